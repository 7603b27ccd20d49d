"""One log format for every Synapse process: time, process role, level, logger, message."""

from __future__ import annotations

import logging
import sys


def configure_logging(level: str, role: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
