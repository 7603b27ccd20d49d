"""Workers as processes on this machine: what `make up`, the tests and the benchmarks scale.

A warm pool of `warm_pool_size` standby workers is kept initialised (Triton up, models loaded) but
out of rotation; scaling up promotes one of them first, which skips Triton's start and model loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contract.processes import terminate, with_parent_death_signal
from contract.settings import Settings
from contract.workers import SERVING_MARKER, worker_folder
from manager.providers.capacity import Capacity

log = logging.getLogger(__name__)

# Past the agent's own drain bound (Redis, the Pushgateway, then Triton's 25 s): a worker stopped in time
# deregisters itself and stops its Triton; one killed here leaves its Triton to its parent-death signal.
STOP_TIMEOUT_S = 45.0
# Cores a starting worker keeps busy (Triton and its models' loads): on fewer cores per start, workers
# started at once share them and each comes up later (issue 41: four at once on two cores took 65 s each
# to load, one alone 20 s), so a burst from zero waited for all of them to get its first answer.
CORES_PER_START = 2
LOG_TAIL_BYTES = 3000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Worker:
    worker_id: str
    process: asyncio.subprocess.Process
    stopping: bool = False  # asked to stop: its exit is no failure
    watcher: asyncio.Task[None] | None = None

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
        self._starts_at_once = max(1, (os.cpu_count() or 1) // CORES_PER_START)

    async def set_desired(self, count: int) -> None:
        self._desired = count
        # A worker that exited unasked (its watcher has logged why) is replaced here.
        self._workers = [w for w in self._workers if w.alive]
        self._warm = [w for w in self._warm if w.alive]
        while len(self._workers) < count and (self._warm or self._may_start()):
            self._workers.append(self._promote() if self._warm else await self._start(standby=False))
        while len(self._workers) > count:
            self._stop_later(self._workers.pop())  # newest first: the oldest have their models warm
        while len(self._warm) < self._settings.warm_pool_size and self._may_start():
            self._warm.append(await self._start(standby=True))

    def _may_start(self) -> bool:
        """Whether another worker may start now: the ones starting leave it cores to load on. The rest
        start on later calls (the autoscaler asks every tick), as those serve."""
        starting = sum(
            not (worker_folder(self._settings.state_dir, w.worker_id) / SERVING_MARKER).exists()
            for w in self._workers + self._warm
        )
        return starting < self._starts_at_once

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
        log_path = self._log_dir / f"{worker_id}.log"
        # No preexec_fn: a plain fork() while gRPC threads run crashed workers at birth (SIGSEGV in cygrpc,
        # epoll_wait on a bad descriptor); the exec wrapper arms the parent-death signal instead.
        with log_path.open("ab") as out:
            process = await asyncio.create_subprocess_exec(
                *with_parent_death_signal([sys.executable, "-m", "worker_image"]),
                env=env, stdout=out, stderr=out,
            )  # fmt: skip
        log.info("started %s worker %s (pid %d)", "standby" if standby else "serving", worker_id, process.pid)
        worker = _Worker(worker_id, process)
        worker.watcher = asyncio.create_task(_report_exit(worker, log_path), name=f"watch {worker_id}")
        return worker

    def _stop_later(self, worker: _Worker) -> None:
        task = asyncio.create_task(self._stop(worker))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop(self, worker: _Worker) -> None:
        """SIGTERM lets the agent drain and deregister; kill only if it will not go."""
        log.info("stopping worker %s", worker.worker_id)
        worker.stopping = True
        await terminate(worker.process, STOP_TIMEOUT_S, name=worker.worker_id)

    async def aclose(self) -> None:
        for worker in self._workers + self._warm:
            self._stop_later(worker)
        self._workers, self._warm, self._desired = [], [], 0
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


async def _report_exit(worker: _Worker, log_path: Path) -> None:
    """A worker that exits unasked (a crash at start, a Triton that hung or died) is reported the moment
    it does, with how it ended and its log's end; one asked to stop is not."""
    started = time.monotonic()
    code = await worker.process.wait()
    if worker.stopping:
        return
    log.error(
        "worker %s (pid %d) exited %s %.1f s after it started; the end of %s:\n%s",
        worker.worker_id, worker.process.pid, _exit_reason(code), time.monotonic() - started, log_path,
        _tail(log_path),
    )  # fmt: skip


def _exit_reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"on signal {signal.Signals(-code).name}"
    return f"with code {code}"


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as log_file:
            log_file.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
            return log_file.read().decode(errors="replace")
    except OSError as exc:
        return f"(unreadable: {exc})"
