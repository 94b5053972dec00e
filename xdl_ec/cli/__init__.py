"""The ``xdl-ec`` command line, a module per command (train, verify, bench, export, resize) beside the shared parts
(the parser base, the flags made from configs, signal handling). User errors (missing file, bad flag value,
malformed data) print one line on stderr and exit with status 2, without a traceback."""

from xdl_ec.cli.command_line import build_parser, main

__all__ = ["build_parser", "main"]
