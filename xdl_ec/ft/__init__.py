"""Fault tolerance: the strategies a job's ``--ft`` names, each plugged into the training driver through
:class:`~xdl_ec.ps.fault_tolerance.FaultTolerance` and into every server through its agent
(:mod:`xdl_ec.ps.agent`).

- ``ec`` (:mod:`xdl_ec.ft.ec_strategy`): erasure-coded parity over the servers' slot records; a lost server is
  rebuilt bit for bit while training goes on (parity agent, recovery, rebuild, scrub);
- ``ckpt`` (:mod:`xdl_ec.ft.ckpt_strategy`): XDL-style full checkpoints, a failure rolls every role back;
- ``cpr`` (:mod:`xdl_ec.ft.cpr_strategy`): partial recovery (Maeng et al., MLSys 2021), only the lost servers'
  rows roll back to their last partial checkpoint;
- the kills of ``--fail-at`` (:mod:`xdl_ec.ft.failure_schedule`, :mod:`xdl_ec.ft.failure_injector`) and the
  strategies' settings (:mod:`xdl_ec.ft.configs`, :mod:`xdl_ec.ft.factory`).

The names below are the checkpoint strategies' building blocks, re-exported for their users.
"""

from xdl_ec.ft.cpr_checkpointer import CprCheckpointer
from xdl_ec.ft.partial_restore import CheckpointChain, RestoreResult, restore_server
from xdl_ec.ft.row_selection import AccessCounter, MfuSelector, SsuSelector
from xdl_ec.keep.checkpoint import CheckpointStore, JobCheckpoint, PendingCheckpoint, ShardCheckpoint, fresh_table
from xdl_ec.settings.interval import IntervalPolicy, cpr_interval, expected_pls, parse_interval, young_interval

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
