"""bench/peers' report code without any peer installed: ratios to xdl-ec are taken within a round and their median
reported, the table and goal line say what was measured (failed runs included), the shared batches are the same
bytes whenever they are written, and the hold-out AUC is the Mann-Whitney statistic with ties shared."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

PEERS = Path(__file__).resolve().parents[3] / "bench" / "peers"
sys.path.insert(0, str(PEERS))

from holdout_auc import holdout_auc  # noqa: E402
from peer_table import CEILING, format_table, goal_line, round_ratios, summarise  # noqa: E402
from shared_batches import SharedBatches, write_batches  # noqa: E402


def result(system: str, rnd: int, rate: float, cpu: float, auc: float = 0.7, rss: float = 500.0) -> Dict[str, Any]:
    return {
        "system": system,
        "round": rnd,
        "samples_per_sec": rate,
        "cpu_us_per_sample": cpu,
        "peak_rss_mb": rss,
        "auc": auc,
        "version": f"{system} 1.0",
    }


def three_rounds() -> List[Dict[str, Any]]:
    # the peer is faster in round 0 only: per-round ratios 1.5, 0.5, 0.8 (median 0.8), while the ratio of the
    # medians would be 60 / 50 = 1.2; CPU ratios 2.0, 1.0, 1.25 (median 1.25)
    return [
        result("xdl-ec", 0, 40.0, 10.0),
        result("peer", 0, 60.0, 20.0, auc=0.71),
        result("xdl-ec", 1, 100.0, 10.0),
        result("peer", 1, 50.0, 10.0, auc=0.69),
        result("xdl-ec", 2, 50.0, 8.0),
        result("peer", 2, 40.0, 10.0, auc=0.70),
    ]


def test_ratios_are_taken_within_a_round_then_their_median() -> None:
    results = three_rounds()
    assert round_ratios(results, "peer", "samples_per_sec") == pytest.approx([1.5, 0.5, 0.8])
    rows = {r["system"]: r for r in summarise(results)}
    assert rows["peer"]["speed_ratio"] == pytest.approx(0.8)
    assert rows["peer"]["cpu_ratio"] == pytest.approx(1.25)
    assert rows["peer"]["samples_per_sec"] == 50.0 and rows["xdl-ec"]["samples_per_sec"] == 50.0
    assert rows["peer"]["auc"] == pytest.approx(0.70)
    assert rows["xdl-ec"]["speed_ratio"] == 1.0 and rows["xdl-ec"]["rounds"] == 3


def test_a_round_without_xdl_ec_gives_no_ratio_and_a_failed_run_is_shown() -> None:
    results = three_rounds()
    results[2] = {"system": "xdl-ec", "round": 1, "error": "exit 1: ImportError"}
    results.append({"system": "peer", "round": 3, "error": "exit 9: killed"})
    rows = {r["system"]: r for r in summarise(results)}
    assert round_ratios(results, "peer", "samples_per_sec") == pytest.approx([1.5, 0.8])
    assert rows["peer"]["rounds"] == 3 and rows["peer"]["failed"] == 1
    table = format_table(summarise(results))
    assert "3 (1 failed: exit 9: killed)" in table
    assert "2 (1 failed: exit 1: ImportError)" in table


def test_the_table_and_goal_line() -> None:
    rows = summarise(three_rounds())
    lines = format_table(rows).splitlines()
    assert lines[0].startswith("| system | samples/s | ratio to xdl-ec in the same round")
    assert lines[2] == "| xdl-ec | 0.1k | 1.00x, 1.00x | 10.0 | 500 | 0.7000 | 3 | xdl-ec 1.0 |"
    assert lines[3] == "| peer | 0.1k | 0.80x, 1.25x | 10.0 | 500 | 0.7000 | 3 | peer 1.0 |"
    fast = summarise(
        [result("xdl-ec", 0, 66_000.0, 10.0), result("keras", 0, 50_000.0, 12.0), result("tfra", 0, 40_000.0, 9.0)]
    )
    assert "| 66.0k |" in format_table(fast)
    assert (
        goal_line(fast, 2048) == "xdl-ec / best peer (keras), median of the rounds' ratios: 1.32x (goal >= 1.3x: met)"
    )
    assert goal_line(fast, 256) == "xdl-ec / best peer (keras), median of the rounds' ratios: 1.32x (goal >= 1.2x: met)"
    slow = summarise([result("xdl-ec", 0, 55_000.0, 10.0), result("keras", 0, 50_000.0, 12.0)])
    assert (
        goal_line(slow, 2048)
        == "xdl-ec / best peer (keras), median of the rounds' ratios: 1.10x (goal >= 1.3x: not met)"
    )
    assert goal_line(slow, 512).endswith("ratios: 1.10x")
    # the best peer by the rounds' ratios, not by its median samples/s: 1 / 0.8 = 1.25x here
    assert goal_line(summarise(three_rounds()), 256).endswith(
        "(peer), median of the rounds' ratios: 1.25x (goal >= 1.2x: met)"
    )
    assert goal_line(summarise([result("keras", 0, 1.0, 1.0)]), 2048).startswith("goal: needs xdl-ec")


def test_the_ceiling_is_not_a_peer_and_is_set_against_the_best_one() -> None:
    rows = summarise(
        [
            result("xdl-ec", 0, 100.0, 10.0),
            result("keras", 0, 80.0, 12.0),
            result(CEILING, 0, 120.0, 9.0),  # faster than xdl-ec: still not the "best peer"
        ]
    )
    line = goal_line(rows, 2048)
    assert line.startswith("xdl-ec / best peer (keras), median of the rounds' ratios: 1.25x (goal >= 1.3x: not met)")
    assert line.endswith("; ceiling / best peer: 1.50x")


def digest(path: str) -> str:
    batches = SharedBatches(path)
    h = hashlib.sha256()
    for a in (*batches.train, *batches.held_out):
        h.update(a.tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("workload", ["fields-100k", "criteo-shaped"])
def test_the_shared_batches_are_the_same_bytes_each_time(tmp_path: Path, workload: str) -> None:
    first, second, other = (str(tmp_path / f"{n}.npz") for n in ("a", "b", "c"))
    meta = write_batches(first, workload, train_rows=5000, seed=0, eval_rows=3000)
    write_batches(second, workload, train_rows=5000, seed=0, eval_rows=3000)
    write_batches(other, workload, train_rows=5000, seed=1, eval_rows=3000)
    assert digest(first) == digest(second) != digest(other)
    assert meta == {**SharedBatches(first).meta} and meta["train_rows"] == 5000 and meta["eval_rows"] == 3000
    data = SharedBatches(first)
    dense, sparse, label = data.train
    assert dense.shape == (5000, 13) and sparse.shape == (5000, 26) and label.shape == (5000,)
    assert dense.dtype == np.float32 and sparse.dtype == np.int64 and label.dtype == np.float32
    assert set(np.unique(label)) <= {0.0, 1.0} and 0.05 < label.mean() < 0.6
    if workload == "fields-100k":
        assert sparse.min() >= 0 and sparse.max() < 100_000
        assert (sparse == 0).mean() > 0.05  # Zipf: id 0 is the most frequent of every field
    # the train rows of a shorter file are the first rows of a longer one: batch sizes see the same data
    write_batches(other, workload, train_rows=9000, seed=0, eval_rows=3000)
    assert np.array_equal(SharedBatches(other).train[1][:5000], sparse)
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_train_batches_cycle_for_steps_and_an_epoch_ends_short(tmp_path: Path) -> None:
    path = str(tmp_path / "b.npz")
    write_batches(path, "fields-100k", train_rows=1000, seed=0, eval_rows=100)
    data = SharedBatches(path)
    cycled = list(data.train_batches(300, steps=5))  # 3 full batches per pass, then from the start again
    assert [len(b[2]) for b in cycled] == [300] * 5
    assert np.array_equal(cycled[3][1], data.train[1][:300])
    assert [len(b[2]) for b in data.train_batches(300)] == [300, 300, 300, 100]
    with pytest.raises(ValueError, match="larger than the file's 1000 train rows"):
        list(data.train_batches(2000, steps=1))


def test_bad_workloads_are_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    with pytest.raises(ValueError, match="workload: expected one of"):
        write_batches(str(path), "criteo-ish", train_rows=10)
    with pytest.raises(ValueError, match="train_rows: must be a positive integer"):
        write_batches(str(path), "fields-100k", train_rows=0)
    with pytest.raises(ValueError, match="needs a Criteo TSV file"):
        write_batches(str(path), "criteo-sample", criteo=str(tmp_path / "missing.tsv"))
    assert not path.exists()


def test_holdout_auc_matches_the_pairwise_count_with_ties() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(2000) < 0.3).astype(np.float32)
    p = np.round(rng.random(2000) + 0.3 * y, 1)  # coarse scores: many ties
    pos, neg = p[y == 1], p[y == 0]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (
        len(pos) * len(neg)
    )
    assert holdout_auc(y, p) == pytest.approx(pairwise, abs=1e-12)
    assert holdout_auc([0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8]) == 1.0
    assert holdout_auc([0, 1], [0.5, 0.5]) == 0.5
    with pytest.raises(ValueError, match="both classes"):
        holdout_auc([1, 1], [0.2, 0.3])
