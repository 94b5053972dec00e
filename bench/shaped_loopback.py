"""ShapedLoopback: this machine's loopback interface limited to a network's rate (``tc`` token bucket), so that a
bench of processes on one machine pays for bytes as on a cluster network. Not a test helper: benches only.

    with ShapedLoopback("1gbit"):   # every byte over 127.0.0.1 now, Ray's and the direct links' alike
        ...

Needs root and ``tc`` (iproute2). It refuses to touch an interface that already has a queueing discipline of
its own (it would not be ours to remove) and removes its own on exit, on an exception too. Every process on the
machine shares the one shaped queue, as the processes of one worker's machine share its NIC.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any, Optional

_RATE = re.compile(r"\d+(\.\d+)?(bit|kbit|mbit|gbit)")


class ShapedLoopback:
    """``rate`` as tc writes it ("100mbit", "1gbit"); None or "none": the context shapes nothing."""

    def __init__(self, rate: Optional[str], device: str = "lo") -> None:
        self.rate = None if rate in (None, "none") else str(rate)
        self.device = device
        if self.rate is not None and not _RATE.fullmatch(self.rate):
            raise ValueError(f"rate: {rate!r} is not a tc rate such as '100mbit' or '1gbit' (or 'none')")

    def __enter__(self) -> "ShapedLoopback":
        if self.rate is None:
            return self
        if os.geteuid() != 0 or shutil.which("tc") is None:
            raise RuntimeError(
                f"shaping {self.device} to {self.rate} needs root and tc (iproute2); run as root or "
                f"leave the rate at 'none'"
            )
        shown = self._tc("qdisc", "show", "dev", self.device)
        if "noqueue" not in shown and "pfifo_fast" not in shown and shown.strip():
            raise RuntimeError(f"{self.device} already has a queueing discipline ({shown.strip()}); not replacing it")
        # burst above lo's 64 KiB MTU, else no packet fits the bucket
        self._tc(
            "qdisc",
            "add",
            "dev",
            self.device,
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            self.rate,
            "burst",
            "256kb",
            "latency",
            "100ms",
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.rate is not None:
            self._tc("qdisc", "del", "dev", self.device, "root", check=False)

    @staticmethod
    def _tc(*args: str, check: bool = True) -> str:
        done = subprocess.run(["tc", *args], capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"tc {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout
