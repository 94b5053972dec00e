"""ResizeError: a resize that cannot be done as asked; nothing was changed."""

from __future__ import annotations

__all__ = ["ResizeError"]


class ResizeError(ValueError):
    """A resize that cannot be done as asked; nothing was changed."""
