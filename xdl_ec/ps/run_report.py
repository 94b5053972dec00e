"""RunReport: what a parameter-server run's report says of its model and its cluster.

The model: its hold-out scores (no row is inserted by an evaluation) and its digest (every table in the job's order
and the dense state, :mod:`xdl_ec.model.digest`). The cluster: per-server and per-worker stats, the workers'
caches, the tables' row rules, and the embedding bytes moved per sample trained by this process.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from xdl_ec.model.digest import model_digest, streamed_model_digest
from xdl_ec.model.evaluation import evaluate_batches
from xdl_ec.model.key_order_merge import merge_key_order
from xdl_ec.model.model_step import ModelStep
from xdl_ec.ps.cached_client import merged_cache_stats
from xdl_ec.ps.dense_sync import DriverDense
from xdl_ec.ps.running_cluster import RunningCluster
from xdl_ec.ps.training_state import TrainingState
from xdl_ec.sparse.memory_budget import tier_reports
from xdl_ec.sparse.row_rules import merged_reports

# each server's stats the report keeps
SERVER_FIELDS = (
    "index",
    "bytes_in",
    "bytes_out",
    "requests",
    "native_requests",
    "pulls",
    "pushes",
    "keys_pulled",
    "keys_pushed",
    "rows",
)


class RunReport:
    """Evaluates, digests and reports the run of ``cluster`` at ``state``; ``dense``: the driver's dense model,
    ``predict``: the job's step over it (for evaluations)."""

    def __init__(self, cluster: RunningCluster, state: TrainingState, dense: DriverDense, predict: ModelStep) -> None:
        self.cluster, self.state, self.dense, self.predict = cluster, state, dense, predict

    def find_rows(self, keys: Dict[str, np.ndarray]) -> Dict[str, tuple]:
        """The rows of ``keys`` per table (zero rows for ids never trained; none inserted)."""
        dims = {t.name: t.dim for t in self.cluster.job.tables}
        return self.cluster.client.find({t: (k, dims[t]) for t, k in keys.items()})

    def evaluate(self, batches: Iterable[Any]) -> Dict[str, Any]:
        """AUC, log loss and sample count of ``batches`` (dict batches as input_fn yields); no row is inserted,
        ids never trained read a zero row."""
        self.dense.current()
        return evaluate_batches(batches, self.cluster.job, self.find_rows, self.predict.predict)

    def digest(self) -> str:
        """``model_digest`` of every table (in the job's order) and the dense state (see :mod:`xdl_ec.model.digest`),
        streamed: each table's rows merged from its servers in key order a chunk at a time, never all in the driver."""
        return self.digest_streamed([self.key_order_rows(t.name) for t in self.cluster.job.tables])

    def key_order_rows(self, table: str) -> Iterator[Dict[str, np.ndarray]]:
        """``table``'s rows over every server in ascending key order, in chunks (a chunk per server held at once)."""
        return merge_key_order(self.cluster.scheduler.key_order_exports(table))

    def digest_streamed(self, tables: Iterable[Iterable[Mapping[str, np.ndarray]]]) -> str:
        """``model_digest`` of ``tables`` given as their rows in key order, chunk by chunk (per table: what
        :meth:`key_order_rows` yields), with the dense state."""
        dense = self.dense.current()
        return streamed_model_digest(tables, dense.model.weights, dense.optimizer.variables)

    def digest_of(self, exports: Sequence[Sequence[Dict[str, np.ndarray]]]) -> str:
        """``model_digest`` of the tables' ``exports`` (per table, every server's) with the dense state."""
        dense = self.dense.current()
        return model_digest(exports, dense.model.weights, dense.optimizer.variables)

    def bytes_per_sample(self, workers: List[Dict[str, Any]]) -> Dict[str, float]:
        """Embedding bytes the ``workers`` (their stats) pulled and pushed per sample they trained."""
        samples = max(self.state.samples - self.state.restored_samples, 1)  # what this process's workers moved
        return {
            "bytes_pulled_per_sample": sum(w["bytes_pulled"] + w["bytes_requested"] for w in workers) / samples,
            "bytes_pushed_per_sample": sum(w["bytes_pushed"] for w in workers) / samples,
        }

    def tier_report(self) -> Optional[Dict[str, Any]]:
        """Budgeted servers' disk tier now (asks every server): {"tables": {table: its tier counts summed over the
        servers}, "memory": {"server-<index>": {"budget_bytes", "peak_rss_bytes"}}}; None without a memory budget
        (and no call made)."""
        if self.cluster.config.memory is None:
            return None
        return self.tiers_of(self.cluster.scheduler.server_stats())

    @staticmethod
    def tiers_of(servers: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """:meth:`tier_report` of the servers' ``stats`` (empty parts when none is budgeted)."""
        return {
            "tables": tier_reports([s["tier"] for s in servers if "tier" in s]),
            "memory": {f"server-{s['index']}": s["memory"] for s in servers if "memory" in s},
        }

    def report(self) -> Dict[str, Any]:
        """The cluster's part of a report: per-server and per-worker stats, bytes moved per sample."""
        cluster = self.cluster
        servers = cluster.scheduler.server_stats()
        workers = cluster.worker_stats()
        cached = [w["cache"] for w in workers if "cache" in w]
        caching = {"cache": merged_cache_stats(cached)} if cached else {}
        tables = [s["tables"] for s in servers if "tables" in s]
        merged = merged_reports(tables) if tables else {}
        for name, entry in self.tiers_of(servers)["tables"].items():  # budgeted servers: the tier's counts beside
            merged.setdefault(name, {}).update(entry)
        return {
            **caching,
            "embedding_rows": sum(sum(s["rows"].values()) for s in servers),
            **({"tables": merged} if merged else {}),
            "cluster": {**dataclasses.asdict(cluster.config), "map": cluster.scheduler.cluster_map()},
            "servers": [{k: s[k] for k in SERVER_FIELDS + (("memory",) if "memory" in s else ())} for s in servers],
            "workers": workers,
            **self.bytes_per_sample(workers),
        }
