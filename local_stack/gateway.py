"""The local front door: an HTTP server that turns each request into an API Gateway proxy event and
hands it to the same Lambda handler that API Gateway invokes in AWS.

Each invocation runs on a thread of its own, as each Lambda invocation has its own execution
environment. Requests that wait on a job (`GET /results/{id}?wait=N`, up to 20 s, and the synchronous
`/v1` completions, up to SYNAPSE_SYNC_TIMEOUT_S) block their thread on the job's done-list. They run
on a pool of their own, `SYNAPSE_GATEWAY_LONG_WAITS` threads, so that however many are waiting, submissions,
health checks and plain reads find the general pool (`SYNAPSE_GATEWAY_CONCURRENCY` threads) free.
One pool for all let 1,500 long-polls hold every thread: submissions then waited up to 19 s.

Why a second pool rather than waiting without a thread (an async wait in the gateway, then the
handler run again to answer): the handler would no longer serve `?wait=` locally as it does in
Lambda, and the gateway would need its own copy of the store's waiting and of the result's shape.
A blocked thread costs no CPU (it sleeps in a socket read, outside the GIL), and the front door's
Redis pool has a connection for each thread of both pools (`frontdoor.intake.redis_connections`).
The price is paid once per thread: each builds its own app on first use (about 10 ms of CPU, as a
Lambda environment cold-starts), so the first burst of 2,000 waits takes some 15 s of CPU to open;
the threads then stay for the next ones. Past that many at once, waits queue for a thread,
still never on the general pool.

Errors of the server itself are JSON in the API's shape too: a request aiohttp cannot parse (a
request line or header over `MAX_LINE_BYTES`, CR or NUL in a header) is answered by the connection's
`handle_error` before any handler runs, and aiohttp 3.14 offers no hook for those (aio-libs/aiohttp
#3287), so the server's connections are a `RequestHandler` subclass that answers them in JSON.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine, HttpProcessingError, InvalidHeader, LineTooLong

from contract.settings import Settings
from frontdoor.api_key import presented_key
from frontdoor.errors import Problem, body_for
from frontdoor.handler import lambda_handler
from frontdoor.schemas import MAX_BODY_BYTES

log = logging.getLogger(__name__)

# API Gateway (REST) takes a request line and headers of 10,240 bytes in all, so no single one longer;
# aiohttp's default of 8,190 would refuse some that it takes.
MAX_LINE_BYTES = 10_240
SYNC_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
RESULTS_PREFIX = "/results/"


def to_proxy_event(request: web.BaseRequest, body: bytes) -> dict[str, Any]:
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


def problem_response(path: str, problem: Problem) -> web.Response:
    """An error in the shape of the path's API (OpenAI's on /v1), as the front door answers it."""
    return web.json_response(body_for(path, problem), status=problem.status, headers=dict(problem.headers))


def api_key_problem(request: web.BaseRequest, expected: str) -> web.Response | None:
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


def waits_on_a_job(event: dict[str, Any]) -> bool:
    """A long-poll (`GET /results/{id}` with a wait over 0) or a synchronous /v1 completion: requests
    that may hold their thread for up to 25 s. A malformed wait is refused at once: not one of them."""
    method, path = event["httpMethod"], event["path"]
    if method == "POST":
        return path in SYNC_PATHS
    if method != "GET" or not path.startswith(RESULTS_PREFIX):
        return False
    wait = (event.get("queryStringParameters") or {}).get("wait") or "0"
    try:
        return float(wait) > 0
    except ValueError:
        return False


def server_problem(status: int, exc: BaseException | None) -> Problem:
    """What the server answers when no handler could: a request it cannot parse, or a failure."""
    if isinstance(exc, LineTooLong):
        message = f"the request line and each header must be at most {MAX_LINE_BYTES} bytes"
        return Problem(status, "request_line_or_header_too_large", message)
    if isinstance(exc, BadStatusLine):
        return Problem(status, "invalid_request_line", "the request line must be `METHOD /path HTTP/1.1`")
    if isinstance(exc, HttpProcessingError):
        # llhttp's reason, without the request bytes aiohttp quotes after it.
        why = (exc.message or "malformed").splitlines()[0].rstrip(":")[:200]
        if isinstance(exc, InvalidHeader) or "header" in why.lower():
            return Problem(status, "invalid_header", f"a header is not valid HTTP/1.1: {why}")
        return Problem(status, "bad_request", f"the request is not valid HTTP/1.1: {why}")
    if status == HTTPStatus.INTERNAL_SERVER_ERROR:
        return Problem(status, "internal_error", "the gateway could not handle the request; see its log")
    return Problem(status, status_code(status), HTTPStatus(status).phrase)


def status_code(status: int) -> str:
    """A machine code from the status's phrase: 504 is `gateway_timeout`."""
    return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")


class JsonErrorProtocol(web.RequestHandler):
    """aiohttp's connection protocol, answering what it refuses itself in the API's JSON shape."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun: no error response can follow it")
        if status >= 500:
            log.error("error handling a request to %s", request.path, exc_info=exc)
        else:
            log.info("refused a request from %s: %s", request.remote, exc or message)
        response = problem_response(request.path, server_problem(status, exc))
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    """aiohttp's low-level server, with connections that answer their own errors in JSON."""

    def __init__(
        self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], **protocol_args: Any
    ) -> None:
        super().__init__(handler, **protocol_args)
        self._protocol_args = protocol_args

    def __call__(self) -> web.RequestHandler:
        return JsonErrorProtocol(self, loop=asyncio.get_running_loop(), **self._protocol_args)


class Gateway:
    def __init__(self, settings: Settings) -> None:
        if not settings.api_key:
            raise ValueError("the gateway needs SYNAPSE_API_KEY (`synapse up` generates one)")
        self.settings = settings
        self._api_key = settings.api_key
        self._pool = ThreadPoolExecutor(max_workers=settings.gateway_concurrency, thread_name_prefix="lambda")
        self._waits = ThreadPoolExecutor(
            max_workers=settings.gateway_long_waits, thread_name_prefix="lambda-wait"
        )
        self._runner: web.ServerRunner | None = None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every answer is JSON: aiohttp's own refusals (HTTPException) become problems too."""
        try:
            return await self._serve(request)
        except web.HTTPException as exc:
            return problem_response(request.path, Problem(exc.status, status_code(exc.status), exc.reason))
        except web.RequestPayloadError:
            message = "the request body could not be read: its chunked framing or Content-Encoding is broken"
            return problem_response(request.path, Problem(400, "invalid_body", message))

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        refused = api_key_problem(request, self._api_key)
        if refused is not None:
            return refused
        try:
            body = await request.clone(client_max_size=MAX_BODY_BYTES).read()
        except web.HTTPRequestEntityTooLarge:
            message = f"the request body is over {MAX_BODY_BYTES} bytes"
            return problem_response(request.path, Problem(413, "body_too_large", message))
        event = to_proxy_event(request, body)
        pool = self._waits if waits_on_a_job(event) else self._pool
        result = await asyncio.get_running_loop().run_in_executor(pool, lambda_handler, event, None)
        return from_proxy_response(result)

    async def start(self) -> None:
        server = JsonErrorServer(
            self.handle, access_log=None, max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES
        )
        self._runner = web.ServerRunner(server, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.api_host, self.settings.api_port, backlog=4096)
        await site.start()
        log.info("gateway listening on http://%s:%d", self.settings.api_host, self.settings.api_port)

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        for pool in (self._pool, self._waits):
            pool.shutdown(wait=False, cancel_futures=True)


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
