"""Starting and stopping the platform's real processes on free loopback ports, for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own session, its output in a log file that a failing test can show."""
    handle = log.open("ab")
    return subprocess.Popen(
        argv,
        env={**os.environ, **env},
        stdout=handle,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )


def synapse(*args: str) -> list[str]:
    return [sys.executable, "-m", "local_stack.cli", *args]


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log else ""
            raise RuntimeError(f"{what}: process exited with {proc.returncode}\n{tail}")
        time.sleep(0.1)
    tail = log.read_text()[-3000:] if log else ""
    raise TimeoutError(f"{what} not ready after {timeout_s} s\n{tail}")


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def session_members(session: int) -> list[int]:
    """Every process in the session (a child started by `start` leads its own)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3]) == session
            ):
                members.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return members


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the process and everything in its session: a worker takes its Triton (which leads a
    process group of its own) and Triton's Python-backend stubs with it."""
    for pid in session_members(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
