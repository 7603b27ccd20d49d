"""Workers as processes on this machine: what `make up`, the tests and the benchmarks scale."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

from manager.providers import Capacity
from manager.settings import Settings

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 30.0


def _die_with_parent() -> None:
    """Runs in the child before exec: a worker must not outlive the manager that started it."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Worker:
    worker_id: str
    process: asyncio.subprocess.Process


class LocalProvider:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._workers: list[_Worker] = []
        self._stopping: set[asyncio.Task[None]] = set()
        self._serial = 0
        self._desired = 0
        self._log_dir = settings.state_dir / "logs"

    async def set_desired(self, count: int) -> None:
        self._desired = count
        self._workers = [w for w in self._workers if w.process.returncode is None]
        while len(self._workers) < count:
            self._workers.append(await self._start())
        while len(self._workers) > count:
            worker = self._workers.pop()  # newest first: the oldest have their models warm
            task = asyncio.create_task(self._stop(worker))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def capacity(self) -> Capacity:
        running = sum(1 for w in self._workers if w.process.returncode is None)
        return Capacity(desired=self._desired, running=running)

    async def _start(self) -> _Worker:
        self._serial += 1
        worker_id = f"local-{os.getpid()}-{self._serial}"
        env = {
            **os.environ,
            **self._settings.to_env(),
            "SYNAPSE_WORKER_ID": worker_id,
            "SYNAPSE_WORKER_PROVIDER": "none",
            "SYNAPSE_TRITON_HTTP_PORT": str(_free_port()),
            "SYNAPSE_TRITON_GRPC_PORT": str(_free_port()),
            "SYNAPSE_TRITON_METRICS_PORT": str(_free_port()),
        }
        self._log_dir.mkdir(parents=True, exist_ok=True)
        with (self._log_dir / f"{worker_id}.log").open("ab") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "manager.cli", "worker",
                env=env, stdout=out, stderr=out, preexec_fn=_die_with_parent,
            )  # fmt: skip
        log.info("started worker %s (pid %d)", worker_id, process.pid)
        return _Worker(worker_id, process)

    async def _stop(self, worker: _Worker) -> None:
        """SIGTERM lets the agent drain and deregister; kill only if it will not go."""
        log.info("stopping worker %s", worker.worker_id)
        if worker.process.returncode is None:
            worker.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(worker.process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            worker.process.kill()
            await worker.process.wait()

    async def aclose(self) -> None:
        await self.set_desired(0)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
