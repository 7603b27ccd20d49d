"""Stopping a child process the way every Synapse process expects: SIGTERM, a grace period, then kill."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGTERM when its parent dies, however the parent dies.

    Workers die with the manager that started them, and Triton with its agent, so a kill -9 upstream
    leaves no orphan serving (or holding ports and shared memory) behind.
    """
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


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
