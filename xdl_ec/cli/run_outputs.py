"""RunOutputs: what ``xdl-ec train`` writes besides the model (its report, TensorBoard scalars, fresh serving
exports, the progress line), each field beside its flag."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Optional

from xdl_ec.cli.parser import UsageError
from xdl_ec.settings.flag import flag
from xdl_ec.settings.interval import parse_interval


@dataclasses.dataclass(frozen=True)
class RunOutputs:
    """The run's outputs as its flags gave them; :meth:`check` refuses bad ones before anything runs."""

    report: Optional[str] = dataclasses.field(
        default=None, metadata=flag("--report", "write the run report (JSON) to this file", metavar="FILE.json")
    )
    logdir: Optional[str] = dataclasses.field(
        default=None,
        metadata=flag(
            "--logdir",
            "write TensorBoard scalars there: loss, progressive AUC, samples/s, rows per table, failures",
            metavar="DIR",
        ),
    )
    export_every: Optional[str] = dataclasses.field(
        default=None,
        metadata=flag(
            "--export-every",
            "fresh serving (with --export-dir): a SavedModel DIR/base when training begins, then every N steps or N "
            "seconds ('60s') and at the end a delta DIR/delta-NNNNNN (rows changed and removed, dense weights) that "
            "plain TensorFlow applies to the model it serves: m.apply_delta(tf.constant(delta_dir))",
            part="serving",
            metavar="N|Ns",
        ),
    )
    export_dir: Optional[str] = dataclasses.field(
        default=None,
        metadata=flag(
            "--export-dir",
            "where --export-every writes the base and its deltas (new or empty)",
            part="serving",
            metavar="DIR",
        ),
    )
    progress: bool = dataclasses.field(
        default=True,
        metadata=flag(
            "--no-progress",
            "no progress (a bar on a terminal; else a plain line with samples/s and loss every 30 s)",
            action="store_false",
        ),
    )

    def check(self) -> None:
        """UsageError naming the flag when a directory is missing or taken, or fresh serving is half given."""
        if self.report is not None:
            parent = Path(self.report).resolve().parent
            if not parent.is_dir():
                raise UsageError(f"--report: directory {parent} does not exist")
        if self.logdir is not None and Path(self.logdir).exists() and not Path(self.logdir).is_dir():
            raise UsageError(f"--logdir: {self.logdir} exists and is not a directory")
        if (self.export_every is None) != (self.export_dir is None):
            missing = "--export-dir DIR" if self.export_dir is None else "--export-every N|Ns"
            raise UsageError(f"{missing}: fresh serving needs both --export-every and --export-dir (or neither)")
        if self.export_every is not None and self.export_dir is not None:
            try:
                if self.export_every.strip().lower() == "auto":  # for --ckpt-interval only
                    raise ValueError(self.export_every)
                parse_interval(self.export_every)
            except ValueError:
                raise UsageError(
                    f"--export-every: {self.export_every!r} is neither a step count (e.g. '500') nor seconds (e.g. "
                    f"'60s')"
                ) from None
            where = Path(self.export_dir)
            if where.exists() and (not where.is_dir() or any(where.iterdir())):
                raise UsageError(
                    f"--export-dir: {self.export_dir} exists and is not an empty directory; pass a new one"
                )

    def fit_arguments(self) -> Dict[str, Any]:
        """fit's logdir, export_every and export_dir, those given."""
        out: Dict[str, Any] = {}
        if self.logdir is not None:
            out["logdir"] = self.logdir
        if self.export_every is not None and self.export_dir is not None:
            out.update(export_every=self.export_every, export_dir=self.export_dir)
        return out
