"""Nothing stuck: `kill -9` of `synapse up` leaves no process and no shared memory behind, and stopping
it stops every worker registered in its Redis, those it did not start too."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from contract.keys import worker_key
from contract.processes import alive, parent_of, processes_with_env
from tests.processes import REPO, free_port, start, synapse, wait_until
from worker_image.triton_server import SHM_DIR, remove_stale_regions, shm_region_prefix

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# A stack whose launcher was killed stops within this: Triton and the workers drain on SIGTERM.
STOPPED_WITHIN_S = 20.0
MARKER = "SYNAPSE_LIFECYCLE_TEST_MARKER"


def up_env(tmp_path: Path) -> dict[str, str]:
    """`synapse up` on free ports with its state in tmp_path; every process of it carries a marker."""
    ports = {name: free_port() for name in ("api", "redis", "manager", "prom", "push", "exporter")}
    return {
        "SYNAPSE_API_PORT": str(ports["api"]),
        "SYNAPSE_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
        "SYNAPSE_METRICS_PORT": str(ports["manager"]),
        "SYNAPSE_PROMETHEUS_PORT": str(ports["prom"]),
        "SYNAPSE_PUSHGATEWAY_PORT": str(ports["push"]),
        "SYNAPSE_REDIS_EXPORTER_PORT": str(ports["exporter"]),
        "SYNAPSE_STATE_DIR": str(tmp_path / "state"),
        "SYNAPSE_MODEL_REPOSITORY": str(REPO / "triton_models"),
        "SYNAPSE_WORKER_MODELS": "gpu-sim",
        MARKER: f"lifecycle-{os.getpid()}-{time.time_ns()}",
    }


def descendants(root: int) -> dict[int, str]:
    """Every live process below root, by pid, with its command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(parent_of(int(entry.name)), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found[pid] = command_line(pid)
        todo += children.get(pid, [])
    return found


def running(pids: set[int]) -> list[int]:
    return sorted(pid for pid in pids if alive(pid))


def command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def kill_all(processes: dict[int, str]) -> None:
    """SIGKILL for each process still running the command line it had (not a reused pid)."""
    for pid, command in processes.items():
        if alive(pid) and command_line(pid) == command:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def now_running(*pids: int) -> dict[int, str]:
    return {pid: command_line(pid) for pid in pids}


@contextlib.contextmanager
def stack(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], dict[int, str]]]:
    """`synapse up`, once its first worker is READY, and its processes then; whatever of it is left at
    the end is killed (Redis rewrites its environment area, so the marker alone cannot find it)."""
    log = tmp_path / "up.log"
    up = start(synapse("up"), env, log)
    tracked: dict[int, str] = {}
    try:
        wait_until(lambda: "Synapse is up" in log.read_text(), 300, "synapse up", up, log)
        tracked.update(descendants(up.pid))
        yield up, tracked
    finally:
        marked = processes_with_env({MARKER: env[MARKER]})
        kill_all({**tracked, **descendants(up.pid), **now_running(up.pid, *marked)})
        up.wait()


def test_kill_9_of_up_leaves_no_process_and_no_shared_memory(tmp_path: Path):
    env = up_env(tmp_path)
    with stack(tmp_path, env) as (up, tracked):
        commands = " ".join(tracked.values())
        assert "tritonserver" in commands and "triton_python_backend_stub" in commands, commands
        agent = next(pid for pid, command in tracked.items() if "-m worker_image" in command)
        regions = {p.name for p in SHM_DIR.glob(f"{shm_region_prefix(agent)}*")}
        assert regions, "the worker's Triton names its shared memory after its agent"

        up.send_signal(signal.SIGKILL)
        up.wait()
        began = time.monotonic()
        while running(set(tracked)) and time.monotonic() - began < STOPPED_WITHIN_S:
            time.sleep(0.1)
        stopped_in = time.monotonic() - began
        leaked = set(running(set(tracked))) | set(processes_with_env({MARKER: env[MARKER]}))
        left = {p.name for p in SHM_DIR.glob(f"{shm_region_prefix(agent)}*")}
        remove_stale_regions()  # what the next `synapse up` does (or one in another test process)
        survivors = {p.name for p in SHM_DIR.glob(f"{shm_region_prefix(agent)}*")}
        print(
            f"FAULT-TALLY launcher-kill9: processes={len(tracked)} stopped_in={stopped_in:.1f}s "
            f"leaked={len(leaked)} shm_regions={len(regions)} shm_left_after_exit={len(left)} "
            f"shm_left_after_next_start={len(survivors)}"
        )
        assert not leaked, {pid: tracked.get(pid, "?") for pid in leaked}
        assert not survivors, "a stale region survives the next start"


def test_stopping_up_stops_a_worker_registered_in_its_redis_that_it_did_not_start(tmp_path: Path):
    env = up_env(tmp_path)
    with stack(tmp_path, env) as (up, _):
        password = (tmp_path / "state" / "redis.password").read_text().strip()
        worker_env = {
            **env,
            "SYNAPSE_REDIS_AUTH_TOKEN": password,
            "SYNAPSE_PUSHGATEWAY_URL": f"http://127.0.0.1:{env['SYNAPSE_PUSHGATEWAY_PORT']}",
            "SYNAPSE_WORKER_ID": "adopted-1",
            "SYNAPSE_TRITON_HTTP_PORT": str(free_port()),
            "SYNAPSE_TRITON_GRPC_PORT": str(free_port()),
            "SYNAPSE_TRITON_METRICS_PORT": str(free_port()),
        }
        worker_log = tmp_path / "adopted.log"
        # Started outside the stack, as a worker whose manager was killed and that a new one adopted.
        adopted = start(synapse("worker"), worker_env, worker_log)
        triton: dict[int, str] = {}
        try:
            client = redis.Redis.from_url(env["SYNAPSE_REDIS_URL"], password=password, decode_responses=True)
            wait_until(lambda: client.hget(worker_key("adopted-1"), "state") == "READY", 300,
                       "adopted worker", adopted, worker_log)  # fmt: skip
            triton.update(descendants(adopted.pid))
            up.send_signal(signal.SIGINT)
            assert up.wait(150) == 0
            assert adopted.wait(10) == 0, "it drained on SIGTERM"
            wait_until(lambda: not running(set(triton)), 10, "the adopted worker's Triton to exit")
        finally:
            kill_all({**triton, **descendants(adopted.pid), **now_running(adopted.pid)})
            adopted.wait()
