"""Runs a set of processes in the foreground: starts them in order, restarts any that dies, and on
SIGINT/SIGTERM stops them in reverse order so nothing is left running.

Each child gets SIGTERM when the supervisor dies, however it dies: a `kill -9` of `synapse up` leaves
nothing running either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.processes import terminate, with_parent_death_signal
from contract.time_limit import stop

log = logging.getLogger("synapse.up")

RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    name: str
    argv: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_port: int | None = None  # the next process starts once this loopback port accepts connections
    stop_timeout_s: float = 30.0
    # Runs once this process has stopped on shutdown, before the ones started before it stop.
    after_stop: Callable[[], Coroutine[Any, Any, None]] | None = None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


class Supervisor:
    def __init__(
        self, specs: Sequence[ProcessSpec], on_ready: Callable[[], Coroutine[Any, Any, None]] | None = None
    ) -> None:
        self._specs = list(specs)
        self._on_ready = on_ready
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._restarts: dict[str, int] = {}
        self._stopping = False

    async def _spawn(self, spec: ProcessSpec) -> asyncio.subprocess.Process:
        # A session of its own: Ctrl-C reaches the supervisor only, which then stops children in order.
        proc = await asyncio.create_subprocess_exec(
            *with_parent_death_signal(spec.argv), env={**os.environ, **spec.env}, start_new_session=True
        )
        self._procs[spec.name] = proc
        log.info("started %s (pid %d)", spec.name, proc.pid)
        return proc

    async def _wait_port(self, spec: ProcessSpec, proc: asyncio.subprocess.Process) -> None:
        if spec.ready_port is None:
            return
        deadline = time.monotonic() + 120
        while not port_open(spec.ready_port):
            if proc.returncode is not None:
                raise RuntimeError(f"{spec.name} exited with code {proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{spec.name} was not ready (port {spec.ready_port}) after 120 s")
            await asyncio.sleep(0.1)

    async def _watch(self, spec: ProcessSpec) -> None:
        while not self._stopping:
            proc = self._procs[spec.name]
            code = await proc.wait()
            if self._stopping:
                return
            count = self._restarts.get(spec.name, 0)
            self._restarts[spec.name] = count + 1
            delay = RESTART_BACKOFF_S[min(count, len(RESTART_BACKOFF_S) - 1)]
            log.warning(
                "%s exited with code %s; restarting in %.1f s (restart #%d)",
                spec.name,
                code,
                delay,
                count + 1,
            )
            await asyncio.sleep(delay)
            if not self._stopping:
                await self._spawn(spec)

    async def run(self) -> None:
        stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_requested.set)
        watchers: list[asyncio.Task[None]] = []
        try:
            for spec in self._specs:
                proc = await self._spawn(spec)
                await self._wait_port(spec, proc)
                watchers.append(asyncio.create_task(self._watch(spec)))
            if self._on_ready is not None:
                ready: asyncio.Task[None] = asyncio.create_task(self._on_ready())
                await asyncio.wait(
                    {ready, asyncio.create_task(stop_requested.wait())}, return_when=asyncio.FIRST_COMPLETED
                )
                await stop(ready)  # it polls the worker registry in Redis: a lost cancel is sent again
            await stop_requested.wait()
        finally:
            self._stopping = True
            for task in watchers:
                task.cancel()
            await self.stop_all()

    async def stop_all(self) -> None:
        for spec in reversed(self._specs):
            proc = self._procs.get(spec.name)
            if proc is None:
                continue
            if proc.returncode is None:
                log.info("stopping %s", spec.name)
                await terminate(proc, spec.stop_timeout_s, name=spec.name)
            if spec.after_stop is not None:
                await self._after_stop(spec.name, spec.after_stop)

    @staticmethod
    async def _after_stop(name: str, step: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """A failing clean-up step is logged; the processes started before still stop."""
        try:
            await step()
        except Exception:
            log.exception("clean-up after %s failed", name)
