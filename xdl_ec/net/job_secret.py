"""JobSecret: the key a job's parity links prove their membership with (see :mod:`xdl_ec.ft.parity_link`).

The driver makes one per job (:meth:`JobSecret.generate`, 32 random bytes from :mod:`secrets`) when it attaches
parity, and hands it to every server through Ray's actor arguments (authenticated when Ray runs in token mode),
never on a command line, in an environment variable or in a log: its ``repr`` and ``str`` show only that a secret
is there. Only HMAC-SHA256 values derived from it ever leave a process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any, Tuple

SECRET_BYTES = 32  # the least accepted, and what generate() makes


class JobSecret:
    """A per-job key of at least 32 bytes; picklable (Ray passes it to the server actors), never printed."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)):
            raise TypeError(
                f"JobSecret: key must be bytes (e.g. secrets.token_bytes({SECRET_BYTES})), got {type(key).__name__}"
            )
        if len(key) < SECRET_BYTES:
            raise ValueError(
                f"JobSecret: key must have at least {SECRET_BYTES} random bytes, got {len(key)}; use "
                f"JobSecret.generate()"
            )
        self._key = bytes(key)

    @classmethod
    def generate(cls) -> "JobSecret":
        return cls(secrets.token_bytes(SECRET_BYTES))

    def mac(self, label: bytes, *parts: Any) -> bytes:
        """HMAC-SHA256 under this key of ``label`` (which says what the value is for, so a value made for one
        purpose never passes for another) followed by ``parts`` (bytes-like)."""
        h = hmac.new(self._key, label, hashlib.sha256)
        for part in parts:
            h.update(part)
        return h.digest()

    def __repr__(self) -> str:
        return "JobSecret(<hidden>)"

    __str__ = __repr__

    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]:
        return type(self), (self._key,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobSecret) and hmac.compare_digest(self._key, other._key)

    def __hash__(self) -> int:
        return hash(hashlib.sha256(b"xdl-ec job secret id" + self._key).digest())
