"""HostedAgent: the agent a parameter server hosts (:mod:`xdl_ec.ps.agent`: a fault-tolerance strategy's part of
the server) and whether the server is to die (an injected crash, asked by its agent or a test).

Both decide what the server's native core may serve by itself: a one-worker step goes without the interpreter only
while the agent allows it and no crash is asked, so the server's every path dies at the same point.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from xdl_ec.ps.agent import AgentHost, ServerAgent
from xdl_ec.ps.backend import ServerLost, in_ray_actor
from xdl_ec.ps.server_shards import ServerShards


class HostedAgent:
    """The agent of the server holding ``shards`` (a plain :class:`ServerAgent` until one is attached)."""

    def __init__(self, shards: ServerShards) -> None:
        self._shards = shards
        self.agent: ServerAgent = ServerAgent()
        self.attached = False
        self._crash_requested = False

    @property
    def crash_requested(self) -> bool:
        """The role dies right after this call (see :meth:`die`); set, no request is served natively any more."""
        return self._crash_requested

    @crash_requested.setter
    def crash_requested(self, value: bool) -> None:
        self._crash_requested = bool(value)
        self.sync_native()

    def sync_native(self) -> None:
        """Lets the core serve one-worker steps itself while the agent allows it (ServerAgent.native_path)."""
        with self._shards.lock:
            enabled, forwarder = (False, None) if self._crash_requested else self.agent.native_path()
            self._shards.set_native(enabled, forwarder)

    def attach(self, host: AgentHost, factory: Callable[..., ServerAgent], *args: Any) -> None:
        """Builds the agent as ``factory(host, *args)`` in this process (one agent per server)."""
        with self._shards.lock:
            if self.attached:
                raise ValueError(f"server {host.index} already hosts an agent ({type(self.agent).__name__})")
            agent = factory(host, *args)
            if not isinstance(agent, ServerAgent):
                raise TypeError(f"attach_agent: the factory must build a ServerAgent, got {type(agent).__name__}")
            self.agent, self.attached = agent, True
            self.sync_native()

    def call(self, host: AgentHost, method: str, *args: Any) -> Any:
        """``agent.<method>(host, *args)``: the driver's calls to the agent (see Remote, agent=True)."""
        self.die_if_asked(host.index)
        if not self.attached:
            raise ValueError(f"server {host.index} hosts no agent; attach_agent first")
        if method.startswith("_") or not callable(getattr(self.agent, method, None)):
            raise AttributeError(f"{type(self.agent).__name__} has no method {method!r}")
        try:
            return getattr(self.agent, method)(host, *args)
        finally:
            self.sync_native()  # the call may have changed what the agent allows (e.g. a crash armed)

    def die_if_asked(self, index: int) -> None:
        """Dies now (:meth:`die`) when a crash was asked."""
        if self._crash_requested:
            self.die(index)

    def die(self, index: int) -> None:
        """Server ``index`` dies now (an injected crash): in a Ray actor the process exits; in one process the
        backend drops the server after the call, and the call fails as a lost server's would."""
        self.crash_requested = True
        if in_ray_actor():
            os._exit(1)
        raise ServerLost(index, "it crashed (injected)")

    def close(self) -> None:
        self.agent.close()
