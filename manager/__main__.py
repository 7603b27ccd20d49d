"""`python -m manager`: the workload manager process, as its image runs it."""

from __future__ import annotations

import asyncio

from contract.logs import configure_logging
from contract.settings import Settings
from manager.service import run_manager


def main() -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, "manager")
    asyncio.run(run_manager(settings))


if __name__ == "__main__":
    main()
