"""The ``xdl-ec`` command line: its parser (one subcommand per module of :mod:`xdl_ec.cli`) and :func:`main`, which
maps user errors to one line on stderr and exit status 2, and a signal's stop to 128 + its number."""

from __future__ import annotations

import signal
import sys
from typing import Callable, Optional, Sequence

from xdl_ec.cli.bench import add_bench_parser
from xdl_ec.cli.export import add_export_parser
from xdl_ec.cli.parser import EXIT_USAGE, OneLineErrorParser, UsageError
from xdl_ec.cli.plan import add_plan_parser
from xdl_ec.cli.resize import add_resize_parser
from xdl_ec.cli.signals import StopOnSignals, stop_message
from xdl_ec.cli.train import add_train_parser
from xdl_ec.cli.verify import add_verify_parser
from xdl_ec.job.job_source import ScriptError


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="xdl-ec", description="xdl-ec: sparse CTR training with erasure-coded fault tolerance"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_train_parser(subparsers)
    add_bench_parser(subparsers)
    add_verify_parser(subparsers)
    add_export_parser(subparsers)
    add_resize_parser(subparsers)
    add_plan_parser(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``xdl-ec`` script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2: its error and a line pointing at --help
    handler: Callable[..., int] = args.handler
    try:
        with StopOnSignals(args.command):
            return handler(args)
    except (UsageError, ScriptError) as err:
        print(f"xdl-ec {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as err:  # SIGINT or SIGTERM: 128 + the signal's number, as the shell reports it
        for line in stop_message(args.command, argv, args, err):
            print(line, file=sys.stderr)
        return 128 + int(getattr(err, "signum", signal.SIGINT))
