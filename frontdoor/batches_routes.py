"""OpenAI's Batch API: create a batch of an uploaded JSONL file, read it, list them, cancel one.

The front door only records a batch (`validating`) and marks it for the managers' batch runners
(manager/batch_runner.py), which validate its file, run its lines as jobs of the batch's tenant at
`batch` priority, and write its output and error files. A batch belongs to its tenant like a job.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, ConfigDict, Field

from contract.batches import (
    COMPLETION_WINDOW,
    INPUT_PURPOSE,
    BatchRecord,
    BatchStatus,
    batch_record_of,
    new_batch_id,
    read_batch,
)
from contract.keys import ACTIVE_BATCHES_KEY, batch_key, tenant_batches_key
from contract.redis_client import SyncRedis
from frontdoor.files_routes import After, file_not_found, list_page, owned_file, page_of
from frontdoor.openapi import API_KEY_OR_BEARER, errors, ok
from frontdoor.responses import json_response, problem_response
from frontdoor.services import redis_client, settings
from frontdoor.tenancy import caller_of
from openai_api.answer_schemas import OpenAIErrorBody
from openai_api.batch_schemas import BatchList, BatchObject
from openai_api.errors import Problem
from openai_api.file_records import listing_score

MAX_BATCHES_PAGE = 100  # OpenAI's limit of GET /v1/batches
BatchLimit = Annotated[int, Query(ge=1, le=MAX_BATCHES_PAGE, description="batches per page")]
MetadataKey = Annotated[str, Field(max_length=64)]
MetadataValue = Annotated[str, Field(max_length=512)]

# A batch still validating or running may be cancelled; KEYS: batch; ARGV: now (s). Returns its status.
_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'validating' or status == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1])
  return 'cancelling'
end
return status
"""


class BatchRequest(BaseModel):
    """`POST /v1/batches` body; any other field is refused by name."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
    completion_window: Literal["24h"]
    metadata: dict[MetadataKey, MetadataValue] | None = Field(None, max_length=16)


def batch_not_found(batch_id: str) -> Problem:
    return Problem(404, "batch_not_found", f"No such batch: {batch_id!r}", param="batch_id")


def owned_batch(client: SyncRedis, batch_id: str, tenant: str) -> BatchRecord | None:
    record = read_batch(client, batch_id)
    return record if record is not None and record.tenant == tenant else None


def create(client: SyncRedis, request: BatchRequest, tenant: str, max_inflight: int) -> Problem | BatchRecord:
    found = owned_file(client, request.input_file_id, tenant)
    if found is None:
        return file_not_found(request.input_file_id)
    if found.purpose != INPUT_PURPOSE:
        message = f"the input file's purpose is {found.purpose!r}, not {INPUT_PURPOSE!r}"
        return Problem(400, "invalid_input_file", message, param="input_file_id")
    now = int(time.time())
    record = BatchRecord(
        id=new_batch_id(),
        tenant=tenant,
        max_inflight=max_inflight,
        endpoint=request.endpoint,
        input_file_id=request.input_file_id,
        completion_window=COMPLETION_WINDOW,
        status=BatchStatus.VALIDATING,
        created_at=now,
        expires_at=now + settings().batch_window_s,
        metadata=json.dumps(request.metadata),
    )
    pipe = client.pipeline(transaction=True)
    pipe.hset(batch_key(record.id), mapping=record.hash_fields())
    pipe.zadd(tenant_batches_key(tenant), {record.id: listing_score()})
    pipe.sadd(ACTIVE_BATCHES_KEY, record.id)
    pipe.execute()
    return record


def request_cancel(client: SyncRedis, batch_id: str) -> str:
    """Asks the batch to stop; its status after the ask (cancelling or cancelled when it may stop)."""
    return str(client.eval(_CANCEL, 1, batch_key(batch_id), str(int(time.time()))))


def cancellation(client: SyncRedis, batch_id: str, tenant: str) -> Problem | BatchRecord:
    """The tenant's batch once asked to stop, or why it cannot be: unknown, or already past stopping."""
    if owned_batch(client, batch_id, tenant) is None:
        return batch_not_found(batch_id)
    status = request_cancel(client, batch_id)
    if status not in ("cancelling", "cancelled"):
        message = f"the batch is {status}: only a validating or in-progress batch can be cancelled"
        return Problem(409, "batch_not_cancellable", message, param="batch_id")
    return read_batch(client, batch_id) or batch_not_found(batch_id)


def batches_router() -> Router:
    router = Router()  # type: ignore[no-untyped-call]

    def problem(found: Problem) -> Response[str]:
        return problem_response(router.current_event.path, found)

    @router.post(
        "/v1/batches",
        operation_id="createBatch",
        summary="Run every request of an uploaded JSONL file as a job at batch priority",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, BatchObject, "the batch, validating"),
            **errors(OpenAIErrorBody, 400, 401, 403, 404),
        },
    )
    def create_batch(request: BatchRequest) -> Response[str]:
        caller = caller_of(router.current_event)
        made = create(redis_client(), request, caller.tenant, caller.max_inflight)
        return problem(made) if isinstance(made, Problem) else json_response(200, made.object())

    @router.get(
        "/v1/batches",
        operation_id="listBatches",
        summary="The caller's batches, newest first",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, BatchList, "a page of batches"), **errors(OpenAIErrorBody, 400, 401, 403)},
    )
    def list_batches(limit: BatchLimit = 20, after: After = None) -> Response[str]:
        client = redis_client()
        tenant = caller_of(router.current_event).tenant
        ids, has_more = page_of(client, tenant_batches_key(tenant), after, limit)
        pipe = client.pipeline(transaction=False)
        for batch_id in ids:
            pipe.hgetall(batch_key(batch_id))
        records = [r for fields in pipe.execute() if (r := batch_record_of(fields)) is not None]
        return json_response(200, list_page([r.object() for r in records], has_more))

    @router.get(
        "/v1/batches/<batch_id>",
        operation_id="retrieveBatch",
        summary="One of the caller's batches",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, BatchObject, "the batch"), **errors(OpenAIErrorBody, 401, 403, 404)},
    )
    def retrieve_batch(batch_id: str) -> Response[str]:
        record = owned_batch(redis_client(), batch_id, caller_of(router.current_event).tenant)
        if record is None:
            return problem(batch_not_found(batch_id))
        return json_response(200, record.object())

    @router.post(
        "/v1/batches/<batch_id>/cancel",
        operation_id="cancelBatch",
        summary="Stop a batch: lines not yet started are not run; it ends cancelled with partial output",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, BatchObject, "the batch, cancelling"),
            **errors(OpenAIErrorBody, 401, 403, 404, 409),
        },
    )
    def cancel_batch(batch_id: str) -> Response[str]:
        found = cancellation(redis_client(), batch_id, caller_of(router.current_event).tenant)
        return problem(found) if isinstance(found, Problem) else json_response(200, found.object())

    return router
