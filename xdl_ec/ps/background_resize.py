"""BackgroundResize: a resize under ``--ft ec`` whose rows move in the background
(:class:`~xdl_ec.ps.background_move.BackgroundMove`), with what its record needs: checked and started at the
boundary that asks for it, finished at its final boundary."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from xdl_ec.ps.background_move import BackgroundMove
from xdl_ec.ps.move_hooks import MoveHooks
from xdl_ec.ps.resize_error import ResizeError
from xdl_ec.ps.resize_plan import code_fields, ideal_fraction, placement_of, plan_ids, server_ids_of
from xdl_ec.ps.resize_request import ResizeRequest
from xdl_ec.ps.resize_target import check_target
from xdl_ec.ps.resize_trainer import ResizeTrainer, wait_answers
from xdl_ec.ps.started_servers import StartedServers

__all__ = ["BackgroundResize"]


class BackgroundResize:
    """A background move (``--ft ec``, :class:`~xdl_ec.ps.background_move.BackgroundMove`) and what its record
    needs: checked and started at the boundary that asks for it (the servers started ahead, if they fit)."""

    def __init__(
        self,
        trainer: ResizeTrainer,
        servers: int,
        started: Optional[StartedServers],
        drain: Sequence[int],
        hooks: MoveHooks,
        schedule: bool = False,
        request: Optional[ResizeRequest] = None,
        code: Optional[Tuple[int, int]] = None,
    ) -> None:
        try:
            check_target(trainer, servers, drain, code)
            placement = placement_of(trainer, servers, code)  # nodes too few for the new count: refused here
        except ResizeError:
            if started is not None:
                started.drop(trainer)
            raise
        self.schedule, self.request = schedule, request
        self.servers, self.drain = servers, tuple(drain)
        self.before = len(trainer.scheduler.servers)
        self.code_before = trainer.strategy.stripe_code
        self.ids_before = server_ids_of(trainer.scheduler)
        kept, ids_after = plan_ids(self.ids_before, servers, self.drain)
        self.kept = kept
        self.ids_after = sorted(ids_after)  # all servers are fresh: in id order, dense again once holes are filled
        ready = started.take(trainer) if started is not None else None
        if ready is not None:
            placement = ready.placement
        self.move = BackgroundMove(
            trainer,
            servers,
            self.ids_after,
            placement,
            None if ready is None else ready.handles,
            hooks,
            self.ids_before,
            self.drain,
            code,
        )

    def finish(self, trainer: ResizeTrainer) -> Optional[Dict[str, Any]]:
        """The final boundary: quiesce, the rest copied, the switch; the record (None: a fresh server was lost
        here and the pre-copy starts over)."""
        start = time.perf_counter()
        trainer.quiesce()
        live = [i for i, w in enumerate(trainer.live_workers()) if w is not None]
        wait_answers(trainer, [trainer.worker(i).settle_pulls() for i in live])
        figures = self.move.finish(trainer, live)
        if figures is None:
            return None
        trainer.cluster = dataclasses.replace(trainer.cluster, servers=self.servers)
        move = self.move
        held, moved = figures["rows"], figures["rows_moved"]
        pause = time.perf_counter() - start
        return {
            "step": int(trainer.step) + 1,
            "servers_before": self.before,
            "servers_after": self.servers,
            "rows": held,
            "rows_moved": moved,
            "moved_fraction": moved / held if held else 0.0,
            "ideal_fraction": ideal_fraction(self.ids_before, self.kept, self.ids_after, self.servers, self.drain),
            "drained": sorted(int(i) for i in self.drain),
            "server_ids": list(self.ids_after),
            "rows_copied": move.rows_precopied + figures["rows_final"],
            "bytes_copied": move.bytes_copied,
            "restarts": move.restarts,
            "seconds": move.precopy_seconds + pause,
            "started_step": move.started_step,
            "precopy_boundaries": move.boundaries,
            "precopy_seconds": move.precopy_seconds,
            "rows_precopied": move.rows_precopied,
            "rows_recopied": figures["rows_recopied"],
            "rows_final": figures["rows_final"],
            "shards_copied_whole": figures["shards_copied_whole"],
            "final_pause_s": pause,
            "final_pause_predicted_s": float(move.final_reserve or 0.0),
            **code_fields(self.code_before, trainer.strategy.stripe_code),
        }
