"""TensorFlow's start-up lines: which lines are dropped at which TF_CPP_MIN_LOG_LEVEL, and the descriptor-level filter
that writes every other line back."""

from __future__ import annotations

import os
import subprocess
import sys

from xdl_ec.tf.startup_log import ABSL_PREAMBLE, is_startup_noise

ONEDNN = (
    "I0000 00:00:1795836470.903399    7516 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results"
)
WARNING = "W0000 00:00:1795836470.903399    7516 cuda.cc:10] a warning\n"


def test_lines_below_the_level_are_noise() -> None:
    assert is_startup_noise(ABSL_PREAMBLE + "\n", 1) and is_startup_noise(ONEDNN, 1)
    assert not is_startup_noise(WARNING, 1) and is_startup_noise(WARNING, 2)
    assert not is_startup_noise(ONEDNN, 0) and not is_startup_noise(ABSL_PREAMBLE, 0)
    assert not is_startup_noise("Traceback (most recent call last):\n", 3)


def test_the_filter_drops_noise_written_to_the_descriptor_and_keeps_the_rest() -> None:
    code = (
        "import os, sys\n"
        "from xdl_ec.tf.startup_log import is_startup_noise, stderr_filtered\n"
        "with stderr_filtered(lambda line: is_startup_noise(line, 1)):\n"
        f"    os.write(2, {(ABSL_PREAMBLE + chr(10) + ONEDNN + chr(10) + WARNING).encode()!r})\n"
        "    print('from python', file=sys.stderr)\n"
        "print('after', file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [WARNING.strip(), "from python", "after"]


def test_tensorflows_first_import_after_import_xdl_ec_prints_nothing() -> None:
    """Even when something looked tensorflow up first (importlib.util.find_spec, as libraries probing for it do)."""
    code = (
        "import importlib.util, sys\n"
        "import xdl_ec\n"
        "assert importlib.util.find_spec('tensorflow') is not None\n"
        "import tensorflow as tf\n"
        "print(float(tf.reduce_sum(tf.constant([1.0, 2.0]))))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("3.0\n", "")
