"""The checks of an asked resize: its drained ids, its code and whether the running cluster can take it
(:func:`check_target`), each failure a :class:`~xdl_ec.ps.resize_error.ResizeError` that changes nothing."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from xdl_ec.ps.resize_error import ResizeError
from xdl_ec.ps.resize_plan import plan_ids, server_ids_of
from xdl_ec.ps.resize_trainer import ResizeTrainer
from xdl_ec.settings.stripe_code import parse_code

__all__ = ["check_target", "code_after", "drain_ids"]


def drain_ids(drain: Any) -> Tuple[int, ...]:
    """``drain`` (None, an id or ids) as a tuple of distinct ints; ResizeError when it is not."""
    if drain is None:
        return ()
    items = [drain] if isinstance(drain, (int, np.integer)) else drain
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)):
        raise ResizeError(f"drain: expected a server id or a list of ids, got {type(drain).__name__}")
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) for i in items):
        raise ResizeError(f"drain: expected int server ids, got {list(items)!r}")
    out = tuple(int(i) for i in items)
    if len(set(out)) != len(out):
        raise ResizeError(f"drain: a server id is given twice in {list(out)}; name each once")
    return out


def code_after(trainer: ResizeTrainer, code: Any) -> Optional[Tuple[int, int]]:
    """The stripes' (k, r) after a resize of ``trainer``'s cluster asked with ``code`` (None: the current one,
    kept); ResizeError when the run keeps no stripes (``--ft`` other than ec) or ``code`` breaks ``--code``'s rule."""
    current = trainer.strategy.stripe_code
    if code is None:
        return None if current is None else (int(current[0]), int(current[1]))
    if current is None:
        ft = getattr(trainer.strategy, "name", "none")
        raise ResizeError(f"code: a code needs --ft ec (this run has --ft {ft}: no stripes); nothing was changed")
    try:
        return parse_code(code)
    except (TypeError, ValueError) as err:
        raise ResizeError(f"{err}; nothing was changed") from None


def check_target(
    trainer: ResizeTrainer, servers: int, drain: Any = None, code: Any = None
) -> Optional[Tuple[int, int]]:
    """ResizeError when ``trainer``'s cluster cannot be resized to ``servers`` with the ``drain`` ids removed and
    its stripes re-formed with ``code`` (None: kept; what is refused: docs/design/elastic.md); else the code after."""
    drained = drain_ids(drain)
    if isinstance(servers, bool) or not isinstance(servers, (int, np.integer)):
        raise ResizeError(f"servers: expected an int, got {type(servers).__name__}")
    current = len(trainer.scheduler.servers)
    if servers < 1:
        raise ResizeError(f"servers: a cluster needs at least 1 server, got {servers}")
    new_code = code_after(trainer, code)
    if new_code is not None and servers < sum(new_code):
        k, r = new_code
        raise ResizeError(
            f"servers: the code k={k}, r={r} needs at least k + r = {k + r} servers, got {servers}; keep at least "
            f"{k + r}"
        )
    if servers == current and not drained and new_code == code_after(trainer, None):
        kept = "" if new_code is None else f" with the code k={new_code[0]}, r={new_code[1]}"
        raise ResizeError(f"servers: the cluster has {current} servers already{kept}")
    plan_ids(server_ids_of(trainer.scheduler), int(servers), drained)
    ft = getattr(trainer.strategy, "name", "none")
    if ft not in ("none", "ec"):
        raise ResizeError(f"resize: not supported with --ft {ft} yet (--ft none or ec); nothing was changed")
    bounded = [t.name for t in trainer.job.tables if t.bounded]
    if bounded:
        raise ResizeError(
            f"resize: tables {bounded} have admit / evict rules, whose row caps are shared per server; they cannot "
            f"be resized"
        )
    if trainer.scheduler.placement is not None and not trainer.strategy.reforms_on_resize:
        raise ResizeError("resize: the servers are placed by a failure domain but form no stripes to re-form")
    return new_code
