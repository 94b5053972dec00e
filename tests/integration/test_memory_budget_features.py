"""Tables larger than memory under every feature above the core (issue #48): with a memory budget (nearly every row
on disk) a run trains the unbudgeted run's model bit for bit under ``ckpt`` and ``cpr`` with a kill (the restore
builds budgeted shards), at the smallest budget the core takes, resumed across budgets and server counts, with
exports and serving deltas, bounded tables, a worker cache and a resize; its TensorBoard scalars carry the tier's
counts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import xdl_ec  # noqa: E402
from support.ft_runs import make_trainer, small_config  # noqa: E402
from xdl_ec.builtin.criteo_job import criteo_job  # noqa: E402
from xdl_ec.ft.ckpt_strategy import Checkpointing  # noqa: E402
from xdl_ec.ft.cpr_strategy import PartialRecovery  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402
from xdl_ec.ps.fault_tolerance import Unrecoverable  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402
from xdl_ec.sparse.table import EmbeddingTable  # noqa: E402

STEPS, CUT = 8, 4
BUDGET = "48K"  # the shard's minimum of 64 frames: nearly all of the ~4,700 rows of STEPS steps live on disk
TIER_KEYS = ("rows_in_memory", "rows_on_disk", "disk_bytes", "disk_read_bytes", "disk_write_bytes", "memory_hit_rate")
# small_config's table with row rules (as tests/integration/test_bounded_tables.py bounds it)
RULES: Dict[str, Any] = dict(admit_min_count=2, evict_ttl_steps=3, max_rows=3 * 2048, evict_every_steps=2)


def fit(tmp_path: Path, budget: Any = None, servers: int = 0, config: Any = None, **options: Any) -> Dict[str, Any]:
    """small_config's run (``options`` to fit, or to the Cluster when it has ``servers``), with ``budget`` of RAM
    (None: no budget) and its spill dir under ``tmp_path``."""
    config = config or small_config(steps=STEPS)
    memory: Dict[str, Any] = {}
    if budget is not None:
        spill = tmp_path / f"spill-{len(list(tmp_path.glob('spill-*')))}"
        spill.mkdir()
        memory = dict(memory_budget=budget, spill_dir=str(spill))
    fit_options = {
        k: v
        for k, v in options.items()
        if k in ("resume", "save_dir", "backstop_every", "export_every", "export_dir", "logdir")
    }
    cluster_options = {k: v for k, v in options.items() if k not in fit_options}
    if servers:
        cluster = xdl_ec.Cluster(servers=servers, **cluster_options, **memory)
        return criteo_job(config).fit(cluster=cluster, deterministic=True, seed=config.seed, **fit_options)
    return criteo_job(config).fit(deterministic=True, seed=config.seed, **fit_options, **memory)


def on_disk(report: Dict[str, Any]) -> None:
    """The run's tables kept nearly every row on disk (a restore did not bring them back into RAM)."""
    for entry in report["tables"].values():
        assert entry["rows_on_disk"] > entry["rows_in_memory"] > 0, entry


def restored_run(tmp_path: Path, strategy: Any, memory: Optional[MemoryBudget]) -> Tuple[str, List[Dict[str, Any]]]:
    """small_config's run on 3 servers (each with ``memory``) under ``strategy`` with server 1 killed before step
    5: its digest and each server's stats at the end of its steps."""
    trainer = make_trainer(
        small_config(steps=STEPS),
        ClusterConfig(servers=3, workers=1, memory=memory),
        strategy=strategy,
        failures=FailureSchedule([Kill(5, "server", 1)]),
    )
    try:
        report = trainer.fit()
        assert [f["index"] for f in report["failures"]] == [1]
        servers = trainer.roles.scheduler.server_stats()  # before the digest's exports, which read every row in
        return trainer.digest(), servers
    finally:
        trainer.close()


@pytest.mark.parametrize("ft", ["ckpt", "cpr"])
def test_a_restore_into_budgeted_servers_builds_budgeted_shards_and_trains_the_same_model(
    failure_free: Any, tmp_path: Path, ft: str
) -> None:
    def strategy() -> Any:
        saves = str(tmp_path / f"saves-{len(list(tmp_path.glob('saves-*')))}")
        return Checkpointing("3", saves) if ft == "ckpt" else PartialRecovery(interval_steps=3, directory=saves)

    (tmp_path / "spill").mkdir()
    digest, servers = restored_run(tmp_path, strategy(), MemoryBudget(BUDGET, str(tmp_path / "spill")))
    # ckpt's rollback is exact (the failure-free model); cpr loses the dead server's updates since its save, the
    # same ones without a budget
    plain = (
        failure_free(3, 1, steps=STEPS)["model_digest"] if ft == "ckpt" else restored_run(tmp_path, strategy(), None)[0]
    )
    assert digest == plain
    for stats in servers:  # every server's shard, the restored ones too, keeps nearly every row on disk
        (counts,) = stats["tier"].values()
        assert counts["rows_on_disk"] > counts["rows_in_memory"] > 0, (stats["index"], counts)


def test_the_smallest_budget_keeps_all_but_the_frames_on_disk_and_trains_the_same_model(
    failure_free: Any, tmp_path: Path
) -> None:
    (table,) = criteo_job(small_config()).spec.tables
    record_bytes = EmbeddingTable.from_config(table).shard.record_bytes
    smallest = 64 * (record_bytes + 16)  # the core's minimum: 64 frames (the spill tier's)
    with pytest.raises(ValueError, match="below the minimum of"):
        fit(tmp_path, smallest - 1)
    budgeted = fit(tmp_path, smallest)
    plain = failure_free(3, 1, steps=STEPS)  # the model (and its rows) whatever the server count
    assert budgeted["model_digest"] == plain["model_digest"]
    (entry,) = budgeted["tables"].values()
    assert entry["rows_in_memory"] + entry["rows_on_disk"] == plain["embedding_rows"]
    # in RAM: the 64 frames, or more while the last step's own rows (at most a batch's 64 x 26 ids) stay resident
    # (a fetch step never evicts its own batch's frames; new rows wait for the next fetch step)
    assert 0 < entry["rows_in_memory"] <= 64 + 64 * 26 < entry["rows_on_disk"], entry


@pytest.mark.parametrize(
    "saved_on, resumed_on",
    [((None, 0), (BUDGET, 0)), ((BUDGET, 0), (None, 0)), ((None, 2), (BUDGET, 3))],
    ids=["unbudgeted-to-budgeted", "budgeted-to-unbudgeted", "2-servers-to-3-budgeted"],
)
def test_a_resume_across_budgets_and_server_counts_ends_at_the_uninterrupted_model(
    failure_free: Any, tmp_path: Path, saved_on: Any, resumed_on: Any
) -> None:
    saves = tmp_path / "saves"
    fit(tmp_path, saved_on[0], saved_on[1], config=small_config(steps=CUT), save_dir=saves)
    resumed = fit(tmp_path, resumed_on[0], resumed_on[1], resume=saves)
    assert resumed["resumed_from"]["step"] == CUT
    assert resumed["model_digest"] == failure_free(3, 1, steps=STEPS)["model_digest"]
    if resumed_on[0] is not None:
        on_disk(resumed)


def delta_files(root: Path) -> Dict[str, bytes]:
    """{path under root: bytes} of every delta's table and dense tensors (its head names the base: another id)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.glob("delta-*/*.tensor"))
        if p.name.startswith(("table-", "dense-"))
    }


def test_exports_and_serving_deltas_of_a_budgeted_run_are_the_unbudgeted_ones(tmp_path: Path) -> None:
    plain_dir, budgeted_dir = tmp_path / "plain", tmp_path / "budgeted"
    config = small_config(steps=CUT)  # a base and 2 deltas
    plain = fit(tmp_path, None, 0, config=config, export_every="2", export_dir=plain_dir)
    budgeted = fit(tmp_path, BUDGET, 0, config=config, export_every="2", export_dir=budgeted_dir)
    assert budgeted["model_digest"] == plain["model_digest"]
    deltas = delta_files(plain_dir)
    assert len(deltas) > 4 and delta_files(budgeted_dir) == deltas


@pytest.mark.parametrize(
    "options, rules, servers_after",
    [
        (dict(), RULES, 2),
        (dict(cache=xdl_ec.Cache(rows=4000, staleness=0)), {}, 2),
        (dict(resize_at=["3:3", "6:4"]), {}, 4),
    ],
    ids=["bounded-table", "worker-cache", "resize"],
)
def test_budgeted_servers_train_the_same_model_with_rules_a_cache_and_a_resize(
    failure_free: Any, tmp_path: Path, options: Dict[str, Any], rules: Dict[str, Any], servers_after: int
) -> None:
    budgeted = fit(tmp_path, BUDGET, 2, config=small_config(steps=STEPS, **rules), **options)
    # a cached or resized run trains the plain model; a bounded table's rules share max_rows over 2 servers
    assert budgeted["model_digest"] == failure_free(2, 1, steps=STEPS, **rules)["model_digest"]
    on_disk(budgeted)
    # every server has its budget: those a resize brings too
    assert [s["memory"]["budget_bytes"] for s in budgeted["servers"]] == [48 << 10] * servers_after


def scalars(logdir: Path) -> Dict[str, Any]:
    """{tag: (step, value)} of each tag's last point, read back from the event files."""
    import tensorflow as tf

    out: Dict[str, Any] = {}
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for v in event.summary.value:
                out[v.tag] = (event.step, float(tf.make_ndarray(v.tensor)))
    return out


@pytest.mark.parametrize("servers", [0, 2], ids=["one-process", "2-servers"])
def test_tensorboard_has_the_tier_counts_and_the_memory_of_each_process(tmp_path: Path, servers: int) -> None:
    logdir = tmp_path / "tb"
    report = fit(tmp_path, BUDGET, servers, logdir=logdir)
    last = scalars(logdir)
    (table,) = report["tables"]
    tier = {name: last[f"tier/{table}/{name}"] for name in TIER_KEYS}
    assert {step for step, _ in tier.values()} == {STEPS}
    rows = tier["rows_in_memory"][1] + tier["rows_on_disk"][1]
    assert rows == report["embedding_rows"] and tier["rows_on_disk"][1] > tier["rows_in_memory"][1] > 0
    assert tier["disk_bytes"][1] > 0 and tier["disk_read_bytes"][1] > 0 and tier["disk_write_bytes"][1] > 0
    assert 0.0 < tier["memory_hit_rate"][1] < 1.0
    processes = [""] if not servers else [f"server-{s['index']}/" for s in report["servers"]]
    memories = [report["memory"]] if not servers else [s["memory"] for s in report["servers"]]
    for process, memory in zip(processes, memories):
        assert last[f"memory/{process}budget_bytes"] == (STEPS, memory["budget_bytes"])
        assert last[f"memory/{process}peak_rss_bytes"][1] >= memory["peak_rss_bytes"] > 0
    plain = tmp_path / "plain-tb"
    fit(tmp_path, None, servers, logdir=plain)
    assert not any(tag.startswith(("tier/", "memory/")) for tag in scalars(plain))  # without a budget: none


def test_the_backstop_of_budgeted_servers_resumes_at_the_failure_free_model(failure_free: Any, tmp_path: Path) -> None:
    """Incremental saves take the rows changed since the last one (tracked through the tier); more than r servers
    lost at once stops the run naming the backstop, and a budgeted resume from it ends at the failure-free model."""
    saves = tmp_path / "saves"
    ec = dict(ft="ec", code=(2, 1), backstop_every="2")
    with pytest.raises(Unrecoverable, match="resume from the backstop"):
        fit(tmp_path, BUDGET, 3, **ec, fail_at=["7:0", "7:1"], save_dir=saves)
    resumed = fit(tmp_path, BUDGET, 3, **ec, resume=saves, save_dir=saves)
    assert resumed["resumed_from"]["step"] == 6
    assert resumed["model_digest"] == failure_free(3, 1, steps=STEPS)["model_digest"]
    on_disk(resumed)
