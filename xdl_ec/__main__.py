"""``python -m xdl_ec``: the ``xdl-ec`` command line."""

import sys

from xdl_ec.cli import main

sys.exit(main())
