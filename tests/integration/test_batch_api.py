"""OpenAI's Batch API through the official `openai` SDK, unchanged, on the local stack: upload a JSONL
file, create a batch, poll it, download its output and error files. Every line ends exactly once, in one
of the two files, and the batch's counts agree with them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types import Batch

from contract.keys import stream_key
from frontdoor.uploads_routes import UPLOAD_PART_BYTES
from openai_api.format import render_chat
from openai_api.schemas import ChatMessage
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.faults import FaultStack, fault_env
from tests.integration.helpers import start_gateway
from tests.integration.tenants import new_tenant_key
from tests.processes import free_port, stop

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
FINAL = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=60)


def request_line(custom_id: str, url: str, body: dict[str, Any]) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def chat_body(i: int) -> dict[str, Any]:
    return {"model": "gpu-sim", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 32}


def upload(client: openai.OpenAI, lines: list[str]) -> str:
    data = ("\n".join(lines) + "\n").encode()
    return client.files.create(file=("requests.jsonl", data), purpose="batch").id


def wait_final(client: openai.OpenAI, batch_id: str, timeout_s: float = 180) -> Batch:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in FINAL:
            return batch
        time.sleep(0.3)
    raise AssertionError(f"batch {batch_id} is still {batch.status} after {timeout_s} s")


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_chat_batch_answers_every_line_once_as_the_route_would(client: openai.OpenAI):
    lines = [request_line(f"q{i}", CHAT, chat_body(i)) for i in range(300)]
    lines.insert(7, request_line("bad-body", CHAT, {"model": "gpu-sim", "messages": "not a list"}))
    lines.insert(100, request_line("unknown-model", CHAT, {**chat_body(0), "model": "llama-9000"}))
    batch = client.batches.create(
        input_file_id=upload(client, lines), endpoint=CHAT, completion_window="24h", metadata={"run": "ci"}
    )
    assert batch.status == "validating"
    assert batch.metadata == {"run": "ci"}
    done = wait_final(client, batch.id)
    assert done.status == "completed", done.errors
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
        302,
        300,
        2,
    )
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    assert done.created_at <= done.in_progress_at <= done.finalizing_at <= done.completed_at

    output = lines_of(client, done.output_file_id)
    errors = lines_of(client, done.error_file_id)
    assert sorted(r["custom_id"] for r in output) == sorted(f"q{i}" for i in range(300))
    assert {r["custom_id"]: r["response"]["status_code"] for r in errors} == {
        "bad-body": 400,
        "unknown-model": 404,
    }
    assert errors[[r["custom_id"] for r in errors].index("unknown-model")]["response"]["body"]["error"][
        "code"
    ] == ("model_not_found")
    for result in output:
        i = int(result["custom_id"][1:])
        body = result["response"]["body"]
        assert result["error"] is None and result["response"]["status_code"] == 200
        assert result["id"].startswith("batch_req_")
        assert body["object"] == "chat.completion"
        expected = render_chat([ChatMessage(role="user", content=f"question {i}")])[::-1]
        assert body["choices"][0]["message"]["content"] == expected
    assert client.files.retrieve(done.output_file_id or "").purpose == "batch_output"
    # The batch's usage is its answers' usage, added up (the refused lines used nothing).
    answered = [r["response"]["body"]["usage"] for r in output]
    assert done.usage is not None
    assert done.usage.input_tokens == sum(u["prompt_tokens"] for u in answered) > 0
    assert done.usage.output_tokens == sum(u["completion_tokens"] for u in answered) > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens


def test_an_embeddings_batch_gives_a_vector_per_line(client: openai.OpenAI):
    texts = [f"sentence number {i} about cats" for i in range(60)]
    lines = [request_line(f"e{i}", EMBEDDINGS, {"model": "minilm", "input": t}) for i, t in enumerate(texts)]
    batch = client.batches.create(
        input_file_id=upload(client, lines), endpoint=EMBEDDINGS, completion_window="24h"
    )
    done = wait_final(client, batch.id)
    assert done.status == "completed"
    assert done.error_file_id is None
    output = lines_of(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in output) == sorted(f"e{i}" for i in range(60))
    direct = client.embeddings.create(model="minilm", input=texts[3]).data[0].embedding
    by_id = {r["custom_id"]: r["response"]["body"] for r in output}
    assert by_id["e3"]["object"] == "list"
    assert by_id["e3"]["data"][0]["embedding"] == pytest.approx(direct, abs=1e-5)
    assert done.usage is not None and done.usage.output_tokens == 0
    assert done.usage.input_tokens == sum(body["usage"]["prompt_tokens"] for body in by_id.values()) > 0


def test_an_invalid_file_fails_the_batch_with_numbered_errors(client: openai.OpenAI):
    lines = [
        request_line("a", CHAT, chat_body(1)),
        request_line("a", CHAT, chat_body(2)),
        request_line("b", EMBEDDINGS, chat_body(3)),
        "{not json",
    ]
    batch = client.batches.create(input_file_id=upload(client, lines), endpoint=CHAT, completion_window="24h")
    done = wait_final(client, batch.id, timeout_s=30)
    assert done.status == "failed" and done.failed_at
    assert done.errors is not None and done.errors.data is not None
    assert [(e.line, e.code) for e in done.errors.data] == [
        (2, "duplicate_custom_id"),
        (3, "invalid_request"),
        (4, "invalid_json_line"),
    ]
    assert done.output_file_id is None and done.error_file_id is None


# Runs thousands of lines: the runner's rule is under test here, not the store's flavour, which the chat
# batch above runs on both.
@PLAIN_REDIS_ONLY
def test_cancel_stops_the_lines_not_started_and_keeps_the_output_so_far(client: openai.OpenAI):
    total = 4000
    lines = [request_line(f"c{i}", CHAT, chat_body(i)) for i in range(total)]
    batch = client.batches.create(input_file_id=upload(client, lines), endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 120
    while (counts := client.batches.retrieve(batch.id).request_counts) is None or counts.completed == 0:
        assert time.monotonic() < deadline, "no line completed"
        time.sleep(0.05)
    assert client.files.delete(batch.input_file_id).deleted, "a running batch keeps its own copy"
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    done = wait_final(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    output = lines_of(client, done.output_file_id)
    errors = lines_of(client, done.error_file_id)
    ids = [r["custom_id"] for r in output + errors]
    assert sorted(ids) == sorted(f"c{i}" for i in range(total)), "every line once, in one file or the other"
    assert output, "lines run before the cancel keep their answers"
    assert {r["error"]["code"] for r in errors} == {"batch_cancelled"}
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (len(output), len(errors))


def test_another_tenant_cannot_see_list_read_or_cancel_a_batch_or_its_files(
    stack: Stack, client: openai.OpenAI
):
    file_id = upload(client, [request_line("x", CHAT, chat_body(1))])
    batch = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    other = openai.OpenAI(
        base_url=f"{stack.api}/v1", api_key=new_tenant_key(stack, "batch-intruder"), max_retries=0, timeout=60
    )
    for call in (
        lambda: other.files.retrieve(file_id),
        lambda: other.files.content(file_id),
        lambda: other.files.delete(file_id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert file_id not in [f.id for f in other.files.list()]
    assert batch.id not in [b.id for b in other.batches.list()]
    assert file_id in [f.id for f in client.files.list()]
    assert wait_final(client, batch.id).status == "completed"


def test_batches_are_listed_newest_first_a_page_at_a_time(client: openai.OpenAI):
    file_id = upload(client, [request_line("x", CHAT, chat_body(1))])
    made = [
        client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id
        for _ in range(3)
    ]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2]
    assert first.has_more
    second = client.batches.list(limit=2, after=first.data[-1].id)
    assert second.data[0].id == made[0]


def test_a_file_is_deleted_for_good(client: openai.OpenAI):
    file_id = upload(client, [request_line("x", CHAT, chat_body(1))])
    kept = client.files.retrieve(file_id)
    assert kept.bytes > 0
    assert kept.expires_at == kept.created_at + 30 * 86_400, "kept 30 days, as OpenAI keeps batch files"
    assert client.files.delete(file_id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file_id)


def test_what_cannot_be_honoured_is_refused_by_name(client: openai.OpenAI):
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("a.jsonl", b"{}\n"), purpose="assistants")
    file_id = upload(client, [request_line("x", CHAT, chat_body(1))])
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="1h")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        client.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")


# Runs thousands of lines: the runner's rule is under test here, not the store's flavour, which the chat
# batch above runs on both.
@PLAIN_REDIS_ONLY
def test_lines_not_started_when_the_window_ends_are_batch_expired(stack: Stack, client: openai.OpenAI):
    """A front door whose "24h" lasts 1 s (SYNAPSE_BATCH_WINDOW_S): the batch ends `expired`, each line
    once, the unstarted ones with `batch_expired`."""
    gateway, api = start_gateway(
        stack.env, stack.api_key, stack.logs, "gateway-short-window", batch_window_s="1"
    )
    try:
        short = openai.OpenAI(base_url=f"{api}/v1", api_key=stack.api_key, max_retries=0, timeout=60)
        total = 3000
        lines = [request_line(f"x{i}", CHAT, chat_body(i)) for i in range(total)]
        batch = short.batches.create(
            input_file_id=upload(short, lines), endpoint=CHAT, completion_window="24h"
        )
    finally:
        stop(gateway)
    assert batch.expires_at == batch.created_at + 1
    done = wait_final(client, batch.id)
    assert done.status == "expired" and done.expired_at
    output = lines_of(client, done.output_file_id)
    errors = lines_of(client, done.error_file_id)
    assert sorted(r["custom_id"] for r in output + errors) == sorted(f"x{i}" for i in range(total))
    expired = [r for r in errors if r["error"] is not None]
    assert expired and {r["error"]["code"] for r in expired} == {"batch_expired"}
    assert all(r["response"] is None for r in expired)
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (len(output), len(errors))


# Runs thousands of lines: the runner's rule is under test here, not the store's flavour, which the chat
# batch above runs on both.
@PLAIN_REDIS_ONLY
def test_a_file_larger_than_one_request_goes_through_the_uploads_api_in_parts(
    client: openai.OpenAI, tmp_path: Path
):
    padding = "p" * 900
    lines = [request_line(f"u{i}", CHAT, {**chat_body(i), "user": padding}) for i in range(10_000)]
    path = tmp_path / "large.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 2 * UPLOAD_PART_BYTES, "three parts at least"
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=path, purpose="batch")
    assert refused.value.status_code == 413
    done = client.uploads.upload_file_chunked(
        file=path, mime_type="text/jsonl", purpose="batch", part_size=UPLOAD_PART_BYTES
    )
    assert done.status == "completed" and done.file is not None
    assert done.file.bytes == path.stat().st_size
    assert client.files.content(done.file.id).read() == path.read_bytes()
    with pytest.raises(openai.APIStatusError) as twice:
        client.uploads.complete(done.id, part_ids=["part_x"])
    assert twice.value.status_code == 409


def test_an_upload_whose_parts_do_not_add_up_is_refused_and_can_be_cancelled(client: openai.OpenAI):
    upload = client.uploads.create(bytes=10, filename="a.jsonl", mime_type="text/jsonl", purpose="batch")
    part = client.uploads.parts.create(upload.id, data=b"12345")
    with pytest.raises(openai.BadRequestError, match="bytes"):
        client.uploads.complete(upload.id, part_ids=[part.id])
    assert client.uploads.cancel(upload.id).status == "cancelled"
    with pytest.raises(openai.APIStatusError):
        client.uploads.parts.create(upload.id, data=b"67890")


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    """A platform of its own, whose manager the test kills: gpu-sim slowed so that a batch is mid-way."""
    root = tmp_path_factory.mktemp("batch-faults")
    port = free_port()
    stack = FaultStack(root, port, fault_env(root, port, SYNAPSE_BATCH_LINES_IN_FLIGHT="200"))
    stack.start_redis()
    stack.start_worker("worker-1")
    stack.wait_workers_ready("worker-1")
    stack.start_gateway(max_queue_length=10_000)
    yield stack
    stack.stop_all()


@pytest.mark.slow
def test_kill9_of_the_manager_mid_batch_leaves_every_line_exactly_once(faults: FaultStack):
    faults.start_manager("manager-doomed")
    client = openai.OpenAI(base_url=f"{faults.api}/v1", api_key=faults.api_key, max_retries=0, timeout=60)
    total = 1200
    lines = [request_line(f"k{i}", CHAT, chat_body(i)) for i in range(total)]
    batch = client.batches.create(input_file_id=upload(client, lines), endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 120
    while (counts := client.batches.retrieve(batch.id).request_counts) is None or counts.completed < 300:
        assert time.monotonic() < deadline, "the batch did not get going"
        time.sleep(0.05)
    faults.kill9("manager-doomed")
    assert client.batches.retrieve(batch.id).status == "in_progress", "killed mid-way"
    faults.start_manager("manager-heir")
    done = wait_final(client, batch.id, timeout_s=300)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
        total,
        total,
        0,
    )
    output = lines_of(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in output) == sorted(f"k{i}" for i in range(total)), "each line once"
    added = faults.redis().xinfo_stream(stream_key("gpu-sim", "batch"))["entries-added"]
    assert added == total, "no line was submitted as a second job after the restart"


def final_through_restarts(client: openai.OpenAI, batch_id: str, timeout_s: float) -> Batch:
    """`wait_final`, for a store that restarts meanwhile: an answer the front door could not give (503
    while Redis is away) or a refused connection is asked again, as a polling client would."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return wait_final(client, batch_id, timeout_s=max(1.0, deadline - time.monotonic()))
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            if isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
                raise
            time.sleep(0.5)
    raise AssertionError(f"batch {batch_id} did not end within {timeout_s} s")


@pytest.mark.slow
def test_kill9_of_redis_mid_batch_leaves_every_line_exactly_once(faults: FaultStack):
    if not any(name.startswith("manager") for name in faults.procs):
        faults.start_manager("manager-r")
    client = openai.OpenAI(base_url=f"{faults.api}/v1", api_key=faults.api_key, max_retries=0, timeout=60)
    total = 1200
    lines = [request_line(f"s{i}", CHAT, chat_body(i)) for i in range(total)]
    batch = client.batches.create(input_file_id=upload(client, lines), endpoint=CHAT, completion_window="24h")
    added_before = faults.redis().xinfo_stream(stream_key("gpu-sim", "batch"))["entries-added"]
    deadline = time.monotonic() + 120
    while (counts := client.batches.retrieve(batch.id).request_counts) is None or counts.completed < 200:
        assert time.monotonic() < deadline, "the batch did not get going"
        time.sleep(0.05)
    faults.kill9("redis")
    faults.start_redis()  # on the same data folder: its append-only file brings the batch back
    done = final_through_restarts(client, batch.id, timeout_s=300)
    assert done.status == "completed"
    assert done.request_counts is not None
    counts = done.request_counts
    assert (counts.total, counts.completed, counts.failed) == (total, total, 0)
    output = lines_of(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in output) == sorted(f"s{i}" for i in range(total)), "each line once"
    added = faults.redis().xinfo_stream(stream_key("gpu-sim", "batch"))["entries-added"]
    assert added - added_before == total, "no line was submitted as a second job after the restart"
