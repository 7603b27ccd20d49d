"""The Synapse job routes: `POST /async-infer`, `GET /results/{jobId}` and `GET /healthz`."""

from __future__ import annotations

import re
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from contract import tokens
from contract.job_record import JobRecord, public_view
from contract.jobs import DEFAULT_TIMEOUT_MS, EmbeddingOptions, Job, Parameters, Priority
from contract.settings import Settings
from frontdoor.intake import IdempotencyKeyHeader, Intake, replay_headers
from frontdoor.job_events import end_event, job_event
from frontdoor.openapi import API_KEY, errors, job_event_stream, ok
from frontdoor.responses import EVENT_STREAM, json_response, problem_response, sse_response
from frontdoor.resume import events_after
from frontdoor.route_traits import declares
from frontdoor.schemas import (
    ErrorBody,
    Health,
    JobView,
    StreamReset,
    SubmitRequest,
    SubmitResponse,
    TextDelta,
)
from frontdoor.services import catalog, settings, store
from frontdoor.stream_handle import StreamHandle, StreamSink, offered
from frontdoor.submit_checks import input_problem
from frontdoor.tenancy import Caller, caller_of
from openai_api.embedding_schemas import texts_of
from openai_api.errors import Problem

JOB_ID = re.compile(r"^[0-9a-fA-F-]{36}$")
# Tells clients (and the fuzzer's stateful phase) that a 202's jobId is what the job's routes take.
JOB_LINKS = {
    name: {"operationId": operation, "parameters": {"job_id": "$response.body#/jobId"}}
    for name, operation in (
        ("GetResult", "getResult"),
        ("StreamResult", "streamResult"),
        ("CancelJob", "cancelJob"),
        ("RetryJob", "retryJob"),
    )
}
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=64,
        description="resume after this event (SSE clients send it when they reconnect); an id this "
        "stream never sent starts it from the beginning",
    ),
]
WaitSeconds = Annotated[
    float, Query(ge=0, le=20, description="hold the request until the job is final, up to this many s")
]


# The margin a submitted timeout must leave in the record's TTL, beyond reclaim_idle_s (after which a
# manager takes over a dead one's jobs and fails the overdue ones at once: docs/guarantees.md): one
# second for that takeover to write the outcome.
TAKEOVER_WRITE_S = 1


def owned_job(
    job_id: str, caller: Caller, wait_s: float = 0, sink: StreamSink | None = None
) -> JobRecord | None:
    """The job if it is the caller's, once final or after wait_s; with a sink, as it is now, and the
    wait left to the server. Another tenant's job is answered as one that does not exist, so that an
    id says nothing about whose it is."""
    record = store().get(job_id) if JOB_ID.match(job_id) else None
    if record is None or record.tenant != caller.tenant:
        return None
    if wait_s > 0 and not record.status.is_final:
        if sink is not None:
            sink.defer(job_id, wait_s)
            return record
        return store().wait(job_id, wait_s, read=record) or record
    return record


def job_not_found(job_id: str) -> Problem:
    return Problem(404, "not_found", f"job {job_id} does not exist or has expired")


def timeout_ms(request: SubmitRequest) -> int:
    return request.timeoutMs or DEFAULT_TIMEOUT_MS


def submission_problem(request: SubmitRequest, cfg: Settings) -> Problem | None:
    """The 4xx for a well-formed submission that the platform cannot take, or None."""
    model = request.model
    if catalog().get(model) is None:
        known = ", ".join(catalog().names())
        return Problem(400, "unknown_model", f"model {model!r} is not served; one of: {known}", param="model")
    found = input_problem(request, cfg, catalog())
    if found is not None:
        return found
    # The job's record must outlive its deadline and the takeover margin, or its outcome is lost.
    kept_ms = (cfg.job_ttl_s - cfg.reclaim_idle_s - TAKEOVER_WRITE_S) * 1000
    if timeout_ms(request) > kept_ms:
        message = (
            f"timeoutMs {timeout_ms(request)} is past what a job's record is kept for: at most "
            f"{int(kept_ms)} with SYNAPSE_JOB_TTL_S {cfg.job_ttl_s}"
        )
        return Problem(400, "timeout_too_long", message, param="timeoutMs")
    if request.callback and cfg.callback_https_only and not request.callback.startswith("https://"):
        message = "callback must be an https:// URL: the job's result is sent to it"
        return Problem(400, "callback_not_https", message, param="callback")
    if request.ttl is not None and request.ttl > cfg.job_ttl_s:
        message = (
            f"ttl {request.ttl} is past the longest a job is kept: {cfg.job_ttl_s} s (SYNAPSE_JOB_TTL_S)"
        )
        return Problem(400, "ttl_too_long", message, param="ttl")
    return None


def new_job(request: SubmitRequest, caller: Caller) -> Job:
    if request.input is not None:  # an embedding model's (submission_problem checked)
        inputs = texts_of(request.input)
        parameters: Parameters = EmbeddingOptions(
            request.encoding_format or "float", request.truncate is not False
        )
        prompt, max_tokens = "", 0
    else:
        inputs, parameters = (), request.parameters.for_job()
        prompt, max_tokens = request.prompt or "", request.parameters.max_tokens
    return Job.new(
        model=request.model,
        prompt=prompt,
        max_tokens=max_tokens,
        parameters=parameters,
        inputs=inputs,
        timeout_ms=timeout_ms(request),
        tenant=caller.tenant,
        priority=Priority(request.priority),
        callback=request.callback or "",
        ttl_s=request.ttl or 0,
    )


def buffered_events(job_id: str, record: JobRecord, last_event_id: str | None) -> str:
    """Through a buffered integration: the events that exist now; a client reconnects with
    Last-Event-ID for more."""
    events = events_after(store().token_events(job_id), last_event_id)
    body = "".join(job_event(e) for e in events if not isinstance(e, tokens.End))
    if record.status.is_final:
        body += end_event(public_view(record))
    return body


def job_stream(
    job_id: str, record: JobRecord, last_event_id: str | None, sink: StreamSink | None, tenant: str
) -> Response[str] | Problem:
    """The job's events: streamed where a streaming server runs the route and admits one more stream of
    the tenant's, else buffered; the refusal where it admits none."""
    if sink is None:
        return sse_response(buffered_events(job_id, record, last_event_id))
    return sink.admit(tenant) or sink.stream(StreamHandle(job_id, record.model))


def jobs_router(intake: Intake) -> Router:
    """The routes, on a router of their own per app: a Powertools router points at the app it joined."""
    router = Router()  # type: ignore[no-untyped-call]

    def problem(found: Problem) -> Response[str]:
        return problem_response(router.current_event.path, found)

    @router.get(
        "/healthz",
        operation_id="health",
        summary="Liveness: 200 while Redis answers",
        tags=["platform"],
        responses={**ok(200, Health, "Redis answers"), **errors(ErrorBody, 503)},
    )
    def healthz() -> Response[str]:
        if store().ping():
            return json_response(200, {"status": "ok"})
        return problem(Problem(503, "unavailable", "redis did not answer"))

    @router.post(
        "/async-infer",
        operation_id="submitJob",
        summary="Queue an inference job; answers at once with its jobId",
        tags=["jobs"],
        security=API_KEY,
        responses={
            202: {
                "description": "queued (or, for a repeated Idempotency-Key, the job it created)",
                "content": {"application/json": {"model": SubmitResponse}},
                "links": JOB_LINKS,
            },
            **errors(ErrorBody, 400, 401, 403, 409, 413, 415, 422, 429, 503),
        },
    )
    def submit(request: SubmitRequest, idempotency_key: IdempotencyKeyHeader = None) -> Response[str]:
        rejection = submission_problem(request, settings())
        if rejection is not None:
            return problem(rejection)
        caller = caller_of(router.current_event)
        submitted = intake.submit(
            lambda: new_job(request, caller),
            route="async-infer",
            body=request,
            key=idempotency_key,
            event=router.current_event,
            context=router.lambda_context,
        )
        body = {"jobId": submitted.job_id, "status": "QUEUED"}
        return json_response(202, body, replay_headers(submitted))

    @router.get(
        "/results/<job_id>",
        operation_id="getResult",
        summary="A job's status and, once final, its result or error",
        tags=["jobs"],
        security=API_KEY,
        responses={**ok(200, JobView, "the job"), **errors(ErrorBody, 400, 401, 403, 404, 429, 503)},
    )
    @declares(wait_param="wait")
    def result(job_id: str, wait: WaitSeconds = 0) -> Response[str]:
        record = owned_job(job_id, caller_of(router.current_event), wait, offered(router))
        if record is None:
            return problem(job_not_found(job_id))
        return json_response(200, public_view(record))

    @router.get(
        "/results/<job_id>/stream",
        operation_id="streamResult",
        summary="A job's text as Server-Sent Events while it is produced, then its final view",
        tags=["jobs"],
        security=API_KEY,
        responses={
            200: {
                "description": "events `delta` (text), `reset` (the job restarted), `end` (the job as "
                "GET /results/{jobId} shows it), `error` (the stream broke off: reconnect); resumable "
                "with Last-Event-ID",
                "content": {EVENT_STREAM: job_event_stream(TextDelta, StreamReset, JobView, ErrorBody)},
            },
            **errors(ErrorBody, 400, 401, 403, 404, 429, 503),
        },
    )
    @declares(streams=True)
    def stream_result(job_id: str, last_event_id: LastEventId = None) -> Response[str]:
        caller = caller_of(router.current_event)
        record = owned_job(job_id, caller)
        if record is None:
            return problem(job_not_found(job_id))
        answer = job_stream(job_id, record, last_event_id, offered(router), caller.tenant)
        return problem(answer) if isinstance(answer, Problem) else answer

    return router
