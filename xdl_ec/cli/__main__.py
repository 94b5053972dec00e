"""``python -m xdl_ec.cli``: the ``xdl-ec`` command line."""

import sys

from xdl_ec.cli.command_line import main

sys.exit(main())
