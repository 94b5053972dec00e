"""PushesInFlight: a worker's pushes whose acks it has not read yet, and those to send again.

Where no other worker's pull can come between a push and the next step (one worker, or async mode), a step answers
without waiting for its push's acks: they are read before the next push (or at a flush), which raises a server's
loss then. A push a lost server never acknowledged is sent again, in order, to its replacement before this worker's
next push; the server applies only the parts its state lacks, by push seq. A caching client holds gradients back:
a write-back pushes them, a rollback drops them.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

from xdl_ec.ps.backend import RoleLost
from xdl_ec.ps.cached_client import CachedClient
from xdl_ec.ps.client import Ack, PSClient
from xdl_ec.ps.step_client import RowGrads, RowRequests, RowsInFlight, StepClient
from xdl_ec.ps.worker_servers import no_servers, servers_client


class PushesInFlight:
    """The pushes worker ``worker`` sends through ``client``: their acks not yet read, the pushes to send again, and
    the step of the latest push (what a write-back's push counts as)."""

    def __init__(self, worker: int, client: StepClient) -> None:
        self._worker, self._client = worker, client
        self._plain = servers_client(client)
        self._unacked: List[Ack] = []
        self._resend: List[Tuple[int, tuple]] = []  # (server, push) lost with its server, for its replacement
        self.last_step = 0

    @property
    def unacked(self) -> int:
        """Pushes whose acks are not read yet."""
        return len(self._unacked)

    def _servers(self, call: str) -> PSClient:
        if self._plain is None:
            raise no_servers(call, self._worker)
        return self._plain

    # ---- sending ---------------------------------------------------------------------------------------------
    def push(self, grads: RowGrads, step: int, participants: int, ttl_before: Optional[Mapping[str, int]]) -> None:
        """Pushes ``grads`` at ``step`` and waits for the acks (a lost server raises)."""
        self.last_step = step
        self._client.push(grads, step, participants, ttl_before)

    def push_async(
        self, grads: RowGrads, step: int, participants: int, ttl_before: Optional[Mapping[str, int]]
    ) -> None:
        """Pushes ``grads`` at ``step``; the acks are read later (:meth:`settle`)."""
        self.last_step = step
        self._unacked.extend(self._client.push_async(grads, step, participants, ttl_before))

    def push_pull(
        self, grads: RowGrads, step: int, requests: RowRequests, ttl_before: Optional[Mapping[str, int]]
    ) -> RowsInFlight:
        """Pushes ``grads`` at ``step`` (one participant) and pulls ``requests`` in one call per server, the push
        applied first there; the acks are read later, the rows come back in flight."""
        client = self._client
        if not isinstance(client, (PSClient, CachedClient)):
            raise no_servers("push_pull", self._worker)
        self.last_step = step
        acks, rows = client.push_pull_async(grads, step, requests, ttl_before)
        self._unacked.extend(acks)
        return rows

    def any_lost(self) -> bool:
        """Whether a push in flight already failed (a call to a server known dead fails at once)."""
        return any(_failed(f) for f in self._unacked)

    def held_in_caches(self) -> int:
        """Gradients held in the client's caches, not yet pushed (lost if this worker dies)."""
        return self._client.pending_updates() if isinstance(self._client, CachedClient) else 0

    # ---- acks ------------------------------------------------------------------------------------------------
    def settle(self) -> None:
        """Waits for every ack in flight, then raises the first server loss among them (after noting the rest; a
        lost server's push is sent again to its replacement before this worker's next push)."""
        unacked, self._unacked = self._unacked, []
        answered, acks, lost = [], [], []
        for future in unacked:
            try:
                acks.append(future.result(self._client.timeout))
                answered.append(future)
            except RoleLost as err:
                lost.append(err)
                self._stash_resend(future)
        self._client.note_acks(answered, acks)
        if lost:
            raise lost[0]

    def flush(self, write_back: bool) -> int:
        """Sends the lost pushes again, then waits for the acks in flight (raising a failure among them); returns
        how many. ``write_back``: first push every gradient the caches hold."""
        self.resend_lost()
        if write_back and isinstance(self._client, CachedClient):
            self._unacked += self._client.write_back(self.last_step)
        count = len(self._unacked)
        self.settle()
        return count

    def _stash_resend(self, future: Ack) -> None:
        if future.sent is not None:
            self._resend.append((future.server, future.sent))

    def resend_lost(self) -> None:
        """Sends again, in order, the pushes whose server was lost before acknowledging them (a recovery replaced
        it, or reloaded it: the server applies only the parts its state lacks, by seq). A strategy that replays
        push logs (ec) has sent them already; one that reloads a checkpoint (cpr) has not."""
        while self._resend:
            server, sent = self._resend[0]
            future = self._servers("resend").resend(server, sent)
            self._client.note_acks([future], [future.result(self._client.timeout)])
            self._resend.pop(0)

    def forget_server(self, index: int) -> None:
        """Server ``index`` was replaced: acks still awaited from the dead one (a push answered after its step) say
        nothing about the new one, so their pushes are sent to it again before the next push (applied only if its
        state lacks them)."""
        self._servers("set_server").drop_acks(index)
        kept = []
        for future in self._unacked:
            if future.server == index:
                self._stash_resend(future)
            else:
                kept.append(future)
        self._unacked = kept

    # ---- the push log (ec) ---------------------------------------------------------------------------------
    def keep_log(self) -> None:
        """Keeps each push until its server reports it durable, for :meth:`replay`."""
        self._servers("enable_push_log").enable_push_log()

    def replay(self, server: int, after_seq: int) -> int:
        """Sends the logged pushes to (rebuilt) ``server`` above push seq ``after_seq`` again, in order; returns
        how many."""
        return self._servers("replay_pushes").replay(server, after_seq)

    def forget(self) -> None:
        """A rollback: the steps of the pushes in flight, to send again or held in caches are trained again."""
        self._unacked = []
        self._resend = []
        if isinstance(self._client, CachedClient):
            self._client.drop_pending()


def _failed(future: Ack) -> bool:
    """Whether ``future`` already failed (a call to a role known dead fails at once)."""
    if not future.done():
        return False
    try:
        future.result(0)
    except RoleLost:
        return True
    except Exception:  # noqa: BLE001 - any other error surfaces where the ack is awaited
        return False
    return False
