"""Serving a SavedModel the way a serving process would: in a fresh interpreter with TensorFlow alone."""

from __future__ import annotations

import textwrap

#: the start of a serving script: importing xdl_ec fails (it is installed in site-packages here), so a SavedModel
#: that needed it would not load; then numpy and TensorFlow are imported
PLAIN_TF = textwrap.dedent("""
    import importlib.abc, sys

    class NoXdlEc(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "xdl_ec":
                raise ImportError("the serving process must not import " + name)
            return None

    sys.meta_path.insert(0, NoXdlEc())
    import numpy as np
    import tensorflow as tf
""")
