"""Shared pytest set-up: Ray clusters the tests start require Ray's token (RAY_AUTH_MODE=token, as the clusters
xdl-ec starts do), and the ``slow`` marker is left out unless selected (``pytest -m slow``)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def failure_free() -> Callable[..., Dict[str, Any]]:
    """``failure_free(servers, workers, **overrides)``: the report of the built-in job's failure-free run of
    ``support.ft_runs.small_config(**overrides)``, trained once per test session (the fault-tolerance tests compare
    their digests with it)."""
    from support.ft_runs import reference

    reports: Dict[Any, Dict[str, Any]] = {}

    def report(servers: int, workers: int = 1, **overrides: Any) -> Dict[str, Any]:
        key = (servers, workers, tuple(sorted(overrides.items())))
        if key not in reports:
            reports[key] = reference(servers, workers, **overrides)
        return reports[key]

    return report
