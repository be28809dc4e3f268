"""The control plane's options: one frozen dataclass, and the argparse parser that fills it.

Every option comes from a flag, a ``CACHEROUTE_<NAME>`` environment variable or ``--config FILE``
(declared once in ``OPTIONS``, see :mod:`servekit.options`); ``python -m controlplane --help``
lists them all.

A package in one room (``controlplane.config``): the settings dataclass (:mod:`.settings`), the
declared options (:mod:`.declared`) and the parser that fills one from the other (:mod:`.parse`).
"""

from controlplane.config.parse import build_parser, parse_config
from controlplane.config.settings import ControlPlaneConfig

__all__ = ["ControlPlaneConfig", "build_parser", "parse_config"]
