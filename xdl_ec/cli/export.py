"""``xdl-ec export``: a save as a TensorFlow SavedModel that serves without xdl-ec."""

from __future__ import annotations

import argparse
from pathlib import Path

from xdl_ec.cli.parser import UsageError
from xdl_ec.job.job_source import load_script_job
from xdl_ec.settings.flag_types import positive_int


def add_export_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a save as a TensorFlow SavedModel that serves without xdl-ec",
        description="Writes the newest save under --from as a SavedModel whose serving_default takes one int64 input "
        "per feature (a variable-length one as <name>_values and <name>_row_splits) plus dense, and "
        "returns probability [B]; standard TensorFlow ops only (no xdl-ec, no custom op library).",
    )
    p.add_argument("--from", dest="source", required=True, metavar="DIR", help="a --save-dir (or one save in it)")
    p.add_argument("--out", required=True, metavar="SAVEDMODEL", help="the SavedModel directory to write (new)")
    p.add_argument(
        "--script",
        metavar="FILE.py",
        help="the job's script, when the save was made by a job built in Python (a --script or built-in "
        "run's save names its job itself)",
    )
    p.add_argument(
        "--drop-rows-below-count",
        type=positive_int,
        metavar="N",
        help="leave out rows of ids seen fewer than N times (tables trained with --admit-min-count, "
        "--evict-ttl-steps, --evict-ttl-seconds or --max-rows keep per-row counts); they serve zeros, as unknown ids",
    )
    p.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from xdl_ec.job.loading import load

    if Path(args.out).exists() and (not Path(args.out).is_dir() or any(Path(args.out).iterdir())):
        raise UsageError(f"--out: {args.out} exists and is not an empty directory; choose a new path")
    job = load_script_job(args.script) if args.script is not None else None
    try:
        model = load(args.source, job=job)
        try:
            path = model.export(args.out, drop_rows_below_count=args.drop_rows_below_count)
        finally:
            model.close()
    except (OSError, ValueError, TypeError) as err:
        raise UsageError(str(err)) from None
    print(f"exported {args.source} to {path}")
    return 0
