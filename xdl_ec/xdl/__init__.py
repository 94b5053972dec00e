"""XDL-shaped API for scripts ported from Alibaba's XDL: ``xdl_ec.embedding``, XDL's optimizer and initializer
names, layers, losses, ``tf_wrapper`` and ``xdl_job`` (see :mod:`xdl_ec.xdl.api`)."""

from .api import *  # noqa: F401,F403 - the port's names, listed in api.__all__
from .api import __all__, missing  # noqa: F401
