"""A job's hash as a typed value: read from Redis once (`JobRecord.of`), then passed around as such.

The front door, the manager and the tests read a job's state through this record, never by parsing
the hash's strings where they use them; `public_view` is how clients see it (`GET /results/{jobId}`,
callbacks, the end of an event stream).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contract.embeddings import EncodingFormat, result_view
from contract.jobs import DEFAULT_TENANT, EmbeddingOptions, JobStatus, Priority, ResultKind
from contract.keys import job_key
from contract.redis_client import AsyncRedis

# What a listing reads of each job (GET /jobs): its view without the result, which may be large.
SUMMARY_FIELDS = (
    "id", "model", "status", "created_ms", "started_ms", "completed_ms", "batch_size", "priority",
    "retry_of", "retried_by", "error_code", "error_message", "callback", "callback_status",
    "callback_attempts", "callback_error",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CallbackState:
    """Where the job's end is announced and how that went: pending until delivered or given up."""

    url: str
    status: str
    attempts: int
    last_error: str

    def view(self) -> dict[str, Any]:
        view: dict[str, Any] = {"url": self.url, "status": self.status, "attempts": self.attempts}
        if self.last_error:
            view["lastError"] = self.last_error
        return view


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job's state: its status, timings, result or error, and links to its retries.

    `result` is the stored JSON, parsed only by whoever shows it (it may be megabytes of vectors);
    `result_kind` says what it holds. A listing's record (`SUMMARY_FIELDS`) has no result, and its
    `max_tokens` and `deadline_ms` read 0.
    """

    id: str
    model: str
    status: JobStatus
    created_ms: int
    priority: Priority
    tenant: str
    max_tokens: int
    deadline_ms: int
    started_ms: int | None
    completed_ms: int | None
    batch_size: int
    result: str
    result_kind: ResultKind | None
    parameters: str  # as stored (JSON): read only by a view of vectors, for their encoding
    error_code: str
    error_message: str
    retry_of: str
    retried_by: str
    callback: CallbackState | None
    sns_status: str = ""  # the outcome topic's channel: "" while owed, then delivered or undeliverable
    sns_attempts: int = 0
    request: str = ""  # the API request its route stored to read back (Job.request)

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> JobRecord:
        """The record a job hash (or a listing's part of it) holds."""
        get = fields.get
        kind = get("result_kind")
        callback = None
        if get("callback"):
            callback = CallbackState(
                url=fields["callback"],
                status=get("callback_status") or "pending",
                attempts=int(get("callback_attempts") or 0),
                last_error=get("callback_error") or "",
            )
        return cls(
            id=fields["id"],
            model=fields["model"],
            status=JobStatus(fields["status"]),
            created_ms=int(fields["created_ms"]),
            priority=Priority(get("priority") or Priority.INTERACTIVE),
            tenant=get("tenant") or DEFAULT_TENANT,
            max_tokens=int(get("max_tokens") or 0),
            deadline_ms=int(get("deadline_ms") or 0),
            started_ms=_int_or_none(get("started_ms")),
            completed_ms=_int_or_none(get("completed_ms")),
            batch_size=int(get("batch_size") or 0),
            result=get("result") or "",
            result_kind=ResultKind(kind) if kind else None,
            parameters=get("parameters") or "",
            error_code=get("error_code") or "",
            error_message=get("error_message") or "",
            retry_of=get("retry_of") or "",
            retried_by=get("retried_by") or "",
            callback=callback,
            sns_status=get("sns_status") or "",
            sns_attempts=int(get("sns_attempts") or 0),
            request=get("request") or "",
        )

    @property
    def encoding(self) -> EncodingFormat:
        """How an embedding job asked for its vectors."""
        return EmbeddingOptions.of(json.loads(self.parameters or "{}")).encoding_format

    @property
    def holds_vectors(self) -> bool:
        """A COMPLETED embedding job: its result is vectors, not text."""
        return self.status is JobStatus.COMPLETED and self.result_kind is ResultKind.VECTORS

    def result_json(self) -> dict[str, Any]:
        """The stored result, parsed (a COMPLETED job's)."""
        parsed: dict[str, Any] = json.loads(self.result)
        return parsed


def record_of(fields: Mapping[str, str]) -> JobRecord | None:
    """The record a job hash holds; None for none: a hash that is gone, or one with no status (a stray
    field written after its job expired)."""
    return JobRecord.of(fields) if fields.get("status") else None


async def read_record(redis: AsyncRedis, job_id: str) -> JobRecord | None:
    """A job's record, read by an asyncio reader (the streaming server); None when there is no job."""
    fields: dict[str, str] = await redis.hgetall(job_key(job_id))  # type: ignore[misc]
    return record_of(fields)


def status_of(fields: Mapping[str, str]) -> JobStatus | None:
    """The status alone, for checks that need no more of the record; None when the hash is gone."""
    return parse_status(fields.get("status") or "")


def parse_status(text: str) -> JobStatus | None:
    """A status as a hash or a script reply spells it; None for none (the job is gone)."""
    return JobStatus(text) if text else None


def is_final(fields: Mapping[str, str]) -> bool:
    """Whether the job has ended (False for a hash that is gone: a reader watches it further)."""
    status = status_of(fields)
    return status is not None and status.is_final


def public_view(record: JobRecord, *, with_result: bool = True) -> dict[str, Any]:
    """The job as `GET /results/{jobId}` shows it to clients (a listing: without its result)."""
    status = record.status
    view: dict[str, Any] = {
        "jobId": record.id,
        "status": status.value,
        "model": record.model,
        "createdAt": _iso(record.created_ms),
        "priority": record.priority.value,
    }
    if record.retry_of:
        view["retryOf"] = record.retry_of
    if record.retried_by:
        view["retriedBy"] = record.retried_by
    if record.callback is not None:
        view["callback"] = record.callback.view()
    if status is JobStatus.COMPLETED and with_result:
        result = record.result_json()
        view["result"] = result_view(result, record.encoding) if record.holds_vectors else result
    if status in (JobStatus.FAILED, JobStatus.CANCELLED):
        view["error"] = {"code": record.error_code, "message": record.error_message}
    if status.is_final:
        completed = record.completed_ms if record.completed_ms is not None else record.created_ms
        started = record.started_ms or completed
        view["completedAt"] = _iso(completed)
        view["timings"] = {
            "queueMs": max(0, started - record.created_ms),
            "inferMs": max(0, completed - started),
            "totalMs": max(0, completed - record.created_ms),
            "batchSize": record.batch_size,
        }
    return view


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value else None


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"
