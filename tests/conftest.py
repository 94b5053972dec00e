"""Shared pytest set-up: Ray clusters the tests start require Ray's token (RAY_AUTH_MODE=token, as the clusters
xdl-ec starts do), the ``slow`` marker is left out unless selected (``pytest -m slow``), a test that starts Ray fails
unless it carries the ``ray`` marker (``scripts/test --quick`` leaves those out by that marker), and the ``ray`` tests
share one pytest-xdist worker."""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, Generator, Optional, Tuple

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    # Under pytest-xdist (scripts/test: -n 2 --dist loadgroup) Ray's tests run on one worker, one after another: two
    # Ray clusters at once would double the processes on two cores and turn the tests' time limits into races
    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# ---- every test that starts Ray carries the ``ray`` marker ------------------------------------------------------
# Each test gets a Ray temp dir of its own (RAY_TMPDIR, inherited by the processes it starts, `xdl-ec train
# --backend ray` included): a Ray head started anywhere under the test leaves its session directory there. A Ray this
# process connected to during the test counts too (a cluster started with an explicit --temp-dir, then joined).
_RAY_WATCH = pytest.StashKey[Tuple[str, Optional[str], bool]]()


def _ray_connected() -> bool:
    """Whether this process is connected to a Ray, read where ``ray.is_initialized`` reads it: a test may have
    monkeypatched ``ray.is_initialized`` itself (test_ray_auth does)."""
    worker = sys.modules.get("ray._private.worker")
    return worker is not None and bool(getattr(getattr(worker, "global_worker", None), "connected", False))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    # short, under /tmp: Ray's socket paths live below it and a Unix socket's path has at most 107 bytes
    root = tempfile.mkdtemp(prefix="xdl-ray-", dir="/tmp")
    item.stash[_RAY_WATCH] = (root, os.environ.get("RAY_TMPDIR"), _ray_connected())
    os.environ["RAY_TMPDIR"] = root
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
    outcome = yield
    if call.when != "call" or _RAY_WATCH not in item.stash:
        return
    root, _, was_connected = item.stash[_RAY_WATCH]
    started = bool(glob.glob(os.path.join(root, "ray", "session_*"))) or (_ray_connected() and not was_connected)
    report = outcome.get_result()
    if started and item.get_closest_marker("ray") is None and report.outcome != "skipped":
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started Ray without the 'ray' marker: add @pytest.mark.ray to it (or "
            "pytestmark = pytest.mark.ray to its module), so `scripts/test --quick` "
            "(-m 'not ray and not slow') leaves it out"
        )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _RAY_WATCH not in item.stash:
        return
    root, previous, _ = item.stash[_RAY_WATCH]
    if previous is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = previous
    if not _ray_connected():  # a Ray this process still uses (a module's fixture) keeps its session directory
        shutil.rmtree(root, ignore_errors=True)


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
