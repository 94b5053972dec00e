"""Where a run's step time went: the report's ``stages``, from its workers' own clocks (``Worker.stats()``) and this
process's CPU time.

Each stage is the wall seconds it ran, summed over the workers: ``input_s`` the input thread producing batches
(reading, checks, unique ids; beside the step), ``pull_s`` the step waiting for its rows (with the pipelined
one-process step, the previous step's push landing too), ``tf_s`` the TF call, ``push_s`` handing the gradients
over, ``wait_s`` the step waiting for the input thread's next batch. ``cores_busy``: this process's CPU seconds
per wall second of training (every role with servers in this process; the driver's part only on Ray).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Sequence

STAGE_KEYS = ("input_s", "pull_s", "tf_s", "push_s", "wait_s", "cores_busy")


class StageClock:
    """Started at a fit's beginning; :meth:`stages` at its end gives the report's ``stages``."""

    def __init__(self, workers: Sequence[Dict[str, Any]]) -> None:
        self._before = _totals(workers)
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stages(self, workers: Sequence[Dict[str, Any]]) -> Dict[str, float]:
        """``stages`` since the start, given the workers' stats now."""
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        now = _totals(workers)
        # (a worker restarted meanwhile started its clock again: its share before the restart is not counted)
        out = {k: max(now[k] - self._before[k], 0.0) for k in now}
        out["cores_busy"] = cpu / wall if wall > 0 else 0.0
        return out


def _totals(workers: Sequence[Dict[str, Any]]) -> Dict[str, float]:
    sources = {
        "input_s": lambda w: w.get("input", {}).get("seconds", 0.0),
        "pull_s": lambda w: w.get("pull_wait_seconds", 0.0),
        "tf_s": lambda w: w.get("compute_seconds", 0.0),
        "push_s": lambda w: w.get("push_seconds", 0.0),
        "wait_s": lambda w: w.get("data_wait_seconds", 0.0),
    }
    return {k: float(sum(read(w) for w in workers)) for k, read in sources.items()}


def stages_text(stages: Dict[str, float]) -> str:
    """One line of ``stages`` for the end of a run."""
    return (
        f"stages: input {stages['input_s']:.2f} s (input thread), pull {stages['pull_s']:.2f} s, "
        f"TF {stages['tf_s']:.2f} s, push {stages['push_s']:.2f} s, waiting for input {stages['wait_s']:.2f} s; "
        f"{stages['cores_busy']:.2f} cores busy"
    )
