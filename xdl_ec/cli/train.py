"""``xdl-ec train``: its parser, laid out from the configs' flags (:mod:`xdl_ec.cli.config_flags`), and its run:
the request, the fit, the printed report and the report file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Optional, Tuple

from xdl_ec.builtin.criteo_job import TrainConfig
from xdl_ec.cli.config_flags import FlagSection
from xdl_ec.cli.parser import EXIT_FAILURE, UsageError
from xdl_ec.cli.run_outputs import RunOutputs
from xdl_ec.cli.saving import Saving
from xdl_ec.cli.train_report import print_report
from xdl_ec.cli.train_request import train_request
from xdl_ec.job.cluster import Cluster


def add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train a job: your --script, or the built-in CTR model (DLRM or Embedding&MLP) on Criteo data",
        description="Train the job of a --script FILE.py (its job() returns an xdl_ec.Job), or the built-in CTR "
        "model on a raw Criteo TSV file (--data) or synthetic data (--synthetic). Without arguments: a "
        "short demo of the built-in model on the Criteo sample if it is found, else on synthetic data.",
        epilog="SIGINT (Ctrl-C) or SIGTERM stops the run at the next step boundary, with a final save when --save-dir "
        "is given, and prints the command that resumes it (exit status 130 or 143).",
    )
    p.add_argument(
        "--script",
        metavar="FILE.py",
        help="a Python file whose job() returns the xdl_ec.Job to train (the built-in model's flags, "
        "marked [built-in], are then refused)",
    )
    top = FlagSection(p)
    top.add(TrainConfig, "built-in", "run")
    top.add(RunOutputs)
    FlagSection(
        p.add_argument_group("parameter servers (default: the job trains in this process, without servers)")
    ).add(Cluster, "servers")
    ft = p.add_argument_group("fault tolerance (needs --servers)")
    FlagSection(ft).add(Cluster, "ft", "resize")
    ft.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where 'xdl-ec resize --run DIR N' reaches this run: its pid file and resize requests (SIGUSR1); "
        "with --backend ray also the run's own Ray head, whose servers, parity and worker outlive a driver that "
        "dies for --reattach-within seconds: the same command run again reattaches to them (nothing re-trained), "
        "later it resumes from --save-dir's backstop",
    )
    ft.add_argument(
        "--reattach-within",
        metavar="S",
        type=float,
        help="with --backend ray --run-dir: seconds the run's roles wait for a driver that died (default 300); "
        "past them the run's Ray head ends every process of the run",
    )
    FlagSection(p.add_argument_group("saving (any backend, any --ft)")).add(Saving)
    FlagSection(
        p.add_argument_group(
            "bounded tables for endless training (xdl_ec.Admit, xdl_ec.Evict): the built-in job's table, or with "
            "--script every table of the job that declares no admit / evict of its own"
        )
    ).add(TrainConfig, "bounded")
    p.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    status, _ = train_and_report(args, verify=False)
    return status


def train_and_report(args: argparse.Namespace, verify: bool) -> Tuple[int, Optional[Dict[str, Any]]]:
    """(exit status, report or None) of ``xdl-ec train``, or of ``verify`` (trained by ``job.verify``)."""
    request = train_request(args)
    from xdl_ec.model.input_stream import InputFnError
    from xdl_ec.ps import CallTimeout, RoleLost, Unrecoverable
    from xdl_ec.sparse.disk_tier_full import DiskTierFull

    control = None
    if getattr(args, "run_dir", None) is not None:
        from xdl_ec.job.resize_control import ResizeControl

        control = ResizeControl(args.run_dir, request.job)
        control.start()
    try:
        if verify:
            report = request.job.verify(
                steps=request.steps,
                cluster=request.cluster,
                deterministic=request.deterministic,
                seed=request.seed,
                progress=request.progress,
            )
        else:
            report = request.job.fit(**request.fit_arguments())
    # a role died and the strategy could not bring it back, or a role is stuck: the run failed (before the OSError
    # clause: a CallTimeout is a TimeoutError)
    except (RoleLost, Unrecoverable, CallTimeout, DiskTierFull) as err:
        print(f"xdl-ec {args.command}: error: {err}; training stopped", file=sys.stderr)
        return EXIT_FAILURE, None
    # A bad line (BadLineError is a ValueError), an unreadable file, a data set too small to split, divergence,
    # a job whose model or input breaks the contract (InputError, ModelError are ValueErrors).
    except (OSError, ValueError, TypeError, FloatingPointError, InputFnError) as err:
        raise UsageError(str(err)) from None
    finally:
        if control is not None:
            control.stop()
    if request.config is not None and request.data is not None:
        # every worker reads the whole file (keeping its share of the batches): each saw every bad line so far
        report["bad_lines"] = max(w.get("input", {}).get("bad_lines", 0) for w in report["workers"])
        report["config"] = {**request.config.describe(), "data_source": request.data.description}
    print_report(report, request.config.model if request.config is not None else None)
    if args.report is not None:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    return 0, report
