"""MachineCpu: the whole machine's busy CPU time, which the benchmarks charge per sample (every process's load,
Ray's included, that one process's own counters cannot see)."""

from __future__ import annotations

import os
from typing import Optional


def busy_cpu_seconds() -> Optional[float]:
    """CPU seconds the whole machine spent busy so far (Linux /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
