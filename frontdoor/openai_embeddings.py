"""`POST /v1/embeddings`, in OpenAI's shape, over the same queue as every other job.

A call is one job of all its texts (a row each of the fleet's batches), waited for on its done-list as
the other `/v1` calls are (`SYNAPSE_SYNC_TIMEOUT_S`, under API Gateway's 29 s), and answered with a
vector per text in input order. At zero workers it answers 503 `capacity_starting` and wakes the pool,
as completions do. A text longer than the model's window is cut and flagged `truncated`, or with
`truncate: false` fails the call with 400 `input_too_long`.
"""

from __future__ import annotations

import json
from dataclasses import replace

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from contract.embeddings import data_items
from contract.jobs import EmbeddingOptions, Job, Priority
from frontdoor.embedding_schemas import EmbeddingList, EmbeddingRequest, texts_of
from frontdoor.errors import Problem
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers
from frontdoor.model_kinds import (
    is_embedding,
    not_for_embeddings,
    not_served,
    texts_problem,
)
from frontdoor.openai_routes import renewed
from frontdoor.openapi import API_KEY_OR_BEARER, ok
from frontdoor.responses import json_response
from frontdoor.route_traits import declares
from frontdoor.services import catalog, settings
from frontdoor.sync_call import SyncCall, sync_errors
from frontdoor.tenancy import caller_of


def request_problem(request: EmbeddingRequest) -> Problem | None:
    cfg = settings()
    found = not_served(request.model, catalog())
    if found is None and not is_embedding(request.model, catalog()):
        found = not_for_embeddings(request.model, catalog())
    return found or texts_problem(texts_of(request.input), cfg)


def embedding_job(
    request: EmbeddingRequest,
    *,
    tenant: str,
    timeout_ms: int,
    priority: Priority = Priority.INTERACTIVE,
    job_id: str | None = None,
) -> Job | Problem:
    """The job an embeddings request stands for, or why it is refused: shared with the Batch API's lines
    (manager/batch_runner.py)."""
    found = request_problem(request)
    if found is not None:
        return found
    job = Job.new(
        model=request.model,
        prompt="",
        max_tokens=0,
        parameters=EmbeddingOptions(request.encoding_format, request.truncate),
        inputs=texts_of(request.input),
        timeout_ms=timeout_ms,
        tenant=tenant,
        priority=priority,
    )
    return job if job_id is None else replace(job, id=job_id)


def embedding_list(request: EmbeddingRequest, fields: dict[str, str]) -> dict[str, object]:
    """The answer's body, built as a dict: a thousand vectors through a pydantic model cost more than the
    rest of the call (EmbeddingList documents the same shape)."""
    result = json.loads(fields["result"])
    return {
        "object": "list",
        "data": data_items(result, request.encoding_format),
        "model": request.model,
        "usage": result["usage"],
    }


def embeddings_router(intake: Intake) -> Router:
    router = Router()  # type: ignore[no-untyped-call]
    sync = SyncCall(router, intake)

    @router.post(
        "/v1/embeddings",
        operation_id="createEmbedding",
        summary="Embed texts: a vector per text (synchronous over the job queue)",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, EmbeddingList, "a vector per text, in input order"), **sync_errors()},
    )
    @declares(waits=True)  # it holds its thread until the vectors are in (SYNAPSE_SYNC_TIMEOUT_S at most)
    def embeddings(request: EmbeddingRequest, idempotency_key: IdempotencyKeyHeader = None) -> Response[str]:
        timeout_ms = int(settings().sync_timeout_s * 1000)
        built = embedding_job(request, tenant=caller_of(router.current_event).tenant, timeout_ms=timeout_ms)
        if isinstance(built, Problem):
            return sync.problem(built)

        def new_job() -> Job:
            return renewed(built)

        submitted = sync.submit(
            new_job, model=request.model, route="embeddings", body=request, key=idempotency_key
        )
        if isinstance(submitted, Response):
            return submitted
        fields = sync.outcome(submitted, "input")
        if isinstance(fields, Response):
            return fields
        return json_response(200, embedding_list(request, fields), replay_headers(submitted))

    return router
