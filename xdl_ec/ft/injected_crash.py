"""InjectedCrash: a server's death armed inside the ec protocol, at the two points a kill at a step boundary never
reaches (before a push is applied; after it is applied and acknowledged but before its deltas are forwarded).

``ErasureCoded.arm_crash_before_apply`` / ``arm_crash_after_apply`` arm it through the server's parity agent; the
agent's data path asks it at each push, and the server's native path stays off while anything is armed or taken.
"""

from __future__ import annotations


class InjectedCrash:
    """The crash state of one server's parity agent: armed before the next push's apply, armed after it, or taken
    (the server is dying: what it still applies is never forwarded)."""

    def __init__(self) -> None:
        self._before_apply = False
        self._after_apply = False
        self.taken = False

    @property
    def active(self) -> bool:
        """Whether a push must ask: a crash is armed or was taken (one test on the training path)."""
        return self._before_apply or self._after_apply or self.taken

    def arm_before_apply(self) -> None:
        """The next push dies before it is applied (the push fails)."""
        self._before_apply = True

    def arm_after_apply(self) -> None:
        """The next push is applied and answered, and its deltas are never forwarded."""
        self._after_apply = True

    def take_before_apply(self) -> bool:
        """Whether this push dies before its apply (disarms it)."""
        armed, self._before_apply = self._before_apply, False
        return armed

    def take_after_apply(self) -> bool:
        """Whether this push is the last one applied (disarms it and marks the crash taken)."""
        armed, self._after_apply = self._after_apply, False
        self.taken = self.taken or armed
        return armed
