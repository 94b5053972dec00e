"""KeptHandle and LostHandle: a Ray role's handle as a reattachable run's record keeps it, and a role the record
names that died before a driver read it (docs/design/reattach.md).

Ray rebuilds an actor handle from the actor's class, which it keeps only while the driver that started the actor,
or a detached actor that driver started, is alive. A replacement server started by a driver that has since died,
and then killed itself, leaves a record no later driver can read whole: Ray's ``load_actor_class`` fails on it
(the 60-minute soak met this: ``AssertionError: Expected str or bytes, got NoneType``). So each handle is kept
pickled on its own, beside its actor's id: a driver opens them one at a time, and a role Ray calls dead (or whose
class Ray no longer holds, which only a dead one's can be) opens as a :class:`LostHandle`, which the reattach counts
as lost like any role that does not answer.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any, Optional

from xdl_ec.ps.backend import RayHandle, actor_entry, lost_error
from xdl_ec.ps.direct import unlinked
from xdl_ec.ps.handle import Handle

log = logging.getLogger(__name__)


class LostFuture:
    """The answer of a call to a lost role: the role's loss, at once."""

    def __init__(self, role: str, index: int, reason: str) -> None:
        self.role, self.index, self.reason = role, index, reason

    def done(self) -> bool:
        return True

    def result(self, timeout: Optional[float] = None) -> Any:
        raise lost_error(self.role, self.index, self.reason)


class LostHandle(Handle):
    """A role of a run record that was dead when a driver opened the record: every call to it fails as the role's
    loss (RoleLost), as a call to a dead actor does. ``actor`` is None: there is nothing to kill."""

    actor = None

    def __init__(self, role: str, index: int, node: Optional[str], reason: str) -> None:
        self.role, self.index, self.node, self.reason = role, index, node, reason

    def call(self, method: str, *args: Any) -> LostFuture:
        return LostFuture(self.role, self.index, self.reason)


class KeptHandle:
    """``handle`` (a RayHandle, linked or not, or a LostHandle kept lost) as a run record keeps it: role, index,
    node, the actor's id and the actor handle pickled alone (``pickle`` of a Ray actor handle is its serialized
    form)."""

    def __init__(self, handle: Handle) -> None:
        handle = unlinked(handle)  # a role's direct link stays in its process: the Ray handle behind it is kept
        self.role, self.index, self.node = handle.role, int(handle.index), handle.node
        actor = getattr(handle, "actor", None)
        self.actor_id: Optional[str] = None if actor is None else actor._actor_id.hex()
        self.actor: Optional[bytes] = None if actor is None else pickle.dumps(actor)

    def open(self) -> Handle:
        """The handle to call: a RayHandle, or a LostHandle when the role is dead."""
        if self.actor is None or self.actor_id is None:
            return LostHandle(self.role, self.index, self.node, "it was lost before the record was written")
        if actor_entry(self.actor_id).get("State") == "DEAD":
            return LostHandle(self.role, self.index, self.node, "its Ray actor died while no driver ran")
        try:
            actor = pickle.loads(self.actor)
        except Exception as err:  # noqa: BLE001 - Ray's own error when the actor's class is gone (see above)
            state = actor_entry(self.actor_id).get("State")  # asked again: it may have died since
            if state in ("DEAD", None):
                log.info("%s %d: its handle no longer opens (%s): lost", self.role, self.index, err)
                return LostHandle(self.role, self.index, self.node, "its Ray actor died while no driver ran")
            raise RuntimeError(
                f"the run record's {self.role} {self.index} (Ray actor {self.actor_id}, {state}) could not be "
                f"opened: {type(err).__name__}: {err}"
            ) from err
        return RayHandle(self.role, self.index, actor, self.node)
