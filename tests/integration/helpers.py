"""Small helpers the API tests share: counting what reached the queue, starting an extra gateway."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from contract.keys import stream_key
from tests.processes import free_port, port_open, start, synapse, wait_until

SERVED = ("gpu-sim", "tiny-gpt2", "minilm")


def entries_added(client: redis.Redis, models: Iterable[str] = SERVED) -> int:
    """Stream entries ever added for these models, both priorities: a request that enqueued nothing
    leaves it unchanged."""
    total = 0
    for model in models:
        for priority in ("interactive", "batch"):
            key = stream_key(model, priority)
            if client.exists(key):
                total += int(client.xinfo_stream(key)["entries-added"])
    return total


@contextmanager
def process_held(pid: int) -> Iterator[None]:
    """A process stopped (SIGSTOP) for the block: the manager, say, so that jobs wait unread."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def start_gateway(
    env: dict[str, str], api_key: str, logs: Path, name: str, **settings: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Another gateway on the same Redis, with its own settings (`SYNAPSE_<NAME>` values)."""
    port = free_port()
    overrides = {f"SYNAPSE_{k.upper()}": v for k, v in settings.items()}
    gateway_env = {**env, **overrides, "SYNAPSE_API_PORT": str(port), "SYNAPSE_API_KEY": api_key}
    log = logs / f"{name}.log"
    proc = start(synapse("gateway"), gateway_env, log)
    wait_until(lambda: port_open(port), 60, name, proc, log)
    return proc, f"http://127.0.0.1:{port}"
