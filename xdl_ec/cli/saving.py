"""Saving: where and how often ``xdl-ec train`` saves its run, and which save it resumes, each field beside its
flag."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Optional

from xdl_ec.cli.parser import UsageError
from xdl_ec.settings.flag import flag
from xdl_ec.settings.flag_types import positive_int
from xdl_ec.settings.interval import parse_interval


def _field(name: str, help: str, **options: Any) -> Any:
    return dataclasses.field(default=options.pop("default", None), metadata=flag(name, help, **options))


@dataclasses.dataclass(frozen=True)
class Saving:
    """The run's saves as their flags gave them; :meth:`check` refuses bad ones before anything runs."""

    save_dir: Optional[str] = _field(
        "--save-dir",
        "save the run into DIR: every --save-every and at the end (a consistent cut of every table, the dense state "
        "and the reader positions; atomic)",
        metavar="DIR",
    )
    save_every: Optional[str] = _field(
        "--save-every", "save every N steps or every N seconds ('60s')", part="cadence", metavar="N|Ns"
    )
    keep: int = _field(
        "--keep",
        "saves kept in --save-dir (default {default})",
        default=2,
        part="cadence",
        type=positive_int,
        metavar="K",
    )
    backstop_every: Optional[str] = _field(
        "--backstop-every",
        "instead of --save-every (needs --servers; meant for --ft ec): incremental saves into --save-dir, only the "
        "rows changed since the previous one, written in the background; when the run cannot recover (more than r "
        "servers lost, the driver lost) resume from them",
        part="cadence",
        metavar="Ns|N",
    )
    resume: Optional[str] = _field(
        "--resume",
        "continue the newest save in DIR: repeat the saved run's command (--steps/--epochs count the whole run) plus "
        "--resume DIR; any --backend and --servers",
        metavar="DIR",
    )

    def check(self, servers: Optional[int]) -> None:
        """UsageError naming the flag when a directory is wrong or an interval bad; ``servers``: the run's
        --servers (None: no servers). (Its "cadence" flags without --save-dir are the command's to refuse: unset
        and default look alike here.)"""
        if self.save_dir is not None:
            self._check_saves(servers)
        if self.resume is not None and not Path(self.resume).is_dir():
            raise UsageError(f"--resume: no such save directory: {self.resume}")

    def _check_saves(self, servers: Optional[int]) -> None:
        assert self.save_dir is not None
        if Path(self.save_dir).exists() and not Path(self.save_dir).is_dir():
            raise UsageError(f"--save-dir: {self.save_dir} exists and is not a directory")
        if self.save_every is not None and self.backstop_every is not None:
            raise UsageError(
                "--backstop-every: give it or --save-every, not both (incremental background saves or full saves "
                "at the step boundary, into one --save-dir)"
            )
        if self.backstop_every is not None and servers is None:
            raise UsageError("--backstop-every: backs up parameter servers: needs --servers N (and --ft ec)")
        for name, text in (("--save-every", self.save_every), ("--backstop-every", self.backstop_every)):
            if text is None:
                continue
            try:
                if text.strip().lower() == "auto":
                    raise ValueError("'auto' is for --ckpt-interval")
                parse_interval(text)
            except (TypeError, ValueError) as err:
                raise UsageError(f"{name}: {err}; give N steps or N seconds ('60s')") from None

    def fit_arguments(self) -> Dict[str, Any]:
        """fit's save_dir, save_every, keep, backstop_every (with --save-dir) and resume (when given)."""
        out: Dict[str, Any] = {}
        if self.save_dir is not None:
            out = {
                "save_dir": self.save_dir,
                "save_every": self.save_every,
                "keep": self.keep,
                "backstop_every": self.backstop_every,
            }
        if self.resume is not None:
            out["resume"] = self.resume
        return out
