"""A Redis still loading its data is "not ready yet", not a crash: a manager started beside it (as `make
up` starts one on a state folder with a large queue) waits, says in its log what it waits for, and
serves once Redis has loaded; it does not exit with a traceback for its supervisor to restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from local_stack.stack import redis_argv
from tests.integration.conftest import base_env
from tests.processes import free_port, port_open, start, stop, synapse, wait_until

pytestmark = [pytest.mark.integration]

FILLER_KEYS = 60_000
# Redis's own knob for its tests: microseconds of sleep per key loaded, so that loading lasts a minute,
# longer than a loaded machine takes to start the manager; the test ends it sooner by setting it to 0.
LOAD_DELAY_US = 1_000


def written_then_restarted_loading(port: int, data: Path, log: Path) -> object:
    """A Redis holding FILLER_KEYS in its append-only file, restarted so that it loads them slowly."""
    proc = start(redis_argv(port, data), {}, log)
    try:
        wait_until(lambda: port_open(port), 30, "redis", proc, log)
        client = redis.Redis(port=port)
        pipe = client.pipeline(transaction=False)
        for i in range(FILLER_KEYS):
            pipe.set(f"filler:{i}", "x")
        pipe.execute()
        rewrites = client.info("persistence")["aof_rewrites"]
        client.bgrewriteaof()  # the keys into the AOF's base file, which Redis loads key by key

        def rewritten() -> bool:
            # aof_rewrites counts a rewrite when it forks, not when it ends: stopped before the end, the
            # keys stay in the incremental file, which loads at full speed (the test's Redis answered).
            persistence = client.info("persistence")
            ended = persistence["aof_rewrites"] > rewrites and not persistence["aof_rewrite_in_progress"]
            return bool(ended and persistence["aof_last_bgrewrite_status"] == "ok")

        wait_until(rewritten, 60, "the AOF rewrite to end")
        client.close()
    finally:
        stop(proc)
    slowly = ["--key-load-delay", str(LOAD_DELAY_US), "--loading-process-events-interval-bytes", "1024"]
    loading = start([*redis_argv(port, data), *slowly], {}, log)  # answering LOADING meanwhile
    wait_until(lambda: port_open(port), 30, "redis to listen", loading, log)
    return loading


def test_a_manager_started_while_redis_loads_waits_for_it_and_serves(tmp_path: Path) -> None:
    port = free_port()
    loading = written_then_restarted_loading(port, tmp_path / "redis", tmp_path / "redis.log")
    client = redis.Redis(port=port)
    env = base_env(f"redis://127.0.0.1:{port}/0", tmp_path / "state")
    log = tmp_path / "manager.log"
    manager = None
    try:
        with pytest.raises(redis.BusyLoadingError):
            client.ping()  # the manager starts while Redis loads, as the test means it to
        manager = start(synapse("manager"), {**env, "SYNAPSE_METRICS_PORT": str(free_port())}, log)
        wait_until(lambda: "waiting for Redis (it is loading its data)" in log.read_text(), 60,
                   "the manager to say what it waits for", manager, log)  # fmt: skip
        client.config_set("key-load-delay", 0)  # a command Redis takes while it loads
        started = time.monotonic()
        wait_until(lambda: " serving " in log.read_text(), 120, "the manager to serve", manager, log)
        assert client.ping()  # it served once Redis had loaded, not before
        assert manager.poll() is None and "Traceback" not in log.read_text()
        print(f"\nthe manager served {time.monotonic() - started:.1f} s after it said it waited")
    finally:
        if manager is not None:
            stop(manager)
        client.close()
        stop(loading)  # type: ignore[arg-type]
