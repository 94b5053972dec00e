"""Overlapping server failures under ``--ft ec``: named scenarios and seeded random ones, each trained to its end
through the job API and judged against the failure-free run of the same configuration. Shared by
``tests/integration/test_overlapping_failures.py`` (a bounded set) and ``bench/stress_ft_ec.py`` (many runs under
load with a watchdog), so the two judge runs the same way."""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Dict, Optional, Tuple

from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job
from xdl_ec.job.cluster import Cluster
from xdl_ec.ps.fault_tolerance import Unrecoverable

EXPECTATIONS = ("exact", "unrecoverable", "either")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """``servers`` under a (k, r) code, ``steps`` steps, server ``kills`` (step, server): killed right before that
    step. ``expect``: "exact" (the failure-free digest), "unrecoverable", or "either" (whether more than r servers
    are down at once depends on how far the rebuild got)."""

    name: str
    servers: int
    k: int
    r: int
    steps: int
    kills: Tuple[Tuple[int, int], ...]
    expect: str = "exact"
    rebuild_share: float = 0.05
    workers: int = 1

    def __post_init__(self) -> None:
        if self.expect not in EXPECTATIONS:
            raise ValueError(f"scenario {self.name}: expect must be one of {EXPECTATIONS}, not {self.expect!r}")

    def cluster(self, backend: str = "local", failures: bool = True) -> Cluster:
        """The scenario's cluster: under ec with its kills, or (``failures=False``) its failure-free twin."""
        if not failures:
            return Cluster(servers=self.servers, workers=self.workers, backend=backend)
        return Cluster(
            servers=self.servers,
            workers=self.workers,
            backend=backend,
            ft="ec",
            code=(self.k, self.r),
            rebuild_share=self.rebuild_share,
            fail_at=[f"{step}:{server}" for step, server in self.kills],
        )


SCENARIOS: Dict[str, Scenario] = {
    s.name: s
    for s in (
        # the scenario that once hung: two lost at once (r = 2), the replacement of 0 lost during its rebuild, then
        # 1 again
        Scenario("issue19", 6, 4, 2, 60, ((20, 0), (20, 1), (22, 0), (24, 1))),
        # a replacement lost while it is being rebuilt, r = 1: the same server again is still one loss
        Scenario("replacement-lost-r1", 4, 2, 1, 30, ((8, 1), (9, 1), (11, 1))),
        # losses at adjacent steps, r = 2, then the first replacement again
        Scenario("adjacent-r2", 5, 3, 2, 30, ((8, 0), (9, 3), (10, 0))),
        # r = 3: three at adjacent steps, then two replacements again
        Scenario("adjacent-r3", 7, 4, 3, 30, ((8, 0), (9, 2), (10, 5), (11, 2), (11, 0))),
        # r = 1, a second server lost one step after the first: unrecoverable while the first is still rebuilt (the
        # background rebuild, flat out since one more loss is fatal, often completes within that step)
        Scenario("second-loss-r1", 4, 2, 1, 30, ((8, 0), (9, 2)), expect="either"),
        # two workers (sync), r = 2, overlapping
        Scenario("two-workers-r2", 5, 3, 2, 24, ((6, 1), (6, 4), (7, 1)), workers=2),
    )
}


def random_scenario(seed: int) -> Scenario:
    """A seeded random schedule: r in 1..3, 2-5 kills within a few steps of each other (some of a replacement)."""
    rng = random.Random(seed)
    r = rng.choice((1, 2, 3))
    k = rng.choice((2, 3, 4))
    servers = k + r + rng.choice((0, 0, 1))
    step = rng.randint(3, 8)
    kills = []
    for _ in range(rng.randint(2, 5)):
        kills.append((step, rng.randrange(servers)))
        step += rng.choice((0, 1, 1, 2, 3))
    return Scenario(
        f"random-{seed}",
        servers,
        k,
        r,
        max(step + 4, 16),
        tuple(sorted(set(kills))),
        expect="either",
        rebuild_share=rng.choice((0.05, 0.05, 0.3, 1.0)),
    )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """``kind``: exact | unrecoverable | wrong-digest | unexpected-unrecoverable | not-unrecoverable."""

    kind: str
    detail: str = ""


def config(steps: int, data: Optional[str] = None) -> TrainConfig:
    """The scenarios' small deterministic built-in job (synthetic unless ``data`` names Criteo rows)."""
    base: Dict[str, Any] = dict(
        batch_size=128, steps=steps, deterministic=True, progress=False, seed=7, emb_dim=8, optimizer="adam"
    )
    if data is None:
        base.update(synthetic=True, synthetic_rows=4000)
    else:
        base.update(data=data)
    return TrainConfig(**base)


def _fit(scenario: Scenario, data: Optional[str], backend: str, failures: bool) -> Dict[str, Any]:
    train = config(scenario.steps, data)
    return criteo_job(train).fit(
        steps=scenario.steps,
        cluster=scenario.cluster(backend, failures),
        deterministic=train.deterministic,
        seed=train.seed,
    )


_REFERENCES: Dict[Tuple, str] = {}


def reference_digest(scenario: Scenario, data: Optional[str] = None, backend: str = "local") -> str:
    """The failure-free model_digest of the scenario's configuration (trained once per process)."""
    key = (scenario.servers, scenario.workers, scenario.steps, data, backend)
    if key not in _REFERENCES:
        _REFERENCES[key] = _fit(scenario, data, backend, failures=False)["model_digest"]
    return _REFERENCES[key]


def run_scenario(scenario: Scenario, data: Optional[str] = None, backend: str = "local") -> Outcome:
    """Runs ``scenario`` to its end and judges it (see :class:`Outcome`)."""
    expected = reference_digest(scenario, data, backend)
    try:
        report = _fit(scenario, data, backend, failures=True)
    except Unrecoverable as err:
        if scenario.expect == "exact":
            return Outcome("unexpected-unrecoverable", str(err))
        return Outcome("unrecoverable", str(err))
    if scenario.expect == "unrecoverable":
        return Outcome("not-unrecoverable", f"ended with digest {report['model_digest']}")
    if report["model_digest"] != expected:
        return Outcome("wrong-digest", f"{report['model_digest']} != failure-free {expected}")
    return Outcome("exact")
