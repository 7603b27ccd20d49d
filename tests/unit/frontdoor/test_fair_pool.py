"""The lanes' thread pool: tenants' work taken in turn, and threads started by the pool, never by the
caller (the server's event loop, which used to wait on each new thread under a burst)."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future

import pytest

from frontdoor import fair_pool
from frontdoor.fair_pool import FairPool

WAIT_S = 10


def holding(started: threading.Event, release: threading.Event) -> bool:
    started.set()
    return release.wait(WAIT_S)


def test_a_tenant_with_one_request_waiting_goes_before_another_tenants_backlog() -> None:
    pool = FairPool(max_workers=1, thread_name_prefix="test")
    started, release = threading.Event(), threading.Event()
    order: list[str] = []
    try:
        first = pool.submit("a", holding, started, release)  # holds the one thread
        assert started.wait(WAIT_S)
        queued = [pool.submit("a", order.append, f"a{i}") for i in range(5)]
        theirs = pool.submit("b", order.append, "b")
        release.set()
        for future in [first, *queued, theirs]:
            future.result(WAIT_S)
    finally:
        pool.shutdown()
    assert order == ["a0", "b", "a1", "a2", "a3", "a4"]


def test_submit_never_starts_a_thread_on_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    starters: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        starters.append(threading.current_thread().name)
        real_start(thread)

    monkeypatch.setattr(fair_pool.threading.Thread, "start", start)
    pool = FairPool(max_workers=8, thread_name_prefix="test")
    release = threading.Event()
    try:
        futures = [pool.submit("a", release.wait, WAIT_S) for _ in range(8)]
        release.set()
        assert all(f.result(WAIT_S) for f in futures)
    finally:
        pool.shutdown()
    assert threading.current_thread().name not in starters[1:], starters  # the first starts the starter
    assert starters[1:] and set(starters[1:]) == {"test-starter"}


def test_it_starts_no_more_threads_than_its_bound_and_runs_everything() -> None:
    pool = FairPool(max_workers=3, thread_name_prefix="bounded")
    running = threading.Semaphore(0)
    release = threading.Event()
    names: set[str] = set()

    def hold() -> None:
        names.add(threading.current_thread().name)
        running.release()
        release.wait(WAIT_S)

    try:
        futures = [pool.submit(f"t{i % 2}", hold) for i in range(9)]
        for _ in range(3):
            assert running.acquire(timeout=WAIT_S)
        assert not running.acquire(timeout=0.2)  # a fourth would need a fourth thread
        release.set()
        for future in futures:
            future.result(WAIT_S)
    finally:
        pool.shutdown()
    assert len(names) == 3


def test_an_exception_reaches_the_caller_and_the_thread_serves_on() -> None:
    pool = FairPool(max_workers=1, thread_name_prefix="test")

    def boom() -> None:
        raise ValueError("boom")

    try:
        failed = pool.submit("a", boom)
        with pytest.raises(ValueError, match="boom"):
            failed.result(WAIT_S)
        assert pool.submit("a", int, "7").result(WAIT_S) == 7
    finally:
        pool.shutdown()


def test_shutdown_cancels_the_work_not_yet_taken() -> None:
    pool = FairPool(max_workers=1, thread_name_prefix="test")
    started, release = threading.Event(), threading.Event()
    running: Future[bool] = pool.submit("a", holding, started, release)
    assert started.wait(WAIT_S)
    queued = pool.submit("b", int, "1")
    pool.shutdown()
    release.set()
    assert running.result(WAIT_S) is True
    with pytest.raises(CancelledError):
        queued.result(WAIT_S)
    with pytest.raises(RuntimeError):
        pool.submit("a", int, "2")
