"""The workload manager process: owns the dispatchers, the fleet view and the callback sender, and shuts
down in order.

Its metrics port serves `/metrics` and `/healthz`, the health check: 503 once the autoscaler loop
stopped going round (`AutoscalerLoop.alive`), so ECS replaces a manager that can no longer scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from types import TracebackType
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import make_wsgi_app

from contract.catalog_build import catalog_of
from contract.keys import CANCEL_CHANNEL
from contract.redis_client import STORE_ERRORS, AsyncRedis, async_client, async_subscriber, until_ready
from contract.settings import Settings
from contract.time_limit import stop
from contract.workers import WorkerRegistry
from manager.autoscaler import AutoscalerLoop
from manager.batch_runner import BatchRunner
from manager.busy import BusyClock
from manager.callbacks import CallbackSender
from manager.cost import CostLedger, prices_of
from manager.dispatcher import ModelDispatcher
from manager.fleet import Fleet
from manager.providers import provider_for
from manager.queue import JobQueue
from manager.sampler import MetricsSampler

log = logging.getLogger(__name__)

FLEET_REFRESH_S = 0.5
# How soon the batch runner goes round again after a pass that moved a batch on (a pass over 512 lines in
# flight is a few milliseconds of Redis and Python): the lines it answered free their room in flight now,
# not at the next SYNAPSE_BATCH_TICK_S.
BUSY_BATCH_TICK_S = 0.05
SHUTDOWN_TIMEOUT_S = 25.0
HEALTHZ_PATH = "/healthz"


class _MetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Scrapes and health checks every few seconds would flood the log."""


def with_healthz(app: WSGIApplication, healthy: Callable[[], bool]) -> WSGIApplication:
    """`app` (the metrics), and `/healthz`: 200 while `healthy()`, else 503 for the health check to act on."""

    def route(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTHZ_PATH:
            return app(environ, start_response)
        ok = healthy()
        start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
        return [b"ok\n" if ok else b"the autoscaler loop stopped\n"]

    return route


def serve_metrics(port: int, addr: str, healthy: Callable[[], bool]) -> WSGIServer:
    """`/metrics` and `/healthz` on a daemon thread, as prometheus_client's own server would."""
    server = make_server(addr, port, with_healthz(make_wsgi_app(), healthy), _MetricsServer, _QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


class Manager:
    """`async with Manager(settings):` runs the manager until the block exits."""

    def __init__(self, settings: Settings, consumer: str | None = None) -> None:
        self.settings = settings
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._redis: AsyncRedis = async_client(settings)
        self._subscriber = async_subscriber(settings)
        self.queue = JobQueue(
            self._redis, self.consumer, settings.job_ttl_s,
            notify_all=bool(settings.success_topic_arn or settings.error_topic_arn),
        )  # fmt: skip
        self.callbacks = CallbackSender.for_settings(self._redis, settings)
        self.sampler: MetricsSampler | None = None
        self.costs = CostLedger(settings.gpu_price_per_hour, prices_of(settings))
        self.fleet = Fleet.for_triton(
            WorkerRegistry(self._redis, settings.heartbeat_s),
            settings.triton_timeout_s,
            settings.max_inflight_batches,
            BusyClock(),
        )
        self.dispatchers = {
            served.name: ModelDispatcher(
                served,
                self.queue,
                self.fleet,
                self.costs,
                max_wait_s=settings.max_wait_ms / 1000,
                max_attempts=settings.max_attempts,
                reclaim_idle_s=settings.reclaim_idle_s,
                routing=settings.generation_routing,
            )
            for served in catalog_of(settings).models.values()
        }
        for dispatcher in self.dispatchers.values():
            self.fleet.subscribe(dispatcher.poke)
        self._fleet_task: asyncio.Task[None] | None = None
        self._cancel_task: asyncio.Task[None] | None = None
        self._batch_task: asyncio.Task[None] | None = None
        provider = provider_for(settings)
        self.autoscaler = (
            None
            if provider is None
            else AutoscalerLoop(
                self._redis,
                settings,
                provider=provider,
                fleet=self.fleet,
                local_backlog=lambda model: self.dispatchers[model].backlog,
                sequences=lambda model: self.dispatchers[model].sequences,
                identity=self.consumer,
            )
        )

    async def start(self) -> None:
        if self.settings.metrics_port:
            serve_metrics(
                self.settings.metrics_port,
                "0.0.0.0" if self.settings.worker_provider == "ecs" else "127.0.0.1",
                self.healthy,
            )
        await until_ready(self._redis, f"manager {self.consumer}", log)
        await self.fleet.refresh()
        for dispatcher in self.dispatchers.values():
            await dispatcher.start()
        cfg = self.settings
        autoscaler = self.autoscaler
        self.sampler = MetricsSampler(
            self._redis, self.fleet, list(self.dispatchers), lambda model: self.dispatchers[model].backlog,
            generative=lambda model: self.dispatchers[model].sequences is not None,
            costs=self.costs, desired=lambda: None if autoscaler is None else autoscaler.desired,
            pushgateway_url=cfg.pushgateway_url,
        )  # fmt: skip
        await self.sampler.start()
        await self.callbacks.start()
        self._fleet_task = asyncio.create_task(self._watch_fleet(), name="fleet")
        self._cancel_task = asyncio.create_task(self._listen_for_cancels(), name="cancels")
        self._batch_task = asyncio.create_task(self._run_batches(), name="batches")
        if self.autoscaler is not None:
            self.autoscaler.start()
        log.info("manager %s serving %s", self.consumer, ", ".join(self.dispatchers))

    def healthy(self) -> bool:
        """What /healthz says: the autoscaler loop, where this manager runs one, still goes round."""
        return self.autoscaler is None or self.autoscaler.alive()

    async def _watch_fleet(self) -> None:
        while True:
            await asyncio.sleep(FLEET_REFRESH_S)
            try:
                await self.fleet.refresh()
            except STORE_ERRORS as exc:
                log.warning("fleet refresh failed: %s", exc)

    async def _run_batches(self) -> None:
        """The Batch API's runner (manager/batch_runner.py), on a thread: it builds each line's job and
        answer with the same transport-free code as the /v1 routes (openai_api/batch_lines.py)."""
        runner = BatchRunner.for_settings(self.settings, self.consumer)
        while True:
            moved = False
            try:
                moved = await asyncio.to_thread(runner.tick)
            except STORE_ERRORS as exc:
                log.warning("batch runner pass failed: %s", exc)
            # A pass that moved a batch on goes round again soon: its lines' room in flight is free now.
            pause_s = self.settings.batch_tick_s
            await asyncio.sleep(min(BUSY_BATCH_TICK_S, pause_s) if moved else pause_s)

    async def _listen_for_cancels(self) -> None:
        """Job ids the front door asks to stop (a client left its stream); missed ones are caught when
        the job starts (its hash says so) or run to the end, harmlessly.

        On its own plain connection (`async_subscriber`): on a Redis Cluster a PUBLISH reaches every
        node, so listening on the one node the URL names hears every cancellation."""
        while True:
            pubsub = self._subscriber.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(CANCEL_CHANNEL)
                while True:
                    # Polled under the client's socket timeout: a quiet channel is not a failure.
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    job_id = None if message is None else message.get("data")
                    if isinstance(job_id, str):
                        for dispatcher in self.dispatchers.values():
                            await dispatcher.cancel(job_id)
            except STORE_ERRORS as exc:
                log.warning("listening for cancellations failed: %s; again in 1 s", exc)
            finally:
                with contextlib.suppress(*STORE_ERRORS):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(1.0)

    async def aclose(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Stop reading, finish what was read (up to timeout_s), then cancel and close."""
        for dispatcher in self.dispatchers.values():
            await dispatcher.stop_intake()
        await asyncio.gather(*(d.drain(timeout_s) for d in self.dispatchers.values()))
        await self.callbacks.aclose()  # deliveries in flight are left to their leases: others retry them
        if self.autoscaler is not None:
            await self.autoscaler.aclose()
        for task in (self._fleet_task, self._cancel_task, self._batch_task):
            await stop(task)
        if self.sampler is not None:
            await self.sampler.aclose()
        await self.fleet.aclose()
        await self._redis.aclose()
        await self._subscriber.aclose()
        log.info("manager %s stopped", self.consumer)

    async def __aenter__(self) -> Manager:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def freeze_startup_heap() -> None:
    """Moves the objects built at start-up (modules, clients, metrics: some 60,000) out of the collector's
    reach. A full collection otherwise walks them all, about 20 ms of stopped event loop here, and that
    pause lands on whichever batch is waiting: it decides the P99 of a 100 ms batch."""
    gc.collect()
    gc.freeze()


async def run_manager(settings: Settings) -> None:
    """Runs until SIGTERM or SIGINT, then shuts down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Manager(settings):
        freeze_startup_heap()
        await stop.wait()
        log.info("manager: stop requested, draining")
