"""The Batch API's records: files and batches as Redis hashes, and the objects OpenAI's API shows of them.

A file's bytes live in the file store (openai_api/file_store.py) under its tenant's prefix; its record
(`file:{id}`) says whose it is and what it holds. A batch's record (`batch:{id}`) holds the fields of
OpenAI's Batch object and the runner's state (manager/batch_runner.py): the next line to expand and the
counts of lines that ended. Both belong to one tenant: another tenant's id reads as unknown.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from contract.keys import batch_key, file_key
from contract.redis_client import SyncRedis

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
COMPLETION_WINDOW = "24h"
INPUT_PURPOSE = "batch"
OUTPUT_PURPOSE = "batch_output"
# A batch's stored `errors` list at most this many of its input file's problems (OpenAI lists a few too).
MAX_LISTED_ERRORS = 100
# Job ids of a batch's lines are derived from the batch and the line (uuid5), so that a runner restarted
# mid-expansion finds the job it made before instead of making a second.
_LINE_NAMESPACE = uuid.UUID("5f0d6b1c-7a4e-4d59-9d0f-2b8c1e7a9e31")


class BatchStatus(StrEnum):
    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED)


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


def output_file_id(batch_id: str, kind: str) -> str:
    """The batch's output or error file: a fixed id, so that a finaliser run twice writes the same file."""
    return f"file-{batch_id.removeprefix('batch_')}-{kind}"


def line_job_id(batch_id: str, line: int) -> str:
    return str(uuid.uuid5(_LINE_NAMESPACE, f"{batch_id}:{line}"))


@dataclass(frozen=True, slots=True)
class FileRecord:
    """A Files API file's record (`file:{id}`): whose it is and what it holds; its bytes are in the file
    store. `expires_at` is set when it is saved (openai_api/file_records.py)."""

    id: str
    tenant: str
    filename: str
    purpose: str
    size: int
    created_at: int
    expires_at: int | None = None

    def hash_fields(self) -> dict[str, str]:
        fields = {
            "id": self.id, "tenant": self.tenant, "filename": self.filename, "purpose": self.purpose,
            "bytes": str(self.size), "created_at": str(self.created_at),
        }  # fmt: skip
        if self.expires_at is not None:
            fields["expires_at"] = str(self.expires_at)
        return fields

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> FileRecord:
        return cls(
            id=fields["id"], tenant=fields["tenant"], filename=fields["filename"], purpose=fields["purpose"],
            size=int(fields["bytes"]), created_at=int(fields["created_at"]),
            expires_at=int(fields["expires_at"]) if fields.get("expires_at") else None,
        )  # fmt: skip

    def object(self) -> dict[str, Any]:
        """OpenAI's File object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }


def file_record_of(fields: Mapping[str, str]) -> FileRecord | None:
    """The record a `file:{id}` hash holds; None when it is gone."""
    return FileRecord.of(fields) if fields.get("id") else None


def read_file(client: SyncRedis, file_id: str) -> FileRecord | None:
    fields: dict[str, str] = client.hgetall(file_key(file_id))  # type: ignore[assignment]
    return file_record_of(fields)


# A batch's times (s), as OpenAI's Batch object names them; each set once, when the batch gets there.
TIMESTAMPS = (
    "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
    "cancelling_at", "cancelled_at",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A batch's record (`batch:{id}`): the fields of OpenAI's Batch object and the runner's state (the
    next line to expand, the lines' counts and tokens). Read whole in one place; written field by field
    by the routes' and the runner's scripts, which move its status."""

    id: str
    tenant: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: BatchStatus
    created_at: int
    expires_at: int
    max_inflight: int = 0
    metadata: str = "null"  # as stored (JSON)
    errors: str = ""  # as stored (JSON): a failed validation's problems
    output_file_id: str = ""
    error_file_id: str = ""
    total: int = 0
    completed: int = 0
    failed: int = 0
    next_line: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    times: Mapping[str, int] = field(default_factory=dict)  # TIMESTAMPS set so far, expires_at aside

    @property
    def expired_at(self) -> int | None:
        return self.times.get("expired_at")

    @property
    def lines_left(self) -> int:
        return self.total - self.completed - self.failed

    def hash_fields(self) -> dict[str, str]:
        """A new batch's hash: what the routes write when it is created."""
        return {
            "id": self.id, "tenant": self.tenant, "max_inflight": str(self.max_inflight),
            "endpoint": self.endpoint, "input_file_id": self.input_file_id,
            "completion_window": self.completion_window, "status": self.status.value,
            "created_at": str(self.created_at), "expires_at": str(self.expires_at), "metadata": self.metadata,
        }  # fmt: skip

    @classmethod
    def of(cls, fields: Mapping[str, str]) -> BatchRecord:
        get = fields.get
        return cls(
            id=fields["id"], tenant=fields["tenant"], endpoint=fields["endpoint"],
            input_file_id=fields["input_file_id"], completion_window=fields["completion_window"],
            status=BatchStatus(fields["status"]), created_at=int(fields["created_at"]),
            expires_at=int(fields["expires_at"]), max_inflight=int(get("max_inflight") or 0),
            metadata=get("metadata") or "null", errors=get("errors") or "",
            output_file_id=get("output_file_id") or "", error_file_id=get("error_file_id") or "",
            total=int(get("total") or 0), completed=int(get("completed") or 0),
            failed=int(get("failed") or 0), next_line=int(get("next_line") or 0),
            input_tokens=int(get("input_tokens") or 0), output_tokens=int(get("output_tokens") or 0),
            times={name: int(value) for name in TIMESTAMPS if name != "expires_at" and (value := get(name))},
        )  # fmt: skip

    def object(self) -> dict[str, Any]:
        """OpenAI's Batch object."""
        times: dict[str, int | None] = {name: self.times.get(name) for name in TIMESTAMPS}
        times["expires_at"] = self.expires_at
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": json.loads(self.errors) if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status.value,
            "output_file_id": self.output_file_id or None,
            "error_file_id": self.error_file_id or None,
            "created_at": self.created_at,
            **times,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "usage": self.usage(),
            "metadata": json.loads(self.metadata),
        }

    def usage(self) -> dict[str, Any]:
        """The tokens of the batch's answered lines so far, as OpenAI counts them. There is no prompt
        cache and no reasoning model here: those details are 0, not absent (the SDK requires them)."""
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


def batch_record_of(fields: Mapping[str, str]) -> BatchRecord | None:
    """The record a `batch:{id}` hash holds; None when it is gone."""
    return BatchRecord.of(fields) if fields.get("id") else None


def read_batch(client: SyncRedis, batch_id: str) -> BatchRecord | None:
    fields: dict[str, str] = client.hgetall(batch_key(batch_id))  # type: ignore[assignment]
    return batch_record_of(fields)


def error_list(problems: list[dict[str, Any]]) -> str:
    """A batch's `errors` as stored: OpenAI's list object of {code, message, param, line}."""
    return json.dumps({"object": "list", "data": problems[:MAX_LISTED_ERRORS]}, separators=(",", ":"))
