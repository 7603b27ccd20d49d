"""`python -m worker_image`: a GPU worker (Triton and its agent), as its image runs it."""

from __future__ import annotations

import asyncio

from contract.logs import configure_logging
from contract.settings import Settings
from worker_image.agent import run_worker


def main() -> None:
    settings = Settings.from_env()
    configure_logging(settings.log_level, "worker")
    asyncio.run(run_worker(settings))


if __name__ == "__main__":
    main()
