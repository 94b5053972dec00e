"""Stress: overlapping server failures under ``--ft ec``, repeated under load with a watchdog. Not a test (the
bounded version lives in tests/integration/test_overlapping_failures.py).

    PYTHONPATH=build/stage python3 -P bench/stress_ft_ec.py [--runs 200] [--seed 0] [--load 1] [--data PATH]
                                                            [--scenario NAME ...] [--backend local|ray]
                                                            [--watchdog-factor 10] [--dumps DIR]

Each run trains a small model on servers of which some die at overlapping times (two lost at once,
a replacement lost while it is being rebuilt, losses at adjacent steps, r = 1, 2, 3,
plus seeded random schedules), and must end either at the failure-free model_digest or with ``Unrecoverable``
(more than r servers down at once); anything else - a wrong digest, another error, a run that does not end - is a
failure. ``--load N`` starts N CPU-bound processes beside it. The watchdog: a run taking more than
``--watchdog-factor`` times the scenario's first run (at least 30 s) has every thread's stack dumped
(``faulthandler``, and ``py-spy dump`` when installed, which sees the C++ frames too) into ``--dumps``, and the
stress stops there (exit status 2). Prints one line per failure and a summary per scenario.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from xdl_ec.benchmark.failure_scenarios import SCENARIOS, Outcome, random_scenario, run_scenario  # noqa: E402


def _spinners(count: int) -> List[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


class Watchdog:
    """Dumps every thread's stack (faulthandler, and py-spy for native frames) if a run outlives its limit."""

    def __init__(self, dumps: Path) -> None:
        self.dumps = dumps
        self.fired = threading.Event()
        self._timer: Optional[threading.Timer] = None
        self._fault_file = None
        self.spinners: List[subprocess.Popen] = []  # the load processes, killed before a hung run exits

    def arm(self, seconds: float, label: str) -> None:
        self.dumps.mkdir(parents=True, exist_ok=True)
        self._fault_file = open(self.dumps / f"faulthandler-{label}.txt", "w")
        # a C-level watchdog thread dumps every Python stack even when no Python thread can run (a held GIL)
        faulthandler.dump_traceback_later(seconds, repeat=False, file=self._fault_file, exit=False)
        self._timer = threading.Timer(seconds + 1.0, self._py_spy, args=(label,))
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self._timer is not None:
            self._timer.cancel()
        if self._fault_file is not None:
            self._fault_file.close()
            if os.path.getsize(self._fault_file.name) == 0:
                os.unlink(self._fault_file.name)
            self._fault_file = None

    def _py_spy(self, label: str) -> None:
        self.fired.set()
        spy = shutil.which("py-spy")
        out = self.dumps / f"py-spy-{label}.txt"
        if spy is not None:
            with open(out, "w") as f:
                subprocess.run(
                    [spy, "dump", "--native", "--pid", str(os.getpid())],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    timeout=120,
                )
        gdb = shutil.which("gdb")
        if gdb is not None:  # every thread's native stack, the C++ ones (forwarders) included
            with open(self.dumps / f"gdb-{label}.txt", "w") as f:
                subprocess.run(
                    [gdb, "-p", str(os.getpid()), "-batch", "-ex", "thread apply all bt"],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    timeout=300,
                )
        print(f"WATCHDOG: run {label} hung; stacks in {self.dumps}", flush=True)
        for spinner in self.spinners:
            spinner.kill()
        os._exit(2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--load", type=int, default=1, help="CPU-bound processes beside the runs")
    p.add_argument("--data", help="a Criteo TSV (default: synthetic data)")
    p.add_argument("--scenario", action="append", help=f"only these ({', '.join(SCENARIOS)}, random)")
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument("--watchdog-factor", type=float, default=10.0)
    p.add_argument("--dumps", default="stress-dumps")
    args = p.parse_args()
    names = args.scenario or [*SCENARIOS, "random"]
    spinners = _spinners(args.load)
    watchdog = Watchdog(Path(args.dumps))
    watchdog.spinners = spinners
    normal: Dict[str, float] = {}
    tally: Dict[str, Dict[str, int]] = {}
    try:
        for i in range(args.runs):
            name = names[i % len(names)]
            scenario = random_scenario(args.seed * 100_003 + i) if name == "random" else SCENARIOS[name]
            key = scenario.name if name != "random" else "random"
            limit = max(30.0, args.watchdog_factor * normal.get(key, 6.0))
            label = f"{i}-{scenario.name}"
            watchdog.arm(limit, label)
            start = time.perf_counter()
            try:
                outcome = run_scenario(scenario, data=args.data, backend=args.backend)
            except Exception as err:  # noqa: BLE001 - a stress reports every way a run goes wrong
                outcome = Outcome("error", f"{type(err).__name__}: {err}")
            finally:
                watchdog.disarm()
            seconds = time.perf_counter() - start
            normal.setdefault(key, seconds)
            counts = tally.setdefault(key, {})
            counts[outcome.kind] = counts.get(outcome.kind, 0) + 1
            if outcome.kind not in ("exact", "unrecoverable"):
                print(f"run {label}: {outcome.kind}: {outcome.detail} ({seconds:.1f} s)", flush=True)
            elif i % 20 == 0:
                print(f"run {label}: {outcome.kind} in {seconds:.1f} s", flush=True)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    for key, counts in tally.items():
        print(f"{key}: {counts}")
    return 0 if all(set(c) <= {"exact", "unrecoverable"} for c in tally.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
