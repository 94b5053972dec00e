"""``xdl-ec bench``: the none / ckpt / cpr / ec comparison (its logic in :mod:`xdl_ec.benchmark`)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List

from xdl_ec.cli.parser import EXIT_FAILURE, UsageError
from xdl_ec.job.cluster import Cluster
from xdl_ec.job.job_source import load_script_job
from xdl_ec.settings.flag import field_flags
from xdl_ec.settings.flag_types import non_negative_int, positive_float, positive_int

if TYPE_CHECKING:
    from xdl_ec.benchmark.runner import BenchConfig


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="compare fault-tolerance strategies (none, ckpt, cpr, ec) through injected server failures",
        description="Train the same model, data, seed and failure schedule under none (the failure-free reference), "
        "ckpt, cpr (mfu, ssu) and ec (k=2 r=1, k=4 r=1, k=4 r=2); write results.json, results.md and "
        "PNG plots into --out.",
    )
    p.add_argument("--quick", action="store_true", help="small preset for smoke tests (minutes, not a measurement)")
    p.add_argument("--out", metavar="DIR", default="bench-results", help="output directory (default %(default)s)")
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local = servers as objects in this process (default), ray = Ray actors",
    )
    p.add_argument("--data", metavar="PATH", help="raw Criteo TSV file (default: synthetic Criteo-shaped data)")
    p.add_argument(
        "--script",
        metavar="FILE.py",
        help="bench the job a script's job() returns instead of the built-in model (its input decides the "
        "run's length; --data and --quick's data size then do not apply)",
    )
    p.add_argument(
        "--mtbf",
        type=positive_float,
        metavar="SECONDS",
        help="mean seconds of training between server failures (default: a third of the reference run)",
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="data, model and failure seed (default 0)")
    rebuild_share = next(f.flag for f in field_flags(Cluster, ["ft"]) if f.field == "rebuild_share")
    p.add_argument(
        "--rebuild-share",
        type=rebuild_share.type,
        metavar=rebuild_share.metavar,
        help="ec rows: share of wall time a rebuild may take, in (0, 1] (default 0.05)",
    )
    p.add_argument(
        "--only",
        action="append",
        metavar="LABEL",
        help="run only these rows (repeatable; the none reference always runs): none, ckpt, cpr-mfu, "
        "cpr-ssu, ec-2+1, ec-4+1, ec-4+2",
    )
    p.add_argument(
        "--overlap",
        type=positive_int,
        metavar="RUNS",
        help="instead: RUNS seeded runs per strategy whose kills do not wait for rebuilds (quick "
        "preset); reports how many runs each survives (xdl_ec.benchmark.overlap)",
    )
    p.add_argument(
        "--sweep-mtbf",
        type=seconds_list,
        metavar="S1,S2,...",
        help="instead: every strategy (ckpt, cpr-mfu, ec-2+1, or --only's) at each of these MTBFs in seconds, "
        "--rounds rounds each; writes results.json's sweep, mtbf.png, the fleet extrapolation and "
        "plan-constants.json (what xdl-ec plan reads)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        metavar="N",
        help="rounds of the sweep per MTBF (default 3; each round has its own failure-free reference)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=run_bench)


def seconds_list(text: str) -> List[float]:
    """``S1,S2,...`` of --sweep-mtbf: positive finite seconds, each once."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds like 10,30,120, got {text!r}") from None
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive seconds like 10,30,120, got {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected each MTBF once, got {text!r}")
    return values


def run_bench(args: argparse.Namespace) -> int:
    from xdl_ec.benchmark import BenchConfig
    from xdl_ec.benchmark import run_bench as run_comparison
    from xdl_ec.benchmark.table import markdown_table

    if args.script is not None and args.data is not None:
        raise UsageError("--data: describes the built-in model's data; with --script the job reads its own")
    job = load_script_job(args.script) if args.script is not None else None
    config = BenchConfig(
        quick=args.quick,
        out=args.out,
        backend=args.backend,
        data=args.data,
        mtbf=args.mtbf,
        seed=args.seed,
        progress=not args.no_progress,
        variants=args.only,
        rebuild_share=args.rebuild_share,
        job=job,
        sweep_mtbf=args.sweep_mtbf,
        rounds=3 if args.rounds is None else args.rounds,
    )
    if args.rounds is not None and args.sweep_mtbf is None:
        raise UsageError("--rounds: counts the rounds of a sweep; give --sweep-mtbf too")
    if args.sweep_mtbf is not None and args.overlap is not None:
        raise UsageError("--overlap: a different run from --sweep-mtbf; give one of them")
    try:
        config.validate()
    except ValueError as err:
        text = str(err)
        for field, flag in (
            ("variants:", "only:"),
            ("rebuild_share:", "rebuild-share:"),
            ("sweep_mtbf:", "sweep-mtbf:"),
        ):
            text = text.replace(field, flag)
        raise UsageError(f"--{text}") from None
    if args.sweep_mtbf is not None:
        return _run_sweep(config)
    if args.overlap is not None:
        from xdl_ec.benchmark.overlap import overlap_table, run_overlap

        results = run_overlap(config, args.overlap, log=lambda line: print(line, file=sys.stderr))
        print(overlap_table(results), end="")
        print(f"wrote {Path(args.out) / 'overlap.json'}")
        return 0
    try:
        results = run_comparison(config, log=lambda line: print(line, file=sys.stderr))
    except (OSError, ValueError) as err:  # unreadable data, a data set too small to split
        raise UsageError(str(err)) from None
    except RuntimeError as err:  # the failure-free reference itself failed: nothing to compare against
        print(f"xdl-ec bench: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(markdown_table(results), end="")
    print(f"wrote {Path(args.out) / 'results.json'}, results.md, throughput.png, loss.png")
    return 0


def _run_sweep(config: "BenchConfig") -> int:
    from xdl_ec.benchmark.mtbf_sweep import run_sweep
    from xdl_ec.benchmark.sweep_report import fleet_table, sweep_table

    try:
        results = run_sweep(config, log=lambda line: print(line, file=sys.stderr))
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from None
    except RuntimeError as err:
        print(f"xdl-ec bench: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(sweep_table(results), end="")
    print(fleet_table(results), end="")
    out = Path(config.out)
    print(f"wrote {out / 'results.json'}, results.md, mtbf.png, plan-constants.json")
    return 0
