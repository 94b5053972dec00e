"""Benchmark: the driver's memory and time to take a cluster's ``model_digest``, the streamed way (the servers'
key-order exports merged a chunk at a time, :func:`xdl_ec.model.digest.streamed_model_digest`) against the whole
way (every server's full export in the driver, then :func:`~xdl_ec.model.digest.model_digest`). Not a test.

    PYTHONPATH=build/stage python3 -P bench/bench_streamed_digest.py [--rows 300000] [--servers 4] [--rounds 5]
                                                                      [--chunk 65536] [--dim 16]
                                                                      [--budget 8M --spill-dir DIR] [--end]

One cluster (local backend, ``--servers`` servers, no fault tolerance) of the built-in job (d``--dim``, Adagrad)
holds ``--rows`` rows created by a preload, then one step; with ``--budget`` each server keeps that much in RAM and
the rest of its rows in ``--spill-dir`` (the whole way then scans each spill file in slot order, the streamed way
reads a chunk's rows by key). Each round takes the digest three ways in an order that
alternates: whole, streamed and whole again (the A/A pair: its spread is the method's noise floor); each way twice,
once under tracemalloc (the peak of the bytes Python and numpy allocate during the call: in the local backend the
servers run in this process, so their answers and the streamed export's sorted keys, 8 bytes a row, are counted
too) and once timed without it. Every digest must be the same.

``--end`` (needs ``--budget``): the whole end of a budgeted cluster fit instead, the digest and the trained model's
copy of the rows: whole (every server's export, ``model_digest``, the rows loaded into in-RAM tables: the end before
#48) against streamed (the streamed digest loading a budgeted copy as it passes, :meth:`Job._fit_on`'s end now). The
native tables are invisible to tracemalloc, so each way is measured by this process's peak anonymous resident memory
(RssAnon, sampled every millisecond by a thread) above where it was before: the page cache of the tiers' mapped spill
files is left out (it is the kernel's to reclaim); the servers (in this process) hold their budget throughout.

Prints the medians and the ratios to the whole way of the same round with their 95% t-intervals over rounds, and the
load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import threading
import time
import tracemalloc
from typing import Callable, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from xdl_ec.benchmark.mtbf_sweep import interval  # noqa: E402
from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job  # noqa: E402
from xdl_ec.job.local_tables import LocalTables  # noqa: E402
from xdl_ec.model.key_order_merge import merge_key_order  # noqa: E402
from xdl_ec.ps import ClusterConfig, PSTrainer, RunSettings  # noqa: E402
from xdl_ec.sparse.memory_budget import MemoryBudget  # noqa: E402


def _peak_and_digest(take: Callable[[], str]) -> "tuple[int, str]":
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        digest = take()
        return tracemalloc.get_traced_memory()[1], digest
    finally:
        tracemalloc.stop()


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _peak_anon_and_digest(take: Callable[[], str]) -> "tuple[int, str]":
    """The bytes this process's anonymous resident memory (RssAnon: not the page cache of mapped spill files) peaked
    at above where it was, during ``take()``: sampled every millisecond by a thread."""
    before = peak = _status_kib("RssAnon")
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _status_kib("RssAnon"))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        digest = take()
    finally:
        done.set()
        sampler.join()
    return (max(peak, _status_kib("RssAnon")) - before) * 1024, digest


def _seconds(take: Callable[[], str]) -> float:
    start = time.perf_counter()
    take()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=65536)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--budget", default=None, help="each server's memory budget, e.g. 8M (default: none)")
    parser.add_argument("--spill-dir", default=None)
    parser.add_argument("--end", action="store_true", help="the end of a fit: digest and trained model's copy")
    args = parser.parse_args()
    config = TrainConfig(
        synthetic=True,
        synthetic_rows=2000,
        batch_size=64,
        steps=1,
        deterministic=True,
        progress=False,
        seed=3,
        emb_dim=args.dim,
        optimizer="adagrad",
    )
    memory = None if args.budget is None else MemoryBudget(args.budget, args.spill_dir or "")
    trainer = PSTrainer(
        criteo_job(config).spec,
        ClusterConfig(servers=args.servers, workers=1, memory=memory),
        RunSettings(3, True),
        None,
    )
    try:
        tables = [t.name for t in trainer.job.tables]
        keys = np.random.default_rng(1).integers(-(2**62), 2**62, args.rows, dtype=np.int64)
        trainer.preload(tables[0], (keys[i : i + 50_000] for i in range(0, keys.size, 50_000)))
        trainer.fit()
        rows = sum(trainer.rows_per_table().values())

        def whole() -> str:
            return trainer.digest_of([trainer.scheduler.exports(t) for t in tables])

        def streamed() -> str:
            return trainer.digest_streamed(
                [merge_key_order(trainer.scheduler.key_order_exports(t, args.chunk)) for t in tables]
            )

        def whole_end() -> str:
            exports = [trainer.scheduler.exports(t) for t in tables]
            digest = trainer.digest_of(exports)
            copy = LocalTables(trainer.job.tables)
            try:
                for table, parts in zip(tables, exports):
                    for part in parts:
                        copy.tables[table].load(part["keys"], part["values"], part["state"])
            finally:
                copy.close()
            return digest

        def streamed_end() -> str:
            assert memory is not None
            copy = LocalTables(trainer.job.tables, dataclasses.replace(memory, parity_code=None), reserve=False)
            try:
                return trainer.digest_streamed(
                    [
                        copy.loading(t, merge_key_order(trainer.scheduler.key_order_exports(t, args.chunk)))
                        for t in tables
                    ]
                )
            finally:
                copy.close()

        if args.end:
            if memory is None:
                raise SystemExit("--end: needs --budget and --spill-dir (the end of a budgeted fit)")
            whole, streamed = whole_end, streamed_end
        measure = _peak_anon_and_digest if args.end else _peak_and_digest
        ways: Dict[str, Callable[[], str]] = {"whole": whole, "streamed": streamed, "whole (A/A)": whole}
        peaks: Dict[str, List[int]] = {w: [] for w in ways}
        seconds: Dict[str, List[float]] = {w: [] for w in ways}
        digests = set()
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for way in order:
                peak, digest = measure(ways[way])
                peaks[way].append(peak)
                digests.add(digest)
                seconds[way].append(_seconds(ways[way]))
        assert len(digests) == 1, f"the ways disagree: {digests}"
        load = os.getloadavg()
        print(
            f"{rows} rows (d{args.dim} Adagrad) on {args.servers} servers (budget {args.budget or 'none'}), chunk "
            f"{args.chunk}, {args.rounds} rounds{', the end of a fit (peak RssAnon)' if args.end else ''}; "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; digest {digests.pop()[:16]}..."
        )
        for way in ways:
            peak_ratio = [p / b for p, b in zip(peaks[way], peaks["whole"])]
            time_ratio = [s / b for s, b in zip(seconds[way], seconds["whole"])]
            lo_p, hi_p = interval(peak_ratio)
            lo_t, hi_t = interval(time_ratio)
            print(
                f"  {way:12s} peak {statistics.median(peaks[way]) / 2**20:8.1f} MiB "
                f"({statistics.median(peaks[way]) / rows:6.1f} B/row) x{statistics.median(peak_ratio):.3f} "
                f"[{lo_p:.3f}, {hi_p:.3f}]   seconds {statistics.median(seconds[way]):6.3f} "
                f"x{statistics.median(time_ratio):.3f} [{lo_t:.3f}, {hi_t:.3f}]"
            )
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
