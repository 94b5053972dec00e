"""The resize schedule: ``--resize-at STEP:N[:drain=I[,J]][:code=K,R]`` (repeatable, like ``--fail-at``) parsed
into :class:`ResizeAt` entries and ordered by step; a malformed entry is a ValueError naming the flag."""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

from xdl_ec.ps.resize_error import ResizeError
from xdl_ec.ps.resize_plan import plan_ids
from xdl_ec.settings.stripe_code import parse_code

__all__ = ["ResizeAt", "check_fits", "check_schedule", "parse_resize"]

_HEAD = re.compile(r"\s*(\d+)\s*:\s*(\d+)\s*")
_DRAIN = re.compile(r"\s*drain\s*=\s*(\d+(?:\s*,\s*\d+)*)\s*")
_CODE = re.compile(r"\s*code\s*=(.*)")


@dataclasses.dataclass(frozen=True)
class ResizeAt:
    """Resize to ``servers`` servers at the boundary before step ``step`` (the first step on the new count)."""

    step: int
    servers: int
    drain: Tuple[
        int, ...
    ] = ()  # server ids removed (a spot reclaim with notice), see :func:`~xdl_ec.ps.resize_plan.plan_ids`
    code: Optional[Tuple[int, int]] = None  # the (k, r) the re-formed stripes take (``--ft ec``); None keeps it

    def __str__(self) -> str:
        tail = f":drain={','.join(str(i) for i in self.drain)}" if self.drain else ""
        if self.code is not None:
            tail += f":code={self.code[0]},{self.code[1]}"
        return f"{self.step}:{self.servers}{tail}"


def parse_resize(text: str, flag: str = "--resize-at") -> ResizeAt:
    """``STEP:N[:drain=I[,J...]][:code=K,R]`` -> :class:`ResizeAt`; ValueError names ``flag`` and what was wrong.
    ``code`` follows the rule of a job's ``--code`` (:func:`~xdl_ec.settings.stripe_code.parse_code`)."""
    if not isinstance(text, str):
        raise TypeError(f"{flag}: expected a string STEP:SERVERS, got {type(text).__name__}")
    usage = (
        f"{flag}: expected STEP:SERVERS[:drain=ID[,ID...]][:code=K,R] with non-negative integers, e.g. 10:3, "
        f"10:3:drain=1 or 10:5:code=3,2, got {text!r}"
    )
    parts = text.split(":")
    head = _HEAD.fullmatch(":".join(parts[:2]))
    if head is None:
        raise ValueError(usage)
    step, servers = int(head.group(1)), int(head.group(2))
    drain: Tuple[int, ...] = ()
    code: Optional[Tuple[int, int]] = None
    given: List[str] = []
    for part in parts[2:]:
        name = part.split("=", 1)[0].strip()
        if name in given:
            raise ValueError(f"{flag}: {name}= is given twice in {text!r}; give it once")
        given.append(name)
        drained, coded = _DRAIN.fullmatch(part), _CODE.fullmatch(part)
        if drained is not None:
            drain = tuple(int(i) for i in drained.group(1).split(","))
        elif coded is not None:
            try:
                code = parse_code(coded.group(1).strip())
            except ValueError as err:
                raise ValueError(f"{flag}: {err} in {text!r} (code=K,R, as --code)") from None
        else:
            raise ValueError(usage)
    if len(set(drain)) != len(drain):
        raise ValueError(f"{flag}: a server id is drained twice in {text!r}; name each once")
    if step < 2:
        raise ValueError(
            f"{flag}: STEP must be >= 2 (a resize happens at the boundary after a step; STEP is the first step on "
            f"the new count), got {text!r}"
        )
    if servers < 1:
        raise ValueError(f"{flag}: SERVERS must be >= 1, got {text!r}")
    return ResizeAt(step, servers, drain, code)


def check_schedule(schedule: Sequence[ResizeAt], flag: str = "--resize-at") -> List[ResizeAt]:
    """The schedule sorted by step; ValueError when two resizes share a step."""
    ordered = sorted(schedule, key=lambda r: r.step)
    for a, b in zip(ordered, ordered[1:]):
        if a.step == b.step:
            raise ValueError(f"{flag}: two resizes at step {a.step} ({a} and {b}); keep one")
    return ordered


def check_fits(
    schedule: Sequence[ResizeAt], servers: int, code: Optional[Tuple[int, int]], total_steps: Optional[int]
) -> None:
    """Checks ``schedule`` (ordered) against a cluster of ``servers`` (stripes ``code``) and the run's steps, each
    entry against the cluster the entries before it leave: ValueError names the flag and the entry."""
    count = servers
    ids = list(range(servers))
    for r in schedule:
        text = f"--resize-at {r}"
        if total_steps is not None and r.step > total_steps:
            raise ValueError(f"{text}: the run has only {total_steps} steps; pick a step in 2..{total_steps}")
        if r.code is not None and code is None:
            raise ValueError(f"{text}: a code needs --ft ec (code=K,R re-forms the stripes; this run has none)")
        new_code = code if r.code is None else r.code
        if new_code is not None and r.servers < sum(new_code):
            raise ValueError(
                f"{text}: the code k={new_code[0]}, r={new_code[1]} needs at least {sum(new_code)} servers"
            )
        if r.servers == count and not r.drain and new_code == code:
            same = "" if code is None else f" with the code k={code[0]}, r={code[1]}"
            raise ValueError(f"{text}: the cluster has {count} servers then already{same}")
        try:
            kept, after = plan_ids(ids, r.servers, r.drain)
        except ResizeError as err:
            raise ValueError(f"{text}: {err}") from None
        ids = [ids[p] for p in kept] + after[len(kept) :]
        count, code = r.servers, new_code
