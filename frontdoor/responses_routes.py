"""OpenAI's Responses API on the job queue: `POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`,
`POST /v1/responses/{id}/cancel` and `GET /v1/responses/{id}/input_items`.

A response is a chat job (openai_api/responses_format.py translates it) whose record carries the request
(openai_api/responses_record.py), so it is as durable as any job: per tenant (another tenant's id is a
404, like a made-up one), kept for the job's TTL, counted in the tenant's quotas, readable after any
process restarts. Without `background` a call waits for its job like a chat does (or streams it);
with `background: true` it answers at once with the response `queued`, the job runs on the queue like
`POST /async-infer`'s (no 503 while the pool starts: it waits there), and `GET ...?stream=true&
starting_after=N` follows it, replaying the events after N.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from contract import tokens
from contract.job_record import JobRecord
from contract.jobs import CANCELLED_BY_CLIENT, DEFAULT_TIMEOUT_MS, Job, JobStatus
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers
from frontdoor.job_control import CANCEL_WAIT_S
from frontdoor.openai_routes import STREAM_DEADLINE_MS, renewed
from frontdoor.openapi import API_KEY_OR_BEARER, errors, event_stream, ok
from frontdoor.responses import EVENT_STREAM, json_response, sse_response
from frontdoor.route_traits import declares
from frontdoor.services import catalog, settings, store
from frontdoor.stream_handle import StreamHandle, StreamSink, admission, offered
from frontdoor.sync_call import SyncCall, sync_errors
from frontdoor.tenancy import caller_of
from frontdoor.token_stream import end_of
from openai_api.answer_schemas import OpenAIErrorBody
from openai_api.completions import completion_job
from openai_api.errors import Problem
from openai_api.format import max_tokens
from openai_api.model_checks import generative_context
from openai_api.responses_format import (
    chat_request_of,
    conversation_of,
    input_items_of,
    job_id_of,
    page_of,
)
from openai_api.responses_format import (
    response_id as response_id_for,
)
from openai_api.responses_record import (
    StoredResponse,
    history_after,
    shape_for,
    stored_of,
    view,
)
from openai_api.responses_schemas import DeletedResponse, InputItemList, ResponseObject, ResponseRequest
from openai_api.responses_stream import ResponseEvents
from openai_api.schemas import ChatCompletionRequest, ChatMessage

StreamFlag = Annotated[bool, Query(description="follow the response as Server-Sent Events")]
StartingAfter = Annotated[
    int | None, Query(ge=-1, description="with stream: send only the events after this sequence_number")
]
ItemsLimit = Annotated[int, Query(ge=1, le=100, description="items per page")]
ItemsOrder = Annotated[Literal["asc", "desc"], Query(description="desc: the last item sent first")]
ItemsAfter = Annotated[str | None, Query(max_length=128, description="list the items after this id")]
# OpenAI's default length is what the context leaves after the prompt, which only the engine counts;
# here a quarter of the model's context, which leaves the prompt the rest.
DEFAULT_OUTPUT_SHARE = 4


def response_not_found(rid: str, param: str | None = None) -> Problem:
    return Problem(404, "not_found", f"Response with id {rid!r} not found.", param=param)


def owned_response(rid: str, tenant: str) -> tuple[JobRecord, StoredResponse] | None:
    """The tenant's response and what its record carries; None for another's, or none at all."""
    job_id = job_id_of(rid)
    record = None if job_id is None else store().get(job_id)
    stored = None if record is None or record.tenant != tenant else stored_of(record)
    return None if record is None or stored is None else (record, stored)


def default_output_tokens(model: str) -> int | None:
    context = generative_context(model, catalog())
    return None if not context else max(1, context // DEFAULT_OUTPUT_SHARE)


def context_problem(model: str, carried: int, output_tokens: int) -> Problem | None:
    """A 400 for a conversation that cannot fit the model's context with the answer it asks for."""
    context = generative_context(model, catalog())
    if not context or carried + output_tokens <= context:
        return None
    message = (
        f"the conversation of previous_response_id holds at least {carried} tokens; with "
        f"max_output_tokens {output_tokens} it is past {model}'s context of {context} tokens"
    )
    return Problem(400, "context_length_exceeded", message, param="previous_response_id")


def events_of(record: JobRecord, stored: StoredResponse, starting_after: int = -1) -> ResponseEvents:
    request = stored.request
    return ResponseEvents(
        job_id=record.id, response_id=response_id_for(record.id), created_s=record.created_ms // 1000,
        model=record.model, request=request, shape=shape_for(request), max_tokens=record.max_tokens,
        queued=request.in_background(), starting_after=starting_after,
    )  # fmt: skip


class ResponseCall(SyncCall):
    """`POST /v1/responses`: the response's job, then its answer as the request asks for it."""

    def create(self, request: ResponseRequest, key: str | None) -> Response[str]:
        tenant = caller_of(self._router.current_event).tenant
        turn = self._turn(request, tenant)
        if isinstance(turn, Problem):
            return self.problem(turn)
        chat, history = turn
        sink = offered(self._router) if request.stream else None
        timeout_ms = int(settings().sync_timeout_s * 1000)
        if request.in_background():
            timeout_ms = DEFAULT_TIMEOUT_MS
        elif sink is not None:
            timeout_ms = STREAM_DEADLINE_MS
        built = completion_job(chat, cfg=settings(), catalog=catalog(), tenant=tenant, timeout_ms=timeout_ms)
        if isinstance(built, Problem):  # a response's messages are its `input`
            return self.problem(replace(built, param="input") if built.param == "messages" else built)
        carried = StoredResponse(request=request, conversation=conversation_of(history, request)).to_json()
        built = replace(built, request=carried, max_tokens=max_tokens(chat))
        found = admission(sink, tenant)  # a stream's slot, before anything is queued
        if found is not None:
            return self.problem(found)
        if request.in_background():
            return self._background(built, request, key, sink)
        return self._waited(built, request, key, sink)

    def _turn(
        self, request: ResponseRequest, tenant: str
    ) -> tuple[ChatCompletionRequest, list[ChatMessage]] | Problem:
        """The chat this response runs as and the history it continues; a chain past the model's
        context is refused here, before anything is queued."""
        history: list[ChatMessage] = []
        floor = 0
        if request.previous_response_id is not None:
            earlier = self._history(request.previous_response_id, tenant)
            if isinstance(earlier, Problem):
                return earlier
            history, floor = earlier
        chat = chat_request_of(
            request, history, default_max_output_tokens=default_output_tokens(request.model)
        )
        if isinstance(chat, Problem):
            return chat
        return context_problem(request.model, floor, max_tokens(chat)) or (chat, history)

    def _history(self, previous: str, tenant: str) -> tuple[list[ChatMessage], int] | Problem:
        """The conversation the previous response ends, and at least how many tokens it holds."""
        owned = owned_response(previous, tenant)
        if owned is None:
            return response_not_found(previous, "previous_response_id")
        record, stored = owned
        continued = history_after(record, stored)
        if continued is None:
            status = view(record, stored).status
            message = f"previous response {previous} is {status}: only a completed one continues"
            return Problem(400, "invalid_request", message, param="previous_response_id")
        return continued

    def _background(
        self, built: Job, request: ResponseRequest, key: str | None, sink: StreamSink | None
    ) -> Response[str]:
        """Queued like /async-infer's jobs: answered at once, run when a worker is free."""
        submitted = self._intake.submit(
            lambda: renewed(built), route="responses", body=request, key=key,
            event=self._router.current_event, context=self._router.lambda_context,
        )  # fmt: skip
        record = store().get(submitted.job_id)
        stored = None if record is None else stored_of(record)
        if record is None or stored is None:
            return self.problem(response_not_found(response_id_for(submitted.job_id)))
        if sink is not None:
            return sink.stream(
                StreamHandle(record.id, record.model, events_of(record, stored), detached=True)
            )
        response = json_response(200, view(record, stored).model_dump(mode="json"))
        response.headers.update(replay_headers(submitted))
        return response

    def _waited(
        self, built: Job, request: ResponseRequest, key: str | None, sink: StreamSink | None
    ) -> Response[str]:
        submitted = self.submit(
            lambda: renewed(built), model=request.model, route="responses", body=request, key=key
        )
        if isinstance(submitted, Response):
            return submitted
        if sink is not None:
            record = store().get(submitted.job_id)
            stored = None if record is None else stored_of(record)
            if record is None or stored is None:
                return self.problem(response_not_found(response_id_for(submitted.job_id)))
            return sink.stream(StreamHandle(record.id, record.model, events_of(record, stored)))
        outcome = self.outcome(submitted, "input")
        if isinstance(outcome, Response):
            return outcome
        stored = stored_of(outcome)
        if stored is None:
            return self.problem(response_not_found(response_id_for(outcome.id)))
        response = json_response(200, view(outcome, stored).model_dump(mode="json"))
        if not request.stores():
            store().delete(outcome)  # store: false keeps nothing once answered
        response.headers.update(replay_headers(submitted))
        return response


def buffered_events(record: JobRecord, stored: StoredResponse, starting_after: int) -> str:
    """Through a buffered integration: the events the job's token stream holds now (after its last
    restart), and its end once it is final; a client comes back with `starting_after` for more."""
    framing = events_of(record, stored, starting_after)
    events = store().token_events(record.id)
    restarts = [at for at, event in enumerate(events) if isinstance(event, tokens.Reset)]
    events = events[restarts[-1] + 1 :] if restarts else events
    if record.status.is_final and not events:
        events = end_of(record)
    body = "".join(framing.delta(e.text, e.index) for e in events if isinstance(e, tokens.Delta))
    if not record.status.is_final:
        return body
    end = end_of(record)[-1]
    assert isinstance(end, tokens.End)
    if record.status is JobStatus.COMPLETED:
        return body + framing.finish(end)
    return body + framing.error(Problem(502, end.error_code or "failed", end.error_message or "it failed"))


def reading(rid: str, tenant: str, after: int | None, sink: StreamSink | None) -> Response[str] | Problem:
    """The response, or (`after` set: ?stream=true) its events after `after`, streamed where the
    server runs the route, and buffered where it does not."""
    owned = owned_response(rid, tenant)
    if owned is None:
        return response_not_found(rid)
    record, stored = owned
    if after is None:
        return json_response(200, view(record, stored).model_dump(mode="json"))
    if sink is None:
        return sse_response(buffered_events(record, stored, after))
    handle = StreamHandle(record.id, record.model, events_of(record, stored, after), detached=True)
    return sink.admit(tenant) or sink.stream(handle)


def items_page(
    rid: str, tenant: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
) -> Response[str] | Problem:
    owned = owned_response(rid, tenant)
    if owned is None:
        return response_not_found(rid)
    page = page_of(input_items_of(rid, owned[1].request), after=after, limit=limit, order=order)
    return json_response(200, page.model_dump(mode="json"))


def deletion(rid: str, tenant: str) -> Response[str] | Problem:
    """Forgets the response; a running one is cancelled first, so nothing runs for a deleted id."""
    owned = owned_response(rid, tenant)
    if owned is None:
        return response_not_found(rid)
    record, _ = owned
    if not record.status.is_final:
        store().cancel(record, CANCELLED_BY_CLIENT)
        record = store().wait(record.id, CANCEL_WAIT_S) or record
    store().delete(record)
    return json_response(200, DeletedResponse(id=rid).model_dump(mode="json"))


def cancellation(rid: str, tenant: str) -> Response[str] | Problem:
    """The response once its job is cancelled (a running one stops in the engine); a final one as is."""
    owned = owned_response(rid, tenant)
    if owned is None:
        return response_not_found(rid)
    record, stored = owned
    if not record.status.is_final:
        status = store().cancel(record, CANCELLED_BY_CLIENT)
        waited = status is JobStatus.RUNNING
        record = (store().wait(record.id, CANCEL_WAIT_S) if waited else store().get(record.id)) or record
    return json_response(200, view(record, stored).model_dump(mode="json"))


def responses_router(intake: Intake) -> Router:
    router = Router()  # type: ignore[no-untyped-call]
    call = ResponseCall(router, intake)

    def tenant() -> str:
        return caller_of(router.current_event).tenant

    def answer(outcome: Response[str] | Problem) -> Response[str]:
        return call.problem(outcome) if isinstance(outcome, Problem) else outcome

    created: dict[int, OpenAPIResponse] = {
        200: {
            "description": "the response (queued, with background); with stream: true, its events",
            "content": {
                "application/json": {"model": ResponseObject},
                EVENT_STREAM: event_stream(ResponseObject),
            },
        },
        **sync_errors(),
    }

    @router.post(
        "/v1/responses",
        operation_id="createResponse",
        summary="Create a model response (on the job queue; background: answered at once)",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses=created,
    )
    @declares(streams=True, waits=True)
    def create(request: ResponseRequest, idempotency_key: IdempotencyKeyHeader = None) -> Response[str]:
        return call.create(request, idempotency_key)

    @router.get(
        "/v1/responses/<response_id>",
        operation_id="getResponse",
        summary="A response; with stream=true, its events, resumed after starting_after",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, ResponseObject, "the response"),
            **errors(OpenAIErrorBody, 400, 401, 403, 404, 429, 503),
        },
    )
    @declares(streams=True)
    def get(
        response_id: str, stream: StreamFlag = False, starting_after: StartingAfter = None
    ) -> Response[str]:
        after = (-1 if starting_after is None else starting_after) if stream else None
        return answer(reading(response_id, tenant(), after, offered(router)))

    @router.delete(
        "/v1/responses/<response_id>",
        operation_id="deleteResponse",
        summary="Delete a response (a running one is cancelled first)",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={**ok(200, DeletedResponse, "deleted"), **errors(OpenAIErrorBody, 400, 401, 403, 404, 503)},
    )
    @declares(cancels=True)
    def delete(response_id: str) -> Response[str]:
        return answer(deletion(response_id, tenant()))

    @router.post(
        "/v1/responses/<response_id>/cancel",
        operation_id="cancelResponse",
        summary="Stop a queued or running response; its generation stops in the engine",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, ResponseObject, "the response"),
            **errors(OpenAIErrorBody, 400, 401, 403, 404, 503),
        },
    )
    @declares(cancels=True)
    def cancel(response_id: str) -> Response[str]:
        return answer(cancellation(response_id, tenant()))

    @router.get(
        "/v1/responses/<response_id>/input_items",
        operation_id="listResponseInputItems",
        summary="The input items a response was created with, a page at a time",
        tags=["openai"],
        security=API_KEY_OR_BEARER,
        responses={
            **ok(200, InputItemList, "a page of items"),
            **errors(OpenAIErrorBody, 400, 401, 403, 404, 503),
        },
    )
    def input_items(
        response_id: str, limit: ItemsLimit = 20, order: ItemsOrder = "desc", after: ItemsAfter = None
    ) -> Response[str]:
        return answer(items_page(response_id, tenant(), after=after, limit=limit, order=order))

    return router
