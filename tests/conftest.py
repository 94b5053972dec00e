"""Shared pytest set-up: Ray clusters the tests start require Ray's token (RAY_AUTH_MODE=token, as the clusters
xdl-ec starts do), and the ``slow`` marker is left out unless selected (``pytest -m slow``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
