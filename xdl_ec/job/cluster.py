"""Cluster: where and how a job trains on parameter servers, with its fault tolerance, checked once.

``Cluster(servers=N, workers=W, backend="local"|"ray", address=None, mode="sync"|"async", ft="none"|"ckpt"|"cpr"|
"ec", code=(k, r), ...)``; the strategy's own keywords (``rebuild_share``, ``rebuild_keeps``, ``rebuild``,
``rebuild_within``: the bound in seconds on ec's vulnerable window, ``ckpt_interval``, ``ckpt_dir``, ``cpr_pls``,
``cpr_interval``, ``cpr_mode``, ``mtbf``) and failure injection (``fail_at``, ``fail_worker_at``: "STEP[:INDEX]"
strings, ``mtbf`` seconds) are those of ``xdl-ec train``'s flags.
``cache``: the workers' embedding caches (an :class:`~xdl_ec.sparse.cache_config.Cache` for every table, or a dict
of table name -> Cache).
``resize_at``: "STEP:N" strings, resize the servers to N at the boundary before step STEP (``--resize-at``, see
:mod:`xdl_ec.ps.resize`); ``resize_share`` (ft="ec"): the share of the steps' time a resize's background move may
take, its final pause included, in [0, 1) (default 0.1; 0: the whole move in one pause at its boundary).
``memory_budget`` (bytes or "4G") with ``spill_dir``: each server keeps at most that much of its tables in RAM and
the rest of their rows in files under ``spill_dir``, the model the same bit for bit (see
:mod:`xdl_ec.sparse.memory_budget`).
``failure_domain`` (ft="ec" on Ray): "node" keeps at most r members of any stripe on one Ray node, "none" lets Ray
place the servers; default "node" when the Ray cluster has several alive nodes (see :mod:`xdl_ec.ps.placement`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Tuple, Union, cast

from xdl_ec.ft.configs import STRATEGIES, CkptConfig, CprConfig, EcConfig, StrategyConfig, parse_code
from xdl_ec.ft.failure_schedule import FailureSchedule
from xdl_ec.ft.rebuild_deadline import DEFAULT_REBUILD_WITHIN
from xdl_ec.ft.rebuild_governor import DEFAULT_REBUILD_KEEPS
from xdl_ec.ps.backend import DEFAULT_TIMEOUT
from xdl_ec.ps.resize import ResizeAt, check_schedule, parse_resize
from xdl_ec.ps.training import ClusterConfig
from xdl_ec.settings import checks
from xdl_ec.settings.flag import flag, flags_from
from xdl_ec.settings.flag_types import number, open_fraction, positive_float, positive_int, stripe_code
from xdl_ec.sparse.cache_config import Cache, caches_for
from xdl_ec.sparse.memory_budget import MemoryBudget, parse_size

_ONLY = {
    "code": "ec",
    "rebuild_share": "ec",
    "rebuild_keeps": "ec",
    "rebuild": "ec",
    "urgent_rebuild": "ec",
    "rebuild_within": "ec",
    "failure_domain": "ec",
    "resize_share": "ec",
    "ckpt_interval": "ckpt",
    "cpr_pls": "cpr",
    "cpr_interval": "cpr",
    "cpr_mode": "cpr",
}


_share = number(float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1] (e.g. 0.05)")
_keeps = number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (e.g. 0.95)")
_resize_share = number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (e.g. 0.1; 0: one pause)")
_size = number(parse_size, lambda v: v >= 1, "a size like 4G, 512M or 1000000 (bytes)")


def _field(default: Any, name: str, help: str, part: str = "ft", **options: Any) -> Any:
    """A Cluster field and its ``xdl-ec train`` flag (in the fault tolerance part unless said)."""
    return dataclasses.field(default=default, metadata=flag(name, help, part=part, **options))


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where and how a job trains on parameter servers (see the module's docstring); each field beside its flag."""

    servers: int = _field(
        1, "--servers", "train with N parameter servers (keys sharded by hash)", "servers", type=positive_int
    )
    workers: int = _field(1, "--workers", "workers (default {default}; needs --servers)", "servers", type=positive_int)
    backend: str = _field(
        "local",
        "--backend",
        "where servers and workers run: local = objects in this process (default), ray = Ray actors",
        "servers",
        choices=("local", "ray"),
    )
    address: Optional[str] = _field(
        None,
        "--address",
        "an existing Ray cluster (with --backend ray; default: start a local Ray)",
        "servers",
        metavar="RAY_ADDRESS",
    )
    cache: Optional[Union[Cache, Mapping[str, Cache]]] = dataclasses.field(
        default=None, metadata=flags_from(Cache, "servers")
    )
    memory_budget: Optional[Union[int, str]] = _field(
        None,
        "--memory-budget",
        "RAM each server (without --servers: this process) may hold of its tables' rows, optimizer state and key "
        "index, e.g. 4G; the rest of the rows live in --spill-dir, the model the same bit for bit",
        "servers",
        type=_size,
        metavar="SIZE",
    )
    spill_dir: Optional[str] = _field(
        None,
        "--spill-dir",
        "with --memory-budget: the directory the rows beyond the budget live in (files removed when the run ends)",
        "servers",
        metavar="DIR",
    )
    mode: str = _field(
        "sync",
        "--mode",
        "sync: all workers finish step t before t+1 (default); async: no barrier",
        "servers",
        choices=("sync", "async"),
    )
    ft: str = _field(
        "none",
        "--ft",
        "none: a lost server stops the run (default); ckpt: periodic checkpoints, every server rolls back; cpr: only "
        "the lost server reloads its checkpoint; ec: erasure-coded servers",
        choices=STRATEGIES,
    )
    code: Optional[Union[str, Tuple[int, int]]] = _field(
        None, "--code", "ec: K data servers per stripe, R parity (default 4,1)", type=stripe_code, metavar="K,R"
    )
    failure_domain: Optional[str] = _field(
        None,
        "--failure-domain",
        "ec on Ray: node = at most R servers of any stripe on one Ray node, so losing a node is recovered exactly "
        "(default when the Ray cluster has several nodes); none = Ray places them",
        choices=("node", "none"),
    )
    rebuild_share: Optional[float] = _field(
        None,
        "--rebuild-share",
        "ec: share of wall time a rebuild may take until it is done, in (0, 1] (default 0.05; training goes on "
        "meanwhile)",
        type=_share,
        metavar="S",
    )
    rebuild_keeps: Optional[float] = _field(
        None,
        "--rebuild-keeps",
        "ec: a background rebuild takes more than --rebuild-share while training keeps this share of its samples/s "
        "before the failure, in [0, 1) (default 0.95; 0: exactly --rebuild-share)",
        type=_keeps,
        metavar="F",
    )
    rebuild: Optional[str] = None
    urgent_rebuild: Optional[str] = _field(
        None,
        "--urgent-rebuild",
        "ec: a rebuild while one more loss would be fatal (R servers down): flat-out (default: the shortest time "
        "without redundancy, training slows meanwhile) or paced like any other (--rebuild-share, --rebuild-keeps: "
        "training keeps its speed, the window is longer)",
        choices=("flat-out", "paced"),
    )
    rebuild_within: Optional[float] = _field(
        None,
        "--rebuild-within",
        "ec: bound in seconds on the window in which one more server loss is fatal, from the loss to full "
        "redundancy (default 10): the rebuild works more, and holds training's steps when it must, as its measured "
        "progress demands; each failure reports vulnerable_seconds",
        type=positive_float,
        metavar="S",
    )
    ckpt_interval: Optional[str] = _field(
        None,
        "--ckpt-interval",
        "ckpt: every N steps, every N seconds ('30s') or auto = Young's formula from the measured save cost and "
        "--mtbf (default auto)",
        metavar="N|Ns|auto",
        labels=("ckpt interval",),
    )
    ckpt_dir: Optional[str] = _field(
        None, "--ckpt-dir", "ckpt/cpr: checkpoint directory (default: a temporary one)", metavar="DIR"
    )
    cpr_pls: Optional[float] = _field(
        None,
        "--cpr-pls",
        "cpr: target portion of lost samples; interval = 2 * servers * MTBF * P (default 0.02)",
        type=open_fraction,
        metavar="P",
        labels=("pls",),
    )
    cpr_interval: Optional[int] = _field(
        None,
        "--cpr-interval",
        "cpr: checkpoint every STEPS steps instead of the --cpr-pls interval",
        type=positive_int,
        metavar="STEPS",
        labels=("interval_steps",),
    )
    cpr_mode: Optional[str] = _field(
        None,
        "--cpr-mode",
        "cpr: rows saved between full saves: most frequently used or sub-sampled used (default mfu)",
        choices=("mfu", "ssu"),
        labels=("cpr mode",),
    )
    fail_at: Sequence[str] = _field(
        (),
        "--fail-at",
        "kill server SERVER (default 0) right before step STEP (repeatable)",
        action="append",
        metavar="STEP[:SERVER]",
    )
    fail_worker_at: Sequence[str] = _field(
        (),
        "--fail-worker-at",
        "kill worker WORKER (default 0) right before step STEP (repeatable)",
        action="append",
        metavar="STEP[:WORKER]",
    )
    mtbf: Optional[float] = _field(
        None,
        "--mtbf",
        "kill a random server (seeded by --seed) every SECONDS of training on average",
        type=positive_float,
        metavar="SECONDS",
    )
    resize_at: Sequence[str] = _field(
        (),
        "--resize-at",
        "resize the servers to SERVERS at the step boundary before step STEP, moving only the rows whose route "
        "changes; the model stays the never-resized run's (repeatable; --ft none or ec). ':drain=ID' first removes "
        "the server of that id (e.g. a spot reclaim): only its rows move, it stops last, and a later grow gives its "
        "id back (e.g. 10:3:drain=1 on 4 servers, then 20:4); ':code=K,R' (--ft ec) re-forms the stripes with that "
        "code, at a new count or the same one (e.g. 10:5:code=3,2)",
        "resize",
        action="append",
        metavar="STEP:SERVERS[:drain=ID[,ID]][:code=K,R]",
    )
    resize_share: Optional[float] = _field(
        None,
        "--resize-share",
        "ec: the share of the steps' time a resize's background move may take, its final pause included, in [0, 1) "
        "(default 0.1: training keeps ~0.9 of its samples/s meanwhile; larger: shorter moves; 0: the whole move in "
        "one pause at its boundary)",
        type=_resize_share,
        metavar="S",
    )
    call_timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        if isinstance(self.cache, Mapping):  # kept as sorted pairs: a Cluster stays hashable
            object.__setattr__(self, "cache", tuple(sorted(self.cache.items())))
        if self.cache is not None and not isinstance(self.cache, (Cache, tuple)):
            raise TypeError(
                f"cache: must be an xdl_ec.Cache or a dict of table name -> Cache, got {type(self.cache).__name__}"
            )
        object.__setattr__(self, "fail_at", tuple(self.fail_at))
        object.__setattr__(self, "fail_worker_at", tuple(self.fail_worker_at))
        object.__setattr__(self, "resize_at", tuple(self.resize_at))
        self.resize_schedule()
        self.cluster_config()  # checks servers, workers, backend, address, mode, call_timeout
        checks.one_of("ft", self.ft, STRATEGIES)
        wrong = [name for name, ft in _ONLY.items() if getattr(self, name) is not None and ft != self.ft]
        if wrong:
            raise ValueError(
                f"{', '.join(wrong)}: only used with ft={_ONLY[wrong[0]]!r} (this cluster has ft={self.ft!r})"
            )
        if self.ckpt_dir is not None and self.ft not in ("ckpt", "cpr"):
            raise ValueError(f"ckpt_dir: only used with ft='ckpt' or 'cpr' (this cluster has ft={self.ft!r})")
        if self.code is not None:
            object.__setattr__(self, "code", parse_code(self.code))
        if self.resize_share is not None:
            object.__setattr__(
                self, "resize_share", checks.number("resize_share", self.resize_share, 0.0, 1.0, high_open=True)
            )
        self.strategy_config(0)
        self.failure_schedule(0)
        if self.ft == "ec":
            k, r = self.ec_code
            if self.servers < k + r:
                raise ValueError(
                    f"servers: the code k={k}, r={r} needs at least k + r = {k + r} servers, got "
                    f"{self.servers}; add servers or use a smaller code"
                )

    @property
    def ec_code(self) -> Tuple[int, int]:
        """(k, r) of an ec cluster: ``code`` as __post_init__ parsed it, or the default (4, 1)."""
        return cast(Tuple[int, int], self.code) if self.code is not None else (4, 1)

    def cluster_config(self) -> ClusterConfig:
        return ClusterConfig(
            servers=self.servers,
            workers=self.workers,
            backend=self.backend,
            address=self.address,
            mode=self.mode,
            call_timeout=self.call_timeout,
            failure_domain=self.failure_domain,
            memory=MemoryBudget.of(self.memory_budget, self.spill_dir),
        )

    def strategy_config(self, seed: int) -> StrategyConfig:
        """The fault-tolerance strategy's config (None for ft='none')."""
        if self.ft == "ec":
            return EcConfig(
                code=self.ec_code,
                rebuild_share=0.05 if self.rebuild_share is None else self.rebuild_share,
                rebuild_keeps=DEFAULT_REBUILD_KEEPS if self.rebuild_keeps is None else self.rebuild_keeps,
                rebuild=self.rebuild or "background",
                urgent_rebuild="flat-out" if self.urgent_rebuild is None else self.urgent_rebuild,
                rebuild_within=DEFAULT_REBUILD_WITHIN if self.rebuild_within is None else self.rebuild_within,
            )
        if self.ft == "ckpt":
            return CkptConfig(interval=self.ckpt_interval or "auto", directory=self.ckpt_dir, mtbf=self.mtbf)
        if self.ft == "cpr":
            return CprConfig(
                pls=0.02 if self.cpr_pls is None else self.cpr_pls,
                mtbf=self.mtbf,
                interval_steps=self.cpr_interval,
                mode=self.cpr_mode or "mfu",
                directory=self.ckpt_dir,
                seed=seed,
            )
        return None

    def caches(self, tables: Sequence[Any]) -> dict:
        """{table name: Cache} of the job's ``tables`` (see :mod:`xdl_ec.sparse.cache_config`)."""
        return caches_for(dict(self.cache) if isinstance(self.cache, tuple) else self.cache, tables)

    def resize_schedule(self) -> Sequence[ResizeAt]:
        """``resize_at`` parsed, by step (ValueError names the flag and the entry)."""
        return check_schedule([parse_resize(text) for text in self.resize_at])

    def failure_schedule(self, seed: int) -> FailureSchedule:
        resizes = [(r.step, r.servers) for r in self.resize_schedule()]
        return FailureSchedule.from_flags(self.fail_at, self.fail_worker_at, self.mtbf, seed, resizes)
