"""``xdl-ec resize``: asks a running ``xdl-ec train --run-dir DIR`` to resize its servers, and prints the resize."""

from __future__ import annotations

import argparse
import sys

from xdl_ec.cli.parser import EXIT_FAILURE, UsageError
from xdl_ec.cli.train_report import resize_tail
from xdl_ec.settings.flag_types import non_negative_int, positive_float, positive_int, stripe_code


def add_resize_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "resize",
        help="resize the servers of a running 'xdl-ec train --run-dir DIR'",
        description="Asks the run training with --run-dir DIR to resize its servers to N at its next step boundary "
        "(moving only the rows whose route changes; under --ft ec the stripes are re-formed) and prints the resize "
        "once done; a resize the run cannot do is refused, changing nothing.",
    )
    p.add_argument("--run", required=True, metavar="DIR", help="the run's --run-dir")
    p.add_argument("servers", type=positive_int, metavar="N", help="the new server count")
    p.add_argument(
        "--drain",
        type=non_negative_int,
        action="append",
        default=None,
        metavar="ID",
        help="remove the server of this id first (e.g. a spot reclaim with notice; repeatable): only its rows move "
        "and it stops last; N counts the servers after (N = the current count replaces it)",
    )
    p.add_argument(
        "--code",
        type=stripe_code,
        default=None,
        metavar="K,R",
        help="re-form the stripes with this code (--ft ec; default: the run's is kept); N may be the current count",
    )
    p.add_argument(
        "--timeout", type=positive_float, default=600.0, metavar="SECONDS", help="wait at most (default 600)"
    )
    p.set_defaults(handler=run_resize)


def run_resize(args: argparse.Namespace) -> int:
    from xdl_ec.job.resize_control import ask_resize

    try:
        record = ask_resize(args.run, args.servers, args.timeout, args.drain or (), args.code)
    except ValueError as err:
        raise UsageError(str(err)) from None
    except (RuntimeError, TimeoutError) as err:
        print(f"xdl-ec resize: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(
        f"resized at step {record['step']}: {record['servers_before']} -> {record['servers_after']} servers, "
        f"{record['rows_moved']:,} of {record['rows']:,} rows moved to another server, "
        f"{record['bytes_copied']:,} bytes copied in {record['seconds']:.2f} s" + resize_tail(record)
    )
    return 0
