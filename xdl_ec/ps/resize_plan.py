"""The plan of a resize: which servers it keeps and the stable ids it ends with (:func:`plan_ids`), where re-formed
servers go (:func:`placement_of`), the share of rows any move must carry (:func:`ideal_fraction`) and the code
fields of its record."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from xdl_ec import _core
from xdl_ec.ps.placement import Placement, plan_placement
from xdl_ec.ps.resize_error import ResizeError
from xdl_ec.ps.resize_trainer import ResizeTrainer
from xdl_ec.ps.scheduler import Scheduler

__all__ = ["code_fields", "ideal_fraction", "placement_of", "plan_ids", "server_ids_of"]


def server_ids_of(scheduler: Scheduler) -> List[int]:
    """The live servers' stable ids, in the cluster's order (0..n-1 until a drain leaves a hole)."""
    ids = getattr(scheduler, "server_ids", None)
    return list(range(len(scheduler.servers))) if ids is None else list(ids)


def plan_ids(ids: Sequence[int], servers: int, drain: Sequence[int] = ()) -> Tuple[List[int], List[int]]:
    """The servers a resize of a cluster with stable ``ids`` (in its order) to ``servers`` keeps and the ids it ends
    with: (positions kept, ids after: the kept ones in their order, then the new servers'). The ``drain`` ids go
    first; then, shrinking further, the highest ids; growing, new servers take the smallest free ids (a drained id
    too: draining i and growing back restores the routing). ResizeError for an id that is not live."""
    missing = [i for i in drain if i not in ids]
    if missing:
        raise ResizeError(
            f"drain: server id{'s' if len(missing) > 1 else ''} {missing} {'are' if len(missing) > 1 else 'is'} not "
            f"live (the live ids are {sorted(ids)}); nothing was changed"
        )
    kept = [p for p, i in enumerate(ids) if i not in drain]
    if servers < len(kept):
        leaving = set(sorted((ids[p] for p in kept), reverse=True)[: len(kept) - servers])
        kept = [p for p in kept if ids[p] not in leaving]
    after = [ids[p] for p in kept]
    free = (i for i in range(servers + len(ids)) if i not in after)
    after += [next(free) for _ in range(servers - len(kept))]
    return kept, after


def placement_of(trainer: ResizeTrainer, servers: int, code: Optional[Tuple[int, int]] = None) -> Optional[Placement]:
    """The failure-domain placement of ``servers`` re-formed servers with stripes of ``code`` (None: the current
    one) (None where Ray places them): the alive nodes must hold them with at most r members of a stripe on a
    node, else ResizeError."""
    if trainer.scheduler.placement is None:
        return None
    stripes = trainer.strategy.stripe_code if code is None else code
    try:
        return plan_placement(trainer.backend, trainer.cluster.failure_domain, servers, stripes)
    except ValueError as err:
        raise ResizeError(f"resize to {servers} servers: {err}") from err


def ideal_fraction(
    ids_before: List[int], kept: List[int], ids_after: List[int], servers: int, drain: Sequence[int]
) -> float:
    """|m - n| / max(m, n), or with a drain the share of the route table's buckets whose owner changes."""
    if drain:  # buckets whose owner is another server after: another id, or a drained id given to a new server
        old_owner = np.asarray(_core.RouteTable(ids_before).owners)
        left = ~np.isin(old_owner, [ids_before[p] for p in kept])
        return float(np.mean((old_owner != np.asarray(_core.RouteTable(ids_after).owners)) | left))
    before = len(ids_before)
    return abs(servers - before) / max(servers, before)


def code_fields(before: Optional[Tuple[int, int]], after: Optional[Tuple[int, int]]) -> Dict[str, Any]:
    """A record's ``code_before`` and ``code`` ([k, r]) under stripes, nothing without them."""
    if before is None or after is None:
        return {}
    return {"code_before": [int(x) for x in before], "code": [int(x) for x in after]}
