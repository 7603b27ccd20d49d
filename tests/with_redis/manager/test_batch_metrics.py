"""The Batch API's series (manager/metrics.py) as a runner records them on a real Redis: lines and final
statuses counted once, batches by status and at risk of expiring read from every active batch."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from contract.batches import BatchRecord, BatchStatus, new_batch_id
from contract.keys import ACTIVE_BATCHES_KEY, batch_key, batch_lease_key
from contract.redis_client import SyncRedis, sync_client
from contract.settings import Settings
from manager import metrics
from manager.batch_runner import BatchRunner
from openai_api.file_store import LocalFileStore

TENANT = "tenant-a"
ENDPOINT = "/v1/chat/completions"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    # A database of its own: the runner reads every active batch in it.
    return Settings.from_env({}, redis_url=redis_url.rsplit("/", 1)[0] + "/7", state_dir=tmp_path)


@pytest.fixture
def client(settings: Settings) -> Iterator[SyncRedis]:
    redis = sync_client(settings)
    redis.flushdb()
    yield redis
    redis.flushdb()


def new_batch(client: SyncRedis, files: LocalFileStore, lines: Sequence[object], **fields: str) -> str:
    """A batch as `POST /v1/batches` leaves it, with its input file in the store."""
    batch_id = new_batch_id()
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    files.put(TENANT, f"file-{batch_id}", text.encode())
    now = int(time.time())
    record = {
        "id": batch_id, "tenant": TENANT, "max_inflight": "0", "endpoint": ENDPOINT,
        "input_file_id": f"file-{batch_id}", "completion_window": "24h", "status": "validating",
        "created_at": str(now - 90), "expires_at": str(now + 86_400), "metadata": "null", **fields,
    }  # fmt: skip
    client.hset(batch_key(batch_id), mapping=record)
    client.sadd(ACTIVE_BATCHES_KEY, batch_id)
    return batch_id


def refused_line(n: int) -> dict[str, object]:
    """A line whose body the route refuses (no model, no messages): it ends at once, in the error file."""
    return {"custom_id": f"line-{n}", "method": "POST", "url": ENDPOINT, "body": {}}


def test_a_batch_counts_each_line_once_and_its_completion_once(
    client: SyncRedis, settings: Settings, tmp_path: Path
) -> None:
    files = LocalFileStore(tmp_path / "files")
    batch_id = new_batch(client, files, [refused_line(n) for n in range(3)])
    failed, completed = (
        value("synapse_batch_api_lines_total", outcome="failed"),
        value("synapse_batch_api_lines_total", outcome="completed"),
    )
    finished = value("synapse_batch_api_batches_finished_total", status="completed")
    durations = value("synapse_batch_api_completion_seconds_count")
    over_a_minute = value("synapse_batch_api_completion_seconds_bucket", le="60.0")
    runner = BatchRunner(client, files, settings, "manager-a")
    for _ in range(3):  # validate, run (every line refused), finalise; a further pass finds it final
        runner.tick()
    assert client.hget(batch_key(batch_id), "status") == "completed"
    assert value("synapse_batch_api_lines_total", outcome="failed") - failed == 3
    assert value("synapse_batch_api_lines_total", outcome="completed") == completed
    assert value("synapse_batch_api_batches_finished_total", status="completed") - finished == 1
    assert value("synapse_batch_api_completion_seconds_count") - durations == 1
    # Created 90 s ago: observed past the 60 s bucket.
    assert value("synapse_batch_api_completion_seconds_bucket", le="60.0") == over_a_minute
    # Another manager's runner, and this one again, find nothing left to count.
    BatchRunner(client, files, settings, "manager-b").work(batch_id)
    runner.tick()
    assert value("synapse_batch_api_lines_total", outcome="failed") - failed == 3
    assert value("synapse_batch_api_batches_finished_total", status="completed") - finished == 1


def test_an_invalid_input_file_counts_a_failed_batch(
    client: SyncRedis, settings: Settings, tmp_path: Path
) -> None:
    files = LocalFileStore(tmp_path / "files")
    batch_id = new_batch(client, files, [{"custom_id": "x", "method": "GET", "url": ENDPOINT, "body": {}}])
    failed = value("synapse_batch_api_batches_finished_total", status="failed")
    durations = value("synapse_batch_api_completion_seconds_count")
    BatchRunner(client, files, settings, "manager-a").tick()
    assert client.hget(batch_key(batch_id), "status") == "failed"
    assert value("synapse_batch_api_batches_finished_total", status="failed") - failed == 1
    assert value("synapse_batch_api_completion_seconds_count") == durations  # only completed ones are timed


def test_every_final_status_has_a_series_from_the_start() -> None:
    for status in ("completed", "failed", "expired", "cancelled"):
        assert (
            REGISTRY.get_sample_value("synapse_batch_api_batches_finished_total", {"status": status})
            is not None
        )


def test_a_pass_exports_every_active_batch_by_status_whoever_works_it(
    client: SyncRedis, settings: Settings, tmp_path: Path
) -> None:
    files = LocalFileStore(tmp_path / "files")
    soon = str(int(time.time()) + 1800)
    lines = [refused_line(0)]
    at_risk = new_batch(client, files, lines, status="in_progress", expires_at=soon, total="100", failed="10")
    nearly_done = new_batch(
        client, files, lines, status="in_progress", expires_at=soon, total="100", completed="60"
    )
    far = new_batch(client, files, lines, status="in_progress", total="100")
    cancelling = new_batch(client, files, lines, status="cancelling")
    done = new_batch(client, files, lines, status="completed")  # final, not yet out of the set
    for batch_id in (at_risk, nearly_done, far, cancelling, done):
        client.set(batch_lease_key(batch_id), "manager-b", px=60_000)  # another manager works them
    BatchRunner(client, files, settings, "manager-a").tick()
    assert value("synapse_batch_api_batches", status="in_progress") == 3
    assert value("synapse_batch_api_batches", status="cancelling") == 1
    assert value("synapse_batch_api_batches", status="validating") == 0
    assert value("synapse_batch_api_batches", status="finalizing") == 0
    assert value("synapse_batch_api_batches_at_risk") == 1


def batch(status: str, expires_at: int, total: int = 0, completed: int = 0, failed: int = 0) -> BatchRecord:
    return BatchRecord(
        id="batch_x", tenant="acme", endpoint="/v1/chat/completions", input_file_id="file-x",
        completion_window="24h", status=BatchStatus(status), created_at=0, expires_at=expires_at,
        total=total, completed=completed, failed=failed,
    )  # fmt: skip


def test_at_risk_needs_the_window_near_its_end_and_most_lines_left() -> None:
    now = 1_000_000.0
    soon, later = int(now) + metrics.BATCH_API_AT_RISK_S, int(now) + metrics.BATCH_API_AT_RISK_S + 1
    batches = [
        batch("in_progress", soon, total=10, completed=4),  # 6 of 10 left
        batch("in_progress", soon, total=10, completed=3, failed=2),  # half
        batch("in_progress", later, total=10),  # the window has more than an hour
        batch("cancelling", soon, total=10),  # stopping anyway
        batch("validating", soon),
        batch("expired", soon, total=10),
    ]
    metrics.set_batch_api(batches, now)
    assert value("synapse_batch_api_batches_at_risk") == 1
    assert value("synapse_batch_api_batches", status="in_progress") == 3
    assert value("synapse_batch_api_batches", status="validating") == 1
    assert value("synapse_batch_api_batches", status="cancelling") == 1
    assert BatchStatus.EXPIRED.value not in metrics.BATCH_API_OPEN_STATUSES
