"""The local front door: the front door's HTTP server (`frontdoor.http_server`: proxy events for the
Lambda handler, two thread pools, token streaming), behind the API-key check that API Gateway's usage
plans do in AWS.

Errors of the server itself are JSON in the API's shape too: a request aiohttp cannot parse (a
request line or header over `MAX_LINE_BYTES`, CR or NUL in a header) is answered by the connection's
`handle_error` before any handler runs, and aiohttp 3.14 offers no hook for those (aio-libs/aiohttp
#3287), so the server's connections are a `RequestHandler` subclass that answers them in JSON.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine, HttpProcessingError, InvalidHeader, LineTooLong

from contract.settings import Settings
from frontdoor.api_key import presented_key
from frontdoor.errors import Problem
from frontdoor.http_server import FrontDoorServer, problem_response
from frontdoor.schemas import MAX_BODY_BYTES

log = logging.getLogger(__name__)

# API Gateway (REST) takes a request line and headers of 10,240 bytes in all, so no single one longer;
# aiohttp's default of 8,190 would refuse some that it takes.
MAX_LINE_BYTES = 10_240


OPEN_PATHS = frozenset({"/healthz"})


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
        self._server = FrontDoorServer(settings)
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
        return await self._server.serve(request, body)

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
        await self._server.aclose()


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
