"""MachineCpu: the whole machine's busy CPU time, which the benchmarks charge per sample (every process's load,
Ray's included, that one process's own counters cannot see), and the CPU time of given processes."""

from __future__ import annotations

import os
from typing import Iterable, Optional


def busy_cpu_seconds() -> Optional[float]:
    """CPU seconds the whole machine spent busy so far (Linux /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def process_cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds ``pids`` (every thread of each) ran so far (Linux schedstat: nanoseconds, not the 10 ms ticks of
    /proc/PID/stat); a process or thread gone counts 0."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                continue
    return total / 1e9
