"""The local front door: the front door's HTTP server (`frontdoor.http_server`: proxy events for the
Lambda handler, two thread pools, token streaming), behind what API Gateway does in AWS: the API-key
check, the tenant the key belongs to, and each tenant's rate limit.

Keys and tenants come from the keys file (`<state_dir>/keys.json`, `synapse keys`; contract/tenants.py),
looked at again at most once a second, so that a new or revoked key takes effect without a restart. The
tenant reaches the handler as the request authorizer's context does in AWS (`requestContext.authorizer`);
a client's own `x-amzn-request-context` header never does. A tenant with a rate (`rate_per_s`, `burst`)
has a token bucket in this process that every one of its keyed requests takes from, as a usage plan
throttles every request of its key: past it, 429 `rate_limited` with Retry-After, and the handler never
sees the request.

Errors of the server itself are JSON in the API's shape too: a request aiohttp cannot parse (a
request line or header over `MAX_LINE_BYTES`, CR or NUL in a header) is answered by the connection's
`handle_error` before any handler runs, and aiohttp 3.14 offers no hook for those (aio-libs/aiohttp
#3287), so the server's connections are a `RequestHandler` subclass that answers them in JSON.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine, HttpProcessingError, InvalidHeader, LineTooLong

from contract.jobs import DEFAULT_TENANT
from contract.keys import COUNTS_KEY
from contract.redis_client import STORE_ERRORS, AsyncRedis, async_client
from contract.settings import Settings
from contract.tenants import KeyBook, Tenant, WatchedKeyBook, keys_file
from frontdoor.api_key import ambiguity, presented_key
from frontdoor.http_server import FrontDoorServer, problem_response
from frontdoor.schemas import MAX_BODY_BYTES
from frontdoor.tenancy import Caller
from openai_api.errors import Problem

log = logging.getLogger(__name__)

# API Gateway (REST) takes a request line and headers of 10,240 bytes in all, so no single one longer;
# aiohttp's default of 8,190 would refuse some that it takes.
MAX_LINE_BYTES = 10_240


OPEN_PATHS = frozenset({"/healthz"})
KEYS_RELOAD_S = 1.0  # how soon `synapse keys` takes effect: the keys file is looked at this often
COUNTER_TIMEOUT_S = 0.25  # counting a refusal is best effort and never holds the answer up for long


def authenticate(request: web.BaseRequest, book: KeyBook) -> Tenant | Problem:
    """The tenant of the key the request presents; or 401 without a key, 403 with a key the book does
    not know or has revoked; 400 with credentials that name more than one key. In AWS, the request
    authorizer and the usage plan do this."""
    ambiguous = ambiguity(request.headers.items())
    if ambiguous is not None:
        return ambiguous
    presented = presented_key(request.headers)
    if presented is None:
        message = "send your API key in the x-api-key header (or Authorization: Bearer)"
        return Problem(401, "missing_api_key", message)
    tenant = book.resolve(presented)
    if tenant is None:
        return Problem(403, "invalid_api_key", "the API key is not valid")
    return tenant


def prepare_keys(settings: Settings) -> None:
    """Makes SYNAPSE_API_KEY (the banner's key) a key of the default tenant; refuses to run with no key."""
    with KeyBook.editing(keys_file(settings.state_dir)) as book:
        if settings.api_key:
            book.ensure_key(settings.api_key, DEFAULT_TENANT)
        if not book.active_keys():
            raise ValueError(
                "the gateway has no API key: set SYNAPSE_API_KEY (`synapse up` makes one), "
                "or add one with `synapse keys create --tenant NAME`"
            )


@dataclass
class TokenBucket:
    """`burst` requests at once, then `rate_per_s` a second: the token bucket API Gateway throttles with."""

    rate_per_s: float
    burst: int
    tokens: float
    updated: float

    def take(self, now: float) -> float:
        """0 when a request may pass (it takes a token); otherwise how long until one may."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate_per_s


class RateLimits:
    """A token bucket per tenant that has a rate (0: none). A tenant with a rate but no burst gets a
    burst of one second's requests (API Gateway takes no rate without a burst)."""

    def __init__(self) -> None:
        self._buckets: dict[str, TokenBucket] = {}

    def wait_s(self, tenant: Tenant, now: float) -> float:
        """0 when the tenant's request may pass now, else the seconds until it may."""
        if tenant.rate_per_s <= 0:
            self._buckets.pop(tenant.name, None)
            return 0.0
        burst = tenant.burst or max(1, math.ceil(tenant.rate_per_s))
        bucket = self._buckets.get(tenant.name)
        if bucket is None:
            bucket = self._buckets[tenant.name] = TokenBucket(tenant.rate_per_s, burst, burst, now)
        elif (bucket.rate_per_s, bucket.burst) != (tenant.rate_per_s, burst):  # `synapse keys tenant`
            bucket.rate_per_s, bucket.burst = tenant.rate_per_s, burst
            bucket.tokens = min(bucket.tokens, burst)
        return bucket.take(now)


def rate_limited(tenant: Tenant, wait_s: float) -> Problem:
    retry_after = max(1, math.ceil(wait_s))
    message = (
        f"tenant {tenant.name!r} is over its rate limit of {tenant.rate_per_s:g} requests a second; "
        f"retry after {retry_after} s"
    )
    return Problem(429, "rate_limited", message, headers={"Retry-After": str(retry_after)})


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
        prepare_keys(settings)
        self.settings = settings
        self._keys = WatchedKeyBook(keys_file(settings.state_dir), KEYS_RELOAD_S)
        self._limits = RateLimits()
        self._server = FrontDoorServer(settings)
        self._counts: AsyncRedis = async_client(settings)
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
        caller = None
        if request.path not in OPEN_PATHS:
            tenant = authenticate(request, self._keys.book(time.monotonic()))
            if isinstance(tenant, Problem):
                return problem_response(request.path, tenant)
            wait_s = self._limits.wait_s(tenant, time.monotonic())
            if wait_s > 0:
                await self._count_refusal(tenant.name, "rate_limited")
                return problem_response(request.path, rate_limited(tenant, wait_s))
            caller = Caller(tenant.name, tenant.max_inflight)
        try:
            body = await request.clone(client_max_size=MAX_BODY_BYTES).read()
        except web.HTTPRequestEntityTooLarge:
            message = f"the request body is over {MAX_BODY_BYTES} bytes"
            return problem_response(request.path, Problem(413, "body_too_large", message))
        return await self._server.serve(request, body, caller)

    async def _count_refusal(self, tenant: str, reason: str) -> None:
        """Counts `<tenant>|rejected:<reason>`, as the front door counts the refusals it makes."""
        try:
            async with asyncio.timeout(COUNTER_TIMEOUT_S):
                await self._counts.hincrby(COUNTS_KEY, f"{tenant}|rejected:{reason}", 1)  # type: ignore[misc]
        except STORE_ERRORS as exc:  # OSError among them: the timeout too
            log.debug("could not count a refusal of tenant %s: %s", tenant, exc)

    async def start(self) -> None:
        server = JsonErrorServer(
            self.handle, access_log=None, max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES
        )
        self._runner = web.ServerRunner(server, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.api_host, self.settings.api_port, backlog=4096)
        await site.start()
        self._server.start()
        log.info("gateway listening on http://%s:%d", self.settings.api_host, self.settings.api_port)

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._server.aclose()
        await self._counts.aclose()


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
