"""OpenAI's Uploads API: a file larger than one request may carry, sent in parts, then assembled into a
Files API file (`client.uploads.upload_file_chunked(..., part_size=UPLOAD_PART_BYTES)`).

Why parts of UPLOAD_PART_BYTES (4,000,000 bytes): a request's body is at most `MAX_BODY_BYTES` (4 MiB)
at the front door, which keeps it under Lambda's 6 MB request payload even when API Gateway hands a
binary body over base64-encoded (4/3 larger: 5.6 MB), and far under API Gateway's 10 MB. A part of
4,000,000 bytes leaves the rest of the 4 MiB for the multipart form's boundaries and headers. The SDK's
default part (64 MiB) is refused with 413, which names this size.

Completion never holds the whole file (a 200 MB file in a 512 MB front door): the parts are read one at
a time, in the client's order, checked on the way (md5, UTF-8) and streamed into the file (FileStore.write:
a folder's file, or an S3 multipart upload of 8 MiB parts, since S3's parts but the last must be 5 MiB
and ours are 4,000,000 bytes; the order is only known at completion, so the S3 parts are made there).
"""

from __future__ import annotations

import codecs
import hashlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import BaseModel, ConfigDict, Field

from contract.batches import INPUT_PURPOSE, FileRecord, new_file_id
from contract.keys import upload_key, upload_parts_key
from frontdoor.files_routes import files, form_parts, request_bytes
from frontdoor.openapi import API_KEY_OR_BEARER, errors, ok
from frontdoor.responses import json_response, problem_response
from frontdoor.services import redis_client, settings
from frontdoor.tenancy import caller_of
from frontdoor.upload_record import UploadRecord, upload_record_of
from openai_api.answer_schemas import OpenAIErrorBody
from openai_api.batch_schemas import UploadObject, UploadPart
from openai_api.errors import Problem
from openai_api.file_records import save_record

UPLOAD_PART_BYTES = 4_000_000
UTF8_CHECK_BYTES = 1 << 20  # a part is checked as UTF-8 this much at a time


class UploadRequest(BaseModel):
    """`POST /v1/uploads` body; any other field (`expires_after`) is refused by name."""

    model_config = ConfigDict(extra="forbid")

    bytes: int = Field(ge=1, description="the whole file's size")
    filename: str = Field(min_length=1, max_length=256)
    mime_type: str = Field(min_length=1, max_length=128)
    purpose: Literal["batch"]


class CompleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    part_ids: list[str] = Field(min_length=1, max_length=10_000)
    md5: str | None = Field(None, min_length=32, max_length=32)


def upload_not_found(upload_id: str) -> Problem:
    return Problem(404, "upload_not_found", f"No such upload: {upload_id!r}", param="upload_id")


def open_upload(upload_id: str, tenant: str) -> UploadRecord | Problem:
    """The tenant's upload while parts may still be added; another tenant's is unknown."""
    fields: dict[str, str] = redis_client().hgetall(upload_key(upload_id))  # type: ignore[assignment]
    record = upload_record_of(fields)
    if record is None or record.tenant != tenant:
        return upload_not_found(upload_id)
    if record.status != "pending":
        return Problem(409, "upload_not_pending", f"the upload is {record.status}", param="upload_id")
    if time.time() > record.expires_at:
        return Problem(409, "upload_expired", "the upload expired: uploads last an hour", param="upload_id")
    return record


def add_part(upload_id: str, tenant: str, event: Any) -> Problem | dict[str, Any]:
    record = open_upload(upload_id, tenant)
    if isinstance(record, Problem):
        return record
    part = form_parts(event.headers.get("content-type") or "", request_bytes(event)).get("data")
    data = None if part is None else part.get_payload(decode=True)
    if not isinstance(data, bytes) or not data:
        return Problem(400, "missing_data", "send the part as the form's `data` field", param="data")
    part_id = f"part_{uuid.uuid4().hex}"
    files().put(tenant, f"{upload_id}.{part_id}", data)
    redis_client().hset(upload_parts_key(upload_id), part_id, str(len(data)))
    return {"id": part_id, "object": "upload.part", "created_at": int(time.time()), "upload_id": upload_id}


def complete(upload_id: str, tenant: str, request: CompleteRequest) -> Problem | dict[str, Any]:
    """Assembles the parts in the order given into a file; the declared size and md5 must match."""
    record = open_upload(upload_id, tenant)
    if isinstance(record, Problem):
        return record
    sizes: dict[str, str] = redis_client().hgetall(upload_parts_key(upload_id))  # type: ignore[assignment]
    unknown = [p for p in request.part_ids if p not in sizes]
    if unknown:
        return Problem(400, "unknown_part", f"no part {unknown[0]!r} in this upload", param="part_ids")
    if sum(int(sizes[p]) for p in request.part_ids) != record.size:
        message = f"the parts hold a different number of bytes than the {record.size} the upload declared"
        return Problem(400, "size_mismatch", message, param="part_ids")
    file_id = new_file_id()
    try:
        size = files().write(tenant, file_id, checked_parts(upload_id, tenant, request))
    except PartsRefusedError as refused:
        return refused.problem
    made = FileRecord(
        file_id, tenant, filename=record.filename, purpose=INPUT_PURPOSE, size=size,
        created_at=int(time.time()),
    )  # fmt: skip
    saved = save_record(redis_client(), made, settings().file_retention_days)
    redis_client().hset(upload_key(upload_id), mapping={"status": "completed", "file_id": saved.id})
    discard_parts(upload_id, tenant, list(sizes))
    return replace(record, status="completed").object(saved.object())


class PartsRefusedError(Exception):
    """The parts, read through, are not the file the client described: the file is not written."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def checked_parts(upload_id: str, tenant: str, request: CompleteRequest) -> Iterator[bytes]:
    """The parts' bytes in the order given, one part at a time, checked as they pass: UTF-8 text (a batch
    input is JSONL) and, once all are read, the md5 given. A failed check raises before the file is whole."""
    digest = hashlib.md5(usedforsecurity=False)
    text = codecs.getincrementaldecoder("utf-8")()
    try:
        for part_id in request.part_ids:
            data = files().get(tenant, f"{upload_id}.{part_id}") or b""
            digest.update(data)
            view = memoryview(data)
            for start in range(0, len(data), UTF8_CHECK_BYTES):  # the text decoded is dropped at once
                text.decode(view[start : start + UTF8_CHECK_BYTES])
            yield data
        text.decode(b"", final=True)
    except UnicodeDecodeError:
        refused = Problem(400, "invalid_file", "a batch input file is JSONL: UTF-8 text", param="part_ids")
        raise PartsRefusedError(refused) from None
    if request.md5 is not None and digest.hexdigest() != request.md5.lower():
        raise PartsRefusedError(
            Problem(400, "md5_mismatch", "the parts' md5 is not the one given", param="md5")
        )


def discard_parts(upload_id: str, tenant: str, part_ids: list[str]) -> None:
    for part_id in part_ids:
        files().delete(tenant, f"{upload_id}.{part_id}")
    redis_client().delete(upload_parts_key(upload_id))


def uploads_router() -> Router:
    router = Router()  # type: ignore[no-untyped-call]

    def answer(found: Problem | dict[str, Any]) -> Response[str]:
        if isinstance(found, Problem):
            return problem_response(router.current_event.path, found)
        return json_response(200, found)

    def tenant() -> str:
        return caller_of(router.current_event).tenant

    @router.post(
        "/v1/uploads",
        operation_id="createUpload",
        summary="Start an upload of a file too large for one request",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, UploadObject, "the upload, pending"), **errors(OpenAIErrorBody, 400, 401, 403)},
    )
    def create_upload(request: UploadRequest) -> Response[str]:
        limit = settings().batch_max_file_bytes
        if request.bytes > limit:
            message = f"a batch input file is at most {limit} bytes"
            return answer(Problem(400, "file_too_large", message, param="bytes"))
        record = UploadRecord(
            id=f"upload_{uuid.uuid4().hex}", tenant=tenant(), filename=request.filename,
            purpose=request.purpose, size=request.bytes, status="pending", created_at=int(time.time()),
        )  # fmt: skip
        pipe = redis_client().pipeline(transaction=True)
        pipe.hset(upload_key(record.id), mapping=record.hash_fields())
        pipe.expire(upload_key(record.id), settings().job_ttl_s)
        pipe.execute()
        return answer(record.object())

    @router.post(
        "/v1/uploads/<upload_id>/parts",
        operation_id="addUploadPart",
        summary=f"Add a part (multipart/form-data: data) of at most {UPLOAD_PART_BYTES} bytes",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, UploadPart, "the part"),
            **errors(OpenAIErrorBody, 400, 401, 403, 404, 409, 413),
        },
    )
    def add_upload_part(upload_id: str) -> Response[str]:
        return answer(add_part(upload_id, tenant(), router.current_event))

    @router.post(
        "/v1/uploads/<upload_id>/complete",
        operation_id="completeUpload",
        summary="Assemble the parts, in the order given, into a file",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, UploadObject, "the upload, completed, with its file"),
            **errors(OpenAIErrorBody, 400, 401, 403, 404, 409),
        },
    )
    def complete_upload(upload_id: str, request: CompleteRequest) -> Response[str]:
        return answer(complete(upload_id, tenant(), request))

    @router.post(
        "/v1/uploads/<upload_id>/cancel",
        operation_id="cancelUpload",
        summary="Cancel an upload; its parts are discarded",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, UploadObject, "the upload, cancelled"),
            **errors(OpenAIErrorBody, 401, 403, 404, 409),
        },
    )
    def cancel_upload(upload_id: str) -> Response[str]:
        record = open_upload(upload_id, tenant())
        if isinstance(record, Problem):
            return answer(record)
        parts: list[str] = redis_client().hkeys(upload_parts_key(upload_id))  # type: ignore[assignment]
        redis_client().hset(upload_key(upload_id), "status", "cancelled")
        discard_parts(upload_id, record.tenant, parts)
        return answer(replace(record, status="cancelled").object())

    return router
