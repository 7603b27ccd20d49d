"""A real Redis Cluster on loopback ports for tests: ElastiCache Serverless runs in cluster mode, so the
job store is proven on one (three masters, no replicas), as well as on a plain Redis."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from contract.redis_client import SyncRedis
from local_stack.stack import redis_argv
from tests.processes import free_port, port_open, start, stop, wait_until

MASTERS = 3
READY_TIMEOUT_S = 30.0


def sync_test_client(url: str, *, cluster: bool) -> SyncRedis:
    """A test's own client, speaking cluster where the platform under test does."""
    if cluster:
        return redis.RedisCluster.from_url(url, decode_responses=True)
    return redis.Redis.from_url(url, decode_responses=True)


def cluster_ok(port: int) -> bool:
    """This node sees every slot served (`cluster_state:ok`)."""
    try:
        with redis.Redis(port=port, socket_timeout=1.0) as node:
            return bool(node.cluster("INFO")["cluster_state"] == "ok")
    except (redis.RedisError, OSError):
        return False


@dataclass
class LocalRedisCluster:
    """Nodes with their data and `nodes.conf` under root: stopped and started again, they re-form the cluster.

    Each node's bus port is chosen free too (Redis's default, port + 10000, may be taken or past 65535).
    """

    root: Path
    logs: Path
    ports: tuple[int, ...] = field(default_factory=lambda: tuple(free_port() for _ in range(MASTERS)))
    bus_ports: tuple[int, ...] = field(default_factory=lambda: tuple(free_port() for _ in range(MASTERS)))
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The seed node; cluster clients learn the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> None:
        formed = (self.root / str(self.ports[0]) / "nodes.conf").exists()
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            data = self.root / str(port)
            argv = [
                *redis_argv(port, data),
                "--cluster-enabled", "yes",
                "--cluster-config-file", str((data / "nodes.conf").resolve()),
                "--cluster-port", str(bus),
                "--cluster-node-timeout", "2000",
            ]  # fmt: skip
            log = self.logs / f"redis-cluster-{port}.log"
            proc = start(argv, {}, log)
            self.procs.append(proc)
            wait_until(lambda p=port: port_open(p), READY_TIMEOUT_S, f"redis cluster node {port}", proc, log)
        if not formed:
            self._create()
        wait_until(lambda: all(cluster_ok(p) for p in self.ports), READY_TIMEOUT_S, "cluster_state:ok")

    def _create(self) -> None:
        cli = shutil.which("redis-cli") or "redis-cli"  # Debian's redis-tools, which redis-server pulls in
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        argv = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"]
        subprocess.run(argv, check=True, capture_output=True, timeout=READY_TIMEOUT_S)

    def stop(self) -> None:
        while self.procs:
            stop(self.procs.pop())

    @classmethod
    @contextmanager
    def running(cls, root: Path, logs: Path) -> Iterator[LocalRedisCluster]:
        """A started cluster, stopped on the way out (a session fixture's whole body)."""
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            pytest.fail("redis-server or redis-cli is not installed: run `make test`, which installs them")
        cluster = cls(root, logs)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
