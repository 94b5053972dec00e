"""``python -m xdl_ec``: the ``xdl-ec`` command line."""

import sys

from .cli import main

sys.exit(main())
