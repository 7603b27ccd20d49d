"""The front-door Lambda: validates requests, enqueues jobs and reads results.

API Gateway invokes `lambda_handler`; the streaming server (`frontdoor.http_server`: the local gateway,
and the streaming function in AWS) invokes `invoke`, the same with a stream sink, with the same event
shape. `build_app` composes the routes: the Synapse job routes (`jobs_routes`, `job_control`), the
OpenAI-compatible routes (`openai_routes`, `openai_embeddings`) and the spec and its UI (`openapi`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError as RedisOutOfMemoryError
from redis.exceptions import TimeoutError as RedisTimeoutError

from contract.job_store import QueueFullError, QuotaExceededError
from frontdoor import telemetry
from frontdoor.api_key import ambiguity, event_headers
from frontdoor.batches_routes import batches_router
from frontdoor.files_routes import FILES_PATH, files_router
from frontdoor.intake import Intake
from frontdoor.job_control import job_control_router
from frontdoor.jobs_routes import jobs_router
from frontdoor.openai_embeddings import embeddings_router
from frontdoor.openai_routes import openai_router
from frontdoor.openapi import docs_router, openapi_spec
from frontdoor.powertools_adapter import IsolatedResolver
from frontdoor.responses import problem_response
from frontdoor.responses_routes import responses_router
from frontdoor.route_traits import traits_for
from frontdoor.schemas import MAX_BODY_BYTES
from frontdoor.services import settings, store
from frontdoor.stream_handle import StreamSink, offer
from frontdoor.uploads_routes import UPLOAD_PART_BYTES, uploads_router
from openai_api.errors import Problem
from openai_api.json_body import (
    MAX_JSON_DEPTH,
    JsonTooDeepError,
    describe_validation_errors,
    strict_json_loads,
)

__all__ = ["build_app", "invoke", "lambda_handler", "settings", "store"]

logger = Logger(service="synapse-frontdoor")
# What a request answers when Redis fails it, here and where the streaming server waits for a route.
STORE_UNAVAILABLE = Problem(
    503, "unavailable", "the job store is unreachable; retry", headers={"Retry-After": "1"}
)

JSON_MEDIA_TYPE = "application/json"


def lower_media_type(value: str) -> str:
    """The media type lower-cased, its parameters kept: a multipart boundary is case-sensitive."""
    media_type, sep, parameters = value.partition(";")
    return media_type.lower() + sep + parameters


def normalized(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event with its Content-Type's media type lower-cased: media types are case-insensitive,
    Powertools' check is not."""
    copy = dict(event)
    for field in ("headers", "multiValueHeaders"):
        headers = copy.get(field)
        if headers:
            copy[field] = {
                name: (
                    lower_media_type(value)
                    if isinstance(value, str)
                    else [lower_media_type(v) for v in value]
                )
                if name.lower() == "content-type"
                else value
                for name, value in headers.items()
            }
    return copy


_UPLOAD_PART_PATH = re.compile(r"^/v1/uploads/[^/]+/parts$")


def takes_files(event: Any) -> bool:
    """The routes whose body is a form, not JSON: a Files API upload (frontdoor/files_routes.py) and an
    upload's part (frontdoor/uploads_routes.py)."""
    path = event.path or ""
    return bool(event.http_method == "POST" and (path == FILES_PATH or _UPLOAD_PART_PATH.match(path)))


def sends_json(event: Any) -> bool:
    """Bodies are JSON only; a form-encoded body must not be read as fields (curl -d sends one). The
    media type must be application/json itself (parameters such as charset aside), not a prefix of it:
    application/jsonx is another type. A file upload reads its multipart form itself."""
    if not event.body or takes_files(event):
        return True
    content_type = (event.headers.get("content-type") or event.headers.get("Content-Type") or "").lower()
    return not content_type or content_type.split(";", 1)[0].strip() == JSON_MEDIA_TYPE


def body_bytes(event: Any) -> int:
    """The body's size in bytes, without decoding it (base64 carries 3 bytes in 4 characters)."""
    body: str = event.body or ""
    if event.is_base64_encoded:
        return len(body) * 3 // 4
    return len(body.encode("utf-8", "surrogatepass"))


def request_problem(event: Any) -> Problem | None:
    """A request the front door refuses before any route reads it: credentials naming more than one
    key (400), a body too large (413; an upload is pointed to the Uploads API), or not JSON (415)."""
    ambiguous = ambiguity(event_headers(event.raw_event))
    if ambiguous is not None:
        return ambiguous
    if body_bytes(event) > MAX_BODY_BYTES and takes_files(event):
        message = (
            f"the upload is over {MAX_BODY_BYTES} bytes, the most one request may carry; send a larger "
            f"file through the Uploads API in parts of {UPLOAD_PART_BYTES} bytes (SDK: "
            f"client.uploads.upload_file_chunked(..., part_size={UPLOAD_PART_BYTES}))"
        )
        return Problem(413, "file_too_large", message)
    if body_bytes(event) > MAX_BODY_BYTES:
        return Problem(413, "body_too_large", f"the request body is over {MAX_BODY_BYTES} bytes")
    if not sends_json(event):
        message = "request bodies must be JSON: send Content-Type: application/json"
        return Problem(415, "unsupported_media_type", message)
    return None


KNOWN_REFUSALS: dict[type[Exception], Callable[[Exception], Problem]] = {
    UnicodeDecodeError: lambda exc: Problem(400, "invalid_json", "request body is not UTF-8 text"),
    JsonTooDeepError: lambda exc: Problem(
        400, "json_too_deep", f"request body nests arrays or objects over {MAX_JSON_DEPTH} levels deep"
    ),
    RequestUnsupportedContentType: lambda exc: Problem(
        415, "unsupported_media_type", "send Content-Type: application/json"
    ),
    QueueFullError: lambda exc: Problem(429, "queue_full", str(exc), headers={"Retry-After": "1"}),
    QuotaExceededError: lambda exc: Problem(429, "quota_exceeded", str(exc), headers={"Retry-After": "1"}),
    IdempotencyValidationError: lambda exc: Problem(
        422,
        "idempotency_key_reused",
        "this Idempotency-Key was already used with a different request body; use a new key",
        param="Idempotency-Key",
    ),
    IdempotencyAlreadyInProgressError: lambda exc: Problem(
        409,
        "idempotency_key_in_use",
        "a request with this Idempotency-Key is still being processed; retry shortly",
        headers={"Retry-After": "1"},
    ),
}


def add_error_handlers(app: IsolatedResolver) -> None:
    """Every error is a JSON 4xx/5xx in the shape of the path's API, never a bare 500."""

    def problem(found: Problem) -> Response[str]:
        return problem_response(app.current_event.path, found)

    @app.exception_handler(RequestValidationError)
    def invalid_request(exc: RequestValidationError) -> Response[str]:
        return problem(describe_validation_errors(exc.errors()))

    # A cluster with no reachable node, a slot in failover or TRYAGAIN: the store is away, not broken.
    @app.exception_handler(
        [
            RedisConnectionError,
            RedisTimeoutError,
            RedisClusterException,
            ClusterError,
            TryAgainError,
            IdempotencyPersistenceLayerError,
        ]
    )
    def store_unavailable(exc: Exception) -> Response[str]:
        logger.warning("job store unavailable", error=str(exc))
        return problem(STORE_UNAVAILABLE)

    @app.exception_handler(RedisOutOfMemoryError)
    def store_full(exc: Exception) -> Response[str]:
        # maxmemory with noeviction: refusing new work is the alternative to evicting accepted jobs.
        logger.error("job store full: Redis refuses writes at maxmemory", error=str(exc))
        message = "the job store is full; nothing was stored; retry later"
        return problem(Problem(503, "store_full", message, headers={"Retry-After": "5"}))

    for exc_type, to_problem in KNOWN_REFUSALS.items():
        app.exception_handler(exc_type)(lambda exc, to_problem=to_problem: problem(to_problem(exc)))

    @app.not_found
    def route_not_found(exc: Exception) -> Response[str]:
        event = app.current_event
        allowed = ", ".join(app.allowed_methods(event.path))
        if allowed:
            message = f"{event.http_method} is not allowed on {event.path}; use {allowed}"
            return problem(Problem(405, "method_not_allowed", message, headers={"Allow": allowed}))
        return problem(Problem(404, "not_found", "no such route"))


def build_app() -> IsolatedResolver:
    """The routes on one resolver, which threads share (each with its own request state: see
    IsolatedResolver, and its own idempotency guard: see Intake)."""
    app = IsolatedResolver(enable_validation=True, json_body_deserializer=strict_json_loads)
    add_error_handlers(app)
    intake = Intake()
    app.include_router(jobs_router(intake))
    app.include_router(job_control_router(intake))
    app.include_router(openai_router(intake))
    app.include_router(embeddings_router(intake))
    app.include_router(responses_router(intake))
    app.include_router(files_router())
    app.include_router(batches_router())
    app.include_router(uploads_router())
    spec: dict[str, Any] = {}
    generating = threading.Lock()

    def current_spec() -> dict[str, Any]:
        with generating:
            if not spec:
                spec.update(openapi_spec(app))
        return spec

    app.include_router(docs_router(current_spec))
    return app


@cache
def shared_app() -> IsolatedResolver:
    """The process's app, which every thread resolves on (threads that start at once may each build
    one: all are alike, and one is kept)."""
    return build_app()


def lambda_handler(event: dict[str, Any], context: LambdaContext | None) -> dict[str, Any]:
    """API Gateway's entry point: every answer is buffered."""
    return invoke(event, context)


def invoke(
    event: dict[str, Any], context: LambdaContext | None, sink: StreamSink | None = None
) -> dict[str, Any]:
    """Answers a proxy event on the process's app. The streaming server passes a sink, which a route
    that declares it streams may answer into (frontdoor/stream_handle.py)."""
    telemetry.begin_invocation(event)
    response = resolve(shared_app(), normalized(event), context, sink)
    telemetry.end_invocation(event, response)
    return response


def answer_after_wait(event: dict[str, Any], waited_s: float) -> dict[str, Any]:
    """A long-poll's answer once the server waited `waited_s` on its job (frontdoor/stream_handle.py):
    the route again, with the wait the server took already removed from `event`. It is the same request,
    which `invoke` counted; the time it waited and this answer took are added, as a stream's are."""
    started = time.monotonic()
    telemetry.begin_invocation(event)
    response = resolve(shared_app(), normalized(event), None, None)
    telemetry.streamed(event, waited_s + time.monotonic() - started)
    return response


def resolve(
    app: IsolatedResolver, event: dict[str, Any], context: LambdaContext | None, sink: StreamSink | None
) -> dict[str, Any]:
    """A request no route may read is refused before routing, whatever the path (a 400, 413 or 415, not
    a 404)."""
    proxy_event = APIGatewayProxyEvent(event)
    problem = request_problem(proxy_event)
    if problem is not None:
        refusal = problem_response(proxy_event.path, problem)
        return ResponseBuilder[APIGatewayProxyEvent](refusal).build(proxy_event)
    traits = traits_for(app, proxy_event.http_method, proxy_event.path)
    if sink is not None and (traits.streams or traits.wait_param is not None):
        offer(app, sink)
    return app.resolve(event, context)  # type: ignore[arg-type]
