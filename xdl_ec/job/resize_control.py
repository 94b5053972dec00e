"""Resizing a running ``xdl-ec train`` from outside it: ``xdl-ec resize --run DIR N [--drain I] [--code K,R]``.

The training process, given ``--run-dir DIR``, writes its pid to ``DIR/train.pid`` and resizes on SIGUSR1: it reads
the request ``DIR/resize.request`` ({"id", "servers", "drain": [ids], "code": [k, r] or null}), resizes its job's
servers at the next step boundary (:meth:`xdl_ec.job.job.Job.resize`, on a thread of its own: a signal handler
must not wait) and writes the answer ``DIR/resize.answer`` ({"id", "record"} or {"id", "error"}). ``xdl-ec resize``
writes the request, signals the pid and waits for the answer of its id. Files are written whole (a temporary file
renamed over), so neither side reads half of one.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

PID_FILE = "train.pid"
REQUEST_FILE = "resize.request"
ANSWER_FILE = "resize.answer"
STARTUP_WAIT = 300.0  # seconds a resize asked while the run's cluster starts waits for it


def _write_whole(path: Path, value: Dict[str, Any]) -> None:
    part = path.with_name(path.name + f".{os.getpid()}.part")
    part.write_text(json.dumps(value) + "\n", encoding="utf-8")
    os.replace(part, path)


class ResizeControl:
    """The training side: ``start`` (pid file, SIGUSR1 handler) before the fit, ``stop`` after it. ``job``: what
    :meth:`~xdl_ec.job.job.Job.resize` is called on."""

    def __init__(self, directory: Union[str, os.PathLike], job: Any) -> None:
        self.directory = Path(directory)
        self.job = job
        self._previous: Any = None
        self._threads: list = []
        self._stopped = threading.Event()

    def start(self) -> None:
        """Writes the pid file and takes SIGUSR1 (the main thread's: where signal handlers are set)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / PID_FILE).write_text(f"{os.getpid()}\n", encoding="utf-8")
        self._previous = signal.signal(signal.SIGUSR1, self._signalled)

    def stop(self) -> None:
        """Restores SIGUSR1 and removes the pid file (a later ``xdl-ec resize`` then says the run is not there)."""
        self._stopped.set()
        if self._previous is not None:
            signal.signal(signal.SIGUSR1, self._previous)
            self._previous = None
        try:
            (self.directory / PID_FILE).unlink()
        except FileNotFoundError:
            pass
        for thread in self._threads:
            thread.join(10.0)

    def _signalled(self, signum: int, frame: Any) -> None:
        thread = threading.Thread(target=self._serve, name="xdl-ec-resize", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        request_id: Any = None
        try:
            request = json.loads((self.directory / REQUEST_FILE).read_text(encoding="utf-8"))
            request_id = request.get("id")
            deadline = time.monotonic() + STARTUP_WAIT
            while not self.job.resizable and not self._stopped.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)  # asked while the cluster starts: the resize waits for it
            drain = [int(i) for i in request.get("drain", [])]
            code = request.get("code")
            record = self.job.resize(int(request["servers"]), drain or None, code=None if code is None else tuple(code))
            answer: Dict[str, Any] = {"id": request_id, "record": record}
        except Exception as err:  # noqa: BLE001 - every refusal or failure is the asker's answer
            answer = {"id": request_id, "error": f"{type(err).__name__}: {err}"}
        _write_whole(self.directory / ANSWER_FILE, answer)


def ask_resize(
    directory: Union[str, os.PathLike],
    servers: int,
    timeout: float = 600.0,
    drain: Sequence[int] = (),
    code: Optional[Tuple[int, int]] = None,
) -> Dict[str, Any]:
    """Asks the run training with ``--run-dir directory`` to resize to ``servers``, first removing the servers of
    ids ``drain``, its stripes re-formed with ``code`` (None: kept), and waits for its answer: the resize's
    record. ValueError when no run is there, RuntimeError with the run's refusal or failure, TimeoutError after
    ``timeout`` seconds."""
    root = Path(directory)
    try:
        pid = int((root / PID_FILE).read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        raise ValueError(f"--run {root}: no training run there (no {PID_FILE}; train with --run-dir {root})") from None
    request_id = secrets.token_hex(8)
    request = {
        "id": request_id,
        "servers": int(servers),
        "drain": [int(i) for i in drain],
        "code": None if code is None else [int(x) for x in code],
    }
    _write_whole(root / REQUEST_FILE, request)
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise ValueError(f"--run {root}: the run (pid {pid}) is gone") from None
    deadline = time.monotonic() + timeout
    answer: Optional[Dict[str, Any]] = None
    while time.monotonic() < deadline:
        try:
            answer = json.loads((root / ANSWER_FILE).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            answer = None
        if answer is not None and answer.get("id") == request_id:
            break
        answer = None
        time.sleep(0.05)
    if answer is None:
        raise TimeoutError(f"--run {root}: no answer to the resize within {timeout:g} s")
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return dict(answer["record"])
