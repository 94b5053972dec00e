"""``--ft ec`` on the one-process backend: servers killed mid-run (one, two at once, one during a rebuild, one
between applying a push and forwarding its deltas) leave the final model_digest equal to the failure-free run's;
more than r losses stop with a clear "unrecoverable" error; the scrub finds every stripe consistent after recovery
and catches a flipped bit. Runs are tiny (synthetic data, a few steps) so the file takes seconds per test."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support.ft_runs import make_trainer  # noqa: E402
from support.ft_runs import run as run_trainer
from xdl_ec.builtin.criteo_job import TrainConfig  # noqa: E402
from xdl_ec.ft.configs import parse_code  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ft.parity_agent import ParityAgent  # noqa: E402
from xdl_ec.ps import (  # noqa: E402
    ClusterConfig,
    Remote,
    Unrecoverable,  # noqa: E402
)
from xdl_ec.ps.api import ServerAPI  # noqa: E402

STEPS = 6


def small_config(**kwargs: Any) -> TrainConfig:
    base = dict(
        synthetic=True,
        synthetic_rows=3000,
        batch_size=128,
        steps=STEPS,
        deterministic=True,
        progress=False,
        seed=3,
        emb_dim=8,
    )
    base.update(kwargs)
    return TrainConfig(**base)


def run(servers: int, strategy: Any, kills: List[Kill] = (), workers: int = 1, mode: str = "sync") -> Dict[str, Any]:
    trainer = make_trainer(
        small_config(),
        ClusterConfig(servers=servers, workers=workers, mode=mode),
        strategy=strategy,
        failures=FailureSchedule(list(kills)),
    )
    report = run_trainer(trainer)
    return {**(strategy.report() if strategy is not None else {}), **report}


BASE = dict(batch_size=128, steps=STEPS, seed=3, optimizer="adagrad")  # this file's small_config, for failure_free
CLI_TRAIN = [
    "train",
    "--synthetic",
    "--synthetic-rows",
    "3000",
    "--steps",
    "4",
    "--batch-size",
    "128",
    "--emb-dim",
    "8",
    "--no-progress",
    "--servers",
    "3",
]  # a small run of the CLI's, for its flags' tests


def test_failure_free_ec_run_equals_the_run_without_parity(failure_free: Any) -> None:
    strategy = ErasureCoded(2, 1)
    report = run(3, strategy)
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]
    assert report["ft"] == "ec" and report["failures"] == []
    assert report["parity_bytes"] > 0
    # the report counts the mutations merged into seq ranges; whether a range spans several depends on the steps'
    # pace against the forwarder's delay (on a loaded CI machine a step can outlast it), so the merge itself is
    # asserted where it is deterministic: delta_forwarder_test.cc's coalescing cases
    coalesced = strategy.report()["parity_coalesced_mutations"]
    assert isinstance(coalesced, int) and coalesced >= 0


def test_one_server_killed_mid_run_is_rebuilt_exactly(failure_free: Any) -> None:
    report = run(3, ErasureCoded(2, 1), [Kill(3, "server", 1)])
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]


def test_two_servers_killed_at_once_with_r2(failure_free: Any) -> None:
    report = run(4, ErasureCoded(2, 2), [Kill(3, "server", 0), Kill(3, "server", 2)])
    assert sorted(f["index"] for f in report["failures"]) == [0, 2]
    assert report["model_digest"] == failure_free(4, 1, **BASE)["model_digest"]


def test_server_killed_while_a_rebuild_is_running(failure_free: Any) -> None:
    killed: List[int] = []

    def kill_another(stripe: int) -> None:  # a survivor dies after the first decoded stripe of the rebuild
        if not killed:
            killed.append(3)
            strategy.view.kill("server", 3)

    strategy = ErasureCoded(2, 2, rebuild_stripes_per_step=1, on_rebuild_stripe=kill_another)
    report = run(4, strategy, [Kill(4, "server", 1)])
    assert killed == [3]
    assert sorted(f["index"] for f in report["failures"]) == [1, 3]
    assert report["model_digest"] == failure_free(4, 1, **BASE)["model_digest"]


class CrashBeforeForwarding(ErasureCoded):
    """Arms server 2 after step 2: it applies and acknowledges its next push, then dies before forwarding. Every
    earlier push is made parity-durable first (forwarding batches a few pushes per range), so the crashed one is
    the only push in the window."""

    def after_step(self, step: int) -> None:
        if step == 2:
            self.drain()
            self.arm_crash_after_apply(2)


def test_server_killed_between_applying_a_push_and_forwarding_its_deltas(failure_free: Any) -> None:
    report = run(3, CrashBeforeForwarding(2, 1))
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 2)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]


def test_two_sync_workers_one_server_killed(failure_free: Any) -> None:
    report = run(3, ErasureCoded(2, 1), [Kill(2, "server", 0)], workers=2)
    assert len(report["failures"]) == 1
    assert report["model_digest"] == failure_free(3, 2, **BASE)["model_digest"]


def test_more_than_r_losses_is_unrecoverable_naming_the_servers() -> None:
    with pytest.raises(Unrecoverable, match=r"unrecoverable: lost servers \[0, 1\].*tolerates 1"):
        run(3, ErasureCoded(2, 1), [Kill(3, "server", 0), Kill(3, "server", 1)])


def test_a_second_loss_before_an_r1_rebuild_completes_is_unrecoverable() -> None:
    """r=1: a survivor dies while server 1's replacement still misses blocks: both stripes' members are gone."""
    killed: List[int] = []

    def kill_another(stripe: int) -> None:
        if not killed:
            killed.append(2)
            strategy.view.kill("server", 2)

    strategy = ErasureCoded(2, 1, rebuild_stripes_per_step=1, on_rebuild_stripe=kill_another)
    with pytest.raises(Unrecoverable, match=r"unrecoverable: lost servers \[1, 2\]"):
        run(3, strategy, [Kill(2, "server", 1)])


def test_scrub_is_clean_after_recovery_and_catches_a_flipped_bit() -> None:
    strategy = ErasureCoded(2, 1)
    trainer = make_trainer(
        small_config(),
        ClusterConfig(servers=3, workers=1),
        strategy=strategy,
        failures=FailureSchedule([Kill(3, "server", 0)]),
    )
    try:
        trainer.fit()
        assert len(strategy.failures) == 1
        assert strategy.verify() == []
        table = trainer.job.tables[0].name
        server = 1
        coordinator = strategy.coordinator
        block = coordinator.call(server, "read_parity", table, 0, 0, coordinator.geometry(table)[1])
        assert block.any(), "parity block 0 of server 1 should hold data after training"
        flipped = block.copy()
        flipped[123] ^= 0x10
        coordinator.call(server, "write_parity", table, 0, flipped)
        bad = strategy.verify()
        assert [(m.table, m.server, m.block) for m in bad] == [(table, server, 0)]
    finally:
        trainer.close()


def test_bad_code_and_too_few_servers_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="code: must be 'k,r'"):
        parse_code("4")
    with pytest.raises(ValueError, match="code: need k >= 1, 1 <= r <= 4"):
        parse_code("4,0")
    with pytest.raises(ValueError, match="--servers"):
        make_trainer(small_config(), ClusterConfig(servers=2, workers=1), strategy=ErasureCoded(2, 1))


def test_rebuild_runs_between_steps_and_serves_degraded_reads(failure_free: Any) -> None:
    """One stripe per step boundary: training goes on while the replacement is incomplete; its blocks touched
    first are decoded on demand, and the rebuild completes with a measured time and throughput. The parity is
    drained before the kill: a forwarder lagging under load leaves the lost rows to the push replay instead, which
    inserts them without a decode (exact too, but no degraded read to see)."""
    strategy = ErasureCoded(2, 1, rebuild_stripes_per_step=1)
    trainer = make_trainer(
        small_config(),
        ClusterConfig(servers=3, workers=1),
        strategy=strategy,
    )
    trainer.fit(steps=1)
    strategy.drain()
    trainer.scheduler.kill("server", 2)  # found lost at step 2
    report = run_trainer(trainer)
    report = {**strategy.report(), **report}
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]
    assert report["degraded_reads"] > 0
    (failure,) = report["failures"]
    assert failure["index"] == 2 and failure["rebuild_seconds"] > 0


def test_fit_in_chunks_keeps_a_rebuild_running_across_calls_and_drain_makes_every_push_durable(
    failure_free: Any,
) -> None:
    """A ``fit(steps)`` that stops while stripes are missing leaves the rebuild to the next call (its report has
    the failure open); ``drain`` returns once every holder applied every delta; the chunked run stays exact."""
    strategy = ErasureCoded(2, 1, rebuild_stripes_per_step=1)
    trainer = make_trainer(
        small_config(),
        ClusterConfig(servers=3, workers=1),
        strategy=strategy,
        failures=FailureSchedule([Kill(2, "server", 1)]),
    )
    try:
        first = trainer.fit(steps=3)
        assert strategy.rebuilding, "the test needs a rebuild still running after the first call"
        assert [f["index"] for f in first["failures"]] == [1] and first["failures"][0]["rebuild_seconds"] == 0.0
        strategy.drain()
        for server in trainer.scheduler.servers:
            progress = Remote(server, ParityAgent, agent=True).progress().result(10)
            assert not progress["pending"] and progress["live_applied"] == progress["seq"] > 0
        last = trainer.fit()
        assert not strategy.rebuilding and last["failures"][0]["rebuild_seconds"] > 0
        assert trainer.digest() == failure_free(3, 1, **BASE)["model_digest"]
    finally:
        trainer.close()


def test_rate_limited_rebuild_spans_several_steps_and_stays_exact() -> None:
    """``rebuild_share``: each boundary earns share / (1 - share) of a mean step; a stripe made to cost a whole
    mean step (the hook sleeps that long) overruns the credit, so no boundary rebuilds more than one stripe and
    the rebuild spreads over several steps while training goes on; the model still equals the failure-free one."""
    steps_of_stripes: List[int] = []

    def slow_stripe(stripe: int) -> None:
        steps_of_stripes.append(strategy.view.step)
        seconds = list(strategy.pacer.step_seconds)
        time.sleep(sum(seconds) / len(seconds) if seconds else 0.01)

    strategy = ErasureCoded(2, 1, rebuild_share=0.5, rebuild="boundary", on_rebuild_stripe=slow_stripe)
    trainer = make_trainer(
        small_config(steps=14),
        ClusterConfig(servers=3, workers=1),
        strategy=strategy,
        failures=FailureSchedule([Kill(3, "server", 1)]),
    )
    report = run_trainer(trainer)
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert len(steps_of_stripes) >= 3, "the test needs a rebuild of several stripes"
    during_training = [s for s in steps_of_stripes if s < 14]
    assert len(set(during_training)) >= 2, steps_of_stripes
    assert all(steps_of_stripes.count(s) == 1 for s in during_training), steps_of_stripes
    reference = run_trainer(make_trainer(small_config(steps=14), ClusterConfig(servers=3, workers=1)))
    assert report["model_digest"] == reference["model_digest"]


@pytest.mark.parametrize("share", [0, -0.1, 1.5, float("nan"), "fast", None])
def test_bad_rebuild_share_is_a_clear_error(share: Any) -> None:
    with pytest.raises(ValueError, match=r"rebuild_share: must be a (finite number in \(0.0, 1.0\]|number, got)"):
        ErasureCoded(2, 1, rebuild_share=share)


def test_rebuild_share_flag(capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import main

    flags = CLI_TRAIN
    for bad in ("0", "1.01", "-1", "x"):
        with pytest.raises(SystemExit) as exited:  # argparse: one usage line, status 2
            main([*flags, "--ft", "ec", "--code", "2,1", f"--rebuild-share={bad}"])
        assert exited.value.code == 2
        assert "--rebuild-share: expected a number in (0, 1]" in capsys.readouterr().err
    assert main([*flags, "--ft", "ckpt", "--rebuild-share", "0.1"]) == 2
    assert "--rebuild-share: only used with --ft ec" in capsys.readouterr().err
    assert main([*flags, "--ft", "ec", "--code", "2,1", "--rebuild-share", "1", "--fail-at", "2:0"]) == 0
    assert "server 0 lost at step 2" in capsys.readouterr().out


def test_urgent_rebuild_paced_keeps_pacing_with_r_servers_down_and_stays_exact(failure_free: Any) -> None:
    """ "flat-out" (default): with r servers being rebuilt the background rebuild never pauses; "paced" keeps its
    share and governor then too (training's speed over the window's length), and recovery stays exact."""
    flat, paced = ErasureCoded(2, 1), ErasureCoded(2, 1, urgent_rebuild="paced")
    for strategy in (flat, paced):
        assert not strategy.background.urgent()
        strategy.coordinator.rebuilding.append(1)  # one server down, r = 1: one more loss would be fatal
        assert strategy._one_more_loss_is_fatal()
    assert flat.background.urgent() and not paced.background.urgent()
    report = run(3, ErasureCoded(2, 1, urgent_rebuild="paced"), [Kill(3, "server", 1)])
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 1)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]


@pytest.mark.parametrize("mode", ["fast", "", None, 1])
def test_bad_urgent_rebuild_is_a_clear_error(mode: Any) -> None:
    from xdl_ec.ft.configs import EcConfig
    from xdl_ec.job.cluster import Cluster

    pattern = r"urgent_rebuild: must be one of 'flat-out', 'paced', got"
    with pytest.raises(ValueError, match=pattern):
        ErasureCoded(2, 1, urgent_rebuild=mode)
    with pytest.raises(ValueError, match=pattern):
        EcConfig(urgent_rebuild=mode)
    if mode is not None:  # None is the Cluster's "not given"
        with pytest.raises(ValueError, match=pattern):
            Cluster(servers=3, ft="ec", code=(2, 1), urgent_rebuild=mode)
    with pytest.raises(ValueError, match=r"urgent_rebuild: only used with ft='ec'"):
        Cluster(servers=3, ft="ckpt", urgent_rebuild="paced")


def test_urgent_rebuild_flag(capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import main

    flags = CLI_TRAIN
    with pytest.raises(SystemExit) as exited:
        main([*flags, "--ft", "ec", "--code", "2,1", "--urgent-rebuild", "fast"])
    assert exited.value.code == 2
    assert "--urgent-rebuild: invalid choice: 'fast'" in capsys.readouterr().err
    assert main([*flags, "--ft", "ckpt", "--urgent-rebuild", "paced"]) == 2
    assert "--urgent-rebuild: only used with --ft ec" in capsys.readouterr().err
    assert main([*flags, "--ft", "ec", "--code", "2,1", "--urgent-rebuild", "paced", "--fail-at", "2:0"]) == 0
    assert "server 0 lost at step 2" in capsys.readouterr().out


def test_async_worker_with_a_server_killed_ends_at_the_failure_free_async_digest() -> None:
    """--mode async, one worker (steps one at a time, so the run is deterministic): the failed step is retried
    with its own optimizer step number and the rebuilt server gets the replayed pushes."""
    reference = run(3, None, mode="async")["model_digest"]
    assert run(3, None, mode="async")["model_digest"] == reference, "the async reference must be deterministic"
    for strategy in (ErasureCoded(2, 1), ErasureCoded(2, 1, rebuild_stripes_per_step=1)):
        report = run(3, strategy, [Kill(3, "server", 1)], mode="async")
        assert [(f["role"], f["index"], f["step"]) for f in report["failures"]] == [("server", 1, 3)]
        assert report["model_digest"] == reference


def test_two_async_workers_with_a_kill_lose_no_push_and_leave_consistent_stripes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two --mode async workers (steps overlap; the model depends on timing, so no digest to compare): a server
    killed mid-run is rebuilt, every stripe scrubs clean, and every push is applied exactly once on every server:
    each server's last seq per worker is the number of pushes that worker sent it, and its applied-push count is
    that number (a replacement: the pushes above the seq its rebuilt state includes, replayed or new). Servers
    apply a worker's pushes only in increasing seq order, so count == last == sent means seqs 1..sent, each once."""
    from xdl_ec.ps.worker import Worker

    replayed_after: Dict[Tuple[int, int], int] = {}  # (server, worker) -> seq the rebuilt state includes
    replay = Worker.replay_pushes

    def recording_replay(self: Worker, server: int, after_seq: int, handle: Any = None) -> int:
        replayed_after[(server, self.index)] = after_seq
        return replay(self, server, after_seq, handle)

    monkeypatch.setattr(Worker, "replay_pushes", recording_replay)
    strategy = ErasureCoded(2, 1, rebuild_stripes_per_step=1)
    trainer = make_trainer(
        small_config(steps=16),
        ClusterConfig(servers=3, workers=2, mode="async"),
        strategy=strategy,
        failures=FailureSchedule([Kill(6, "server", 2)]),
    )
    try:
        report = trainer.fit()
        assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 2)]
        assert report["samples"] == 16 * 128
        assert strategy.boundaries_rebuilding >= 1  # the driver made boundaries for the rebuild between steps
        assert strategy.verify() == []
        assert sorted(replayed_after) == [(2, 0), (2, 1)]
        sent = [w._obj.client._seq for w in trainer.workers]  # pushes each worker sent to each server
        for s, server in enumerate(trainer.scheduler.servers):
            stats = Remote(server, ServerAPI).stats().result(10)
            expected = 0
            for w in range(2):
                assert Remote(server, ServerAPI).push_state(w).result(10)[1] == sent[w][s], (s, w)
                expected += sent[w][s] - replayed_after.get((s, w), 0)
            assert stats["pushes"] == expected, (s, stats["pushes"], expected)
    finally:
        trainer.close()


def test_verify_subcommand_trains_with_a_failure_then_scrubs(capsys: pytest.CaptureFixture) -> None:
    from xdl_ec.cli import main

    flags = [
        "--synthetic",
        "--synthetic-rows",
        "3000",
        "--steps",
        "6",
        "--batch-size",
        "128",
        "--emb-dim",
        "8",
        "--deterministic",
        "--no-progress",
    ]
    assert main(["verify", *flags, "--servers", "3", "--code", "2,1", "--fail-at", "3:1"]) == 0
    out = capsys.readouterr().out
    assert "server 1 lost at step 3" in out and "scrub: all stripes consistent" in out
    assert main(["verify", *flags]) == 2
    assert "--servers" in capsys.readouterr().err
    assert main(["verify", *flags, "--servers", "3", "--ft", "ckpt"]) == 2
    assert "needs --ft ec" in capsys.readouterr().err


@pytest.mark.ray
def test_ray_backend_two_failures_rebuilt_exactly(failure_free: Any) -> None:
    """Real processes: server 2's process exits after applying a push and before forwarding its deltas (armed after
    step 2), later server 1's actor is SIGKILLed; the digest equals the one-process failure-free run's."""
    pytest.importorskip("ray")
    strategy = CrashBeforeForwarding(2, 1, rebuild_stripes_per_step=0)
    trainer = make_trainer(
        small_config(),
        ClusterConfig(servers=3, workers=1, backend="ray"),
        strategy=strategy,
        failures=FailureSchedule([Kill(5, "server", 1)]),
    )
    report = run_trainer(trainer)
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 2), ("server", 1)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]


def test_a_restarted_worker_continues_its_push_seqs_and_log(failure_free: Any) -> None:
    """A worker killed under ec is restarted by the driver: its pushes carry seqs above its predecessor's (so
    servers do not take them for replays) and are logged until durable; a later server loss is still exact."""
    report = run(3, ErasureCoded(2, 1), [Kill(2, "worker", 0), Kill(4, "server", 2)])
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("worker", 0), ("server", 2)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]


def test_worker_lost_with_a_server_holding_its_non_durable_push_is_unrecoverable_naming_them() -> None:
    """Server 2 applies and acknowledges step 3's push, then dies before forwarding it (so the push is not
    parity-durable and lives only in worker 0's log); worker 0 is killed at the next boundary: the push died with
    both. Recovery names the worker, the server and the push seqs instead of rebuilding a model without them."""
    with pytest.raises(
        Unrecoverable,
        match=r"unrecoverable: server 2 lost pushes 3\.\.3 of worker 0: .*not yet "
        r"parity-durable and died with the worker's push log",
    ):
        run(3, CrashBeforeForwarding(2, 1), [Kill(4, "worker", 0)])


class CrashBeforeForwardingAfterStep1(ErasureCoded):
    def after_step(self, step: int) -> None:
        if step == 1:
            self.drain()  # as CrashBeforeForwarding: step 1 durable, step 2's push the window
            self.arm_crash_after_apply(2)


def test_same_window_with_two_workers_is_unrecoverable_too() -> None:
    """Two sync workers (3 steps): server 2 applies step 2's merged push and dies before forwarding it; worker 1
    is killed at the next boundary, worker 0 survives and sees server 2's death. The server's recovery, which
    replays only live workers' logs, must not go on without worker 1's non-durable push."""
    with pytest.raises(Unrecoverable, match=r"server 2 lost pushes 2\.\.2 of worker 1: .*push log"):
        run(3, CrashBeforeForwardingAfterStep1(2, 1), [Kill(3, "worker", 1)], workers=2)


class DurableAtStep3(ErasureCoded):
    """Waits after step 3 until every server's deltas reached its parity holders (every push durable)."""

    def after_step(self, step: int) -> None:
        super().after_step(step)
        if step == 3:
            self.drain()


def test_worker_and_server_lost_together_after_their_pushes_are_durable_is_exact(failure_free: Any) -> None:
    report = run(3, DurableAtStep3(2, 1), [Kill(4, "worker", 0), Kill(4, "server", 1)])
    assert sorted((f["role"], f["index"]) for f in report["failures"]) == [("server", 1), ("worker", 0)]
    assert report["model_digest"] == failure_free(3, 1, **BASE)["model_digest"]


def test_recovery_fragments_are_fetched_again_until_the_parity_caught_up_with_the_data() -> None:
    """The key-index fetch of a recovery (all fragments at once, with versions): while a survivor's data (delta
    seq 5) is ahead of the parity read (applied 4), the fetch is repeated, the survivor's links flushed once, and
    the decode runs on the consistent fragments only."""
    from xdl_ec.ft.consistent_decode import consistent_decode

    class Answered:
        def __init__(self, value: Any) -> None:
            self.value = value

        def result(self, timeout: float = 0) -> Any:
            return self.value

    class Survivor:
        def __init__(self) -> None:
            self.calls: List[str] = []
            self.applied = 4  # as a parity holder: server 0's seq its block reflects

        def call(self, method: str, *args: Any) -> Answered:
            raise AssertionError(f"{method}{args}: fragment reads go beside the server's queued calls")

        def call_beside(self, method: str, name: str, *args: Any) -> Answered:
            assert method == "agent_call"
            self.calls.append(name)
            if name == "flush":
                servers[1].applied = 5
                return Answered(None)
            assert name == "read_many"  # every fragment of one server in one call
            _table, reads = args
            return Answered(
                [
                    (np.full(8 * width, 5, np.uint8), 5)
                    if kind == "read_data"
                    else (np.full(8 * width, self.applied, np.uint8), {0: self.applied, 2: 7})
                    for kind, _block, _offset, width in reads
                ]
            )

    servers = [Survivor(), Survivor()]
    decoded = consistent_decode(servers, "t", 8, lambda data, parity: (data(0, 3, 0, 2), parity(1, 1, 0, 2)))[0]
    assert decoded[0].tolist() == [5] * 16 and decoded[1].tolist() == [5] * 16  # never the parity at seq 4
    assert servers[0].calls == ["read_many", "flush", "read_many"]
    assert servers[1].calls == ["read_many", "read_many"]


def test_a_stopped_decode_ends_while_its_parity_blocks_disagree_on_a_dead_sender() -> None:
    """Two parity blocks that applied different seqs of a sender lost mid-delivery never agree until the recovery
    rolls its remnant back: the background rebuild's stop must end the decode then, not its 60 s deadline (the
    stop's own wait was 30 s: an 'unrecoverable' that was not)."""
    from concurrent.futures import Future

    from xdl_ec.ft.consistent_decode import DecodeStopped, consistent_decode

    def answered(value: Any) -> Future:
        future: Future = Future()
        future.set_result(value)
        return future

    class Holder:
        def __init__(self, dead_senders_seq: int) -> None:
            self.seq, self.reads = dead_senders_seq, 0

        def call(self, method: str, *args: Any) -> Future:
            raise AssertionError(f"{method}{args}: fragment reads go beside the server's queued calls")

        def call_beside(self, method: str, name: str, *args: Any) -> Future:
            if name == "flush":
                return answered(None)
            self.reads += 1
            return answered([(np.zeros(8 * width, np.uint8), {2: self.seq}) for _k, _b, _o, width in args[1]])

    servers = [Holder(7), Holder(6)]
    asked: List[int] = []
    start = time.monotonic()
    with pytest.raises(DecodeStopped, match="stopped before its fragments agreed"):
        consistent_decode(
            servers,
            "t",
            8,
            lambda data, parity: (parity(0, 1, 0, 2), parity(1, 1, 0, 2)),
            60.0,
            stopped=lambda: asked.append(1) or len(asked) >= 3,
        )
    assert time.monotonic() - start < 10 and servers[0].reads == 3 and len(asked) == 3


# ---- the transport pieces, without training ------------------------------------------------------------------
def _shards(n: int, block_slots: int = 8) -> List[Any]:
    from xdl_ec import _core
    from xdl_ec.sparse import init, optim

    config = _core.ShardConfig()
    config.dim, config.seed, config.block_slots = 4, 5, block_slots
    config.optimizer = optim.Adagrad(learning_rate=0.1).to_config()
    config.initializer = init.RandomUniform(-0.05, 0.05).to_config()
    return [_core.EmbeddingShard(config) for _ in range(n)]


def test_holder_rollback_then_recovery_rebuilds_the_lost_shard_as_of_w() -> None:
    """Routed deltas applied by ParityHolders in order; holders roll server 0's stream back to W = 5 (undo log), and
    C++ Recovery over the survivors rebuilds server 0's blocks exactly as they were after its 5th batch."""
    from support.parity_reference import route
    from xdl_ec import _core
    from xdl_ec.ft.delta_forwarding import holders_of

    n, k, r = 3, 2, 1
    shards = _shards(n)
    bs, rb = shards[0].block_slots, shards[0].record_bytes
    layout = _core.StripeLayout(n, k, r)
    roles = [_core.ParityHolder(i, n, k, r, {"t": bs * rb}) for i in range(n)]
    rng = np.random.default_rng(0)
    snapshot: Dict[int, np.ndarray] = {}
    for step in range(1, 9):
        for s in range(n):
            keys = np.unique(rng.integers(0, 60, size=12)) * n + s
            slots, xor = shards[s].push(
                keys, rng.normal(size=(keys.size, 4)).astype(np.float32), step, return_deltas=True
            )
            routed = route(layout, s, slots, xor, bs)
            for h in holders_of(s, n, k, r):
                update = {"t": routed[h]} if h in routed else {}
                assert roles[h].apply(s, _core.serialize_batches([(step, update, {7: step})]), 2) == step
        if step == 5:
            snapshot = {b: shards[0].read_block(b) for b in range(shards[0].num_blocks)}
    with pytest.raises(ValueError, match="sequence order"):
        roles[1].apply(0, _core.serialize_batches([(10, {}, {})]), 0)  # a gap: batch 9 never arrived
    with pytest.raises(ValueError, match="cannot roll"):
        roles[1].rollback(0, 1)  # batches up to the durable watermark (2) left the undo log
    assert [roles[h].rollback(0, 5) for h in holders_of(0, n, k, r)] == [{7: 5}, {7: 5}]
    recovery = _core.Recovery(n, k, r, bs, rb)

    def data(server: int, block: int, offset: int, width: int) -> np.ndarray:
        assert server != 0, "the lost server is never read"
        whole = shards[server].read_block(block).reshape(bs, rb)
        return np.ascontiguousarray(whole[:, offset : offset + width]).reshape(-1)

    def parity(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return roles[server].read_block("t", block, rb, offset, width)[0]

    keys, slots, high_water = recovery.recover_key_index(0, 2 * k * 4, [0], data, parity)
    assert high_water == len(keys) > 0
    for b, expected in snapshot.items():
        np.testing.assert_array_equal(recovery.decode_data_block(0, b, [0], data, parity), expected)
    assert not np.array_equal(shards[0].read_block(0), snapshot[0])  # batches 6..8 did change it


def test_stripe_reads_are_the_fragments_a_stripe_decode_reads() -> None:
    """consistent_decode fetches Recovery.stripe_reads instead of recording a decode of zeros: both must name the
    same fragments, in every loss pattern, or a decode would ask for a fragment nobody fetched."""
    from itertools import combinations

    from xdl_ec import _core

    for n, k, r in [(3, 2, 1), (6, 4, 2), (7, 2, 3)]:
        recovery, layout = _core.Recovery(n, k, r, 4, 16), _core.StripeLayout(n, k, r)
        for lost in (list(c) for m in range(1, r + 1) for c in combinations(range(n), m)):
            for stripe in range(2 * n):
                wanted = [t for t in range(k + r) if layout.server_at(stripe, t) in lost]
                if not wanted:
                    continue
                read: list = []

                def recorder(method: str) -> Any:
                    # called within this iteration: `read` is this stripe's list
                    def fn(server: int, block: int, offset: int, width: int) -> np.ndarray:  # noqa: B023
                        read.append((method, server, block))  # noqa: B023
                        return np.zeros(4 * width, np.uint8)

                    return fn

                recovery.decode_stripe(stripe, wanted, lost, recorder("read_data"), recorder("read_parity"))
                listed = recovery.stripe_reads(stripe, lost)
                assert [tuple(x) for x in listed] == read, (n, k, r, lost, stripe)
                assert len(listed) == k and not {s for _, s, _ in listed} & set(lost)
    with pytest.raises(ValueError, match="unrecoverable: lost servers"):
        _core.Recovery(3, 2, 1, 4, 16).stripe_reads(0, [0, 1])


def test_recovery_and_scrubber_bindings_reject_bad_input() -> None:
    from xdl_ec import _core

    def zeros(server: int, block: int, offset: int, width: int) -> np.ndarray:
        return np.zeros(8 * width, np.uint8)

    with pytest.raises(ValueError, match="unrecoverable: lost servers"):
        _core.Recovery(3, 2, 1, 8, 40).recover_key_index(0, 4, [0, 2], zeros, zeros)
    with pytest.raises(ValueError):
        _core.Recovery(3, 2, 2, 8, 40)  # n < k + r
    with pytest.raises(ValueError):
        _core.Scrubber(3, 2, 2, 8, 40)
    with pytest.raises(ValueError, match=r"Scrubber: read_parity\(.*must return uint8\[320\]"):
        _core.Scrubber(3, 2, 1, 8, 40).scrub(3, zeros, lambda *a: np.zeros(3, np.uint8))
    assert _core.Scrubber(3, 2, 1, 8, 40).scrub(3, zeros, zeros) == []  # all zeros: consistent


class CrashDuringPush(ErasureCoded):
    """Server 0 dies on its next push after step 2, before applying it: both sync workers' pushes to it fail while
    the survivors merge theirs; the retried step must not push again, the replay completes server 0's step."""

    def after_step(self, step: int) -> None:
        super().after_step(step)
        if step == 2:
            self.arm_crash_before_apply(0)


def test_server_lost_during_a_sync_push_of_two_workers(failure_free: Any) -> None:
    report = run(3, CrashDuringPush(2, 1), workers=2)
    assert [(f["role"], f["index"]) for f in report["failures"]] == [("server", 0)]
    assert report["model_digest"] == failure_free(3, 2, **BASE)["model_digest"]
