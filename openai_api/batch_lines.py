"""A Batch API input file's lines: checked as OpenAI checks them, made into jobs by the very code the /v1
routes use (`completion_job`, `embedding_job`), and their results shaped as those routes answer.

So a line is refused for what its /v1 request would be refused for (an unknown model, a bad body, a
prompt over the limit), with the same status and error body, and a line's `response.body` is the JSON
the route would have returned.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from contract.catalog import Catalog
from contract.job_record import JobRecord
from contract.jobs import Job, JobStatus, Priority
from contract.settings import Settings
from openai_api.completions import completion_job
from openai_api.embedding_schemas import EmbeddingRequest
from openai_api.embeddings import embedding_job, embedding_list
from openai_api.errors import Problem, openai_body
from openai_api.format import answer_from, chat_completion, completion, failure_problem, shape_of
from openai_api.json_body import describe_validation_errors, strict_json_loads
from openai_api.schemas import ChatCompletionRequest, CompletionRequest

REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/embeddings": EmbeddingRequest,
}
PROMPT_PARAMS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt", "/v1/embeddings": "input"}


@dataclass(frozen=True, slots=True)
class Line:
    """One request of a batch: its custom_id and its body, as the endpoint's route would read it."""

    custom_id: str
    body: dict[str, Any]


def line_problem(line: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """One entry of a failed batch's `errors` (OpenAI's BatchError; `line` counts from 1)."""
    return {"code": code, "message": message, "param": param, "line": line}


def line_spans(chunks: Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """Each line of a file read in chunks: its number (from 1), its first byte's offset and its bytes
    (without the newline). Lines end at b"\\n" only, as JSONL's do: a JSON string may hold U+2028 raw."""
    number, offset, carry = 0, 0, b""
    for chunk in chunks:
        buffer, start = carry + chunk if carry else chunk, 0
        while (end := buffer.find(b"\n", start)) >= 0:
            number += 1
            yield number, offset + start, buffer[start:end]
            start = end + 1
        offset, carry = offset + start, buffer[start:]
    if carry:
        yield number + 1, offset, carry


def parse_line(raw: bytes) -> Any:
    """A line's JSON value; ValueError (UnicodeDecodeError is one) when it is not UTF-8 JSON."""
    return strict_json_loads(raw.decode("utf-8"))


def scan_input(
    chunks: Iterable[bytes], endpoint: str, max_lines: int
) -> tuple[array[int], list[dict[str, Any]]]:
    """Where each request line lies (`spans`: a flat array of start, end byte offsets), or the problems
    that fail the batch: each line an object {custom_id, method: POST, url: the endpoint, body: an
    object}, custom_ids unique, at most `max_lines` of them. One pass; a line is held while it is read,
    and of each line only its span and a 16-byte digest of its custom_id are kept."""
    spans: array[int] = array("q")
    problems: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    count, first_over = 0, 0
    for number, start, raw in line_spans(chunks):
        if not raw.strip():
            continue
        count += 1
        if count > max_lines:
            first_over = first_over or number
            continue
        try:
            value = parse_line(raw)
        except ValueError as exc:
            problems.append(line_problem(number, "invalid_json_line", f"the line is not valid JSON: {exc}"))
            continue
        found = line_shape_problem(value, endpoint)
        if found is not None:
            problems.append(line_problem(number, "invalid_request", found[0], found[1]))
            continue
        digest = hashlib.blake2b(value["custom_id"].encode("utf-8"), digest_size=16).digest()
        if digest in seen:
            message = f"custom_id {value['custom_id']!r} is used by an earlier line: each must be unique"
            problems.append(line_problem(number, "duplicate_custom_id", message, "custom_id"))
            continue
        seen.add(digest)
        spans.extend((start, start + len(raw)))
    if not count:
        return spans, [line_problem(1, "empty_file", "the input file holds no requests")]
    if first_over:
        message = f"the input file holds {count} requests, over the limit of {max_lines}"
        return array("q"), [line_problem(first_over, "too_many_requests", message)]
    return spans, problems


def request_spans(chunks: Iterable[bytes]) -> array[int]:
    """The spans `scan_input` gives for a file it passed, found again without parsing a line (a tenth of
    the time: a restarted runner finds a 200 MB batch's lines well inside its lease)."""
    spans: array[int] = array("q")
    for _, start, raw in line_spans(chunks):
        if raw.strip():
            spans.extend((start, start + len(raw)))
    return spans


def read_line(raw: bytes) -> Line:
    """A line of an input file that passed `scan_input`."""
    value = parse_line(raw)
    return Line(value["custom_id"], value["body"])


_ENVELOPE = ("custom_id", "method", "url", "body")


def line_shape_problem(value: Any, endpoint: str) -> tuple[str, str | None] | None:
    """What is wrong with a line's envelope (not its body: that is the route's to judge), and its field."""
    if not isinstance(value, dict):
        return "each line must be a JSON object", None
    extra = sorted(set(value) - set(_ENVELOPE))
    checks: list[tuple[bool, str, str | None]] = [
        (
            not extra,
            f"unknown field {extra[0]!r}: a line has {', '.join(_ENVELOPE)}" if extra else "",
            (extra or [None])[0],
        ),
        (
            isinstance(value.get("custom_id"), str) and bool(value["custom_id"]),
            "custom_id must be a non-empty string",
            "custom_id",
        ),
        (value.get("method") == "POST", "method must be POST", "method"),
        (value.get("url") == endpoint, f"url must be the batch's endpoint, {endpoint}", "url"),
        (isinstance(value.get("body"), dict), "body must be a JSON object", "body"),
    ]
    return next(((message, param) for passed, message, param in checks if not passed), None)


def parsed_request(endpoint: str, body: dict[str, Any]) -> BaseModel | Problem:
    try:
        request = REQUEST_MODELS[endpoint].model_validate(body)
    except ValidationError as exc:
        return describe_validation_errors(exc.errors())
    if getattr(request, "stream", False):
        return Problem(400, "unsupported_parameter", "stream is not supported in a batch", param="stream")
    return request


def line_job(
    endpoint: str,
    body: dict[str, Any],
    *,
    cfg: Settings,
    catalog: Catalog,
    tenant: str,
    timeout_ms: int,
    job_id: str,
) -> Job | Problem:
    """The line's job at batch priority, or its refusal, as the endpoint's /v1 route would decide it."""
    request = parsed_request(endpoint, body)
    if isinstance(request, Problem):
        return request
    if isinstance(request, EmbeddingRequest):
        return embedding_job(
            request,
            cfg=cfg,
            catalog=catalog,
            tenant=tenant,
            timeout_ms=timeout_ms,
            priority=Priority.BATCH,
            job_id=job_id,
        )
    assert isinstance(request, CompletionRequest | ChatCompletionRequest)
    return completion_job(
        request,
        cfg=cfg,
        catalog=catalog,
        tenant=tenant,
        timeout_ms=timeout_ms,
        priority=Priority.BATCH,
        job_id=job_id,
    )


def line_answer(endpoint: str, body: dict[str, Any], record: JobRecord) -> tuple[int, dict[str, Any]]:
    """A final job's HTTP status and body, as the endpoint's route answers them."""
    if record.status is not JobStatus.COMPLETED:
        found = failure_problem(
            record.status, record.error_code, record.error_message, record.id, PROMPT_PARAMS[endpoint]
        )
        return found.status, openai_body(found)
    request = parsed_request(endpoint, body)
    if isinstance(request, EmbeddingRequest):
        return 200, embedding_list(request, record)
    if isinstance(request, CompletionRequest):
        return 200, completion(answer_from(record), shape_of(request)).model_dump(mode="json")
    assert isinstance(request, ChatCompletionRequest)
    return 200, chat_completion(answer_from(record), shape_of(request)).model_dump(mode="json")


def result_line(
    custom_id: str, job_id: str, status: int | None, body: dict[str, Any] | None, error: dict[str, str] | None
) -> str:
    """A line of the output or error file, as OpenAI writes it."""
    response = None if status is None else {"status_code": status, "request_id": job_id, "body": body}
    value = {
        "id": f"batch_req_{job_id.replace('-', '')}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
