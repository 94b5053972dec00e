"""Handle: one started role as a backend sees it, and the two ways to call it."""

from __future__ import annotations

from typing import Any, Optional


class Handle:
    """One started role: ``role`` ('server' or 'worker'), ``index`` and a transport-specific ``call``."""

    role: str
    index: int
    node: Optional[str] = None  # the node it was placed on (None: wherever the backend chose)

    def call(self, method: str, *args: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def call_beside(self, method: str, *args: Any) -> Any:
        """Like :meth:`call`, for a method that is safe beside the role's other calls (it takes its own locks):
        it need not wait behind them. Parity batches use it, so applying them never delays a push or pull."""
        return self.call(method, *args)
