"""The front door counts every request it serves and the Lambda time it bills, by route, into Redis,
where the manager reads them (a plain Redis and a cluster alike)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from contract.keys import REQUESTS_KEY
from contract.redis_client import SyncRedis
from frontdoor import telemetry
from frontdoor.handler import lambda_handler
from frontdoor.usage import RequestTally, route_of
from manager.sampler import front_door_usage
from tests.redis_cluster import sync_test_client
from tests.unit.frontdoor.test_frontdoor_rejections import event

JOB = "6f1c7c1e-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/async-infer", "submit"),
        (f"/results/{JOB}", "result"),
        (f"/results/{JOB}/stream", "stream"),
        ("/v1/chat/completions", "v1"),
        ("/v1/models", "v1"),
        ("/v1/responses", "responses"),
        ("/v1/responses/resp_0123/input_items", "responses"),
        ("/v1/responsesx", "v1"),
        ("/v1/files", "batch"),
        ("/v1/files/file-abc/content", "batch"),
        ("/v1/uploads/upload_abc/parts", "batch"),
        ("/v1/batches", "batch"),
        ("/v1/batches/batch_abc/cancel", "batch"),
        ("/v1/filesystem", "v1"),
        ("/healthz", "public"),
        ("/docs", "public"),
        ("/wp-admin/setup.php", "other"),
    ],
)
def test_a_path_maps_to_one_of_a_handful_of_routes(path: str, route: str):
    assert route_of(path) == route


class Recorder:
    """A writer that keeps what it was given and reports success."""

    def __init__(self) -> None:
        self.writes: list[dict[str, int]] = []

    def __call__(self, fields: Mapping[str, int]) -> bool:
        self.writes.append(dict(fields))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_are_written_at_once_after_a_quiet_interval_and_summed_within_one():
    writes = Recorder()
    clock = Clock()
    tally = RequestTally(writes, interval_s=1.0, clock=clock)
    tally.add("submit", requests=1, seconds=0.0121)
    assert writes.writes == [{"submit:count": 1, "submit:ms": 13}], "billed in whole ms, rounded up"
    clock.now += 0.3
    tally.add("result", requests=1, seconds=0.150)
    tally.add("result", requests=1, seconds=0.020)
    assert len(writes.writes) == 1, "within the interval, requests wait in memory"
    clock.now += 0.8
    tally.add("result", requests=1, seconds=0.001)
    assert writes.writes[1] == {"result:count": 3, "result:ms": 171}


def test_a_failed_write_keeps_its_counts_for_the_next_one():
    writes: list[dict[str, int]] = []
    redis_up = False

    def write(fields: Mapping[str, int]) -> bool:
        if redis_up:
            writes.append(dict(fields))
        return redis_up

    clock = Clock()
    tally = RequestTally(write, interval_s=1.0, clock=clock)
    tally.add("submit", requests=1, seconds=0.005)
    redis_up, clock.now = True, clock.now + 1.0
    tally.add("submit", requests=1, seconds=0.005)
    assert writes == [{"submit:count": 2, "submit:ms": 10}]


def test_time_spent_streaming_adds_to_the_route_without_another_request():
    writes = Recorder()
    tally = RequestTally(writes, interval_s=0.0)
    tally.add("stream", requests=0, seconds=2.5)
    assert writes.writes == [{"stream:ms": 2500}]


@pytest.fixture(params=["plain", "cluster"])
def counted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncRedis]:
    """The front door's counters pointed at a real Redis, written on every request."""
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else request.getfixturevalue("redis_url")
    monkeypatch.setenv("SYNAPSE_REDIS_URL", url)
    monkeypatch.setenv("SYNAPSE_REDIS_CLUSTER", str(cluster).lower())
    telemetry._counter_client.cache_clear()
    monkeypatch.setattr(telemetry, "_usage", RequestTally(telemetry._write_usage, interval_s=0.0))
    client = sync_test_client(url, cluster=cluster)
    client.delete(REQUESTS_KEY)
    yield client
    client.delete(REQUESTS_KEY)
    client.close()
    telemetry._counter_client.cache_clear()


def test_every_request_the_handler_serves_is_counted_by_route_and_read_back_by_the_manager(
    counted: SyncRedis,
):
    for _ in range(3):
        lambda_handler(event("POST", "/async-infer", "not json"), None)  # refused: still billed
    lambda_handler(event("GET", "/openapi.json"), None)
    fields: dict[str, str] = counted.hgetall(REQUESTS_KEY)  # type: ignore[assignment]
    assert fields["submit:count"] == "3"
    assert fields["public:count"] == "1"
    usage = front_door_usage(fields)
    assert usage.requests == {"submit": 3, "public": 1}
    assert usage.seconds["submit"] == int(fields["submit:ms"]) / 1000
