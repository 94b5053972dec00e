"""The line of the user's script an error came from: the innermost frame outside xdl_ec and the libraries it runs
on (TensorFlow, Keras, numpy, the standard library, anything installed), so that an error names the user's file and
line rather than the port's."""

from __future__ import annotations

import os
import sysconfig
import traceback
from typing import Iterable, Optional

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the xdl_ec package
_LIBRARIES = tuple(
    os.path.abspath(path) + os.sep
    for path in {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def is_users(filename: str) -> bool:
    """Whether ``filename`` is the user's code: not xdl_ec's, not the standard library's or an installed package's,
    not generated (``<string>``)."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_HERE) and not path.startswith(_LIBRARIES)


def users_line(frames: Iterable[traceback.FrameSummary]) -> Optional[str]:
    """``file:line`` of the last of ``frames`` (outermost first) in the user's code, or None."""
    found = None
    for frame in frames:
        if is_users(frame.filename):
            found = f"{frame.filename}:{frame.lineno}"
    return found


def calling_line() -> Optional[str]:
    """``file:line`` of the innermost frame of the running stack in the user's code, or None."""
    return users_line(traceback.extract_stack())
