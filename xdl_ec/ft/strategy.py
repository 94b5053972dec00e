"""The strategies' seam lives with the driver (:mod:`xdl_ec.ps.fault_tolerance`); this name is kept for the ec
strategy's imports while it is being split (see docs/design/ec-protocol.md)."""

from ..ps.fault_tolerance import FailureRecord, FaultTolerance, NoFaultTolerance, Resume, Unrecoverable

__all__ = ["FailureRecord", "FaultTolerance", "NoFaultTolerance", "Resume", "Unrecoverable"]
