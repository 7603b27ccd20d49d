"""What a Triton killed with its agent leaves behind is cleaned up at the next start: its Python-backend
stubs (Triton's children, with no parent-death signal of their own) and their shared memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from worker_image.triton_server import SHM_REGION_PREFIX, STUB, reap_orphaned_stubs

SLEEP = "import time; time.sleep(60)"


def a_dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def stub(path: Path, owner: int) -> subprocess.Popen[bytes]:
    """A process that looks like a stub: the stub's name, its agent's region prefix among its arguments."""
    process = subprocess.Popen([str(path), "-c", SLEEP, f"{SHM_REGION_PREFIX}{owner}_region"])
    deadline = time.monotonic() + 10
    while SHM_REGION_PREFIX.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the stand-in stub did not start"
        time.sleep(0.01)
    return process


def test_a_stub_whose_agent_died_is_killed_and_one_whose_agent_lives_is_kept(tmp_path: Path):
    fake = tmp_path / STUB
    fake.symlink_to(os.path.realpath(sys.executable))
    orphan = stub(fake, a_dead_pid())
    live = stub(fake, os.getpid())
    try:
        reaped = reap_orphaned_stubs()
        assert orphan.pid in reaped
        assert live.pid not in reaped
        assert orphan.wait(10) == -9
        assert live.poll() is None
    finally:
        for process in (orphan, live):
            process.kill()
            process.wait()
