"""Local monitoring: Prometheus, the Pushgateway and the Redis exporter (Debian packages), on loopback.

Prometheus runs `dashboards/prometheus.yml` with its targets swapped for the local ones, written
into the state dir; the rule file is the very `dashboards/rules.yml`, so what alerts locally is
what alerts in AWS.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml


def binary(name: str) -> str:
    return shutil.which(name) or f"/usr/bin/{name}"


def write_prometheus_config(config: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "prometheus.yml"
    path.write_text("# Written by Synapse from dashboards/prometheus.yml; edits are overwritten.\n"
                    + yaml.safe_dump(config, sort_keys=False))  # fmt: skip
    return path


def prometheus_argv(config: Path, data_dir: Path, port: int, *, retention: str = "7d") -> list[str]:
    """No `--web.enable-lifecycle`: with it, any local user could shut Prometheus down or reload it
    (POST /-/quit, /-/reload). Edited rules load on SIGHUP or a restart."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        binary("prometheus"),
        f"--config.file={config.resolve()}",
        f"--storage.tsdb.path={data_dir.resolve()}",
        f"--storage.tsdb.retention.time={retention}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]


def pushgateway_argv(port: int) -> list[str]:
    return [
        binary("prometheus-pushgateway"),
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]


def redis_exporter_argv(port: int, redis_url: str) -> list[str]:
    """The exporter AWS runs beside ElastiCache, here beside the local Redis: memory, evictions, clients.

    No password here: the exporter reads it from REDIS_PASSWORD, out of `ps`."""
    return [
        binary("prometheus-redis-exporter"),
        f"-redis.addr={redis_url}",
        f"-web.listen-address=127.0.0.1:{port}",
    ]


def local_targets(
    *, manager_port: int, pushgateway_port: int, redis_exporter_port: int = 0
) -> dict[str, str]:
    """Loopback targets by scrape job name; a port of 0 leaves its job out."""
    targets = {"pushgateway": f"127.0.0.1:{pushgateway_port}"}
    if manager_port:
        targets["synapse-manager"] = f"127.0.0.1:{manager_port}"
    if redis_exporter_port:
        targets["redis"] = f"127.0.0.1:{redis_exporter_port}"
    return targets
