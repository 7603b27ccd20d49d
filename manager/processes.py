"""Stopping a child process the way every Synapse process expects: SIGTERM, a grace period, then kill."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

log = logging.getLogger(__name__)


async def terminate(
    process: asyncio.subprocess.Process, timeout_s: float, *, name: str, group: bool = False
) -> None:
    """SIGTERM lets the process drain; after timeout_s it is killed (with its process group if `group`)."""
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        log.warning("%s did not stop in %.0f s; killing it", name, timeout_s)
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        await process.wait()
