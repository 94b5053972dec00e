"""A training run interrupted (SIGINT) right after it starts recovering lost servers: what the SIGINT tests of one
process and of Ray share."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Dict, List, Optional, Set, Tuple


def descendants(pid: int) -> Set[int]:
    """Every process below ``pid`` now (children, their children, ...)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: Dict[int, List[int]] = {}
    for line in out.split("\n"):
        if line.strip():
            child, parent = (int(x) for x in line.split())
            children.setdefault(parent, []).append(child)
    found: Set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def default_stop_signals() -> None:
    """In a child before it runs its command: SIGINT and SIGTERM as the kernel delivers them by default, whatever
    this process inherited (a runner that ignores SIGINT, e.g. a background job of a non-interactive shell, would
    pass the ignored disposition on, and the child would never see the signal the test sends)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def interrupt_when_recovering(
    cmd: List[str],
    env: Dict[str, str],
    cwd: Optional[str] = None,
    start_timeout: float = 240.0,
    before_interrupt: Optional[Callable[[int], None]] = None,
) -> Tuple[int, float, str, int]:
    """Runs ``cmd`` in a session of its own, sends SIGINT as soon as its stderr says "recovering", and returns
    (exit status, seconds from the SIGINT to the exit, the rest of stderr, the run's session id); ``before_interrupt``
    is called with the run's pid right before the SIGINT. Fails the calling test when no recovery starts; the whole
    session is killed if the run outlives the wait."""
    import pytest

    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + start_timeout
        for line in proc.stderr:  # the strategy's warning when a recovery starts
            if "recovering" in line:
                break
            assert time.monotonic() < deadline, "no recovery started"
        else:
            pytest.fail(f"the run ended without a recovery: {proc.wait()}")
        time.sleep(0.05)
        if before_interrupt is not None:
            before_interrupt(proc.pid)
        interrupted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=60)
        seconds = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return status, seconds, proc.stderr.read(), proc.pid
