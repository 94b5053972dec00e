"""FailureSchedule: which role to kill when (``--fail-at STEP[:SERVER]``, ``--fail-worker-at STEP[:WORKER]``,
``--mtbf SECONDS``), for failure injection by the training driver.

Kills are real, not bookkeeping: the driver hands each due kill to ``Scheduler.kill``, which SIGKILLs the role's Ray
actor process or, in one process, drops the role's object with everything it held. Detection then happens the
ordinary way: the next call to the role fails and the scheduler confirms the death.

When a kill lands: at a step boundary, right before step ``STEP`` is dispatched (so ``STEP`` is the step that fails
and, with ``ec``/``cpr``, is retried). A boundary has no push in flight, which keeps the baselines' semantics clear
(the failed step either never reached the dead role or is retried whole); kills inside a step are the ``ec``
engineer's dedicated injection points.

``--mtbf M`` (seeded): failure times are a Poisson process of mean inter-arrival ``M`` seconds of training wall time
(exponential gaps from ``numpy.random.default_rng(seed)``), each striking a server drawn uniformly from the same
generator. A failure fires at the first step boundary at or after its time; at most one scheduled MTBF failure
fires per boundary (several overdue ones fire at the following boundaries), so the victims' order is fixed by the
seed alone.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec.settings import checks

__all__ = ["Kill", "FailureSchedule", "parse_kill"]

_KILL = re.compile(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?")


@dataclasses.dataclass(frozen=True)
class Kill:
    """One injected failure: kill ``role`` ``index`` right before step ``step`` (1-based) is dispatched."""

    step: int
    role: str
    index: int


def parse_kill(text: str, role: str, flag: str) -> Kill:
    """``STEP[:INDEX]`` -> :class:`Kill` (INDEX defaults to 0); ``flag`` names the option in errors."""
    if not isinstance(text, str):
        raise TypeError(f"{flag}: expected a string STEP[:INDEX], got {type(text).__name__}")
    m = _KILL.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{flag}: expected STEP[:{role.upper()}] with non-negative integers, e.g. 50 or 50:1, got {text!r}"
        )
    step, index = int(m.group(1)), int(m.group(2) or 0)
    if step < 1:
        raise ValueError(f"{flag}: STEP must be >= 1 (a role is killed right before that step), got {text!r}")
    return Kill(step, role, index)


class FailureSchedule:
    """The run's injected failures: explicit kills at steps, plus seeded random server kills every ``mtbf``
    seconds on average. :meth:`due` pops what must be killed before a step."""

    def __init__(
        self,
        kills: Iterable[Kill] = (),
        mtbf: Optional[float] = None,
        seed: int = 0,
        resizes: Sequence[Tuple[int, int]] = (),
    ) -> None:
        self._kills: List[Kill] = sorted(kills, key=lambda k: (k.step, k.role, k.index))
        # (step, servers) of the run's planned resizes, by step: a kill names a server of the count in force at
        # its step, not only of the count the run starts with
        self.resizes: Tuple[Tuple[int, int], ...] = tuple(sorted((int(s), int(n)) for s, n in resizes))
        for k in self._kills:
            if not isinstance(k, Kill):
                raise TypeError(f"kills: expected Kill objects, got {type(k).__name__}")
        if mtbf is not None and (
            isinstance(mtbf, bool) or not isinstance(mtbf, numbers.Real) or not math.isfinite(mtbf) or mtbf <= 0
        ):
            raise ValueError(f"--mtbf: expected a positive finite number of seconds, got {mtbf!r}")
        seed = checks.integer("seed", seed, 0)
        self.mtbf = None if mtbf is None else float(mtbf)
        self.seed = int(seed)
        self._num_servers = 1
        self._rng = np.random.default_rng(self.seed)
        self._next_time: Optional[float] = None if self.mtbf is None else float(self._rng.exponential(self.mtbf))
        self.fired: List[Tuple[Kill, Optional[float]]] = []
        # the step the last MTBF failure was made before: the driver asks again for a step after recovering from
        # that failure, and a backlog of due times (a recovery slower than the MTBF) must not kill at every ask
        # while the step never runs
        self._mtbf_step: Optional[int] = None

    @classmethod
    def from_flags(
        cls,
        fail_at: Sequence[str] = (),
        fail_worker_at: Sequence[str] = (),
        mtbf: Optional[float] = None,
        seed: int = 0,
        resizes: Sequence[Tuple[int, int]] = (),
    ) -> "FailureSchedule":
        """From the CLI flags (each list: repeated ``STEP[:INDEX]`` strings); ``resizes``: the (step, servers) of
        ``--resize-at``."""
        kills = [parse_kill(t, "server", "--fail-at") for t in fail_at or ()]
        kills += [parse_kill(t, "worker", "--fail-worker-at") for t in fail_worker_at or ()]
        return cls(kills, mtbf, seed, resizes)

    def servers_at(self, step: int, num_servers: int) -> int:
        """The servers the run plans to have at ``step``: ``num_servers``, or the last planned resize's count
        at or before it."""
        count = num_servers
        for at, servers in self.resizes:
            if at <= step:
                count = servers
        return count

    @property
    def empty(self) -> bool:
        return not self._kills and self.mtbf is None

    @property
    def kills(self) -> List[Kill]:
        """The explicit kills not fired yet."""
        return list(self._kills)

    def validate(self, num_servers: int, num_workers: int, total_steps: Optional[int] = None) -> None:
        """Checks every kill names an existing role (and a step the run reaches); ValueError names the flag."""
        for k in self._kills:
            count = self.servers_at(k.step, num_servers) if k.role == "server" else num_workers
            flag = "--fail-at" if k.role == "server" else "--fail-worker-at"
            if k.index >= count:
                planned = bool(self.resizes) and k.role == "server"  # the count depends on the step
                where, there = (f" at step {k.step}", " there") if planned else ("", "")
                raise ValueError(
                    f"{flag} {k.step}:{k.index}: there is no {k.role} {k.index}{where} (the run has {count} "
                    f"{k.role}s{there}, indices 0..{count - 1})"
                )
            if total_steps is not None and k.step > total_steps:
                raise ValueError(
                    f"{flag} {k.step}:{k.index}: the run has only {total_steps} steps; pick a step in 1..{total_steps}"
                )
        self._num_servers = num_servers

    def made_through(self, step: int) -> None:
        """The explicit kills of steps <= ``step`` were made already (by a driver that died, whose run a reattached
        driver continues after ``step``): removed, not made twice."""
        self._kills = [k for k in self._kills if k.step > step]

    def due(self, step: int, elapsed: float, num_servers: Optional[int] = None) -> List[Kill]:
        """The kills to perform right before ``step``, ``elapsed`` seconds into training (removed from the
        schedule): every explicit kill of a step <= ``step``, plus one MTBF failure whose time has come (at most one
        per step, however often the step is asked for).
        ``num_servers``: the servers the run has now; a kill of a server a resize has not brought yet (an ec move
        still copying) waits until the server is there."""
        out: List[Kill] = []
        kept: List[Kill] = []
        for k in self._kills:
            there = num_servers is None or k.role != "server" or k.index < num_servers
            (out if k.step <= step and there else kept).append(k)
        servers = self._num_servers if num_servers is None else num_servers
        self._kills = kept
        for k in out:
            self.fired.append((k, None))
        if (
            self._next_time is not None
            and self.mtbf is not None
            and elapsed >= self._next_time
            and self._mtbf_step != step
        ):
            self._mtbf_step = step
            victim = Kill(step, "server", int(self._rng.integers(servers)))
            self.fired.append((victim, self._next_time))
            out.append(victim)
            self._next_time += float(self._rng.exponential(self.mtbf))
        return out

    def mtbf_times(self, count: int) -> List[Tuple[float, int]]:
        """The first ``count`` (time, server) MTBF failures this seed gives (a fresh generator; for inspection)."""
        if self.mtbf is None:
            return []
        rng = np.random.default_rng(self.seed)
        t, out = 0.0, []
        for _ in range(count):
            t += float(rng.exponential(self.mtbf))
            out.append((t, int(rng.integers(self._num_servers))))
        return out

    def __repr__(self) -> str:
        return f"FailureSchedule(kills={self._kills}, mtbf={self.mtbf}, seed={self.seed})"
