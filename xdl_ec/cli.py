"""The ``xdl-ec`` command line: one argparse subcommand per verb (``train`` here; others register theirs in
:func:`build_parser`). User errors (missing file, bad flag value, malformed data) print one line on stderr and exit
with status 2, without a traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

EXIT_USAGE = 2
EXIT_FAILURE = 1  # the run itself failed (e.g. a parameter server was lost)

# Where `xdl-ec train` without --data looks for the Criteo sample, in order: $XDL_EC_CRITEO_SAMPLE, ../shared/data
# and shared/data below the working directory, and ../shared/data beside a source checkout of the package.
SAMPLE_NAME = "criteo_kaggle_train_head10k.tsv.gz"


class UsageError(Exception):
    """A user error: reported as one line on stderr with exit status 2."""


def _number(parse: Callable[[str], Any], accept: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: ``parse`` the text, then check it with ``accept``; errors say what was expected."""

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return convert


_positive_int = _number(int, lambda v: v >= 1, "a positive integer")
_non_negative_int = _number(int, lambda v: v >= 0, "a non-negative integer")
_positive_float = _number(float, lambda v: 0 < v < float("inf"), "a positive finite number")
_fraction = _number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")


def _layer_sizes(text: str) -> tuple[int, ...]:
    if text.strip() == "":
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers like 64,32, got {text!r}") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers like 64,32, got {text!r}")
    return sizes


def find_criteo_sample() -> Optional[Path]:
    """The Criteo sample used by the no-argument demo, or None when it is not around."""
    candidates = []
    if os.environ.get("XDL_EC_CRITEO_SAMPLE"):
        candidates.append(Path(os.environ["XDL_EC_CRITEO_SAMPLE"]))
    cwd = Path.cwd()
    candidates += [cwd.parent / "shared" / "data" / SAMPLE_NAME, cwd / "shared" / "data" / SAMPLE_NAME,
                   Path(__file__).resolve().parents[1].parent / "shared" / "data" / SAMPLE_NAME]
    return next((p for p in candidates if p.is_file()), None)


def add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    from .trainer import DENSE_OPTIMIZERS, TrainConfig

    d = TrainConfig()
    p = subparsers.add_parser(
        "train", help="train a CTR model (DLRM or Embedding&MLP) on Criteo data with an xdl-ec embedding table",
        description="Train a CTR model on a raw Criteo TSV file (--data) or synthetic data (--synthetic). "
                    "Without arguments: a short demo on the Criteo sample if it is found, else on synthetic data.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data", metavar="PATH", help="raw Criteo TSV file, plain or .gz (label, I1..I13, C1..C26)")
    src.add_argument("--synthetic", action="store_true", help="train on seeded synthetic Criteo-shaped data")
    p.add_argument("--synthetic-rows", type=_positive_int, default=d.synthetic_rows,
                   help=f"rows of synthetic data, eval split included (default {d.synthetic_rows})")
    p.add_argument("--synthetic-max-cardinality", type=_positive_int, default=d.synthetic_max_cardinality,
                   help="cap on each synthetic column's cardinality (default %(default)s)")
    p.add_argument("--model", choices=("dlrm", "mlp"), default=d.model, help="model body (default %(default)s)")
    p.add_argument("--emb-dim", type=_positive_int, default=d.emb_dim, help="embedding dimension (default %(default)s)")
    p.add_argument("--bottom-mlp", type=_layer_sizes, default=d.bottom_mlp, metavar="N,N",
                   help="DLRM bottom MLP hidden sizes; its output layer has emb-dim units (default 64)")
    p.add_argument("--top-mlp", type=_layer_sizes, default=d.top_mlp, metavar="N,N",
                   help="DLRM top MLP hidden sizes before the logit (default 64,32)")
    p.add_argument("--hidden", type=_layer_sizes, default=d.hidden, metavar="N,N",
                   help="Embedding&MLP hidden sizes (default 128,64)")
    p.add_argument("--optimizer", default=d.optimizer,
                   help="sparse optimizer of the embedding table: sgd, momentum, adagrad, adam, ftrl (default %(default)s)")
    p.add_argument("--lr", type=_positive_float, default=d.lr, help="sparse learning rate (default %(default)s)")
    p.add_argument("--dense-optimizer", choices=DENSE_OPTIMIZERS, default=d.dense_optimizer,
                   help="Keras optimizer of the dense model (default %(default)s)")
    p.add_argument("--dense-lr", type=_positive_float, default=d.dense_lr, help="dense learning rate (default %(default)s)")
    p.add_argument("--batch-size", type=_positive_int, default=d.batch_size, help="default %(default)s")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_positive_int, help="train this many steps (cycling the data as needed)")
    length.add_argument("--epochs", type=_positive_int, help=f"passes over the train split (default {d.epochs})")
    p.add_argument("--eval-fraction", type=_fraction, default=d.eval_fraction,
                   help="held-out fraction: the last rows in file order (default %(default)s)")
    p.add_argument("--seed", type=_non_negative_int, default=d.seed, help="default %(default)s")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic TF ops and single-threaded op pools: same seed, same model_digest")
    p.add_argument("--on-bad-line", choices=("error", "skip"), default=d.on_bad_line,
                   help="malformed lines: stop with file:line and the reason, or skip and count them")
    p.add_argument("--report", metavar="FILE.json", help="write the run report (JSON) to this file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    ps = p.add_argument_group("parameter servers (default: the single-process trainer, without servers)")
    ps.add_argument("--servers", type=_positive_int, help="train with N parameter servers (keys sharded by hash)")
    ps.add_argument("--workers", type=_positive_int, help="workers (default 1; needs --servers)")
    ps.add_argument("--backend", choices=("local", "ray"),
                    help="where servers and workers run: local = objects in this process (default), ray = Ray actors")
    ps.add_argument("--address", metavar="RAY_ADDRESS",
                    help="an existing Ray cluster (with --backend ray; default: start a local Ray)")
    ps.add_argument("--mode", choices=("sync", "async"),
                    help="sync: all workers finish step t before t+1 (default); async: no barrier")
    ft = p.add_argument_group("fault tolerance (needs --servers)")
    ft.add_argument("--ft", choices=("none", "ckpt", "cpr", "ec"),
                    help="none: a lost server stops the run (default); ckpt: periodic checkpoints, every server rolls "
                         "back; cpr: only the lost server reloads its checkpoint; ec: erasure-coded servers")
    ft.add_argument("--code", type=_code, metavar="K,R", help="ec: K data servers per stripe, R parity (default 4,1)")
    ft.add_argument("--rebuild-share", type=_share, metavar="S",
                    help="ec: share of wall time a rebuild may take until it is done, in (0, 1] (default 0.05; "
                         "training goes on meanwhile)")
    ft.add_argument("--ckpt-interval", metavar="N|Ns|auto",
                    help="ckpt: every N steps, every N seconds ('30s') or auto = Young's formula from the measured "
                         "save cost and --mtbf (default auto)")
    ft.add_argument("--ckpt-dir", metavar="DIR", help="ckpt/cpr: checkpoint directory (default: a temporary one)")
    ft.add_argument("--cpr-pls", type=_open_fraction, metavar="P",
                    help="cpr: target portion of lost samples; interval = 2 * servers * MTBF * P (default 0.02)")
    ft.add_argument("--cpr-interval", type=_positive_int, metavar="STEPS",
                    help="cpr: checkpoint every STEPS steps instead of the --cpr-pls interval")
    ft.add_argument("--cpr-mode", choices=("mfu", "ssu"),
                    help="cpr: rows saved between full saves: most frequently used or sub-sampled used (default mfu)")
    ft.add_argument("--fail-at", action="append", metavar="STEP[:SERVER]", default=None,
                    help="kill server SERVER (default 0) right before step STEP (repeatable)")
    ft.add_argument("--fail-worker-at", action="append", metavar="STEP[:WORKER]", default=None,
                    help="kill worker WORKER (default 0) right before step STEP (repeatable)")
    ft.add_argument("--mtbf", type=_positive_float, metavar="SECONDS",
                    help="kill a random server (seeded by --seed) every SECONDS of training on average")
    p.set_defaults(handler=run_train)


def _code(text: str) -> tuple[int, int]:
    """``K,R`` of --code: positive K, non-negative R."""
    parts = text.split(",")
    try:
        k, r = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K,R (data and parity servers per stripe) like 4,1, got "
                                         f"{text!r}") from None
    if k < 1 or r < 1:
        raise argparse.ArgumentTypeError(f"expected K >= 1 and R >= 1 in K,R, got {text!r}")
    return k, r


_open_fraction = _number(float, lambda v: 0.0 < v < 1.0, "a number in (0, 1)")
_share = _number(float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1] (e.g. 0.05)")


def run_train(args: argparse.Namespace) -> int:
    from .trainer import TrainConfig

    data, synthetic, epochs, steps = args.data, args.synthetic, args.epochs, args.steps
    if data is None and not synthetic:
        sample = find_criteo_sample()
        if sample is not None:
            data = str(sample)
        else:
            synthetic = True
        print(f"xdl-ec train: no --data given: demo on {data or 'synthetic data (Criteo sample not found)'}",
              file=sys.stderr)
    if data is not None and not Path(data).is_file():
        raise UsageError(f"--data: no such file: {data}")
    if args.report is not None:
        parent = Path(args.report).resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--report: directory {parent} does not exist")
    config = TrainConfig(
        data=data, synthetic=synthetic, synthetic_rows=args.synthetic_rows,
        synthetic_max_cardinality=args.synthetic_max_cardinality, model=args.model, emb_dim=args.emb_dim,
        bottom_mlp=args.bottom_mlp, top_mlp=args.top_mlp, hidden=args.hidden, optimizer=args.optimizer,
        lr=args.lr, dense_optimizer=args.dense_optimizer, dense_lr=args.dense_lr, batch_size=args.batch_size,
        steps=steps, epochs=epochs if epochs is not None else TrainConfig.epochs,
        eval_fraction=args.eval_fraction, seed=args.seed, deterministic=args.deterministic,
        on_bad_line=args.on_bad_line, progress=not args.no_progress)
    try:
        config.validate()
        from . import optim

        optim.get(config.optimizer, learning_rate=config.lr)  # unknown name -> ValueError listing the known ones
    except ValueError as err:
        raise UsageError(str(err)) from None
    cluster = _cluster_config(args)
    strategy, failures = _fault_tolerance(args, config, cluster)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .ft.strategy import Unrecoverable
    from .ps import PSTrainer, RoleLost
    from .trainer import Trainer

    try:
        report = Trainer(config).run() if cluster is None else PSTrainer(config, cluster, strategy, failures).run()
    # A bad line (BadLineError is a ValueError), an unreadable file, a data set too small to split, divergence.
    except (OSError, ValueError, FloatingPointError) as err:
        raise UsageError(str(err)) from None
    except (RoleLost, Unrecoverable) as err:  # a role died and the strategy could not bring it back
        print(f"xdl-ec train: error: {err}; training stopped", file=sys.stderr)
        return EXIT_FAILURE
    auc_text = "n/a" if report["auc"] is None else f"{report['auc']:.4f}"
    logloss_text = "n/a" if report["logloss"] is None else f"{report['logloss']:.4f}"
    print(f"trained {config.model}: {report['samples']:,} samples in {report['steps']:,} steps, "
          f"{report['samples_per_sec']:,.0f} samples/s, final loss {report['final_loss']:.4f}")
    print(f"eval on {report['eval_samples']:,} held-out rows: AUC {auc_text}, log loss {logloss_text}")
    if report["bad_lines"]:
        print(f"skipped {report['bad_lines']:,} bad lines")
    for failure in report.get("failures", []):
        print(f"{report['ft']}: {failure['role']} {failure['index']} lost at step {failure['step']}, recovered in "
              f"{failure['rebuild_seconds']:.2f} s ({failure['lost_samples']:,} samples lost or re-trained)")
    if report.get("lost_updates"):
        print(f"{report['ft']}: {report['lost_updates']:,} row updates lost")
    print(f"model_digest {report['model_digest']}")
    for server in report.get("servers", []):
        print(f"server {server['index']}: {server['bytes_in']:,} bytes in, {server['bytes_out']:,} bytes out")
    if args.report is not None:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    return 0


def _cluster_config(args: argparse.Namespace) -> Any:
    """The ClusterConfig of --servers/--workers/--backend/--address/--mode, or None for the single-process trainer."""
    if args.servers is None:
        given = [f"--{name}" for name in ("workers", "backend", "address", "mode") if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: needs --servers N (without it training runs in one process)")
        return None
    if args.address is not None and args.backend != "ray":
        raise UsageError("--address: a Ray address needs --backend ray")
    from .ps import ClusterConfig

    return ClusterConfig(servers=args.servers, workers=args.workers or 1, backend=args.backend or "local",
                         address=args.address, mode=args.mode or "sync")


FT_FLAGS = ("ft", "code", "rebuild_share", "ckpt_interval", "ckpt_dir", "cpr_pls", "cpr_interval", "cpr_mode",
            "fail_at", "fail_worker_at", "mtbf")


def _fault_tolerance(args: argparse.Namespace, config: Any, cluster: Any) -> tuple:
    """(strategy, failure schedule) of the fault-tolerance flags; (None, None) without any."""
    given = [f"--{name.replace('_', '-')}" for name in FT_FLAGS if getattr(args, name, None) is not None]
    if not given:
        return None, None
    if cluster is None:
        raise UsageError(f"{', '.join(given)}: needs --servers N (fault tolerance is about parameter servers)")
    from .ft.factory import make_strategy
    from .ft.failure_schedule import FailureSchedule

    name = args.ft or "none"
    specific = {"ckpt": ("ckpt_interval",), "cpr": ("cpr_pls", "cpr_interval", "cpr_mode"),
                "ec": ("code", "rebuild_share")}
    for strategy, flags in specific.items():
        wrong = [f"--{f.replace('_', '-')}" for f in flags if getattr(args, f, None) is not None and name != strategy]
        if wrong:
            raise UsageError(f"{', '.join(wrong)}: only used with --ft {strategy} (this run has --ft {name})")
    if args.ckpt_dir is not None and name not in ("ckpt", "cpr"):
        raise UsageError(f"--ckpt-dir: only used with --ft ckpt or cpr (this run has --ft {name})")
    if args.ckpt_dir is not None and Path(args.ckpt_dir).exists() and not Path(args.ckpt_dir).is_dir():
        raise UsageError(f"--ckpt-dir: {args.ckpt_dir} exists and is not a directory")
    try:
        failures = FailureSchedule.from_flags(args.fail_at or (), args.fail_worker_at or (), args.mtbf, config.seed)
        args.seed = config.seed
        strategy = make_strategy(name, args)
    except ValueError as err:
        raise UsageError(str(err)) from None
    return strategy, failures


def add_verify_parser(subparsers: argparse._SubParsersAction) -> None:
    """``xdl-ec verify``: the train flags; trains under --ft ec (failures injected as asked), then scrubs."""
    helper = argparse.ArgumentParser(add_help=False)
    inner = helper.add_subparsers()
    add_train_parser(inner)
    p = subparsers.add_parser(
        "verify", parents=[inner.choices["train"]], conflict_handler="resolve",
        help="train a parameter-server cluster under --ft ec, then scrub every parity stripe",
        description="Runs like 'xdl-ec train --servers N --ft ec' (with any --fail-at), then re-encodes every stripe "
                    "from its data blocks and compares it with the stored parity. Exit 0: all consistent; 1: the "
                    "inconsistent stripes are listed.")
    p.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    if args.servers is None:
        raise UsageError("--servers: verify scrubs a parameter-server cluster: give --servers N (N >= k + r)")
    if (args.ft or "ec") != "ec":
        raise UsageError(f"--ft: verify scrubs erasure-coded parity, so it needs --ft ec (got --ft {args.ft})")
    args.ft, args.scrub = "ec", True
    status = run_train(args)
    strategy = getattr(args, "ec_strategy", None)
    if status != 0 or strategy is None or strategy.scrub_result is None:
        return status or EXIT_FAILURE
    for m in strategy.scrub_result:
        print(f"inconsistent: table {m.table} stripe {m.stripe} parity member {m.parity_member} "
              f"(server {m.server}, parity block {m.block})")
    print(f"scrub: {'all stripes consistent' if not strategy.scrub_result else f'{len(strategy.scrub_result)} inconsistent parity blocks'}")
    return EXIT_FAILURE if strategy.scrub_result else 0


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    """``xdl-ec bench``: the none / ckpt / cpr / ec comparison (logic in :mod:`xdl_ec.benchmark`)."""
    p = subparsers.add_parser(
        "bench", help="compare fault-tolerance strategies (none, ckpt, cpr, ec) through injected server failures",
        description="Train the same model, data, seed and failure schedule under none (the failure-free reference), "
                    "ckpt, cpr (mfu, ssu) and ec (k=2 r=1, k=4 r=1, k=4 r=2); write results.json, results.md and "
                    "PNG plots into --out.")
    p.add_argument("--quick", action="store_true", help="small preset for smoke tests (minutes, not a measurement)")
    p.add_argument("--out", metavar="DIR", default="bench-results", help="output directory (default %(default)s)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local = servers as objects in this process (default), ray = Ray actors")
    p.add_argument("--data", metavar="PATH", help="raw Criteo TSV file (default: synthetic Criteo-shaped data)")
    p.add_argument("--mtbf", type=_positive_float, metavar="SECONDS",
                   help="mean seconds of training between server failures (default: a third of the reference run)")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="data, model and failure seed (default 0)")
    p.add_argument("--rebuild-share", type=_share, metavar="S",
                   help="ec rows: share of wall time a rebuild may take, in (0, 1] (default 0.05)")
    p.add_argument("--only", action="append", metavar="LABEL",
                   help="run only these rows (repeatable; the none reference always runs): none, ckpt, cpr-mfu, "
                        "cpr-ssu, ec-2+1, ec-4+1, ec-4+2")
    p.add_argument("--overlap", type=_positive_int, metavar="RUNS",
                   help="instead: RUNS seeded runs per strategy whose kills do not wait for rebuilds (quick "
                        "preset); reports how many runs each survives (xdl_ec.benchmark.overlap)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=run_bench_command)


def run_bench_command(args: argparse.Namespace) -> int:
    from .benchmark import BenchConfig, run_bench
    from .benchmark.table import markdown_table

    config = BenchConfig(quick=args.quick, out=args.out, backend=args.backend, data=args.data, mtbf=args.mtbf,
                         seed=args.seed, progress=not args.no_progress, variants=args.only,
                         rebuild_share=args.rebuild_share)
    try:
        config.validate()
    except ValueError as err:
        raise UsageError(f"--{str(err).replace('variants:', 'only:').replace('rebuild_share:', 'rebuild-share:')}") \
            from None
    if args.overlap is not None:
        from .benchmark.overlap import overlap_table, run_overlap

        results = run_overlap(config, args.overlap, log=lambda line: print(line, file=sys.stderr))
        print(overlap_table(results), end="")
        print(f"wrote {Path(args.out) / 'overlap.json'}")
        return 0
    try:
        results = run_bench(config, log=lambda line: print(line, file=sys.stderr))
    except (OSError, ValueError) as err:  # unreadable data, a data set too small to split
        raise UsageError(str(err)) from None
    except RuntimeError as err:  # the failure-free reference itself failed: nothing to compare against
        print(f"xdl-ec bench: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(markdown_table(results), end="")
    print(f"wrote {Path(args.out) / 'results.json'}, results.md, throughput.png, loss.png")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xdl-ec", description="xdl-ec: sparse CTR training with erasure-coded "
                                                                "fault tolerance")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_train_parser(subparsers)
    add_bench_parser(subparsers)
    add_verify_parser(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``xdl-ec`` script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 with one usage line on bad flags
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UsageError as err:
        print(f"xdl-ec {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"xdl-ec {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
