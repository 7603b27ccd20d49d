"""Child processes every Synapse process starts the same way: they die with their parent, and stop with
SIGTERM, a grace period, then SIGKILL for them and their process group.

Children are spawned without a `preexec_fn`: a `fork()` that runs Python in the child while gRPC (or any)
threads run in the parent can crash the child (the manager lost 3 workers in 28 spawns). Without one,
subprocess uses vfork-exec, and the parent-death signal is armed by `with_parent_death_signal`'s tiny exec
wrapper instead, which works for Python entry points and binaries (Triton, Redis, Prometheus) alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from contract.time_limit import within

log = logging.getLogger(__name__)


PROC = Path("/proc")

# Run as `python -I -S -c EXEC_WITH_PARENT <parent pid> <signal> <group|-> <binary> <args...>`. The
# parent-death signal survives execve (not into set-user-ID binaries); checking the parent right after
# arming it closes the race where the parent died before the child could arm it.
EXEC_WITH_PARENT = """\
import ctypes, os, sys
parent, signum, group, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "group", sys.argv[4:]
ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
if os.getppid() != parent:
    sys.exit(f"{argv[0]}: not started, its parent (pid {parent}) has already exited")
if group and os.getpgid(0) != os.getpid():
    os.setpgid(0, 0)
os.execv(argv[0], argv)
"""


def with_parent_death_signal(
    argv: Sequence[str], *, own_group: bool = False, signum: int = signal.SIGTERM
) -> list[str]:
    """`argv` run so that it gets `signum` when this process dies, however it dies (kill -9 included).

    `own_group` makes it lead a process group, so stopping it can take its own children too (Triton's
    Python-backend stubs ignore SIGTERM). A missing binary makes the child exit with code 1. Spawn it
    from a thread that lives as long as the process (the event loop's): the kernel sends the signal
    when the spawning thread exits.
    """
    binary = shutil.which(argv[0]) or argv[0]
    mode = "group" if own_group else "-"
    return [sys.executable, "-I", "-S", "-c", EXEC_WITH_PARENT, str(os.getpid()), str(int(signum)), mode,
            binary, *argv[1:]]  # fmt: skip


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def kill(process: asyncio.subprocess.Process) -> None:
    """SIGKILL at once, which ends even a stopped process, with its group if it leads one (its stubs);
    a process that already exited is only reaped."""
    if process.returncode is None:
        if _leads_group(process.pid):
            _kill_group(process.pid)
        else:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    await process.wait()


async def terminate(process: asyncio.subprocess.Process, timeout_s: float, *, name: str) -> None:
    """SIGTERM lets the process drain; after timeout_s it is killed.

    A process that leads its own group takes the group with it, even when it exits in time: what it
    started (Triton's stubs) must not outlive it as orphans.
    """
    if process.returncode is not None:
        return
    group = _leads_group(process.pid)
    process.send_signal(signal.SIGTERM)
    try:
        await within(timeout_s, process.wait())
    except TimeoutError:
        log.warning("%s did not stop in %.0f s; killing it", name, timeout_s)
        process.kill()
        await process.wait()
    if group:
        _kill_group(process.pid)


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie does not: nobody may reap orphans where pid 1 is not an init)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def parent_of(pid: int) -> int:
    try:
        return int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def processes_with_env(variables: Mapping[str, str]) -> list[int]:
    """Live processes of this user whose environment holds every one of `variables` (not this one)."""
    wanted = [f"{name}={value}".encode() for name, value in variables.items()]
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:  # gone, or another user's
            continue
        if all(item in environ for item in wanted) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


async def wait_gone(pids: Sequence[int], timeout_s: float) -> list[int]:
    """Waits up to timeout_s for pids (not our children) to exit; returns those still running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    left = [pid for pid in pids if alive(pid)]
    while left and loop.time() < deadline:
        await asyncio.sleep(0.1)
        left = [pid for pid in left if alive(pid)]
    return left
