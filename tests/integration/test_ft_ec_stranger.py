"""A stranger on the network: while a --ft ec run trains, a process outside the job connects to every parity receiver
and sends (a) a well-formed batch from a sender the job does not have, (b) a real sender's id at a far seq without
the secret, (c) a replay of a recorded genuine connection, (d) random bytes, (e) a header claiming 2^60 payload
bytes, (f) one byte a second; then a server is killed. The run ends at the failure-free digest, every attempt got
nothing back but a closed connection (the challenge nonce at most) and shows as a warning naming the peer, and (on
Ray, slow) no server's peak memory grew more than 64 MiB over the same run without the stranger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from support import stranger  # noqa: E402
from support.ft_runs import (  # noqa: E402
    make_trainer,
    small_config,  # noqa: E402
)
from support.ft_runs import run as run_trainer
from xdl_ec import _core  # noqa: E402
from xdl_ec.ft.ec_strategy import ErasureCoded  # noqa: E402
from xdl_ec.ft.failure_schedule import FailureSchedule, Kill  # noqa: E402
from xdl_ec.ft.parity_agent import ParityAgent  # noqa: E402
from xdl_ec.ps import ClusterConfig  # noqa: E402
from xdl_ec.ps.remote import Remote  # noqa: E402

ATTACK_STEP, KILL_STEP, STEPS = 3, 6, 8


class StrangerAtStep(ErasureCoded):
    """ErasureCoded whose driver, after step ATTACK_STEP, lets the stranger loose on every server's receiver."""

    def __init__(self, k: int, r: int, attack: bool = True) -> None:
        super().__init__(k, r)
        self.attack = attack
        self.attacks: List[Dict[str, Any]] = []
        self.events: List[List[str]] = []
        self.peak_rss: List[int] = []

    def _servers(self) -> List[Any]:
        return self.view.server_handles()

    def after_step(self, step: int) -> None:
        super().after_step(step)
        servers = self._servers()
        if step == ATTACK_STEP and self.attack:
            self._drain(list(range(self.n)))  # every sender's seq 1 applied: the recorded request is a resend
            targets = []
            for h, s in enumerate(servers):
                host, port = Remote(s, ParityAgent, agent=True).parity_address().result(60)
                sender = (h - 1) % self.n
                resend = _core.serialize_batches([(1, {}, {}, 1)]).tobytes()
                replay = stranger.genuine_exchange((host, int(port)), self.secret, sender, h, resend)
                targets.append(
                    dict(host=host, port=int(port), holder=h, sender=sender, servers=self.n, replay=replay.hex())
                )
            before = [len(Remote(s, ParityAgent, agent=True).security_events().result(60)) for s in servers]
            done = subprocess.run(
                [sys.executable, stranger.__file__, json.dumps(targets)],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            self.attacks = json.loads(done.stdout)
            self.events = [
                Remote(s, ParityAgent, agent=True).security_events().result(60)[b:] for s, b in zip(servers, before)
            ]
        if step == STEPS:
            self.peak_rss = [int(Remote(s, ParityAgent, agent=True).peak_rss().result(60)) for s in servers]


def _run(backend: str, attack: bool) -> Dict[str, Any]:
    strategy = StrangerAtStep(4, 1, attack)
    report = make_trainer(
        small_config(steps=STEPS),
        ClusterConfig(servers=5, workers=1, backend=backend),
        strategy=strategy,
        failures=FailureSchedule([Kill(KILL_STEP, "server", 1)]),
    )
    report = run_trainer(report)
    return {"report": report, "strategy": strategy}


def _reference_digest() -> str:
    return run_trainer(make_trainer(small_config(steps=STEPS), ClusterConfig(servers=5, workers=1)))["model_digest"]


def _check_attacks(strategy: StrangerAtStep) -> None:
    assert len(strategy.attacks) == 5
    for result in strategy.attacks:
        assert result["a_old_form"] == 0 and result["a_handshake"] == 0, result
        assert result["b_no_secret"] == 33 and result["c_replay"] == 33, result  # the challenge, then closed
        assert result["d_random"] == 0 and result["e_huge_header"] == 0, result
        assert result["trickle_bytes"] == 0 and 9.0 <= result["trickle_seconds"] < 20.0, result
    for h, events in enumerate(strategy.events):
        assert len(events) == 7, (h, events)  # one warning per attempt, each naming the peer (host:port)
        assert all(f"parity receiver of server {h}: " in e and "refused " in e for e in events), events
        assert sum("not a parity link" in e for e in events) == 3, events  # (a) old form, (d), (e)
        assert sum("claims to be server 7" in e for e in events) == 1, events  # (a) through the handshake
        assert sum("failed authentication" in e for e in events) == 2, events  # (b), (c)
        assert sum("did not complete the handshake" in e for e in events) == 1, events  # (f)


def test_a_stranger_changes_nothing_on_the_local_backend() -> None:
    """The CI variant: the receivers live in this process (asked for their address, as remote senders would)."""
    run = _run("local", attack=True)
    _check_attacks(run["strategy"])
    assert [(f["role"], f["index"]) for f in run["report"]["failures"]] == [("server", 1)]
    assert run["report"]["model_digest"] == _reference_digest()


@pytest.mark.ray
@pytest.mark.slow
def test_a_stranger_changes_nothing_on_ray_and_costs_no_memory() -> None:
    pytest.importorskip("ray")
    quiet = _run("ray", attack=False)
    attacked = _run("ray", attack=True)
    _check_attacks(attacked["strategy"])
    reference = _reference_digest()
    assert quiet["report"]["model_digest"] == attacked["report"]["model_digest"] == reference
    grown = [a - q for a, q in zip(attacked["strategy"].peak_rss, quiet["strategy"].peak_rss)]
    assert max(grown) < 64 << 20, grown
