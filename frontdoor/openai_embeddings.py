"""`POST /v1/embeddings`, in OpenAI's shape, over the same queue as every other job.

A call is one job of all its texts (a row each of the fleet's batches), waited for on its done-list as
the other `/v1` calls are (`SYNAPSE_SYNC_TIMEOUT_S`, under API Gateway's 29 s), and answered with a
vector per text in input order. At zero workers it answers 503 `capacity_starting` and wakes the pool,
as completions do. A text longer than the model's window is cut and flagged `truncated`, or with
`truncate: false` fails the call with 400 `input_too_long`.
"""

from __future__ import annotations

import json

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from contract.embeddings import data_items
from contract.jobs import Job
from frontdoor.capacity import CapacityStartingError, require_capacity, starting_problem
from frontdoor.embedding_schemas import EmbeddingList, EmbeddingRequest, texts_of
from frontdoor.errors import Problem
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers, settings, store
from frontdoor.model_kinds import (
    embedding_parameters,
    is_embedding,
    not_for_embeddings,
    not_served,
    texts_problem,
)
from frontdoor.openai_format import outcome_problem
from frontdoor.openai_schemas import OpenAIErrorBody
from frontdoor.openapi import API_KEY_OR_BEARER, errors, ok
from frontdoor.responses import json_response, problem_response
from frontdoor.tenancy import caller_of

EMBEDDING_ERRORS = (400, 401, 403, 404, 409, 413, 415, 422, 429, 502, 503, 504)


def request_problem(request: EmbeddingRequest) -> Problem | None:
    cfg = settings()
    found = not_served(request.model, cfg)
    if found is None and not is_embedding(request.model, cfg):
        found = not_for_embeddings(request.model, cfg)
    return found or texts_problem(texts_of(request.input), cfg)


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

    def problem(found: Problem) -> Response[str]:
        return problem_response(router.current_event.path, found)

    @router.post(
        "/v1/embeddings",
        operation_id="createEmbedding",
        summary="Embed texts: a vector per text (synchronous over the job queue)",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, EmbeddingList, "a vector per text, in input order"),
                   **errors(OpenAIErrorBody, *EMBEDDING_ERRORS)},
    )  # fmt: skip
    def embeddings(request: EmbeddingRequest, idempotency_key: IdempotencyKeyHeader = None) -> Response[str]:
        found = request_problem(request)
        if found is not None:
            return problem(found)
        cfg = settings()
        event = router.current_event

        def new_job() -> Job:
            require_capacity(request.model)  # at zero, a job would only expire with its client gone
            return Job.new(
                model=request.model,
                prompt="",
                max_tokens=0,
                parameters=embedding_parameters(request.encoding_format, request.truncate),
                inputs=texts_of(request.input),
                timeout_ms=int(cfg.sync_timeout_s * 1000),
                tenant=caller_of(event).tenant,
            )

        try:
            submitted = intake.submit(
                new_job, route="embeddings", body=request, key=idempotency_key, event=event,
                context=router.lambda_context,
            )  # fmt: skip
        except CapacityStartingError:
            return problem(starting_problem(request.model, cfg.cold_start_retry_after_s))
        fields = store().wait(submitted.job_id, cfg.sync_timeout_s)
        if fields is None:
            message = "the job for this Idempotency-Key has expired; send the request with a new key"
            return problem(Problem(404, "job_expired", message, job_id=submitted.job_id))
        found = outcome_problem(fields, cfg.sync_timeout_s, "input", vectors=True)
        if found is not None:
            return problem(found)
        return json_response(200, embedding_list(request, fields), replay_headers(submitted))

    return router
