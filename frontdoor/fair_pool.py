"""The threads of one of the streaming server's lanes: tenants' requests taken in turn, threads started
off the event loop.

`concurrent.futures.ThreadPoolExecutor` keeps one FIFO queue and starts a thread inside `submit`,
waiting until the thread runs. On the server's event loop both hurt under a burst: 3,000 long-polls of
one tenant made the loop start a thousand threads one after another, each start waiting for the GIL,
while another tenant's poll and cancel waited behind them, first to be read and then in the queue
(issue 41: 17.6 s). Here work waits in one queue per tenant, and a free thread takes the oldest request
of the next tenant in turn, so a tenant with one request waiting is served by the next free thread
however many another has queued; and `submit` never starts a thread: a thread of the pool's own does,
while the loop goes on reading requests.

Nothing else is added: the lane decides what is admitted (frontdoor/lanes.py); the pool only orders it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

Result = TypeVar("Result")


@dataclass(frozen=True, slots=True)
class _Work:
    future: Future[Any]
    func: Callable[..., Any]
    args: tuple[Any, ...]

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.func(*self.args)
        except BaseException as exc:  # handed to whoever awaits the future
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class FairPool:
    """At most `max_workers` threads, started as work needs them and kept; work taken a tenant at a time."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        self._max = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)
        self._start_wanted = threading.Condition(self._lock)
        self._queues: OrderedDict[str, deque[_Work]] = OrderedDict()  # tenants in turn, next first
        self._waiting = 0  # work queued, not yet taken
        self._threads = 0  # threads started or asked for
        self._busy = 0  # threads running work: the others take queued work as soon as they can
        self._to_start = 0  # threads asked for, not yet started
        self._closed = False
        self._starter = threading.Thread(target=self._start_threads, name=f"{thread_name_prefix}-starter",
                                         daemon=True)  # fmt: skip
        self._starter.start()

    def submit(self, tenant: str, func: Callable[..., Result], *args: Any) -> Future[Result]:
        """Queues `func(*args)` for the tenant; returns at once, never starting a thread itself."""
        future: Future[Result] = Future()
        work = _Work(future, func, args)
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._queues.setdefault(tenant, deque()).append(work)
            self._waiting += 1
            if self._waiting > self._threads - self._busy and self._threads < self._max:
                self._threads += 1
                self._to_start += 1
                self._start_wanted.notify()
            self._work_ready.notify()
        return future

    def shutdown(self) -> None:
        """Cancels the work not yet taken; threads end once their work is done."""
        with self._lock:
            self._closed = True
            queued = [work for queue in self._queues.values() for work in queue]
            self._queues.clear()
            self._waiting = 0
            self._work_ready.notify_all()
            self._start_wanted.notify_all()
        for work in queued:
            work.future.cancel()

    def _start_threads(self) -> None:
        serial = 0
        while True:
            with self._lock:
                while not self._to_start and not self._closed:
                    self._start_wanted.wait()
                if self._closed:
                    return
                self._to_start -= 1
            thread = threading.Thread(target=self._serve, name=f"{self._prefix}_{serial}", daemon=True)
            thread.start()
            serial += 1

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._work_ready.wait()
                if not self._waiting:  # closed
                    self._threads -= 1
                    return
                work = self._next()
                self._busy += 1
            try:
                work.run()
            finally:
                with self._lock:
                    self._busy -= 1

    def _next(self) -> _Work:
        """The next tenant's oldest work; that tenant goes last in turn (the lock is held)."""
        tenant, queue = next(iter(self._queues.items()))
        work = queue.popleft()
        if queue:
            self._queues.move_to_end(tenant)
        else:
            del self._queues[tenant]
        self._waiting -= 1
        return work
