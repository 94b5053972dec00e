"""LocalHandle: a role's calls run in order on its own thread; call_beside runs in the caller's thread at once
(methods that take their own locks: a rebuild's fragment reads must not wait behind the steps' calls)."""

from __future__ import annotations

import threading

import pytest

from xdl_ec.ps import ServerLost
from xdl_ec.ps.backend import LocalBackend


class Role:
    def __init__(self) -> None:
        self.release = threading.Event()

    def block(self) -> str:
        self.release.wait(10)
        return "unblocked"

    def where(self) -> str:
        return threading.current_thread().name

    def fail(self) -> None:
        raise ValueError("bad argument")


def test_call_beside_does_not_queue_behind_a_call_in_flight() -> None:
    handle = LocalBackend().start("server", 0, Role)
    blocked = handle.call("block")
    # the queued call behind the blocked one waits; a beside call answers now, in this thread
    queued = handle.call("where")
    assert handle.call_beside("where").result(1) == threading.current_thread().name
    assert not queued.done()
    handle.local_object().release.set()
    assert blocked.result(5) == "unblocked" and queued.result(5).startswith("xdl-ec-server0")
    handle.drop()


def test_call_beside_raises_in_result_and_after_drop() -> None:
    handle = LocalBackend().start("server", 3, Role)
    failed = handle.call_beside("fail")
    with pytest.raises(ValueError, match="bad argument"):
        failed.result(1)
    handle.drop()
    with pytest.raises(ServerLost):
        handle.call_beside("where").result(1)
