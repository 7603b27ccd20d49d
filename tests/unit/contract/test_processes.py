"""Children die with their parent however it dies, start without a `preexec_fn`, and stop with their group."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract.processes import (
    alive,
    processes_with_env,
    terminate,
    wait_gone,
    with_parent_death_signal,
)
from contract.settings import Settings
from manager.providers import local
from tests.processes import REPO

# A parent that starts `sleep` through the exec wrapper, prints the child's pid, and waits to be killed.
PARENT = """
import subprocess, sys, time
from contract.processes import with_parent_death_signal
child = subprocess.Popen(with_parent_death_signal(["sleep", "120"], own_group=sys.argv[1] == "group"))
print(child.pid, flush=True)
time.sleep(120)
"""


def wait_for(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def kill_quietly(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def parent_and_child() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A parent process and the `sleep` it started through the wrapper; neither outlives the test."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, "-"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = 0
    try:
        child = int(parent.stdout.readline())
        yield parent, child
    finally:
        kill_quietly(parent.pid, *([child] if child else []))
        parent.wait()


def test_a_child_started_through_the_wrapper_dies_when_its_parent_is_killed_with_9(parent_and_child):
    parent, child = parent_and_child
    assert wait_for(lambda: "sleep" in Path(f"/proc/{child}/cmdline").read_text(), 5), "the wrapper execs"
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_for(lambda: not alive(child), 5), "the child outlived its parent"


def test_a_child_whose_parent_is_already_gone_never_runs(tmp_path: Path):
    # Wrapper argv built here names this process as the parent; a different process runs it.
    marker = tmp_path / "ran"
    argv = with_parent_death_signal(["touch", str(marker)])
    grandparent = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", *argv],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert grandparent.returncode == 1
    assert "has already exited" in grandparent.stderr
    assert not marker.exists()


def test_the_wrapper_runs_the_binary_with_its_arguments_and_can_give_it_its_own_group(tmp_path: Path):
    out = subprocess.run(
        with_parent_death_signal(["sh", "-c", 'echo "$0 $1 $$ $(ps -o pgid= -p $$)"', "a b", "c"],
                                 own_group=True),
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    assert out[:3] == ["a", "b", "c"]
    assert out[3] == out[4], "the child leads its own process group"


async def test_terminate_takes_the_group_along_even_a_grandchild_that_ignores_sigterm(tmp_path: Path):
    # Triton's Python-backend stub ignores SIGTERM, and Triton may leave it behind when it stops.
    script = textwrap.dedent("""
        import signal, subprocess, sys
        stub = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"],
            stdout=subprocess.DEVNULL)
        print(stub.pid, flush=True)
        signal.sigwait([signal.SIGTERM])
    """)
    argv = with_parent_death_signal([sys.executable, "-c", script], own_group=True)
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    stub = int(await process.stdout.readline())
    try:
        await terminate(process, 10, name="triton-like")
        assert process.returncode == -signal.SIGTERM, "it stopped in time: no SIGKILL was needed"
        assert not await wait_gone([stub], 5), "the stub outlived its Triton"
    finally:
        kill_quietly(process.pid, stub)


async def test_terminate_kills_what_does_not_stop_in_time():
    argv = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print(flush=True); time.sleep(120)"]  # fmt: skip
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    await process.stdout.readline()
    began = time.monotonic()
    try:
        await terminate(process, 0.5, name="stubborn")
    finally:
        kill_quietly(process.pid)
    assert process.returncode == -signal.SIGKILL
    assert time.monotonic() - began < 5


def test_processes_are_found_by_their_environment():
    marker = f"processes-test-{os.getpid()}-{time.time_ns()}"
    child = subprocess.Popen(["sleep", "60"], env={**os.environ, "SYNAPSE_TEST_MARKER": marker})
    try:
        assert wait_for(lambda: processes_with_env({"SYNAPSE_TEST_MARKER": marker}) == [child.pid], 5)
        assert processes_with_env({"SYNAPSE_TEST_MARKER": marker, "OTHER": "x"}) == []
    finally:
        child.kill()
        child.wait()
    assert not alive(child.pid)


class _SpawnedError(Exception):
    """Stops the provider once the spawn call was seen."""


async def test_the_local_provider_spawns_workers_without_preexec_fn_and_arms_the_parent_death_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    seen_argv: list[str] = []
    seen_options: dict[str, object] = {}

    async def spawn(*argv: str, **options: object) -> asyncio.subprocess.Process:
        seen_argv.extend(argv)
        seen_options.update(options)
        raise _SpawnedError

    monkeypatch.setattr(local.asyncio, "create_subprocess_exec", spawn)
    provider = local.LocalProvider(Settings(state_dir=tmp_path))
    with pytest.raises(_SpawnedError):
        await provider.set_desired(1)
    assert "preexec_fn" not in seen_options, "a preexec_fn forks while gRPC threads run: workers crash"
    wrapper = seen_argv.index("-c")
    assert seen_argv[wrapper + 2] == str(os.getpid()), "the wrapper checks its parent is the manager"
    assert seen_argv[-3:] == [sys.executable, "-m", "worker_image"]


async def test_a_worker_that_dies_at_start_is_logged_with_its_exit_and_the_end_of_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    real_spawn = asyncio.create_subprocess_exec
    crash = "import os, sys; print('cygrpc: epoll_wait error', flush=True); os.kill(os.getpid(), 11)"

    async def spawn(*argv: str, **options: object) -> asyncio.subprocess.Process:
        return await real_spawn(sys.executable, "-c", crash, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(local.asyncio, "create_subprocess_exec", spawn)
    provider = local.LocalProvider(Settings(state_dir=tmp_path))
    with caplog.at_level(logging.ERROR, logger=local.__name__):
        await provider.set_desired(1)
        watcher = provider._workers[0].watcher
        assert watcher is not None
        await asyncio.wait_for(watcher, 30)
    message = "\n".join(record.getMessage() for record in caplog.records)
    assert "on signal SIGSEGV" in message
    assert "cygrpc: epoll_wait error" in message


async def test_a_worker_asked_to_stop_is_not_reported_as_a_failed_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    real_spawn = asyncio.create_subprocess_exec

    async def spawn(*argv: str, **options: object) -> asyncio.subprocess.Process:
        return await real_spawn("sleep", "60", **options)  # type: ignore[arg-type]

    monkeypatch.setattr(local.asyncio, "create_subprocess_exec", spawn)
    provider = local.LocalProvider(Settings(state_dir=tmp_path))
    with caplog.at_level(logging.ERROR, logger=local.__name__):
        await provider.set_desired(1)
        worker = provider._workers[0]
        await provider.aclose()
        assert worker.watcher is not None
        await asyncio.wait_for(worker.watcher, 30)
    assert worker.process.returncode == -signal.SIGTERM
    assert not caplog.records
