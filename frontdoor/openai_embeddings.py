"""`POST /v1/embeddings`, in OpenAI's shape, over the same queue as every other job.

A call is one job of all its texts (a row each of the fleet's batches), waited for on its done-list as
the other `/v1` calls are (`SYNAPSE_SYNC_TIMEOUT_S`, under API Gateway's 29 s), and answered with a
vector per text in input order. At zero workers it answers 503 `capacity_starting` and wakes the pool,
as completions do. A text longer than the model's window is cut and flagged `truncated`, or with
`truncate: false` fails the call with 400 `input_too_long`. A call whose texts could not be embedded
within that wait (more than `SYNAPSE_MAX_SYNC_EMBEDDING_CHARS` characters in all) is refused with 413
`input_too_large_for_sync` before anything is queued, naming `POST /async-infer`, which takes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from contract.jobs import Job
from contract.settings import Settings
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers
from frontdoor.openai_routes import renewed
from frontdoor.openapi import API_KEY_OR_BEARER, ok
from frontdoor.responses import json_response
from frontdoor.route_traits import declares
from frontdoor.services import catalog, settings
from frontdoor.sync_call import SyncCall, sync_errors
from frontdoor.tenancy import caller_of
from openai_api.embedding_schemas import EmbeddingList, EmbeddingRequest
from openai_api.embeddings import embedding_job, embedding_list
from openai_api.errors import Problem


def sync_size_problem(texts: Sequence[str], cfg: Settings) -> Problem | None:
    """A 413 for texts too many to embed within a synchronous call's wait, or None."""
    chars = sum(len(text) for text in texts)
    if chars <= cfg.max_sync_embedding_chars:
        return None
    message = (
        f"the input has {chars} characters in all; a synchronous call embeds at most "
        f"{cfg.max_sync_embedding_chars} (SYNAPSE_MAX_SYNC_EMBEDDING_CHARS), what it can within its "
        f"{cfg.sync_timeout_s:g} s wait; nothing was queued: send fewer texts per call, or send these to "
        f"POST /async-infer and fetch the vectors from GET /results/{{id}}"
    )
    return Problem(413, "input_too_large_for_sync", message, param="input")


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
        cfg = settings()
        timeout_ms = int(cfg.sync_timeout_s * 1000)
        tenant = caller_of(router.current_event).tenant
        built = embedding_job(request, cfg=cfg, catalog=catalog(), tenant=tenant, timeout_ms=timeout_ms)
        if isinstance(built, Problem):
            return sync.problem(built)
        too_large = sync_size_problem(built.inputs, cfg)  # a batch line or /async-infer waits no such wait
        if too_large is not None:
            return sync.problem(too_large)

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
