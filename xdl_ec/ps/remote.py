"""Remote: calls to a role through its :class:`~xdl_ec.ps.handle.Handle`, by the methods an interface declares.

The one place where a remote method is named: ``Remote(handle, ServerAPI).pull(requests)`` sends one message
``pull(requests)`` and returns the call's future; a method the interface does not declare is an AttributeError
here, in the caller, not a failure in the role. ``agent=True`` addresses the agent the role hosts (the message is
the server's ``agent_call(method, *args)``); ``beside=True`` uses ``Handle.call_beside`` (a method safe beside the
role's other calls, which need not queue behind them).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, FrozenSet

from xdl_ec.ps.handle import Handle


@functools.lru_cache(maxsize=None)  # a Remote is made per call in places: inspecting the class each time showed up
def _declared(api: type) -> FrozenSet[str]:
    return frozenset(name for name, member in inspect.getmembers(api) if not name.startswith("_") and callable(member))


class Remote:
    """The methods of ``api`` (a class or Protocol) called on the role behind ``handle``."""

    def __init__(self, handle: Handle, api: type, agent: bool = False, beside: bool = False) -> None:
        if not callable(getattr(handle, "call", None)):
            raise TypeError(f"handle: expected a backend Handle, got {type(handle).__name__}")
        self.handle, self.api, self._agent, self._beside = handle, api, agent, beside
        self._methods = _declared(api)

    @property
    def index(self) -> int:
        return self.handle.index

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_") or method not in self._methods:
            raise AttributeError(f"{self.api.__name__} declares no remote method {method!r}")
        send = self.handle.call_beside if self._beside else self.handle.call
        if self._agent:
            return lambda *args: send("agent_call", method, *args)
        return lambda *args: send(method, *args)

    def __repr__(self) -> str:
        return f"Remote({self.handle.role} {self.handle.index}, {self.api.__name__})"
