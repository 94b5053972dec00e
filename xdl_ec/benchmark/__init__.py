"""``xdl-ec bench``: the none / ckpt / cpr / ec comparison through injected failures.

:mod:`~xdl_ec.benchmark.runner` runs the matrix, :mod:`~xdl_ec.benchmark.table` writes results.json and the Markdown
table, :mod:`~xdl_ec.benchmark.plots` the PNG charts."""

from xdl_ec.benchmark.runner import MATRIX, PRESETS, BenchConfig, Variant, run_bench

__all__ = ["MATRIX", "PRESETS", "BenchConfig", "Variant", "run_bench"]
