"""The ``xdl-ec`` command line: one argparse subcommand per verb (``train`` here; others register theirs in
:func:`build_parser`). User errors (missing file, bad flag value, malformed data) print one line on stderr and exit
with status 2, without a traceback."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from xdl_ec.job.job_source import ScriptError, builtin_source, load_script_job
from xdl_ec.job.stop_request import STOP_REQUEST, RunStopped

EXIT_USAGE = 2
EXIT_FAILURE = 1  # the run itself failed (e.g. a parameter server was lost)

# Where `xdl-ec train` without --data looks for the Criteo sample, in order: $XDL_EC_CRITEO_SAMPLE, ../shared/data
# and shared/data below the working directory, and ../shared/data beside a source checkout of the package.
SAMPLE_NAME = "criteo_kaggle_train_head10k.tsv.gz"


class UsageError(Exception):
    """A user error: reported as one line on stderr with exit status 2."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse's errors without its usage block: the error, then one line pointing at --help (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for every flag\n")


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
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,32, got {text!r}"
        ) from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers like 64,32, got {text!r}")
    return sizes


def find_criteo_sample() -> Optional[Path]:
    """The Criteo sample used by the no-argument demo, or None when it is not around."""
    candidates = []
    if os.environ.get("XDL_EC_CRITEO_SAMPLE"):
        candidates.append(Path(os.environ["XDL_EC_CRITEO_SAMPLE"]))
    cwd = Path.cwd()
    candidates += [
        cwd.parent / "shared" / "data" / SAMPLE_NAME,
        cwd / "shared" / "data" / SAMPLE_NAME,
        Path(__file__).resolve().parents[1].parent / "shared" / "data" / SAMPLE_NAME,
    ]
    return next((p for p in candidates if p.is_file()), None)


def add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    from xdl_ec.builtin.criteo_job import TrainConfig
    from xdl_ec.model.dense_model import DENSE_OPTIMIZERS

    d = TrainConfig(synthetic=True)
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
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data", metavar="PATH", help="[built-in] raw Criteo TSV file, plain or .gz")
    src.add_argument("--synthetic", action="store_true", help="[built-in] seeded synthetic Criteo-shaped data")
    src.add_argument(
        "--stream",
        metavar="DIR",
        help="[built-in] train on the Criteo TSV files (plain or .gz) of DIR in name order as they "
        "appear, endlessly; a file counts once renamed in (names starting with '.' or ending in "
        ".tmp are ignored); saves keep the stream position (file, offset)",
    )
    p.add_argument(
        "--stream-idle-exit",
        type=_positive_float,
        metavar="SECONDS",
        help="[built-in] with --stream: end when no new file came for this many seconds of waiting "
        "(default: wait forever; SIGINT/SIGTERM stop cleanly)",
    )
    p.add_argument(
        "--synthetic-rows",
        type=_positive_int,
        help=f"[built-in] rows of synthetic data, eval split included (default {d.synthetic_rows})",
    )
    p.add_argument(
        "--synthetic-max-cardinality",
        type=_positive_int,
        help=f"[built-in] cap on each synthetic column's cardinality (default {d.synthetic_max_cardinality})",
    )
    p.add_argument(
        "--synthetic-zipf",
        type=_positive_float,
        metavar="S",
        help=f"[built-in] Zipf exponent of the synthetic ids' skew (default {d.synthetic_zipf})",
    )
    p.add_argument("--model", choices=("dlrm", "mlp"), help=f"[built-in] model body (default {d.model})")
    p.add_argument("--emb-dim", type=_positive_int, help=f"[built-in] embedding dimension (default {d.emb_dim})")
    p.add_argument(
        "--bottom-mlp",
        type=_layer_sizes,
        metavar="N,N",
        help="[built-in] DLRM bottom MLP hidden sizes; its output layer has emb-dim units (default 64)",
    )
    p.add_argument(
        "--top-mlp",
        type=_layer_sizes,
        metavar="N,N",
        help="[built-in] DLRM top MLP hidden sizes before the logit (default 64,32)",
    )
    p.add_argument(
        "--hidden", type=_layer_sizes, metavar="N,N", help="[built-in] Embedding&MLP hidden sizes (default 128,64)"
    )
    p.add_argument(
        "--optimizer",
        help=f"[built-in] sparse optimizer of the embedding table: sgd, momentum, adagrad, "
        f"adam, ftrl (default {d.optimizer})",
    )
    p.add_argument("--lr", type=_positive_float, help=f"[built-in] sparse learning rate (default {d.lr})")
    p.add_argument(
        "--dense-optimizer",
        choices=DENSE_OPTIMIZERS,
        help=f"[built-in] Keras optimizer of the dense model (default {d.dense_optimizer})",
    )
    p.add_argument("--dense-lr", type=_positive_float, help=f"[built-in] dense learning rate (default {d.dense_lr})")
    p.add_argument("--batch-size", type=_positive_int, help=f"[built-in] default {d.batch_size}")
    length = p.add_mutually_exclusive_group()
    length.add_argument(
        "--steps",
        type=_positive_int,
        help="built-in: batches of the run, split over the workers (cycling the data as needed); "
        "--script: at most this many steps, each one batch on every worker",
    )
    length.add_argument(
        "--epochs", type=_positive_int, help=f"[built-in] passes over the train split (default {d.epochs})"
    )
    p.add_argument(
        "--eval-fraction",
        type=_fraction,
        help=f"[built-in] held-out fraction: the last rows in file order (default {d.eval_fraction})",
    )
    p.add_argument("--seed", type=_non_negative_int, default=0, help="default %(default)s")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic TF ops, one thread per op (ops side by side on two): same seed, same model_digest "
        "(except with --evict-ttl-seconds, whose passes follow wall time)",
    )
    p.add_argument(
        "--on-bad-line",
        choices=("error", "skip"),
        help="[built-in] malformed lines: stop with file:line and the reason, or skip and count them",
    )
    p.add_argument("--report", metavar="FILE.json", help="write the run report (JSON) to this file")
    p.add_argument(
        "--logdir",
        metavar="DIR",
        help="write TensorBoard scalars there: loss, progressive AUC, samples/s, rows per table, failures",
    )
    p.add_argument(
        "--export-every",
        metavar="N|Ns",
        help="fresh serving (with --export-dir): a SavedModel DIR/base when training begins, then every N steps or "
        "N seconds ('60s') and at the end a delta DIR/delta-NNNNNN (rows changed and removed, dense weights) that "
        "plain TensorFlow applies to the model it serves: m.apply_delta(tf.constant(delta_dir))",
    )
    p.add_argument(
        "--export-dir", metavar="DIR", help="where --export-every writes the base and its deltas (new or empty)"
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress (a bar on a terminal; else a plain line with samples/s and loss every 30 s)",
    )
    ps = p.add_argument_group("parameter servers (default: the job trains in this process, without servers)")
    ps.add_argument("--servers", type=_positive_int, help="train with N parameter servers (keys sharded by hash)")
    ps.add_argument("--workers", type=_positive_int, help="workers (default 1; needs --servers)")
    ps.add_argument(
        "--backend",
        choices=("local", "ray"),
        help="where servers and workers run: local = objects in this process (default), ray = Ray actors",
    )
    ps.add_argument(
        "--address",
        metavar="RAY_ADDRESS",
        help="an existing Ray cluster (with --backend ray; default: start a local Ray)",
    )
    ps.add_argument(
        "--cache-rows",
        metavar="N|P%",
        help="a worker cache of every table (HET): N rows or P%% of the table's rows (needs --servers)",
    )
    ps.add_argument(
        "--staleness",
        type=_non_negative_int,
        metavar="S",
        help="cache: read a cached row while at most S versions behind, write back after S local "
        "updates (default 0: exact, the same model as without a cache)",
    )
    ps.add_argument("--cache-policy", choices=("lfu", "lru"), help="cache eviction (default lfu)")
    ps.add_argument(
        "--mode",
        choices=("sync", "async"),
        help="sync: all workers finish step t before t+1 (default); async: no barrier",
    )
    ft = p.add_argument_group("fault tolerance (needs --servers)")
    ft.add_argument(
        "--ft",
        choices=("none", "ckpt", "cpr", "ec"),
        help="none: a lost server stops the run (default); ckpt: periodic checkpoints, every server rolls "
        "back; cpr: only the lost server reloads its checkpoint; ec: erasure-coded servers",
    )
    ft.add_argument("--code", type=_code, metavar="K,R", help="ec: K data servers per stripe, R parity (default 4,1)")
    ft.add_argument(
        "--failure-domain",
        choices=("node", "none"),
        help="ec on Ray: node = at most R servers of any stripe on one Ray node, so losing a node is "
        "recovered exactly (default when the Ray cluster has several nodes); none = Ray places them",
    )
    ft.add_argument(
        "--rebuild-share",
        type=_share,
        metavar="S",
        help="ec: share of wall time a rebuild may take until it is done, in (0, 1] (default 0.05; "
        "training goes on meanwhile)",
    )
    ft.add_argument(
        "--rebuild-keeps",
        type=_keeps,
        metavar="F",
        help="ec: a background rebuild takes more than --rebuild-share while training keeps this share "
        "of its samples/s before the failure, in [0, 1) (default 0.95; 0: exactly --rebuild-share)",
    )
    ft.add_argument(
        "--urgent-rebuild",
        choices=("flat-out", "paced"),
        help="ec: a rebuild while one more loss would be fatal (R servers down): flat-out (default: the "
        "shortest time without redundancy, training slows meanwhile) or paced like any other "
        "(--rebuild-share, --rebuild-keeps: training keeps its speed, the window is longer)",
    )
    ft.add_argument(
        "--ckpt-interval",
        metavar="N|Ns|auto",
        help="ckpt: every N steps, every N seconds ('30s') or auto = Young's formula from the measured "
        "save cost and --mtbf (default auto)",
    )
    ft.add_argument("--ckpt-dir", metavar="DIR", help="ckpt/cpr: checkpoint directory (default: a temporary one)")
    ft.add_argument(
        "--cpr-pls",
        type=_open_fraction,
        metavar="P",
        help="cpr: target portion of lost samples; interval = 2 * servers * MTBF * P (default 0.02)",
    )
    ft.add_argument(
        "--cpr-interval",
        type=_positive_int,
        metavar="STEPS",
        help="cpr: checkpoint every STEPS steps instead of the --cpr-pls interval",
    )
    ft.add_argument(
        "--cpr-mode",
        choices=("mfu", "ssu"),
        help="cpr: rows saved between full saves: most frequently used or sub-sampled used (default mfu)",
    )
    ft.add_argument(
        "--fail-at",
        action="append",
        metavar="STEP[:SERVER]",
        default=None,
        help="kill server SERVER (default 0) right before step STEP (repeatable)",
    )
    ft.add_argument(
        "--fail-worker-at",
        action="append",
        metavar="STEP[:WORKER]",
        default=None,
        help="kill worker WORKER (default 0) right before step STEP (repeatable)",
    )
    ft.add_argument(
        "--mtbf",
        type=_positive_float,
        metavar="SECONDS",
        help="kill a random server (seeded by --seed) every SECONDS of training on average",
    )
    ft.add_argument(
        "--resize-at",
        action="append",
        metavar="STEP:SERVERS[:drain=ID[,ID]][:code=K,R]",
        default=None,
        help="resize the servers to SERVERS at the step boundary before step STEP, moving only the rows whose "
        "route changes; the model stays the never-resized run's (repeatable; --ft none or ec). ':drain=ID' first "
        "removes the server of that id (e.g. a spot reclaim): only its rows move, it stops last, and a later grow "
        "gives its id back (e.g. 10:3:drain=1 on 4 servers, then 20:4); ':code=K,R' (--ft ec) re-forms the "
        "stripes with that code, at a new count or the same one (e.g. 10:5:code=3,2)",
    )
    ft.add_argument(
        "--resize-share",
        type=_resize_share,
        metavar="S",
        help="ec: the share of the steps' time a resize's background move may take, its final pause included, in "
        "[0, 1) (default 0.1: training keeps ~0.9 of its samples/s meanwhile; larger: shorter moves; 0: the whole "
        "move in one pause at its boundary)",
    )
    ft.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where 'xdl-ec resize --run DIR N' reaches this run: its pid file and resize requests (SIGUSR1)",
    )
    save = p.add_argument_group("saving (any backend, any --ft)")
    save.add_argument(
        "--save-dir",
        metavar="DIR",
        help="save the run into DIR: every --save-every and at the end (a consistent cut of every "
        "table, the dense state and the reader positions; atomic)",
    )
    save.add_argument("--save-every", metavar="N|Ns", help="save every N steps or every N seconds ('60s')")
    save.add_argument("--keep", type=_positive_int, metavar="K", help="saves kept in --save-dir (default 2)")
    save.add_argument(
        "--backstop-every",
        metavar="Ns|N",
        help="instead of --save-every (needs --servers; meant for --ft ec): incremental saves into "
        "--save-dir, only the rows changed since the previous one, written in the background; when "
        "the run cannot recover (more than r servers lost, the driver lost) resume from them",
    )
    save.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the newest save in DIR: repeat the saved run's command (--steps/--epochs count "
        "the whole run) plus --resume DIR; any --backend and --servers",
    )
    bounded = p.add_argument_group(
        "bounded tables for endless training (xdl_ec.Admit, xdl_ec.Evict): the built-in job's table, or with "
        "--script every table of the job that declares no admit / evict of its own"
    )
    bounded.add_argument(
        "--admit-min-count",
        type=_positive_int,
        metavar="N",
        help="an id gets a row on its N-th occurrence (pushes); until then it reads zeros and its "
        "gradients are dropped (default: at once)",
    )
    bounded.add_argument(
        "--admit-counter",
        choices=("exact", "sketch"),
        help="how --admit-min-count counts the ids without a row: exact (a record per id; the default) or sketch "
        "(a count-min sketch per server: no record per id, may admit an id early; halved every --evict-every-steps)",
    )
    bounded.add_argument(
        "--evict-ttl-steps",
        type=_positive_int,
        metavar="N",
        help="evict rows not updated for more than N steps (default: never)",
    )
    bounded.add_argument(
        "--evict-ttl-seconds",
        type=_positive_float,
        metavar="S",
        help="instead of --evict-ttl-steps: evict rows not updated for more than S seconds of training wall "
        "time (the driver's step start times; the steps before a --resume count as started with the first "
        "step after it). Wall time varies from run to run, so even --deterministic runs may evict other rows "
        "(a recovered run still evicts what its failure-free run with the same step times would)",
    )
    bounded.add_argument(
        "--max-rows",
        type=_positive_int,
        metavar="N",
        help="at most N rows, summed over the servers (each keeps N / servers, at least one "
        "1024-row block); the least used go first (default: no cap)",
    )
    bounded.add_argument(
        "--evict-every-steps",
        type=_positive_int,
        metavar="K",
        help="eviction passes run after the pushes of every K-th step (default 100)",
    )
    p.set_defaults(handler=run_train)


def _code(text: str) -> tuple[int, int]:
    """``K,R`` of --code, by the ec config's one rule (:func:`xdl_ec.ft.configs.parse_code`)."""
    from xdl_ec.ft.configs import parse_code

    try:
        return parse_code(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected K,R (data and parity servers per stripe) like 4,1: {str(err).removeprefix('code: ')}"
        ) from None


_open_fraction = _number(float, lambda v: 0.0 < v < 1.0, "a number in (0, 1)")
_share = _number(float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1] (e.g. 0.05)")
_keeps = _number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (e.g. 0.95)")
_resize_share = _number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (e.g. 0.1; 0: one pause)")

# the built-in job's table rules, which also apply to a --script job: the rules of its tables that declare none
TABLE_RULE_FLAGS = (
    "admit_min_count",
    "admit_counter",
    "evict_ttl_steps",
    "evict_ttl_seconds",
    "max_rows",
    "evict_every_steps",
)
BUILTIN_FLAGS = (
    "data",
    "synthetic",
    "stream",
    "stream_idle_exit",
    "synthetic_rows",
    "synthetic_max_cardinality",
    "synthetic_zipf",
    "model",
    "emb_dim",
    "bottom_mlp",
    "top_mlp",
    "hidden",
    "optimizer",
    "lr",
    "dense_optimizer",
    "dense_lr",
    "batch_size",
    "epochs",
    "eval_fraction",
    "on_bad_line",
    *TABLE_RULE_FLAGS,
)
CLUSTER_FLAGS = (
    "workers",
    "backend",
    "address",
    "mode",
    "cache_rows",
    "staleness",
    "cache_policy",
    "resize_at",
    "run_dir",
)
FT_FLAGS = (
    "ft",
    "code",
    "failure_domain",
    "rebuild_share",
    "rebuild_keeps",
    "resize_share",
    "urgent_rebuild",
    "ckpt_interval",
    "ckpt_dir",
    "cpr_pls",
    "cpr_interval",
    "cpr_mode",
    "fail_at",
    "fail_worker_at",
    "mtbf",
)


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _given(args: argparse.Namespace, names: Sequence[str]) -> list:
    return [_flag(n) for n in names if getattr(args, n, None) not in (None, False)]


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """What ``xdl-ec train`` was asked: the job, where it runs, and how (built from the flags by
    :func:`train_request`)."""

    job: Any
    cluster: Any
    steps: Optional[int]
    seed: int
    deterministic: bool
    progress: bool
    config: Optional[Any] = None  # the built-in job's TrainConfig
    data: Optional[Any] = None  # the built-in job's data (description and bad lines for the report)
    saving: Dict[str, Any] = dataclasses.field(default_factory=dict)  # fit's resume/save_dir/save_every/keep

    def fit_arguments(self) -> Dict[str, Any]:
        return dict(
            steps=self.steps,
            cluster=self.cluster,
            deterministic=self.deterministic,
            seed=self.seed,
            progress=self.progress,
            **self.saving,
        )


def train_request(args: argparse.Namespace) -> TrainRequest:
    """The one mapping of ``xdl-ec train``'s flags to the job, the Cluster and the fit arguments; UsageError
    names the flag at fault. Reads ``args``, changes nothing."""
    from xdl_ec.job.cluster import Cluster

    if args.report is not None:
        parent = Path(args.report).resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--report: directory {parent} does not exist")
    cluster = None
    if args.servers is None:
        given = _given(args, CLUSTER_FLAGS)
        if given:
            raise UsageError(f"{', '.join(given)}: needs --servers N (without it training runs in one process)")
        given = _given(args, FT_FLAGS)
        if given:
            raise UsageError(f"{', '.join(given)}: needs --servers N (fault tolerance is about parameter servers)")
    else:
        if args.ckpt_dir is not None and Path(args.ckpt_dir).exists() and not Path(args.ckpt_dir).is_dir():
            raise UsageError(f"--ckpt-dir: {args.ckpt_dir} exists and is not a directory")
        try:
            cache = None
            if args.cache_rows is not None:
                from xdl_ec.sparse.cache_config import Cache

                rows = int(args.cache_rows) if args.cache_rows.isdigit() else args.cache_rows
                cache = Cache(rows=rows, staleness=args.staleness or 0, policy=args.cache_policy or "lfu")
            elif args.staleness is not None or args.cache_policy is not None:
                raise UsageError(
                    f"{', '.join(_given(args, ('staleness', 'cache_policy')))}: set the worker cache, "
                    f"which needs --cache-rows N|P%"
                )
            cluster = Cluster(
                servers=args.servers,
                workers=args.workers or 1,
                backend=args.backend or "local",
                address=args.address,
                mode=args.mode or "sync",
                ft=args.ft or "none",
                code=args.code,
                rebuild_share=args.rebuild_share,
                rebuild_keeps=args.rebuild_keeps,
                urgent_rebuild=args.urgent_rebuild,
                ckpt_interval=args.ckpt_interval,
                ckpt_dir=args.ckpt_dir,
                cpr_pls=args.cpr_pls,
                cpr_interval=args.cpr_interval,
                cpr_mode=args.cpr_mode,
                mtbf=args.mtbf,
                fail_at=args.fail_at or (),
                fail_worker_at=args.fail_worker_at or (),
                cache=cache,
                failure_domain=args.failure_domain,
                resize_at=args.resize_at or (),
                resize_share=args.resize_share,
            )
        except (TypeError, ValueError) as err:
            raise UsageError(_flag_names(str(err))) from None
    progress = not args.no_progress
    saving = _saving(args)
    if args.evict_ttl_steps is not None and args.evict_ttl_seconds is not None:
        raise UsageError(
            "--evict-ttl-steps, --evict-ttl-seconds: give one of them (a row ages by steps or by seconds of "
            "training wall time, not both)"
        )
    if args.script is not None:
        given = _given(args, [name for name in BUILTIN_FLAGS if name not in TABLE_RULE_FLAGS])
        if given:
            raise UsageError(
                f"{', '.join(given)}: describe the built-in model; with --script the job declares its "
                f"own tables, model and input (drop the flag(s) or the --script)"
            )
        table_rules = {name: getattr(args, name) for name in TABLE_RULE_FLAGS if getattr(args, name) is not None}
        if table_rules and not any(
            name in table_rules for name in ("admit_min_count", "evict_ttl_steps", "evict_ttl_seconds", "max_rows")
        ):
            raise UsageError(
                f"{', '.join(_flag(n) for n in table_rules)}: set how a rule counts or when it runs; give the rule "
                f"too (--admit-min-count, --evict-ttl-steps, --evict-ttl-seconds or --max-rows)"
            )
        _check_kills(cluster, args.steps)
        if cluster is not None and cluster.backend == "ray" and Path(args.script).is_file():
            from xdl_ec.ps.backend import check_project_folder

            try:  # before the script runs (it may import TensorFlow) and Ray starts
                check_project_folder(str(Path(args.script).resolve().parent))
            except ValueError as err:
                raise UsageError(str(err)) from None
        job = load_script_job(args.script, table_rules)
        return TrainRequest(job, cluster, args.steps, args.seed, args.deterministic, progress, saving=saving)
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job, num_train_batches, open_training_data

    if args.stream is not None:
        return _stream_request(args, cluster, progress, saving)
    if args.stream_idle_exit is not None:
        raise UsageError("--stream-idle-exit: ends a --stream; give --stream DIR")
    data, synthetic = args.data, args.synthetic
    if data is None and not synthetic:
        sample = find_criteo_sample()
        if sample is not None:
            data = str(sample)
        else:
            synthetic = True
        print(
            f"xdl-ec train: no --data given: demo on {data or 'synthetic data (Criteo sample not found)'}",
            file=sys.stderr,
        )
    if data is not None and not Path(data).is_file():
        raise UsageError(f"--data: no such file: {data}")
    settings = {
        name: getattr(args, name)
        for name in BUILTIN_FLAGS
        if getattr(args, name, None) is not None and name not in ("data", "synthetic")
    }
    try:
        config = TrainConfig(
            data=data,
            synthetic=synthetic,
            steps=args.steps,
            seed=args.seed,
            deterministic=args.deterministic,
            progress=progress,
            **settings,
        )
        training_data = open_training_data(config)
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from None
    # the run's steps, known here (the input is bounded to the run's batches): the progress bar's total
    batches = num_train_batches(training_data, config)
    workers = 1 if cluster is None else cluster.workers
    steps = (batches if cluster is not None and cluster.mode == "async" else -(-batches // workers)) or None
    _check_kills(cluster, steps)
    job = criteo_job(config)
    job.source = builtin_source(config)
    return TrainRequest(job, cluster, steps, args.seed, args.deterministic, progress, config, training_data, saving)


def _stream_request(args: argparse.Namespace, cluster: Any, progress: bool, saving: Dict[str, Any]) -> TrainRequest:
    """The built-in job on ``--stream DIR``: endless (``--steps`` bounds it), no hold-out."""
    from xdl_ec.builtin.criteo_job import TrainConfig, criteo_job

    if not Path(args.stream).is_dir():
        raise UsageError(f"--stream: no such directory: {args.stream}")
    if args.epochs is not None or args.eval_fraction is not None:
        raise UsageError(
            f"{', '.join(_given(args, ('epochs', 'eval_fraction')))}: a stream is endless and has no "
            f"hold-out (its progressive validation is in the report); drop the flag(s)"
        )
    settings = {
        name: getattr(args, name)
        for name in BUILTIN_FLAGS
        if getattr(args, name, None) is not None and name not in ("data", "synthetic", "stream", "stream_idle_exit")
    }
    try:
        config = TrainConfig(
            stream=args.stream,
            stream_idle_exit=args.stream_idle_exit,
            steps=args.steps,
            seed=args.seed,
            deterministic=args.deterministic,
            progress=progress,
            **settings,
        )
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from None
    workers = 1 if cluster is None else cluster.workers
    steps = (
        None
        if args.steps is None
        else args.steps
        if cluster is not None and cluster.mode == "async"
        else -(-args.steps // workers)
    )
    _check_kills(cluster, steps)
    job = criteo_job(config)
    job.source = builtin_source(config)
    return TrainRequest(job, cluster, steps, args.seed, args.deterministic, progress, config, None, saving)


def _check_kills(cluster: Any, steps: Optional[int]) -> None:
    """--fail-at / --fail-worker-at against the cluster's servers, workers and the run's steps: checked here, before
    TensorFlow is imported or Ray started, not when the first kill is due."""
    if cluster is None:
        return
    try:
        cluster.failure_schedule(0).validate(cluster.servers, cluster.workers, steps)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _saving(args: argparse.Namespace) -> Dict[str, Any]:
    """fit's saving arguments from --save-dir, --save-every, --keep and --resume (checked here, before any run)."""
    if getattr(args, "save_dir", None) is None:
        given = _given(args, ("save_every", "keep", "backstop_every"))
        if given:
            raise UsageError(f"{', '.join(given)}: needs --save-dir DIR, where the saves go")
        out: Dict[str, Any] = {}
    else:
        if Path(args.save_dir).exists() and not Path(args.save_dir).is_dir():
            raise UsageError(f"--save-dir: {args.save_dir} exists and is not a directory")
        if args.save_every is not None and args.backstop_every is not None:
            raise UsageError(
                "--backstop-every: give it or --save-every, not both (incremental background saves or "
                "full saves at the step boundary, into one --save-dir)"
            )
        if args.backstop_every is not None and args.servers is None:
            raise UsageError("--backstop-every: backs up parameter servers: needs --servers N (and --ft ec)")
        for flag, text in (("--save-every", args.save_every), ("--backstop-every", args.backstop_every)):
            if text is None:
                continue
            from xdl_ec.settings.interval import parse_interval

            try:
                if text.strip().lower() == "auto":
                    raise ValueError("'auto' is for --ckpt-interval")
                parse_interval(text)
            except (TypeError, ValueError) as err:
                raise UsageError(f"{flag}: {err}; give N steps or N seconds ('60s')") from None
        out = {
            "save_dir": args.save_dir,
            "save_every": args.save_every,
            "keep": args.keep or 2,
            "backstop_every": args.backstop_every,
        }
    if getattr(args, "resume", None) is not None:
        if not Path(args.resume).is_dir():
            raise UsageError(f"--resume: no such save directory: {args.resume}")
        out["resume"] = args.resume
    if getattr(args, "logdir", None) is not None:  # not a saving argument, but fit's too
        if Path(args.logdir).exists() and not Path(args.logdir).is_dir():
            raise UsageError(f"--logdir: {args.logdir} exists and is not a directory")
        out["logdir"] = args.logdir
    export_every, export_dir = getattr(args, "export_every", None), getattr(args, "export_dir", None)
    if (export_every is None) != (export_dir is None):
        missing = "--export-dir DIR" if export_dir is None else "--export-every N|Ns"
        raise UsageError(f"{missing}: fresh serving needs both --export-every and --export-dir (or neither)")
    if export_every is not None and export_dir is not None:
        from xdl_ec.settings.interval import parse_interval

        try:
            if export_every.strip().lower() == "auto":  # for --ckpt-interval only
                raise ValueError(export_every)
            parse_interval(export_every)
        except ValueError:
            raise UsageError(
                f"--export-every: {export_every!r} is neither a step count (e.g. '500') nor seconds (e.g. '60s')"
            ) from None
        where = Path(export_dir)
        if where.exists() and (not where.is_dir() or any(where.iterdir())):
            raise UsageError(f"--export-dir: {export_dir} exists and is not an empty directory; pass a new one")
        out.update(export_every=export_every, export_dir=export_dir)
    return out


def _flag_names(message: str) -> str:
    """A config's error with its setting names written as the flags that set them."""
    import re

    message = message.replace("ckpt interval:", "--ckpt-interval:").replace("cpr mode:", "--cpr-mode:")
    message = message.replace("cache rows:", "--cache-rows:").replace("cache policy:", "--cache-policy:")
    for name, flag in (("interval_steps", "cpr_interval"), ("pls", "cpr_pls")):
        message = re.sub(rf"(?<![\w-]){name}:", f"{_flag(flag)}:", message)
    for name in (*CLUSTER_FLAGS, *FT_FLAGS, "servers"):
        message = re.sub(rf"(?<![\w-]){name}:", f"{_flag(name)}:", message)
    return re.sub(r"(ft|backend)='(\w+)'", r"--\1 \2", message)


def run_train(args: argparse.Namespace) -> int:
    status, _ = _train(args, verify=False)
    return status


def _train(args: argparse.Namespace, verify: bool) -> tuple:
    """(exit status, report or None) of ``xdl-ec train`` (or ``verify``)."""
    request = train_request(args)
    from xdl_ec.model.input_stream import InputFnError
    from xdl_ec.ps import CallTimeout, RoleLost, Unrecoverable

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
    except (RoleLost, Unrecoverable, CallTimeout) as err:
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
    _print_report(report, request)
    if args.report is not None:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    return 0, report


def _print_report(report: dict, request: TrainRequest) -> None:
    what = request.config.model if request.config is not None else "the job"
    print(
        f"trained {what}: {report['samples']:,} samples in {_steps_text(report)}, "
        f"{report['samples_per_sec']:,.0f} samples/s, final loss {_number_text(report['final_loss'])}"
    )
    saves_line = _saves_text(report)
    if saves_line:
        print(saves_line)
    if "eval_samples" in report:
        auc_text = "n/a" if report["auc"] is None else f"{report['auc']:.4f}"
        logloss_text = "n/a" if report["logloss"] is None else f"{report['logloss']:.4f}"
        print(f"eval on {report['eval_samples']:,} held-out rows: AUC {auc_text}, log loss {logloss_text}")
    if report.get("bad_lines"):
        print(f"skipped {report['bad_lines']:,} bad lines")
    for failure in report.get("failures", []):
        print(
            f"{report['ft']}: {failure['role']} {failure['index']} lost at step {failure['step']}, recovered in "
            f"{failure['rebuild_seconds']:.2f} s ({failure['lost_samples']:,} samples lost or re-trained)"
        )
    if report.get("lost_updates"):
        print(f"{report['ft']}: {report['lost_updates']:,} row updates lost")
    for resize in report.get("resizes", []):
        print(
            f"resized at step {resize['step']}: {resize['servers_before']} -> {resize['servers_after']} servers, "
            f"{resize['rows_moved']:,} of {resize['rows']:,} rows to another server, {resize['bytes_copied']:,} "
            f"bytes copied in {resize['seconds']:.2f} s"
            + (f" (drained server {', '.join(map(str, resize['drained']))})" if resize.get("drained") else "")
            + _code_change(resize)
        )
    print(f"model_digest {report['model_digest']}")
    for server in report.get("servers", []):
        print(f"server {server['index']}: {server['bytes_in']:,} bytes in, {server['bytes_out']:,} bytes out")
    exports = report.get("exports")
    if exports is not None and exports["deltas"]:
        print(
            f"exports: a base and {exports['deltas']:,} deltas in {exports['directory']}; freshness median "
            f"{exports['freshness_s']['median']:.2f} s, p99 {exports['freshness_s']['p99']:.2f} s; a delta "
            f"{exports['delta_bytes']:,.0f} bytes (every row: {exports['full_bytes']:,} bytes)"
        )
    if "stages" in report:
        from xdl_ec.ps.step_stages import stages_text

        print(stages_text(report["stages"]))


def _number_text(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _steps_text(report: dict) -> str:
    """The steps this run trained: a resumed run's samples are this run's, so are the steps named with them."""
    resumed = report.get("resumed_from")
    if resumed is None:
        return f"{report['steps']:,} steps"
    first, last = resumed["step"] + 1, report["steps"]
    if last < first:
        return f"0 steps this run (the save was at step {resumed['step']:,} already)"
    return f"{last - first + 1:,} steps this run (steps {first:,}-{last:,})"


def _saves_text(report: dict) -> Optional[str]:
    """Which save the run resumed and where its saves went (None: neither)."""
    resumed, saves = report.get("resumed_from"), report.get("saves")
    parts = []
    if resumed is not None:
        parts.append(f"resumed the save of step {resumed['step']:,} in {Path(resumed['directory']).resolve()}")
    if saves is not None:
        newest = "" if saves.get("last_step") is None else f" (newest: step {saves['last_step']:,})"
        parts.append(f"saves go to {Path(saves['directory']).resolve()}{newest}")
    elif resumed is not None:
        parts.append("this run is not saved (add --save-dir DIR)")
    return "; ".join(parts) or None


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
    given = _given(args, ("save_dir", "save_every", "keep", "resume", "backstop_every", "export_every", "export_dir"))
    if given:
        raise UsageError(
            f"{', '.join(given)}: verify trains a fresh run to scrub it; save and resume with 'xdl-ec train'"
        )
    status, report = _train(argparse.Namespace(**{**vars(args), "ft": "ec"}), verify=True)
    if status != 0:
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


def add_bench_parser(subparsers: argparse._SubParsersAction) -> None:
    """``xdl-ec bench``: the none / ckpt / cpr / ec comparison (logic in :mod:`xdl_ec.benchmark`)."""
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
        type=_positive_float,
        metavar="SECONDS",
        help="mean seconds of training between server failures (default: a third of the reference run)",
    )
    p.add_argument("--seed", type=_non_negative_int, default=0, help="data, model and failure seed (default 0)")
    p.add_argument(
        "--rebuild-share",
        type=_share,
        metavar="S",
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
        type=_positive_int,
        metavar="RUNS",
        help="instead: RUNS seeded runs per strategy whose kills do not wait for rebuilds (quick "
        "preset); reports how many runs each survives (xdl_ec.benchmark.overlap)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=run_bench_command)


def run_bench_command(args: argparse.Namespace) -> int:
    from xdl_ec.benchmark import BenchConfig, run_bench
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
    )
    try:
        config.validate()
    except ValueError as err:
        raise UsageError(
            f"--{str(err).replace('variants:', 'only:').replace('rebuild_share:', 'rebuild-share:')}"
        ) from None
    if args.overlap is not None:
        from xdl_ec.benchmark.overlap import overlap_table, run_overlap

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
        type=_positive_int,
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


def add_resize_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "resize",
        help="resize the servers of a running 'xdl-ec train --run-dir DIR'",
        description="Asks the run training with --run-dir DIR to resize its servers to N at its next step boundary "
        "(moving only the rows whose route changes; under --ft ec the stripes are re-formed) and prints the resize "
        "once done; a resize the run cannot do is refused, changing nothing.",
    )
    p.add_argument("--run", required=True, metavar="DIR", help="the run's --run-dir")
    p.add_argument("servers", type=_positive_int, metavar="N", help="the new server count")
    p.add_argument(
        "--drain",
        type=_non_negative_int,
        action="append",
        default=None,
        metavar="ID",
        help="remove the server of this id first (e.g. a spot reclaim with notice; repeatable): only its rows move "
        "and it stops last; N counts the servers after (N = the current count replaces it)",
    )
    p.add_argument(
        "--code",
        type=_code,
        default=None,
        metavar="K,R",
        help="re-form the stripes with this code (--ft ec; default: the run's is kept); N may be the current count",
    )
    p.add_argument(
        "--timeout", type=_positive_float, default=600.0, metavar="SECONDS", help="wait at most (default 600)"
    )
    p.set_defaults(handler=run_resize)


def _code_change(record: Dict[str, Any]) -> str:
    """A resize's code change for its printed line ("" when the code was kept or there are no stripes)."""
    before, after = record.get("code_before"), record.get("code")
    if before is None or after is None or list(before) == list(after):
        return ""
    return f" (code {before[0]},{before[1]} -> {after[0]},{after[1]})"


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
        f"{record['bytes_copied']:,} bytes copied in {record['seconds']:.2f} s"
        + (f" (drained server {', '.join(map(str, record['drained']))})" if record.get("drained") else "")
        + _code_change(record)
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="xdl-ec", description="xdl-ec: sparse CTR training with erasure-coded fault tolerance"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_train_parser(subparsers)
    add_bench_parser(subparsers)
    add_verify_parser(subparsers)
    add_export_parser(subparsers)
    add_resize_parser(subparsers)
    return parser


#: seconds a run has, after SIGINT/SIGTERM, to reach a step boundary (and save there) before it is stopped where it
#: is (a recovery in progress, a long wait): a second signal stops it at once
STOP_GRACE_SECONDS = 1.0


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run where it was (not at a step boundary)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)


class StopOnSignals:
    """While a command runs: SIGINT and SIGTERM ask the run to stop at its next step boundary (final save there,
    see :mod:`xdl_ec.job.stop_request`); a second signal, or none reached within :data:`STOP_GRACE_SECONDS`, stops
    it where it is. A signal the caller ignores (SIG_IGN, e.g. a background job of a non-interactive shell) stays
    ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, command: str) -> None:
        self.command = command
        self.previous: Dict[int, Any] = {}
        self.timer: Optional[threading.Timer] = None

    def __enter__(self) -> "StopOnSignals":
        STOP_REQUEST.clear()
        STOP_REQUEST.on_boundary.append(self._cancel_timer)
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cancel_timer()
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        STOP_REQUEST.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if STOP_REQUEST.asked:
            raise Interrupted(signum)
        STOP_REQUEST.ask(signum)
        name = signal.Signals(signum).name
        print(
            f"xdl-ec {self.command}: {name}: stopping at the next step boundary ({name} again: at once)",
            file=sys.stderr,
            flush=True,
        )
        main = threading.main_thread().ident
        # a real signal to the main thread: it also breaks a blocking wait there, which a flag would not
        self.timer = threading.Timer(STOP_GRACE_SECONDS, signal.pthread_kill, (main, signum))
        self.timer.daemon = True
        self.timer.start()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def stop_message(command: str, argv: Sequence[str], args: argparse.Namespace, err: KeyboardInterrupt) -> List[str]:
    """The lines printed when a signal stopped ``command``: where it stopped, the last save, the command resuming it."""
    signum = getattr(err, "signum", signal.SIGINT)
    name = signal.Signals(signum).name
    head = f"xdl-ec {command}: interrupted ({name})"
    if isinstance(err, RunStopped):
        head += f", stopped at step {err.step:,}"
    saved, where = None, None
    for where in (getattr(args, "save_dir", None), getattr(args, "resume", None)):
        if where is None:
            continue
        from xdl_ec.keep.saved_run import SavedRun

        try:
            saved = SavedRun.open(where)
            break
        except (OSError, ValueError):
            saved = None
    if saved is None:
        if getattr(args, "save_dir", None) is not None:
            return [f"{head}; nothing saved yet in {Path(args.save_dir).resolve()}"]
        if command != "train":
            return [head]
        return [f"{head}; nothing saved: run with --save-dir DIR to be able to resume"]
    resume = _without_flag(list(argv), "--resume") + ["--resume", str(where)]
    return [
        f"{head}; last save: step {saved.step:,} in {saved.directory.resolve()}",
        f"resume with: {shlex.join(['xdl-ec', *resume])}",
    ]


def _without_flag(argv: List[str], flag: str) -> List[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == flag:
            skip = True
        elif not token.startswith(flag + "="):
            out.append(token)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``xdl-ec`` script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2: its error and a line pointing at --help
    handler: Callable[[argparse.Namespace], int] = args.handler
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


if __name__ == "__main__":
    sys.exit(main())
