"""RunHead: the Ray head of a run started with ``--run-dir DIR`` on Ray, which outlives the driver for the run's grace
and no longer (docs/design/reattach.md).

The driver starts a supervisor (this file run as a script: standard library only, so it starts fast and needs
nothing of the package) in a session of its own. The supervisor runs ``ray start --head --block`` on a free port,
writes ``DIR/ray-head.json`` once the head answers, and watches the driver's heartbeat (``DIR/heartbeat.json``, its
mtime; :mod:`xdl_ec.ps.run_heartbeat` writes it, with the grace and the driver's pid): when no heartbeat came for
the grace and the driver's process is gone (a live driver is late, not dead: the supervisor runs on its machine),
or the head died, or ``DIR/ray-head.stop`` appears (a clean end), it SIGKILLs every process of its session - the
head, the raylet, every actor (Ray's workers change their process group, not their session) - removes
``ray-head.json`` and exits. So nothing of a dead run outlives its grace.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HEAD_FILE = "ray-head.json"  # the address of the run's head and the supervisor's pid, written once it answers
STOP_FILE = "ray-head.stop"  # a clean end asks the supervisor to end the head
HEARTBEAT_FILE = "heartbeat.json"  # the driver's (xdl_ec.ps.run_heartbeat)
LOG_FILE = "ray-head.log"
START_TIMEOUT = 180.0  # seconds a head may take to start on a loaded machine
POLL_SECONDS = 0.25


class RunHeadError(RuntimeError):
    """The run's Ray head could not be started or found."""


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) not in (None, "Z")


def _state(pid: int) -> Optional[str]:
    """The process's state letter (Z: a zombie), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()[0]


def session_members(sid: int) -> List[int]:
    """Pids of this machine's live processes in session ``sid`` (zombies left out: they run nothing)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session
            pids.append(int(entry))
    return pids


def read_head(directory: Path) -> Optional[Dict[str, Any]]:
    """The live head recorded in ``directory`` ({"address", "supervisor", "session"}), None when there is none
    (never started, ended, or its supervisor is gone)."""
    try:
        record = json.loads((directory / HEAD_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not process_alive(int(record.get("supervisor", 0))):
        return None
    return record


def start_head(directory: Path, grace: float) -> Dict[str, Any]:
    """Starts the supervisor of a new head for the run in ``directory`` (in its own session, not this process's
    child once started) and waits until the head answers; its record ({"address", "supervisor", "session"})."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (HEAD_FILE, STOP_FILE):
        (directory / name).unlink(missing_ok=True)
    log = open(directory / LOG_FILE, "ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), str(directory), "--grace", repr(float(grace))],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "token")),
        )
    finally:
        log.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        record = read_head(directory)
        if record is not None and record.get("supervisor") == proc.pid:
            return record
        if proc.poll() is not None:
            raise RunHeadError(
                f"the run's Ray head did not start (its supervisor exited with {proc.returncode}); see "
                f"{directory / LOG_FILE}"
            )
        time.sleep(POLL_SECONDS)
    stop_head(directory, {"supervisor": proc.pid, "session": proc.pid})
    raise RunHeadError(f"the run's Ray head did not answer within {START_TIMEOUT:g} s; see {directory / LOG_FILE}")


def stop_head(directory: Path, record: Dict[str, Any], timeout: float = 30.0) -> None:
    """Ends the run's head (a clean end): asks its supervisor, then kills its session itself if it has not."""
    (directory / STOP_FILE).touch()
    deadline = time.monotonic() + timeout
    while process_alive(int(record["supervisor"])) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    _kill_session(int(record["session"]))
    forget_current_cluster(str(record["address"]))
    (directory / HEAD_FILE).unlink(missing_ok=True)


def forget_current_cluster(address: str) -> None:
    """``ray start`` names its head in Ray's ``ray_current_cluster`` file, where a later ``ray.init()`` of this
    machine looks for a cluster to join: once the run's head is ended, the file no longer names it (else that
    ``ray.init`` fails, joining a dead cluster). A file naming another cluster is left alone."""
    try:
        from ray._common.utils import get_ray_address_file  # Ray's own, untyped

        path = Path(get_ray_address_file(None))
    except ImportError:  # another Ray layout: its default place
        path = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    port = address.rsplit(":", 1)[-1]
    try:
        if path.read_text().strip().rsplit(":", 1)[-1] == port:
            path.unlink()
    except OSError:
        pass  # none, or another process's to manage


def _kill_session(sid: int) -> None:
    for _ in range(50):  # processes may fork while we kill: repeat until none is left
        members = [p for p in session_members(sid) if p != os.getpid()]
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _heartbeat(directory: Path, grace: float) -> tuple:
    """(mtime of the driver's last heartbeat or None, the grace it asks for, the driver's pid or 0)."""
    path = directory / HEARTBEAT_FILE
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None, grace, 0
    pid = 0
    try:
        record = json.loads(path.read_text().strip("\0 \n") or "{}")
        grace, pid = float(record.get("grace", grace)), int(record.get("pid", 0))
    except (OSError, ValueError):
        pass  # being rewritten: its mtime is what counts
    return mtime, grace, pid


def supervise(directory: Path, grace: float) -> int:
    """The supervisor's life: start the head, record it, end the session when the run is over (module docstring)."""
    ray = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    port = _free_port()
    head = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--num-cpus={os.cpu_count() or 1}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.time()
    assert head.stdout is not None
    for line in head.stdout:  # the head says when it runs
        sys.stdout.write(line)
        if "Ray runtime started" in line:
            break
    else:
        print(f"ray start exited ({head.wait()}) before the runtime started", flush=True)
        _kill_session(os.getsid(0))
        return 1
    sys.stdout.flush()
    threading.Thread(target=_copy_lines, args=(head.stdout,), daemon=True).start()  # never a full pipe
    record = {"address": f"127.0.0.1:{port}", "supervisor": os.getpid(), "session": os.getsid(0), "started": started}
    tmp = directory / (HEAD_FILE + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, directory / HEAD_FILE)
    why = ""
    while not why:
        time.sleep(POLL_SECONDS)
        beat, grace, driver = _heartbeat(directory, grace)
        last = max(beat or 0.0, started)
        if head.poll() is not None:
            why = f"the head exited ({head.returncode})"
        elif (directory / STOP_FILE).exists():
            why = "the run ended"
        elif time.time() - last > grace and not (driver and process_alive(driver)):
            # a driver still running (this machine's: it started this supervisor) is late, not dead: a loaded
            # machine can hold its heartbeat thread for seconds, and its run must not be ended under it
            why = f"no driver heartbeat for {time.time() - last:.1f} s (grace {grace:g} s) and its driver is gone"
    print(f"{time.strftime('%H:%M:%S')} ending the run's Ray head: {why}", flush=True)
    (directory / HEAD_FILE).unlink(missing_ok=True)
    (directory / STOP_FILE).unlink(missing_ok=True)
    forget_current_cluster(str(record["address"]))  # before the session's end, which ends this process too
    _kill_session(os.getsid(0))
    return 0


def _copy_lines(stream: Any) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="supervises the Ray head of an xdl-ec run (xdl_ec.ps.run_head)")
    parser.add_argument("directory")
    parser.add_argument("--grace", type=float, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ended by its heartbeat rule or a stop file, never half-way
    return supervise(Path(args.directory), args.grace)


if __name__ == "__main__":
    sys.exit(main())
