"""The local front door: an HTTP server that turns each request into an API Gateway proxy event and
hands it to the same Lambda handler that API Gateway invokes in AWS.

Each invocation runs on its own thread (as each Lambda invocation has its own execution environment),
so long-polls can block without holding up other requests.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from contract.settings import Settings
from frontdoor.api_key import presented_key
from frontdoor.errors import Problem, body_for
from frontdoor.handler import lambda_handler

log = logging.getLogger(__name__)


def to_proxy_event(request: web.Request, body: bytes) -> dict[str, Any]:
    """An API Gateway REST API (v1) proxy integration event for this request."""
    # Text travels as is; bytes that are not UTF-8 travel base64-encoded, as API Gateway sends binary.
    as_text = not body or _is_utf8(body)
    multi_headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        multi_headers.setdefault(name, []).append(value)
    multi_query: dict[str, list[str]] = {}
    for name, value in request.query.items():
        multi_query.setdefault(name, []).append(value)
    return {
        "resource": "/{proxy+}",
        "path": request.path,
        "httpMethod": request.method,
        "headers": {name: values[-1] for name, values in multi_headers.items()},
        "multiValueHeaders": multi_headers,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": request.path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": request.method,
            "path": request.path,
            "stage": "local",
            "requestId": str(uuid.uuid4()),
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": request.remote or "127.0.0.1"},
        },
        "body": (body.decode("utf-8") if as_text else base64.b64encode(body).decode("ascii"))
        if body
        else None,
        "isBase64Encoded": not as_text,
    }


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def from_proxy_response(result: dict[str, Any]) -> web.Response:
    headers: dict[str, str] = {}
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers[name] = ", ".join(values)
    headers.update(result.get("headers") or {})
    raw = result.get("body") or ""
    body = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode("utf-8")
    return web.Response(status=int(result["statusCode"]), body=body, headers=headers)


OPEN_PATHS = frozenset({"/healthz"})
MAX_BODY_BYTES = 4 * 1024 * 1024


def problem_response(path: str, problem: Problem) -> web.Response:
    """An error in the shape of the path's API (OpenAI's on /v1), as the front door answers it."""
    return web.json_response(body_for(path, problem), status=problem.status, headers=dict(problem.headers))


def api_key_problem(request: web.Request, expected: str) -> web.Response | None:
    """401 without a key, 403 with a wrong one; in AWS, API Gateway's usage plans do this check."""
    if request.path in OPEN_PATHS:
        return None
    presented = presented_key(request.headers)
    if presented is None:
        message = "send your API key in the x-api-key header (or Authorization: Bearer)"
        return problem_response(request.path, Problem(401, "missing_api_key", message))
    # Header bytes that are not UTF-8 reach us surrogate-escaped; they must compare unequal, not crash.
    if not hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected.encode()):
        return problem_response(request.path, Problem(403, "invalid_api_key", "the API key is not valid"))
    return None


class Gateway:
    def __init__(self, settings: Settings) -> None:
        if not settings.api_key:
            raise ValueError("the gateway needs SYNAPSE_API_KEY (`synapse up` generates one)")
        self.settings = settings
        self._api_key = settings.api_key
        self._pool = ThreadPoolExecutor(max_workers=settings.gateway_concurrency, thread_name_prefix="lambda")
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        refused = api_key_problem(request, self._api_key)
        if refused is not None:
            return refused
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            message = f"the request body is over {MAX_BODY_BYTES} bytes"
            return problem_response(request.path, Problem(413, "body_too_large", message))
        event = to_proxy_event(request, body)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._pool, lambda_handler, event, None)
        return from_proxy_response(result)

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.api_host, self.settings.api_port, backlog=4096)
        await site.start()
        log.info("gateway listening on http://%s:%d", self.settings.api_host, self.settings.api_port)

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._pool.shutdown(wait=False, cancel_futures=True)


async def run_gateway(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    gateway = Gateway(settings)
    await gateway.start()
    try:
        await stop.wait()
    finally:
        await gateway.aclose()
