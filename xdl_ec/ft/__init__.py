"""Fault-tolerance building blocks of the checkpoint baselines: ``ckpt`` (XDL-style full checkpoints with rollback)
and ``cpr`` (partial recovery, Maeng et al., MLSys 2021). Transport-free: a parameter server or the training loop
calls them with its tables, dense state and reader position."""

from xdl_ec.keep.checkpoint import CheckpointStore, JobCheckpoint, PendingCheckpoint, ShardCheckpoint, fresh_table
from xdl_ec.settings.interval import IntervalPolicy, cpr_interval, expected_pls, parse_interval, young_interval

from .cpr_checkpointer import CprCheckpointer
from .partial_restore import CheckpointChain, RestoreResult, restore_server
from .row_selection import AccessCounter, MfuSelector, SsuSelector

__all__ = [
    "CheckpointStore",
    "JobCheckpoint",
    "PendingCheckpoint",
    "ShardCheckpoint",
    "fresh_table",
    "IntervalPolicy",
    "cpr_interval",
    "expected_pls",
    "parse_interval",
    "young_interval",
    "CprCheckpointer",
    "CheckpointChain",
    "RestoreResult",
    "restore_server",
    "AccessCounter",
    "MfuSelector",
    "SsuSelector",
]
