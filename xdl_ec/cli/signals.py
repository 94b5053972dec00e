"""Signals while a command runs: SIGINT and SIGTERM stop a run at its next step boundary (:class:`StopOnSignals`),
and what is printed once it stopped (:func:`stop_message`)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from xdl_ec.job.stop_request import STOP_REQUEST, RunStopped

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
    resume = without_flag(list(argv), "--resume") + ["--resume", str(where)]
    return [
        f"{head}; last save: step {saved.step:,} in {saved.directory.resolve()}",
        f"resume with: {shlex.join(['xdl-ec', *resume])}",
    ]


def without_flag(argv: List[str], flag: str) -> List[str]:
    """``argv`` without ``flag`` and its value (``--flag V`` and ``--flag=V`` alike)."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == flag:
            skip = True
        elif not token.startswith(flag + "="):
            out.append(token)
    return out
