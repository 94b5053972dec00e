"""``xdl-ec verify``: trains like ``xdl-ec train`` under --ft ec (failures injected as asked), then scrubs every
parity stripe against its data blocks."""

from __future__ import annotations

import argparse
import sys

from xdl_ec.cli.config_flags import given
from xdl_ec.cli.parser import EXIT_FAILURE, UsageError
from xdl_ec.cli.run_outputs import RunOutputs
from xdl_ec.cli.saving import Saving
from xdl_ec.cli.train import add_train_parser, train_and_report
from xdl_ec.settings.flag import field_flags


def add_verify_parser(subparsers: argparse._SubParsersAction) -> None:
    """``xdl-ec verify``: the train flags; trains under --ft ec (failures injected as asked), then scrubs."""
    helper = argparse.ArgumentParser(add_help=False)
    inner = helper.add_subparsers()
    add_train_parser(inner)
    p = subparsers.add_parser(
        "verify",
        parents=[inner.choices["train"]],
        conflict_handler="resolve",
        help="train a parameter-server cluster under --ft ec, then scrub every parity stripe",
        description="Runs like 'xdl-ec train --servers N --ft ec' (with any --fail-at), then re-encodes every stripe "
        "from its data blocks and compares it with the stored parity. Exit 0: all consistent; 1: the "
        "inconsistent stripes are listed.",
    )
    p.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    if args.servers is None:
        raise UsageError("--servers: verify scrubs a parameter-server cluster: give --servers N (N >= k + r)")
    if (args.ft or "ec") != "ec":
        raise UsageError(f"--ft: verify scrubs erasure-coded parity, so it needs --ft ec (got --ft {args.ft})")
    refused = given(args, field_flags(Saving) + field_flags(RunOutputs, ["serving"]))
    if refused:
        raise UsageError(
            f"{', '.join(refused)}: verify trains a fresh run to scrub it; save and resume with 'xdl-ec train'"
        )
    status, report = train_and_report(argparse.Namespace(**{**vars(args), "ft": "ec"}), verify=True)
    if status != 0 or report is None:
        return status
    inconsistent = report.get("scrub", {}).get("inconsistent")
    if inconsistent is None:
        print("xdl-ec verify: error: the run reported no scrub", file=sys.stderr)
        return EXIT_FAILURE
    for m in inconsistent:
        print(
            f"inconsistent: table {m['table']} stripe {m['stripe']} parity member {m['parity_member']} "
            f"(server {m['server']}, parity block {m['block']})"
        )
    print(f"scrub: {f'{len(inconsistent)} inconsistent parity blocks' if inconsistent else 'all stripes consistent'}")
    return EXIT_FAILURE if inconsistent else 0
