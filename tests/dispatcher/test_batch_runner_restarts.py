"""A manager that dies at any step of a batch (expanding its lines, writing its files) leaves a batch the
next manager finishes with every line exactly once in one of its files, and no line run as a second job.

The death is an exception no handler catches, raised at the chosen point inside the runner (as `kill -9`
stops it there); the heir is a new runner on the same Redis and files. The jobs are ended by a small
double of the worker side, which writes each queued job's answer the way the manager's completion does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from contract.batches import INPUT_PURPOSE, BatchRecord, BatchStatus, FileRecord, new_file_id
from contract.job_store import Written
from contract.jobs import Job, Priority
from contract.keys import batch_key, batch_results_key, job_key, stream_key
from contract.redis_client import SyncRedis
from contract.settings import Settings
from frontdoor.batches_routes import BatchRequest, create, request_cancel
from manager.batch_runner import BatchRunner
from openai_api.file_records import save_file
from openai_api.file_store import FileStore, LocalFileStore

CHAT = "/v1/chat/completions"
TENANT = "batch-restarts"
LINES = 24
UNKNOWN_MODEL_LINES = (5, 17)  # refused when their job is built: they end in the error file


class Killed(BaseException):
    """Stops the runner where it stands: no `except Exception` of its own catches it."""


def request_line(i: int) -> str:
    model = "no-such-model" if i in UNKNOWN_MODEL_LINES else "gpu-sim"
    body = {"model": model, "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 4}
    return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": CHAT, "body": body})


def new_batch(client: SyncRedis, files: FileStore, lines: int = LINES) -> str:
    data = ("\n".join(request_line(i) for i in range(lines)) + "\n").encode()
    record = FileRecord(
        new_file_id(),
        TENANT,
        filename="in.jsonl",
        purpose=INPUT_PURPOSE,
        size=len(data),
        created_at=int(time.time()),
    )
    save_file(client, files, record, data, retention_days=1)
    made = create(
        client, BatchRequest(input_file_id=record.id, endpoint=CHAT, completion_window="24h"), TENANT, 0
    )
    assert isinstance(made, BatchRecord), made
    return made.id


def answer_queued_jobs(client: SyncRedis) -> int:
    """The worker side: every job waiting in gpu-sim's batch stream ends COMPLETED; how many it ended."""
    ended = 0
    for entry_id, entry in client.xrange(stream_key("gpu-sim", Priority.BATCH)):  # type: ignore[union-attr]
        job_id = entry["id"]
        if client.hget(job_key(job_id), "status") != "QUEUED":
            continue
        result = {"text": f"answer to {job_id}", "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                  "total_tokens": 5}, "finish_reason": "stop"}  # fmt: skip
        client.hset(job_key(job_id), mapping={"status": "COMPLETED", "result": json.dumps(result)})
        client.xdel(stream_key("gpu-sim", Priority.BATCH), entry_id)
        ended += 1
    return ended


def run_to_the_end(runner: BatchRunner, client: SyncRedis, batch_id: str) -> dict[str, str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        runner.work(batch_id)
        batch: dict[str, str] = client.hgetall(batch_key(batch_id))  # type: ignore[assignment]
        if BatchStatus(batch["status"]).is_final:
            return batch
        answer_queued_jobs(client)
    raise AssertionError(f"batch {batch_id} did not end")


def custom_ids(files: FileStore, batch: dict[str, str], field: str) -> list[str]:
    data = files.get(TENANT, batch[field]) if batch.get(field) else b""
    return [json.loads(line)["custom_id"] for line in (data or b"").decode().splitlines()]


def assert_every_line_once(files: FileStore, client: SyncRedis, batch: dict[str, str]) -> None:
    output, errors = custom_ids(files, batch, "output_file_id"), custom_ids(files, batch, "error_file_id")
    assert batch["status"] == "completed"
    assert sorted(output + errors) == sorted(f"r{i}" for i in range(LINES)), "each line once, in one file"
    assert sorted(errors) == sorted(f"r{i}" for i in UNKNOWN_MODEL_LINES)
    assert (int(batch["completed"]), int(batch["failed"])) == (len(output), len(errors))
    assert client.hlen(batch_results_key(batch["id"])) == LINES
    # Each answer used 3 + 2 tokens (answer_queued_jobs): the usage counts every answered line once.
    usage = BatchRecord.of(batch).object()["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (3 * len(output), 2 * len(output))


class DiesOnPut:
    """A file store that dies when it is asked to write the named kind of file (after `before` puts)."""

    def __init__(self, inner: FileStore, dies_on: str) -> None:
        self.inner, self.dies_on = inner, dies_on

    def put(self, tenant: str, file_id: str, data: bytes) -> None:
        if file_id.endswith(self.dies_on):
            raise Killed(f"killed writing {file_id}")
        self.inner.put(tenant, file_id, data)

    def write(self, tenant: str, file_id: str, chunks: Iterable[bytes]) -> int:
        return self.inner.write(tenant, file_id, chunks)

    def get(self, tenant: str, file_id: str) -> bytes | None:
        return self.inner.get(tenant, file_id)

    def size(self, tenant: str, file_id: str) -> int | None:
        return self.inner.size(tenant, file_id)

    def read_range(self, tenant: str, file_id: str, start: int, length: int) -> bytes | None:
        return self.inner.read_range(tenant, file_id, start, length)

    def delete(self, tenant: str, file_id: str) -> None:
        self.inner.delete(tenant, file_id)


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return LocalFileStore(tmp_path / "files")


def test_a_manager_killed_between_its_two_files_leaves_each_line_once(
    sync_redis: SyncRedis, files: FileStore
) -> None:
    cfg = Settings()
    batch_id = new_batch(sync_redis, files)
    doomed = BatchRunner(sync_redis, DiesOnPut(files, "errors"), cfg, "manager-doomed")
    with pytest.raises(Killed):
        run_to_the_end(doomed, sync_redis, batch_id)
    assert sync_redis.hget(batch_key(batch_id), "status") == BatchStatus.FINALIZING.value
    heir = BatchRunner(sync_redis, files, cfg, "manager-heir")
    assert_every_line_once(files, sync_redis, run_to_the_end(heir, sync_redis, batch_id))


def dying_submit(runner: BatchRunner, after: int, *, submitted: bool) -> None:
    """The runner's job store dies at its `after`-th job submitted, before or after that job is in Redis
    (the jobs of its chunk before it are in)."""
    real: Callable[..., list[Written]] = runner._jobs.submit_many
    calls = 0

    def submit_many(jobs: Sequence[Job], max_inflight: int = 0) -> list[Written]:
        nonlocal calls
        if calls + len(jobs) < after:
            calls += len(jobs)
            return real(jobs, max_inflight)
        dies_at = after - calls - 1  # the dying job's place in this chunk
        real(jobs[: dies_at + 1] if submitted else jobs[:dies_at], max_inflight)
        raise Killed(f"killed at submit {after}")

    runner._jobs.submit_many = submit_many  # type: ignore[method-assign]


@pytest.mark.parametrize("submitted", [False, True], ids=["before-its-job", "after-its-job"])
def test_a_manager_killed_while_expanding_leaves_each_line_once_and_no_job_twice(
    sync_redis: SyncRedis, files: FileStore, submitted: bool
) -> None:
    cfg = Settings(batch_lines_in_flight=8)
    batch_id = new_batch(sync_redis, files)
    added_before = stream_entries_added(sync_redis)
    doomed = BatchRunner(sync_redis, files, cfg, "manager-doomed")
    dying_submit(doomed, after=11, submitted=submitted)
    with pytest.raises(Killed):
        run_to_the_end(doomed, sync_redis, batch_id)
    heir = BatchRunner(sync_redis, files, cfg, "manager-heir")
    assert_every_line_once(files, sync_redis, run_to_the_end(heir, sync_redis, batch_id))
    valid = LINES - len(UNKNOWN_MODEL_LINES)
    assert stream_entries_added(sync_redis) - added_before == valid, "no line became a second job"


def stream_entries_added(client: SyncRedis) -> int:
    key = stream_key("gpu-sim", Priority.BATCH)
    if not client.exists(key):
        return 0
    info: dict[str, Any] = client.xinfo_stream(key)  # type: ignore[assignment]
    return int(info["entries-added"])


def test_a_cancelled_batch_of_thousands_ends_each_unstarted_line_once(
    sync_redis: SyncRedis, files: FileStore
) -> None:
    """The lines never started are recorded a chunk per round trip, and a runner killed part-way through
    (here: between chunks) leaves its heir to record the rest, none twice."""
    lines = 2500
    batch_id, cfg = new_batch(sync_redis, files, lines), Settings(batch_lines_in_flight=8)
    runner = BatchRunner(sync_redis, files, cfg, "manager-a")
    runner.work(batch_id)  # validated
    runner.work(batch_id)  # the first lines claimed and queued
    assert request_cancel(sync_redis, batch_id) == "cancelling"
    real_eval = sync_redis.eval
    chunks = 0

    def dies_after_two_chunks(script: str, numkeys: int, *keys_and_args: Any) -> Any:
        nonlocal chunks
        if len(keys_and_args) > 100:  # a chunk of stopped lines, not one line's result
            chunks += 1
            if chunks > 2:
                raise Killed("killed between chunks")
        return real_eval(script, numkeys, *keys_and_args)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Killed):
        patch.setattr(sync_redis, "eval", dies_after_two_chunks)
        runner.work(batch_id)
    assert chunks == 3
    heir = BatchRunner(sync_redis, files, cfg, "manager-heir")
    batch: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while batch.get("status") != "cancelled":
        assert time.monotonic() < deadline, "the cancelled batch did not end"
        heir.work(batch_id)
        batch = sync_redis.hgetall(batch_key(batch_id))  # type: ignore[assignment]
    errors, output = custom_ids(files, batch, "error_file_id"), custom_ids(files, batch, "output_file_id")
    assert sorted(output + errors) == sorted(f"r{i}" for i in range(lines)), "each line once, in one file"
    assert (int(batch.get("completed", 0)), int(batch["failed"])) == (len(output), len(errors))


class DeletedWhileCopied(DiesOnPut):
    """The tenant deletes the batch's input file while the runner copies it: half of it was read."""

    def read_range(self, tenant: str, file_id: str, start: int, length: int) -> bytes | None:
        if file_id.endswith(".input"):  # the batch's own copy: read as it is
            return self.inner.read_range(tenant, file_id, start, length)
        whole = self.inner.get(tenant, file_id) or b""
        half = whole[: len(whole) // 2 + 1]
        cut = half[: half.rindex(b"\n") + 1]  # at a line's end: the copy parses, with lines missing
        return cut[start : start + length] or None


def test_an_input_deleted_while_it_is_copied_fails_the_batch_rather_than_run_part_of_it(
    sync_redis: SyncRedis, files: FileStore
) -> None:
    batch_id = new_batch(sync_redis, files)
    runner = BatchRunner(sync_redis, DeletedWhileCopied(files, dies_on="never"), Settings(), "manager-a")
    runner.work(batch_id)
    batch: dict[str, str] = sync_redis.hgetall(batch_key(batch_id))  # type: ignore[assignment]
    assert batch["status"] == "failed"
    assert BatchRecord.of(batch).object()["errors"]["data"][0]["code"] == "file_not_found"
