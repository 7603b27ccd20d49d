"""OpenAI-compatible routes: `/v1/models`, `/v1/completions` and `/v1/chat/completions`.

They use the same queue and batching as `/async-infer`: a call submits a job, then blocks on the
job's done-list (no polling) for up to `SYNAPSE_SYNC_TIMEOUT_S`, under API Gateway's 29 s, which is
also the job's deadline: no job outlives the client that waits for it. Past it, a 504 carries the
jobId (`/results/{jobId}` tells how it ended). While no worker is READY (the pool starts from zero,
minutes on AWS) a call answers 503 `capacity_starting` with `Retry-After` and wakes the pool
(`frontdoor.capacity`), rather than queue a job that would expire. Errors are in OpenAI's shape.
`stream: true` answers with Server-Sent Events, a chunk per delta of text as the engine produces it,
when a streaming server runs the route (`frontdoor.http_server`: the local gateway, or the streaming
function in AWS, see docs/streaming.md), its job's deadline then `STREAM_DEADLINE_MS`; through a
buffered integration, the whole text as one chunk once the job is final.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from contract.jobs import Job, now_ms
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers
from frontdoor.openai_stream import ChunkFraming
from frontdoor.openapi import API_KEY_OR_BEARER, errors, event_stream, ok
from frontdoor.responses import EVENT_STREAM, json_response, sse_response
from frontdoor.route_traits import declares
from frontdoor.services import catalog, settings
from frontdoor.stream_handle import StreamHandle, admission, offered
from frontdoor.sync_call import SyncCall, sync_errors
from frontdoor.tenancy import caller_of
from openai_api.answer_schemas import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChunk,
    ModelCard,
    ModelList,
    OpenAIErrorBody,
)
from openai_api.completions import completion_job
from openai_api.errors import Problem
from openai_api.format import (
    Answer,
    answer_from,
    chat_completion,
    completion,
    shape_of,
)
from openai_api.schemas import ChatCompletionRequest, CompletionRequest

OWNER = "synapse"
# A streamed call's job lives no longer than its stream may: the streaming function is cut off at 5 min
# (stacks/front_door.py), and its reader follows a job to its deadline plus token_stream.GRACE_S (10 s).
# Four minutes leave the rest of the fifth for the submission and the stream's own end.
STREAM_DEADLINE_MS = 240_000


def renewed(job: Job) -> Job:
    """The job with an id and a clock of its own, taken when it is stored (a replay stores none)."""
    created = now_ms()
    deadline = created + job.deadline_ms - job.created_ms
    return replace(job, id=str(uuid.uuid4()), created_ms=created, deadline_ms=deadline)


def sync_responses(
    model: type[Completion] | type[ChatCompletion],
    chunk: type[CompletionChunk] | type[ChatCompletionChunk],
    what: str,
) -> dict[int, OpenAPIResponse]:
    success: OpenAPIResponse = {
        "description": f"the {what}; with stream: true, Server-Sent Events of its chunks",
        "content": {"application/json": {"model": model}, EVENT_STREAM: event_stream(chunk)},
    }
    return {200: success, **sync_errors()}


def include_usage(request: CompletionRequest | ChatCompletionRequest) -> bool:
    return bool(request.stream_options and request.stream_options.include_usage)


def framer_for(
    request: CompletionRequest | ChatCompletionRequest, job_id: str, created_s: int
) -> ChunkFraming:
    """The request's chunks: OpenAI's completion or chat chunk, its choices and whether usage ends them."""
    kind: Literal["chat", "completion"] = "completion" if isinstance(request, CompletionRequest) else "chat"
    return ChunkFraming(kind, job_id, request.model, created_s, include_usage(request), shape_of(request))


def buffered_stream(request: CompletionRequest | ChatCompletionRequest, answer: Answer) -> Response[str]:
    """Through a buffered integration: the whole text as one chunk, with the framing streams have."""
    chunks = framer_for(request, answer.job_id, answer.created_s)
    choices = answer.all_choices()
    deltas = "".join(chunks.delta(c.text, i, c.logprobs or ()) for i, c in enumerate(choices))
    reasons = [c.engine_finish for c in answer.choices] or [answer.finish_reason]
    return sse_response(deltas + chunks.end(reasons, answer.usage))


def completion_response(request: CompletionRequest, answer: Answer) -> Response[str]:
    if request.stream:
        return buffered_stream(request, answer)
    return json_response(200, completion(answer, shape_of(request)).model_dump(mode="json"))


def chat_response(request: ChatCompletionRequest, answer: Answer) -> Response[str]:
    if request.stream:
        return buffered_stream(request, answer)
    return json_response(200, chat_completion(answer, shape_of(request)).model_dump(mode="json"))


class CompletionCall(SyncCall):
    """A completion or a chat: a prompt for a text model, answered whole or streamed."""

    def run(
        self,
        request: CompletionRequest | ChatCompletionRequest,
        *,
        route: str,
        key: str | None,
        respond: Callable[[Answer], Response[str]],
    ) -> Response[str]:
        prompt_param = "prompt" if isinstance(request, CompletionRequest) else "messages"
        tenant = caller_of(self._router.current_event).tenant
        sink = offered(self._router) if request.stream else None
        timeout_ms = STREAM_DEADLINE_MS if sink is not None else int(settings().sync_timeout_s * 1000)
        built = completion_job(
            request, cfg=settings(), catalog=catalog(), tenant=tenant, timeout_ms=timeout_ms
        )
        if isinstance(built, Problem):
            return self.problem(built)
        found = admission(sink, tenant)  # a stream's slot, after validation and before anything is queued
        if found is not None:
            return self.problem(found)

        def new_job() -> Job:
            return renewed(built)

        submitted = self.submit(new_job, model=request.model, route=route, body=request, key=key)
        if isinstance(submitted, Response):
            return submitted
        if sink is not None:
            framer = framer_for(request, submitted.job_id, int(time.time()))
            return sink.stream(StreamHandle(submitted.job_id, request.model, framer))
        fields = self.outcome(submitted, prompt_param)
        if isinstance(fields, Response):
            return fields
        response = respond(answer_from(fields))
        response.headers.update(replay_headers(submitted))
        return response


def openai_router(intake: Intake) -> Router:
    """The routes, on a router of their own per app: a Powertools router points at the app it joined."""
    router = Router()  # type: ignore[no-untyped-call]
    sync = CompletionCall(router, intake)

    @router.get(
        "/v1/models",
        operation_id="listModels",
        summary="The models the platform serves",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, ModelList, "every served model"), **errors(OpenAIErrorBody, 401, 403)},
    )
    def list_models() -> Response[str]:
        now = int(time.time())
        cards = [ModelCard(id=m, created=now, owned_by=OWNER) for m in catalog().names()]
        return json_response(200, ModelList(data=cards).model_dump(mode="json"))

    @router.get(
        "/v1/models/<model_id>",
        operation_id="getModel",
        summary="One served model",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, ModelCard, "the model"), **errors(OpenAIErrorBody, 401, 403, 404)},
    )
    def get_model(model_id: str) -> Response[str]:
        if catalog().get(model_id) is None:
            message = f"The model {model_id!r} does not exist"
            return sync.problem(Problem(404, "model_not_found", message, param="model"))
        card = ModelCard(id=model_id, created=int(time.time()), owned_by=OWNER)
        return json_response(200, card.model_dump(mode="json"))

    @router.post(
        "/v1/completions",
        operation_id="createCompletion",
        summary="Complete a prompt (synchronous over the job queue)",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses=sync_responses(Completion, CompletionChunk, "completion"),
    )
    @declares(streams=True, waits=True)
    def completions(
        request: CompletionRequest, idempotency_key: IdempotencyKeyHeader = None
    ) -> Response[str]:
        return sync.run(
            request,
            route="completions",
            key=idempotency_key,
            respond=lambda answer: completion_response(request, answer),
        )

    @router.post(
        "/v1/chat/completions",
        operation_id="createChatCompletion",
        summary="Answer a chat (synchronous over the job queue) with the model's own chat template",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses=sync_responses(ChatCompletion, ChatCompletionChunk, "chat completion"),
    )
    @declares(streams=True, waits=True)
    def chat_completions(
        request: ChatCompletionRequest, idempotency_key: IdempotencyKeyHeader = None
    ) -> Response[str]:
        return sync.run(
            request,
            route="chat-completions",
            key=idempotency_key,
            respond=lambda answer: chat_response(request, answer),
        )

    return router
