"""The parser base of ``xdl-ec``: argparse's errors as one line, the user error every command raises, and the exit
statuses they map to."""

from __future__ import annotations

import argparse
from typing import NoReturn

EXIT_USAGE = 2
EXIT_FAILURE = 1  # the run itself failed (e.g. a parameter server was lost)


class UsageError(Exception):
    """A user error: reported as one line on stderr with exit status 2."""


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse's errors without its usage block: the error, then one line pointing at --help (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for every flag\n")
