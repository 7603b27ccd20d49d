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
from enum import StrEnum
from typing import Any

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


def file_record(
    file_id: str, tenant: str, *, filename: str, purpose: str, size: int, created_at: int
) -> dict[str, str]:
    return {
        "id": file_id,
        "tenant": tenant,
        "filename": filename,
        "purpose": purpose,
        "bytes": str(size),
        "created_at": str(created_at),
    }


def file_object(record: Mapping[str, str]) -> dict[str, Any]:
    """OpenAI's File object."""
    return {
        "id": record["id"],
        "object": "file",
        "bytes": int(record["bytes"]),
        "created_at": int(record["created_at"]),
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": "processed",
        "expires_at": int(record["expires_at"]) if record.get("expires_at") else None,
        "status_details": None,
    }


_TIMESTAMPS = (
    "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
    "cancelling_at", "cancelled_at",
)  # fmt: skip


def batch_object(record: Mapping[str, str]) -> dict[str, Any]:
    """OpenAI's Batch object of a batch's record."""
    errors = record.get("errors")
    return {
        "id": record["id"],
        "object": "batch",
        "endpoint": record["endpoint"],
        "errors": json.loads(errors) if errors else None,
        "input_file_id": record["input_file_id"],
        "completion_window": record["completion_window"],
        "status": record["status"],
        "output_file_id": record.get("output_file_id") or None,
        "error_file_id": record.get("error_file_id") or None,
        "created_at": int(record["created_at"]),
        **{name: int(record[name]) if record.get(name) else None for name in _TIMESTAMPS},
        "request_counts": {
            "total": int(record.get("total") or 0),
            "completed": int(record.get("completed") or 0),
            "failed": int(record.get("failed") or 0),
        },
        "usage": batch_usage(record),
        "metadata": json.loads(record.get("metadata") or "null"),
    }


def batch_usage(record: Mapping[str, str]) -> dict[str, Any]:
    """The tokens of the batch's answered lines so far, as OpenAI counts them. There is no prompt cache
    and no reasoning model here: those details are 0, not absent (the SDK requires them)."""
    tokens_in, tokens_out = int(record.get("input_tokens") or 0), int(record.get("output_tokens") or 0)
    return {
        "input_tokens": tokens_in,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + tokens_out,
    }


def error_list(problems: list[dict[str, Any]]) -> str:
    """A batch's `errors` as stored: OpenAI's list object of {code, message, param, line}."""
    return json.dumps({"object": "list", "data": problems[:MAX_LISTED_ERRORS]}, separators=(",", ":"))
