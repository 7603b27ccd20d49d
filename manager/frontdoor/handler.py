"""The front-door Lambda: validates requests, enqueues jobs and reads results.

API Gateway invokes `lambda_handler`; locally the gateway (`synapse gateway`) invokes the same
function with the same event shape.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.utilities.typing import LambdaContext
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from manager.frontdoor import telemetry
from manager.frontdoor.schemas import MAX_TIMEOUT_MS, SubmitRequest, error_body
from manager.frontdoor.store import JobStore
from manager.jobs import Job, public_view
from manager.redis_client import sync_client
from manager.settings import Settings

logger = Logger(service="synapse-frontdoor")

JOB_ID = re.compile(r"^[0-9a-fA-F-]{36}$")


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def store() -> JobStore:
    """One Redis pool per execution environment, reused across invocations."""
    return JobStore(sync_client(settings()), settings().job_ttl_s)


def json_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        headers=headers,
    )


def describe_validation_errors(errors: Any) -> tuple[str, str]:
    """A code and a one-line message naming every field that failed."""
    problems: list[str] = []
    for err in errors:
        if err.get("type") == "json_invalid":
            return "invalid_json", "request body is not valid JSON"
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid_request", "; ".join(problems)


def reject_submission(request: SubmitRequest, cfg: Settings) -> Response[str] | None:
    """The 4xx for a well-formed body that the platform cannot take, or None."""
    if request.model not in cfg.models:
        known = ", ".join(cfg.models)
        return json_response(
            400, error_body("unknown_model", f"model {request.model!r} is not served; one of: {known}")
        )
    if len(request.prompt) > cfg.max_prompt_chars:
        message = f"prompt has {len(request.prompt)} characters; the limit is {cfg.max_prompt_chars}"
        return json_response(413, error_body("prompt_too_large", message))
    return None


class IsolatedResolver(APIGatewayRestResolver):
    """A resolver that keeps the current event on itself.

    Powertools stores the event on the shared router class, which is right for Lambda (one invocation
    per process at a time) but not for the local gateway, which runs invocations side by side in
    threads. Each thread gets its own resolver, as each Lambda execution environment has its own.
    """

    @property
    def current_event(self) -> Any:
        return self._own_event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._own_event = value

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        self._own_event = self._to_proxy_event(dict(event))
        if not sends_json(self._own_event):
            message = "request bodies must be JSON: send Content-Type: application/json"
            return self._build_response(
                ResponseBuilder(json_response(415, error_body("unsupported_media_type", message)))
            )
        return super().resolve(event, context)


def sends_json(event: Any) -> bool:
    """Bodies are JSON only; a form-encoded body must not be read as fields (curl -d sends one)."""
    if not event.body:
        return True
    content_type = (event.headers.get("content-type") or event.headers.get("Content-Type") or "").lower()
    return not content_type or content_type.startswith("application/json") or "+json" in content_type


def build_app() -> APIGatewayRestResolver:
    app = IsolatedResolver(enable_validation=True)

    @app.exception_handler(RequestValidationError)
    def invalid_request(exc: RequestValidationError) -> Response[str]:
        code, message = describe_validation_errors(exc.errors())
        return json_response(400, error_body(code, message))

    @app.exception_handler([RedisConnectionError, RedisTimeoutError])
    def store_unavailable(exc: Exception) -> Response[str]:
        logger.warning("job store unavailable", error=str(exc))
        return json_response(
            503, error_body("unavailable", "the job store is unreachable; retry"), {"Retry-After": "1"}
        )

    @app.not_found
    def route_not_found(exc: Exception) -> Response[str]:
        return json_response(404, error_body("not_found", "no such route"))

    @app.get("/healthz")
    def healthz() -> Response[str]:
        if store().ping():
            return json_response(200, {"status": "ok"})
        return json_response(503, error_body("unavailable", "redis did not answer"))

    @app.post("/async-infer")
    def submit(request: SubmitRequest) -> Response[str]:
        cfg = settings()
        rejection = reject_submission(request, cfg)
        if rejection is not None:
            return rejection
        job = Job.new(
            model=request.model,
            prompt=request.prompt,
            max_tokens=request.parameters.max_tokens,
            parameters=request.parameters.model_dump(),
            timeout_ms=request.timeoutMs or MAX_TIMEOUT_MS,
        )
        store().submit(job)
        logger.append_keys(job_id=job.id)
        return json_response(202, {"jobId": job.id, "status": "QUEUED"})

    @app.get("/results/<job_id>")
    def result(job_id: str, wait: Annotated[float, Query(ge=0, le=20)] = 0) -> Response[str]:
        fields = store().wait(job_id, wait) if JOB_ID.match(job_id) else None
        if fields is None:
            return json_response(404, error_body("not_found", f"job {job_id} does not exist or has expired"))
        return json_response(200, public_view(fields))

    return app


_local = threading.local()


def lambda_handler(event: dict[str, Any], context: LambdaContext | None) -> dict[str, Any]:
    app: APIGatewayRestResolver | None = getattr(_local, "app", None)
    if app is None:
        app = _local.app = build_app()
    telemetry.begin_invocation(event)
    response = app.resolve(event, context)  # type: ignore[arg-type]
    telemetry.end_invocation(event, response)
    return response
