"""Workers as processes on this machine: what `make up`, the tests and the benchmarks scale.

A warm pool of `warm_pool_size` standby workers is kept initialised (Triton up, models loaded) but
out of rotation; scaling up promotes one of them first, which skips Triton's start and model loads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

from contract.processes import die_with_parent, terminate
from contract.settings import Settings
from manager.providers.capacity import Capacity

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Worker:
    worker_id: str
    process: asyncio.subprocess.Process

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


class LocalProvider:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._workers: list[_Worker] = []  # serving (or starting to)
        self._warm: list[_Worker] = []  # standby, promoted first
        self._stopping: set[asyncio.Task[None]] = set()
        self._serial = 0
        self._desired = 0
        self._log_dir = settings.state_dir / "logs"

    async def set_desired(self, count: int) -> None:
        self._desired = count
        self._workers = [w for w in self._workers if w.alive]
        self._warm = [w for w in self._warm if w.alive]
        while len(self._workers) < count:
            self._workers.append(self._promote() if self._warm else await self._start(standby=False))
        while len(self._workers) > count:
            self._stop_later(self._workers.pop())  # newest first: the oldest have their models warm
        while len(self._warm) < self._settings.warm_pool_size:
            self._warm.append(await self._start(standby=True))

    def _promote(self) -> _Worker:
        worker = self._warm.pop(0)
        worker.process.send_signal(signal.SIGUSR2)
        log.info("promoted warm worker %s", worker.worker_id)
        return worker

    async def capacity(self) -> Capacity:
        return Capacity(desired=self._desired, running=sum(1 for w in self._workers if w.alive))

    async def _start(self, *, standby: bool) -> _Worker:
        self._serial += 1
        worker_id = f"local-{os.getpid()}-{self._serial}"
        env = {
            **os.environ,
            **self._settings.to_env(),
            "SYNAPSE_WORKER_ID": worker_id,
            "SYNAPSE_WORKER_PROVIDER": "none",
            "SYNAPSE_WORKER_STANDBY": "true" if standby else "false",
            "SYNAPSE_TRITON_HTTP_PORT": str(_free_port()),
            "SYNAPSE_TRITON_GRPC_PORT": str(_free_port()),
            "SYNAPSE_TRITON_METRICS_PORT": str(_free_port()),
        }
        self._log_dir.mkdir(parents=True, exist_ok=True)
        with (self._log_dir / f"{worker_id}.log").open("ab") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "worker_image",
                env=env, stdout=out, stderr=out, preexec_fn=die_with_parent,
            )  # fmt: skip
        log.info("started %s worker %s (pid %d)", "standby" if standby else "serving", worker_id, process.pid)
        return _Worker(worker_id, process)

    def _stop_later(self, worker: _Worker) -> None:
        task = asyncio.create_task(self._stop(worker))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop(self, worker: _Worker) -> None:
        """SIGTERM lets the agent drain and deregister; kill only if it will not go."""
        log.info("stopping worker %s", worker.worker_id)
        await terminate(worker.process, STOP_TIMEOUT_S, name=worker.worker_id)

    async def aclose(self) -> None:
        for worker in self._workers + self._warm:
            self._stop_later(worker)
        self._workers, self._warm, self._desired = [], [], 0
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
