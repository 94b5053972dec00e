"""TensorFlow's start-up lines, quieted: importing TensorFlow prints absl's "All log messages before
absl::InitializeLog() ..." warning and INFO lines (oneDNN's "custom operations are on", cpu_feature_guard) straight to
file descriptor 2, once per native library, whatever ``TF_CPP_MIN_LOG_LEVEL`` says. :func:`quiet_tensorflow_startup`
(called when ``xdl_ec`` is imported) sets ``TF_CPP_MIN_LOG_LEVEL`` to 1 unless the user set it (TF's own INFO lines are
then dropped, its warnings kept), and makes the process's first ``import tensorflow`` drop the start-up lines below
that level from its stderr; every other line it printed is written back, in order. ``TF_CPP_MIN_LOG_LEVEL=0`` keeps
them all."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

#: the level set when the user set none: TF's INFO lines dropped, its warnings and errors kept
DEFAULT_LEVEL = "1"
ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# absl's line head: severity letter, MMDD, the time (before InitializeLog its seconds run on: 00:00:1795836749.2),
# thread id, file:line]
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ \S+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def tensorflow_log_level() -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as TF reads it (0 when unset or not a number)."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def is_startup_noise(line: str, level: int) -> bool:
    """True for a line TensorFlow's import prints below ``level`` (absl's preamble counts as INFO)."""
    if level < 1:
        return False
    if line.startswith(ABSL_PREAMBLE):
        return True
    head = _ABSL_LINE.match(line)
    return head is not None and _SEVERITY[head.group(1)] < level


@contextmanager
def stderr_filtered(drop: Callable[[str], bool]) -> Iterator[None]:
    """Runs the block with file descriptor 2 captured (native libraries write there, not to ``sys.stderr``), then
    writes back every captured line ``drop`` does not reject. Without a usable descriptor 2, runs it as is."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not drop(line))
            if kept:
                os.write(2, kept.encode("utf-8"))


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, its ``exec_module`` (the whole import) under :func:`stderr_filtered`; the finder that
    made it leaves ``sys.meta_path`` then (only the first import prints the start-up lines)."""

    def __init__(self, loader: importlib.abc.Loader, finder: "_FirstTensorflowImport") -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        level = tensorflow_log_level()
        with stderr_filtered(lambda line: is_startup_noise(line, level)):
            self.loader.exec_module(module)


class _FirstTensorflowImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` through the other finders and wraps its loader (a spec asked for without an import, as
    ``importlib.util.find_spec`` does, leaves the finder in place for the import that follows)."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != "tensorflow":
            return None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietLoader(spec.loader, self)
                return spec
        return None


def quiet_tensorflow_startup() -> None:
    """Sets ``TF_CPP_MIN_LOG_LEVEL`` unless the user did, and quiets the start-up lines of TensorFlow's first import
    in this process (nothing to do when it is imported already)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LEVEL)
    if "tensorflow" in sys.modules or tensorflow_log_level() < 1:
        return
    if not any(isinstance(finder, _FirstTensorflowImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FirstTensorflowImport())
