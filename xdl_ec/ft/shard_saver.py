"""ShardSaver: ``--ft ckpt``'s part of each server (its agent): writes and loads the server's shards as a
:class:`~xdl_ec.keep.checkpoint.ShardCheckpoint`, in the server's process and under its lock."""

from __future__ import annotations

from xdl_ec.keep.checkpoint import ShardCheckpoint
from xdl_ec.ps.agent import AgentHost, ServerAgent


class ShardSaver(ServerAgent):
    """The shard checkpoints of the server ``host``."""

    def __init__(self, host: AgentHost) -> None:
        self.host = host

    def save(self, host: AgentHost, directory: str, step: int) -> int:
        """Writes every table to ``directory`` (not atomic by itself: the job checkpoint's commit publishes it);
        returns the bytes written."""
        with host.lock:
            return ShardCheckpoint.write(directory, host.tables(), step=step, atomic=False).nbytes()

    def load(self, host: AgentHost, directory: str) -> int:
        """Replaces every table by the ShardCheckpoint in ``directory`` (verified before anything changes);
        returns the rows loaded."""
        with host.lock:
            restored = ShardCheckpoint.open(directory).restore(host.tables())
            host.replace_tables(restored)
            return sum(len(t) for t in restored.values())
