"""Tables larger than memory on Ray (issue #48): servers in their own processes, each with a memory budget and its
spill files, under ec (2, 1) with server 1's actor killed: its replacement, budgeted too, is rebuilt from the
survivors' rows and parity read through their tiers, and the run trains the unbudgeted run's model bit for bit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import ray_ec_kill_run, small_config  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402

STEPS = 8


@pytest.mark.ray
def test_ray_servers_with_a_budget_rebuild_a_killed_server_exactly(failure_free: Any, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    report, digest, scrub = ray_ec_kill_run(small_config(steps=STEPS), MemoryBudget("48K", str(tmp_path)))
    assert [f["index"] for f in report["failures"]] == [1]
    assert digest == failure_free(3, 1, steps=STEPS)["model_digest"] and scrub == []
    (entry,) = report["tier"]["tables"].values()  # every server, the replacement too, kept most rows on disk
    assert entry["rows_on_disk"] > entry["rows_in_memory"] > 0, entry
    assert sorted(report["tier"]["memory"]) == ["server-0", "server-1", "server-2"]
    assert list(tmp_path.iterdir()) == []  # the spill files are unlinked when made
