"""A batch file is never held whole: completing a chunked upload and working a batch's input allocate a
small fraction of the file's size (tracemalloc's peak, measured around the step alone).

The front door has 512 MB and the manager 1 GB for a file of up to 200 MB; these tests use files of 64 MB
and bound the peak by a few parts or read windows (which do not grow with the file): holding the file once
(let alone bytes, text and parsed lines, as before) would be far over.
"""

from __future__ import annotations

import base64
import json
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from contract.batches import INPUT_PURPOSE, BatchRecord, BatchStatus, FileRecord, new_file_id
from contract.keys import batch_key, upload_key
from contract.redis_client import SyncRedis
from contract.settings import Settings
from frontdoor import uploads_routes
from frontdoor.batches_routes import BatchRequest, create
from frontdoor.uploads_routes import UPLOAD_PART_BYTES, CompleteRequest, add_part, complete
from manager.batch_runner import BatchRunner
from openai_api.file_records import save_record
from openai_api.file_store import READ_CHUNK_BYTES, FileStore, LocalFileStore

MB = 1_000_000
FILE_BYTES = 64 * MB
PARTS = FILE_BYTES // UPLOAD_PART_BYTES
TENANT = "batch-memory"
CHAT = "/v1/chat/completions"
T = TypeVar("T")


def peak_of(step: Callable[[], T]) -> tuple[T, int]:
    """What the step returns, and the most memory it held at once beyond what was held before it."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        answer = step()
        return answer, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def request_lines(count: int, width: int) -> Iterator[bytes]:
    """Chat lines of `width` bytes each (a long message pads them)."""
    for i in range(count):
        body = {"model": "gpu-sim", "messages": [{"role": "user", "content": ""}], "max_tokens": 4}
        line: dict[str, Any] = {"custom_id": f"r{i}", "method": "POST", "url": CHAT, "body": body}
        bare = len(json.dumps(line)) + 1
        line["body"]["messages"][0]["content"] = "x" * (width - bare)
        yield (json.dumps(line) + "\n").encode()


# A store of its own, emptied afterwards: the runner queues gpu-sim jobs here, which an autoscaler test
# reading the shared store's streams (tests/with_redis/frontdoor/test_capacity.py) would take for waiting
# work.
DATABASE = 9  # apart from the other suites' (0, 1, 3, 4, 5, 7, 8)


@pytest.fixture
def client(redis_url: str) -> Iterator[SyncRedis]:
    found: Any = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + f"/{DATABASE}", decode_responses=True)
    yield found
    found.flushdb()
    found.close()


@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return LocalFileStore(tmp_path / "files")


@dataclass
class PartEvent:
    """The slice of a Lambda event that `add_part` reads: a multipart form with the part as `data`."""

    body: str
    is_base64_encoded: bool = True
    headers: dict[str, str] = field(
        default_factory=lambda: {"content-type": "multipart/form-data; boundary=B"}
    )


def part_event(data: bytes) -> PartEvent:
    form = (
        b'--B\r\nContent-Disposition: form-data; name="data"; filename="part"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--B--\r\n"
    )
    return PartEvent(base64.b64encode(form).decode())


def test_completing_a_chunked_upload_holds_a_small_fraction_of_the_file(
    client: SyncRedis, files: FileStore, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(uploads_routes, "files", lambda: files)
    monkeypatch.setattr(uploads_routes, "redis_client", lambda: client)
    upload_id = f"upload_{uuid.uuid4().hex}"
    client.hset(upload_key(upload_id), mapping={
        "id": upload_id, "tenant": TENANT, "filename": "in.jsonl", "purpose": "batch",
        "bytes": str(PARTS * UPLOAD_PART_BYTES), "status": "pending", "created_at": str(int(time.time())),
    })  # fmt: skip
    stream = b"".join(request_lines(PARTS * UPLOAD_PART_BYTES // 4000, 4000))
    part_ids = []
    for i in range(PARTS):
        added = add_part(
            upload_id, TENANT, part_event(stream[i * UPLOAD_PART_BYTES : (i + 1) * UPLOAD_PART_BYTES])
        )
        assert isinstance(added, dict), added
        part_ids.append(added["id"])
    del stream

    done, peak = peak_of(lambda: complete(upload_id, TENANT, CompleteRequest(part_ids=part_ids)))

    assert isinstance(done, dict), done
    assert done["status"] == "completed" and done["file"]["bytes"] == FILE_BYTES
    assert files.size(TENANT, done["file"]["id"]) == FILE_BYTES
    held = f"completion held {peak / MB:.1f} MB of a {FILE_BYTES / MB:.0f} MB file"
    assert peak < 3 * UPLOAD_PART_BYTES, f"{held}: more than three of its {PARTS} parts"


def test_a_runner_validates_and_expands_a_large_input_holding_a_small_fraction_of_it(
    client: SyncRedis, files: FileStore
):
    record = FileRecord(
        new_file_id(), TENANT, filename="in.jsonl", purpose=INPUT_PURPOSE, size=FILE_BYTES,
        created_at=int(time.time()),
    )  # fmt: skip
    assert files.write(TENANT, record.id, request_lines(FILE_BYTES // 16_000, 16_000)) == FILE_BYTES
    save_record(client, record, retention_days=1)
    made = create(
        client, BatchRequest(input_file_id=record.id, endpoint=CHAT, completion_window="24h"), TENANT, 0
    )
    assert isinstance(made, BatchRecord), made
    assert 4 * READ_CHUNK_BYTES < FILE_BYTES / 3, "the bound is a small fraction of the file"
    runner = BatchRunner(client, files, Settings(batch_lines_in_flight=64), "manager-memory")

    _, validating = peak_of(lambda: runner.work(made.id))
    assert client.hget(batch_key(made.id), "status") == BatchStatus.IN_PROGRESS.value
    _, expanding = peak_of(lambda: runner.work(made.id))
    assert client.hget(batch_key(made.id), "next_line") == "64", "a pass claimed its most in flight"

    fresh = BatchRunner(client, files, Settings(batch_lines_in_flight=64), "manager-heir")
    _, restarting = peak_of(lambda: fresh.work(made.id))  # finds the spans again, from the copy
    held = {"validating": validating, "expanding": expanding, "restarting": restarting}
    measured = {k: f"{v / MB:.1f} MB" for k, v in held.items()}
    assert max(held.values()) < 4 * READ_CHUNK_BYTES, (
        f"more than four read windows of a {FILE_BYTES // MB} MB file: {measured}"
    )
