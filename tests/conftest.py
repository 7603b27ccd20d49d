"""Session fixtures every suite shares: a log folder, a real Redis server on a free loopback port, and a
real Redis Cluster (three masters on free loopback ports) for the suites that run on both. The run
starts only with room on disk for what it writes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_stack.stack import redis_argv
from tests.processes import free_port, port_open, start, stop, wait_until
from tests.redis_cluster import LocalRedisCluster

# The whole suite's temporary folders peak at about 1.2 GB (stacks with model copies, checkpoints,
# synthesized apps); below this the run would fail in hundreds of places instead of once, clearly.
NEEDED_FREE_BYTES = 2 * 1024**3


def pytest_sessionstart(session: pytest.Session) -> None:
    where = Path(session.config.option.basetemp or tempfile.gettempdir()).resolve()
    while not where.exists():  # --basetemp names a folder pytest has yet to make
        where = where.parent
    free = shutil.disk_usage(where).free
    if free < NEEDED_FREE_BYTES:
        pytest.exit(
            f"{where} has {free / 1024**3:.1f} GiB free; the tests need about "
            f"{NEEDED_FREE_BYTES / 1024**3:.0f} GiB there (set TMPDIR or --basetemp to a roomier disk)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for `pytest -n 2 --dist loadgroup` (make test): each group runs in one process, in order.

    An integration test runs in its store's group (`redis_target`: plain or cluster), so each process
    starts the one session stack it needs, and no process switches stores midway (which would stop its
    stack and start it again). Any other test runs with the rest of its file, so module fixtures (a fault
    stack, a synthesized app) start once."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        store = callspec.params.get("redis_target") if callspec else None
        group = f"store-{store}" if store else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Every test id an xdist process collected must carry its group (`…@group`): ids without one would
    be scheduled one by one, and both processes would start every stack, with no error to say so."""
    ungrouped = [nodeid for nodeid in ids if "@" not in nodeid]
    if node.config.getvalue("dist") == "loadgroup" and ungrouped:
        pytest.exit(f"{len(ungrouped)} tests have no xdist group, the first {ungrouped[0]}", returncode=3)


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: run `make test`, which installs it")
    port = free_port()
    proc = start(redis_argv(port, tmp_path_factory.mktemp("redis")), {}, logs / "redis.log")
    wait_until(lambda: port_open(port), 30, "redis", proc, logs / "redis.log")
    yield f"redis://127.0.0.1:{port}/0"
    stop(proc)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster.running(tmp_path_factory.mktemp("redis-cluster"), logs) as cluster:
        yield cluster
