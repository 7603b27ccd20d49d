"""OpenAI's Files API, for the Batch API's input and output files: upload, list, read, download, delete.

A file belongs to the tenant that uploaded it (or whose batch wrote it): another tenant's id answers 404
like an unknown one. An upload is one multipart request, so it is bounded by the front door's body limit
(`MAX_BODY_BYTES`, under Lambda's 6 MB request payload); the message of a larger one says so.
"""

from __future__ import annotations

import base64
import time
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from functools import cache
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from contract.batches import INPUT_PURPOSE, FileRecord, file_record_of, new_file_id, read_file
from contract.keys import file_key, tenant_files_key
from contract.redis_client import SyncRedis
from frontdoor.openapi import API_KEY_OR_BEARER, errors, ok
from frontdoor.responses import json_response, problem_response
from frontdoor.services import redis_client, settings
from frontdoor.tenancy import caller_of
from openai_api.answer_schemas import OpenAIErrorBody
from openai_api.batch_schemas import FileDeleted, FileList, FileObject
from openai_api.errors import Problem
from openai_api.file_records import save_file
from openai_api.file_store import FileStore, file_store_for

MULTIPART = "multipart/form-data"
FILES_PATH = "/v1/files"
OCTET_STREAM = "application/octet-stream"
FILE_BYTES: OpenAPIResponse = {
    "description": "the file's bytes: JSONL",
    "content": {OCTET_STREAM: {"schema": {"type": "string"}}},
}
MAX_FILES_PAGE = 10_000  # OpenAI's limit of GET /v1/files
FileLimit = Annotated[int, Query(ge=1, le=MAX_FILES_PAGE, description="files per page")]
After = Annotated[
    str | None, Query(min_length=1, max_length=128, description="the last id of the page before")
]
Purpose = Annotated[str | None, Query(min_length=1, max_length=64, description="only files of this purpose")]


@cache
def files() -> FileStore:
    """The file store of this execution environment."""
    return file_store_for(settings())


def file_not_found(file_id: str) -> Problem:
    return Problem(404, "file_not_found", f"No such file: {file_id!r}", param="file_id")


def owned_file(client: SyncRedis, file_id: str, tenant: str) -> FileRecord | None:
    """The file's record if the tenant owns it; None for another tenant's, as for an unknown id."""
    record = read_file(client, file_id)
    return record if record is not None and record.tenant == tenant else None


def page_of(client: SyncRedis, index: str, after: str | None, limit: int) -> tuple[list[str], bool]:
    """Ids of an index (newest first) after the cursor id, and whether more follow."""
    start = 0
    if after is not None:
        rank: int | None = client.zrevrank(index, after)  # type: ignore[assignment]
        start = 0 if rank is None else rank + 1
    ids: list[str] = client.zrevrange(index, start, start + limit)  # type: ignore[assignment]
    return ids[:limit], len(ids) > limit


def list_page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def request_bytes(event: Any) -> bytes:
    body: str = event.body or ""
    return base64.b64decode(body) if event.is_base64_encoded else body.encode("utf-8", "surrogatepass")


def form_parts(content_type: str, data: bytes) -> dict[str, EmailMessage]:
    """The parts of a multipart/form-data body by field name (RFC 7578), read by the standard library's
    MIME parser."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + data)
    if not isinstance(message, EmailMessage) or not message.is_multipart():
        return {}
    parts: dict[str, EmailMessage] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(part, EmailMessage) and isinstance(name, str):
            parts[name] = part
    return parts


def upload(event: Any, tenant: str) -> Problem | dict[str, Any]:
    """Stores a multipart upload's `file` for `purpose` batch; its record's File object."""
    content_type = event.headers.get("content-type") or ""
    if content_type.split(";", 1)[0].strip().lower() != MULTIPART:
        return Problem(415, "unsupported_media_type", f"send the file as {MULTIPART}")
    parts = form_parts(content_type, request_bytes(event))
    purpose_part, file_part = parts.get("purpose"), parts.get("file")
    purpose = "" if purpose_part is None else str(purpose_part.get_content()).strip()
    if purpose != INPUT_PURPOSE:
        message = f"purpose must be {INPUT_PURPOSE!r}: the platform stores files for the Batch API only"
        return Problem(400, "invalid_purpose", message, param="purpose")
    if file_part is None:
        return Problem(400, "missing_file", "the form has no `file` part", param="file")
    data = file_part.get_payload(decode=True)
    if not isinstance(data, bytes) or not data:
        return Problem(400, "empty_file", "the file is empty", param="file")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return Problem(400, "invalid_file", "a batch input file is JSONL: UTF-8 text", param="file")
    filename = file_part.get_filename() or "upload.jsonl"
    record = FileRecord(
        new_file_id(),
        tenant,
        filename=filename[:256],
        purpose=purpose,
        size=len(data),
        created_at=int(time.time()),
    )
    return save_file(redis_client(), files(), record, data, settings().file_retention_days).object()


def listing(tenant: str, purpose: str | None, limit: int, after: str | None) -> dict[str, Any]:
    client = redis_client()
    ids, has_more = page_of(client, tenant_files_key(tenant), after, limit)
    pipe = client.pipeline(transaction=False)
    for file_id in ids:
        pipe.hgetall(file_key(file_id))
    records = [r for fields in pipe.execute() if (r := file_record_of(fields)) is not None]
    return list_page([r.object() for r in records if purpose is None or r.purpose == purpose], has_more)


def delete(file_id: str, tenant: str) -> bool:
    """Deletes the tenant's file: its record first, so that no reader finds a record without bytes."""
    client = redis_client()
    if owned_file(client, file_id, tenant) is None:
        return False
    pipe = client.pipeline(transaction=True)
    pipe.delete(file_key(file_id))
    pipe.zrem(tenant_files_key(tenant), file_id)
    pipe.execute()
    files().delete(tenant, file_id)
    return True


def files_router() -> Router:
    router = Router()  # type: ignore[no-untyped-call]

    def problem(found: Problem) -> Response[str]:
        return problem_response(router.current_event.path, found)

    def tenant() -> str:
        return caller_of(router.current_event).tenant

    @router.post(
        FILES_PATH,
        operation_id="createFile",
        summary="Upload a JSONL file of batch requests (multipart/form-data: file, purpose=batch)",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, FileObject, "the file"), **errors(OpenAIErrorBody, 400, 401, 403, 413, 415)},
    )
    def create_file() -> Response[str]:
        found = upload(router.current_event, tenant())
        return problem(found) if isinstance(found, Problem) else json_response(200, found)

    @router.get(
        FILES_PATH,
        operation_id="listFiles",
        summary="The caller's files, newest first",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, FileList, "a page of files"), **errors(OpenAIErrorBody, 400, 401, 403)},
    )
    def list_files(
        purpose: Purpose = None, limit: FileLimit = MAX_FILES_PAGE, after: After = None
    ) -> Response[str]:
        return json_response(200, listing(tenant(), purpose, limit, after))

    @router.get(
        "/v1/files/<file_id>",
        operation_id="retrieveFile",
        summary="One of the caller's files",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, FileObject, "the file"), **errors(OpenAIErrorBody, 401, 403, 404)},
    )
    def retrieve_file(file_id: str) -> Response[str]:
        record = owned_file(redis_client(), file_id, tenant())
        return problem(file_not_found(file_id)) if record is None else json_response(200, record.object())

    @router.get(
        "/v1/files/<file_id>/content",
        operation_id="downloadFile",
        summary="The bytes of one of the caller's files",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={200: FILE_BYTES, **errors(OpenAIErrorBody, 401, 403, 404)},
    )
    def file_content(file_id: str) -> Response[str]:
        record = owned_file(redis_client(), file_id, tenant())
        data = None if record is None else files().get(record.tenant, file_id)
        if data is None:
            return problem(file_not_found(file_id))
        return Response(200, OCTET_STREAM, data.decode("utf-8"))

    @router.delete(
        "/v1/files/<file_id>",
        operation_id="deleteFile",
        summary="Delete one of the caller's files",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, FileDeleted, "the file is deleted"), **errors(OpenAIErrorBody, 401, 403, 404)},
    )
    def delete_file(file_id: str) -> Response[str]:
        if not delete(file_id, tenant()):
            return problem(file_not_found(file_id))
        return json_response(200, {"id": file_id, "object": "file", "deleted": True})

    return router
