"""Test-only: the driver SIGKILLs itself at a named point of a recovery, so that a test can kill it exactly there
(a driver that dies mid-recovery, docs/design/reattach.md). ``XDL_EC_DRIVER_DIES_AT=<point>`` names the point;
unset (every real run), :func:`reached` does nothing. The points are :data:`POINTS`."""

from __future__ import annotations

import os
import signal

ENV = "XDL_EC_DRIVER_DIES_AT"
POINTS = (
    "recovery-begun",  # the heartbeat says recovering; no role changed yet
    "rolled-back",  # the holders rolled the lost servers' streams back; nothing replaced yet
    "replaced",  # replacements started, named to workers and holders, in restore mode; no push replayed
    "replayed",  # the workers replayed their logs to the replacements; the failed step not retried yet
)


def reached(point: str) -> None:
    """SIGKILLs this process when ``XDL_EC_DRIVER_DIES_AT`` names ``point`` (a test's; a name not in POINTS is an
    error, so a typo cannot make a test pass without the kill)."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    if wanted not in POINTS:
        raise ValueError(f"{ENV}={wanted!r}: not a kill point; one of {POINTS} (test-only)")
    if wanted == point:
        os.kill(os.getpid(), signal.SIGKILL)
