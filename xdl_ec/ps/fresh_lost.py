"""FreshLost: a background move's fresh server died or stopped answering; the move starts over on new ones."""

from __future__ import annotations

__all__ = ["FreshLost"]


class FreshLost(RuntimeError):
    """A fresh server of a move died or stopped answering (the move starts over on new ones: the old servers still
    hold every row, so it is no loss of the run)."""
