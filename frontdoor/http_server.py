"""The front door as an HTTP server that can stream: the local gateway's core, and in AWS the streaming
function behind API Gateway's response streaming (run by the Lambda Web Adapter: docs/streaming.md).

Every request becomes an API Gateway proxy event for the same handler that API Gateway invokes
(`frontdoor.handler.invoke`), on a thread of its own, as each Lambda invocation has its own execution
environment. The server offers each invocation a stream sink: a route that declares it streams
(`stream: true` on the /v1 completions, `GET /results/{id}/stream`) validates and submits as always,
and puts in the sink which job to follow (`frontdoor.stream_handle`); this server then sends the job's
text from Redis as Server-Sent Events, each delta the moment it is there. A /v1 client that goes away
cancels its generation. Each stream holds one of the server's Redis connections while it lasts, so the
server admits at most `SYNAPSE_MAX_STREAMS` of them, `SYNAPSE_MAX_STREAMS_PER_TENANT` per tenant
(`frontdoor.stream_slots`): a route takes its slot before it submits, so a refused stream queued nothing.

Requests whose route declares that they wait on a job (`GET /results/{id}?wait=N`, up to 20 s, the
buffered /v1 calls; frontdoor/route_traits.py) run on a lane of their own, in fair shares per tenant;
cancels have a lane of their own too, and the rest the general one (`frontdoor.lanes`). A long-poll
holds no thread while it waits: its route hands the wait to this server, which waits on the job's end
on its event loop, one blocking read per job however many poll it (frontdoor/job_waits.py), then asks
the route again. A buffered /v1 call blocks its thread on its job's done-list. A lane admits a bounded
number of requests (the general one, a bounded queue beyond its threads) and refuses the next at once
(429 past a tenant's share, 503 past the lane's capacity, Retry-After), before the handler runs, so past
capacity the server sheds load and keeps answering. A blocked thread costs no CPU, and the front door's
Redis pool has a connection for each thread of every lane.

`python -m frontdoor.http_server` serves on 127.0.0.1:$AWS_LWA_PORT (8080): the streaming function's
entry point, behind API Gateway, which has checked the API key already. Whose request it is comes from
the request authorizer's context (frontdoor/tenancy.py), which the Lambda Web Adapter forwards in the
`x-amzn-request-context` header; locally the gateway names the caller. That header never reaches the
handler as a header: only the gateway in front may name the caller, never the client.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from contract import tokens
from contract.job_record import public_view, read_record
from contract.jobs import CLIENT_GONE, JobStatus
from contract.logs import configure_logging
from contract.redis_client import STORE_ERRORS, AsyncRedis, async_client
from contract.settings import Settings
from frontdoor import telemetry
from frontdoor.handler import STORE_UNAVAILABLE, answer_after_wait, invoke, shared_app
from frontdoor.job_events import end_event, job_event
from frontdoor.job_events import error_event as job_error_event
from frontdoor.job_waits import DoneWaits
from frontdoor.lanes import Lane, Lanes
from frontdoor.resume import resume_after
from frontdoor.route_traits import traits_for
from frontdoor.services import catalog, store
from frontdoor.services import settings as frontdoor_settings
from frontdoor.stream_handle import AnswerFramer, DeferredWait, StreamHandle, StreamSink
from frontdoor.stream_slots import POOL_HEADROOM, StreamSlots, pool_size
from frontdoor.tenancy import TENANT_FIELD, Caller, caller_from_context
from frontdoor.token_stream import follow
from openai_api.errors import Problem, body_for
from openai_api.format import failure_problem

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 30.0  # a client that takes no bytes for this long has gone, whatever its TCP says
CLIENT_CHECK_S = 0.25  # how often a stream with nothing to send looks whether its client has left
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
REQUEST_CONTEXT_HEADER = "x-amzn-request-context"  # the Lambda Web Adapter's copy of requestContext


async def client_gone(request: web.BaseRequest) -> None:
    """Returns once the request's connection is closed (the client left), looking every CLIENT_CHECK_S."""
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(CLIENT_CHECK_S)


def to_proxy_event(
    request: web.BaseRequest, body: bytes, authorizer: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """An API Gateway REST API (v1) proxy integration event for this request; `authorizer` is what a
    request authorizer's context would hold (frontdoor/tenancy.py), None for a route without one."""
    # Text travels as is; bytes that are not UTF-8 travel base64-encoded, as API Gateway sends binary.
    as_text = not body or _is_utf8(body)
    multi_headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        if name.lower() != REQUEST_CONTEXT_HEADER:
            multi_headers.setdefault(name, []).append(value)
    multi_query: dict[str, list[str]] = {}
    for name, value in request.query.items():
        multi_query.setdefault(name, []).append(value)
    request_context: dict[str, Any] = {
        "resourcePath": "/{proxy+}",
        "httpMethod": request.method,
        "path": request.path,
        "stage": "local",
        "requestId": str(uuid.uuid4()),
        "requestTimeEpoch": int(time.time() * 1000),
        "identity": {"sourceIp": request.remote or "127.0.0.1"},
    }
    if authorizer is not None:
        request_context["authorizer"] = dict(authorizer)
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
        "requestContext": request_context,
        "body": (body.decode("utf-8") if as_text else base64.b64encode(body).decode("ascii"))
        if body
        else None,
        "isBase64Encoded": not as_text,
    }


def without_query(event: dict[str, Any], param: str) -> dict[str, Any]:
    """The event as if its request had not had the query parameter `param`."""
    single = {k: v for k, v in (event.get("queryStringParameters") or {}).items() if k != param}
    multi = {k: v for k, v in (event.get("multiValueQueryStringParameters") or {}).items() if k != param}
    return {
        **event,
        "queryStringParameters": single or None,
        "multiValueQueryStringParameters": multi or None,
    }


def adapter_caller(headers: Mapping[str, str]) -> Caller | None:
    """The caller API Gateway's authorizer named, from the request context the Lambda Web Adapter
    forwards (JSON; the literal `null` when the invocation had none); None without an authorizer."""
    try:
        context = json.loads(headers.get(REQUEST_CONTEXT_HEADER) or "null")
    except ValueError:
        return None
    authorizer = context.get("authorizer") if isinstance(context, dict) else None
    if not isinstance(authorizer, dict) or not authorizer.get(TENANT_FIELD):
        return None
    return caller_from_context(authorizer)


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


async def send(response: web.StreamResponse, text: str) -> None:
    """Writes one event; a client that stopped reading (its socket open, its buffer full) counts as gone."""
    try:
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await response.write(text.encode())
    except TimeoutError as exc:
        raise ConnectionResetError(CLIENT_GONE) from exc


def end_problem(end: tokens.End, job_id: str) -> Problem:
    """The HTTP error a /v1 stream answers when its job failed: as the buffered call's."""
    return failure_problem(end.status, end.error_code, end.error_message, job_id)


def problem_response(path: str, problem: Problem) -> web.Response:
    """An error in the shape of the path's API (OpenAI's on /v1), as the front door answers it."""
    return web.json_response(body_for(path, problem), status=problem.status, headers=dict(problem.headers))


class FrontDoorServer:
    """Hands requests to the handler and streams what a route hands it to stream."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lanes = Lanes.of(settings)
        self._slots = StreamSlots.of(settings)
        self._redis: AsyncRedis = async_client(settings, pool_size(settings))  # the streams' connections
        # One connection per job the admitted long-polls wait on, at most one per poll.
        self._done = DoneWaits(async_client(settings, settings.gateway_long_waits + POOL_HEADROOM))
        self._catalog = catalog()  # the one the routes validate against, so a stream agrees with them
        self._routes = shared_app()  # to look routes up on the event loop: building it connects to nothing

    async def serve(
        self, request: web.BaseRequest, body: bytes, caller: Caller | None = None
    ) -> web.StreamResponse:
        """Answers the request as the handler does; `caller` is whose request the gateway found it to be."""
        traits = traits_for(self._routes, request.method, request.path)
        lane = self._lanes.named(traits.lane(dict(request.query.items())))  # the last of a repeated one wins
        tenant = "" if caller is None else caller.tenant
        refused = lane.take(tenant)
        if refused is not None:  # first: a burst refused costs the loop as little as can be
            return problem_response(request.path, refused)
        sink = StreamSink(self._slots)  # a streaming route takes a slot from it before it submits
        long_poll = traits.wait_param is not None  # its route reads, and leaves its wait to this server
        try:
            authorizer = None if caller is None else caller.authorizer_context()
            event = to_proxy_event(request, body, authorizer)
            result: dict[str, Any] | Problem = await lane.run(
                tenant, invoke, event, None, sink, quick=long_poll
            )
            if sink.waiting is not None and traits.wait_param is not None:
                result = await self._after_wait(event, sink.waiting, traits.wait_param, lane, tenant)
        except BaseException:
            sink.release()
            raise
        finally:
            lane.give_back(tenant)  # a long-poll holds its place in the lane while it waits
        if sink.handle is None:
            sink.release()
            return (
                problem_response(request.path, result)
                if isinstance(result, Problem)
                else from_proxy_response(result)
            )
        started = time.monotonic()
        try:
            return await self._stream(request, sink.handle, tenant)
        finally:
            sink.release()  # at once: the client may ask for its next stream as soon as this one ends
            held_s = time.monotonic() - started
            await self._lanes.general.run(tenant, telemetry.streamed, event, held_s)

    async def _after_wait(
        self, event: dict[str, Any], waiting: DeferredWait, param: str, lane: Lane, tenant: str
    ) -> dict[str, Any] | Problem:
        """The long-poll's answer: its job waited on here, on the event loop, then the route asked again
        with no wait (frontdoor/job_waits.py); a 503, as the route's own wait would answer, when the
        store fails the wait."""
        started = time.monotonic()
        try:
            await self._done.until_ended(waiting.job_id, waiting.seconds)
        except STORE_ERRORS as exc:
            log.warning("job %s: the job store failed a long-poll's wait: %s", waiting.job_id, exc)
            return STORE_UNAVAILABLE
        waited_s = time.monotonic() - started
        return await lane.run(tenant, answer_after_wait, without_query(event, param), waited_s, quick=True)

    async def _stream(
        self, request: web.BaseRequest, handle: StreamHandle, tenant: str
    ) -> web.StreamResponse:
        """The stream, cut short when its client's connection closes: a stream that has nothing to send
        (its job queued behind a paused manager) would otherwise hold its slot, and its Redis
        connection, to the job's deadline. Gone is seen within CLIENT_CHECK_S."""
        served = self._catalog.get(handle.model)
        generative = served is not None and served.generates
        if handle.framer is None:
            streaming = self._job_stream(request, handle, generative)
        else:
            streaming = self._answer_stream(request, handle, handle.framer, generative, tenant)
        work = asyncio.ensure_future(streaming)
        gone = asyncio.ensure_future(client_gone(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        await self._client_gone(handle, tenant)
        return web.StreamResponse(headers=SSE_HEADERS)  # nobody reads it: the connection is closed

    async def _job_stream(
        self, request: web.BaseRequest, handle: StreamHandle, generative: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        try:
            after = await resume_after(self._redis, handle.job_id, request.headers.get("Last-Event-ID"))
            async for event in follow(self._redis, handle.job_id, generative=generative, after=after):
                if isinstance(event, tokens.End):
                    record = await read_record(self._redis, handle.job_id)
                    if record is not None:
                        await send(response, end_event(public_view(record), event.entry_id))
                    break
                await send(response, job_event(event))
            await response.write_eof()
        except ConnectionResetError:
            pass  # one reader of the job left; the job goes on
        except STORE_ERRORS as exc:
            log.warning("job %s: its stream broke off: %s", handle.job_id, exc)
            message = (
                "the job store did not answer; the job goes on: reconnect with Last-Event-ID, or fetch "
                f"/results/{handle.job_id}"
            )
            with contextlib.suppress(ConnectionResetError, OSError):
                await send(response, job_error_event(Problem(503, "unavailable", message)))
        return response

    async def _answer_stream(
        self,
        request: web.BaseRequest,
        handle: StreamHandle,
        framer: AnswerFramer,
        generative: bool,
        tenant: str,
    ) -> web.StreamResponse:
        """A job's answer in the route's framing. Nothing is sent until the first event: a job that
        failed before it produced anything is an HTTP error, not a stream."""
        events = follow(self._redis, handle.job_id, generative=generative).__aiter__()
        try:
            first = await anext(events)
        except STORE_ERRORS as exc:  # nothing sent yet: an HTTP error can still say so
            log.warning("job %s: its stream could not start: %s", handle.job_id, exc)
            message = f"the job store did not answer; fetch the result from /results/{handle.job_id}"
            unavailable = Problem(503, "unavailable", message, headers={"Retry-After": "1"})
            return problem_response(request.path, unavailable)
        if isinstance(first, tokens.End) and first.status != JobStatus.COMPLETED:
            return problem_response(request.path, end_problem(first, handle.job_id))
        response = web.StreamResponse(headers=SSE_HEADERS)
        try:
            await response.prepare(request)
            await self._relay(response, framer, first, events)
            await response.write_eof()
        except ConnectionResetError:
            await self._client_gone(handle, tenant)
        except STORE_ERRORS as exc:
            log.warning("job %s: its stream broke off: %s", handle.job_id, exc)
            message = f"the job store did not answer; fetch the result from /results/{handle.job_id}"
            with contextlib.suppress(ConnectionResetError, OSError):
                await send(response, framer.error(Problem(503, "unavailable", message)))
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        return response

    async def _relay(
        self, response: web.StreamResponse, framer: AnswerFramer, first: tokens.Event, rest: Any
    ) -> None:
        """Writes each event in the framer's format until the end; raises ConnectionResetError when the
        client is gone."""
        event: tokens.Event | None = first
        sent_text = False
        while event is not None:
            if isinstance(event, tokens.Delta) and (event.text or event.logprobs):
                await send(response, framer.delta(event.text, event.index, event.logprobs))
                sent_text = True
            elif isinstance(event, tokens.Reset) and sent_text:
                message = f"the generation restarted; fetch its result from /results/{framer.job_id}"
                await send(response, framer.error(Problem(502, "restarted", message)))
                return
            elif isinstance(event, tokens.End):
                if event.status is JobStatus.COMPLETED:
                    await send(response, framer.finish(event))
                else:
                    await send(response, framer.error(end_problem(event, framer.job_id)))
                return
            event = await anext(rest, None)

    async def _client_gone(self, handle: StreamHandle, tenant: str) -> None:
        if not handle.cancel_on_disconnect:
            return
        log.info("job %s: its client left the stream; cancelling it", handle.job_id)
        try:
            await self._lanes.cancels.run(tenant, store().cancel_by_id, handle.job_id, CLIENT_GONE)
        except Exception as exc:  # best effort: the job still ends by its deadline
            log.warning("job %s: could not cancel it: %s", handle.job_id, exc)

    def start(self) -> None:
        """Starts the server's own watch of its event loop, on the loop that will serve: a process that
        serves many requests at once (the local gateway) sheds load when that loop runs late."""
        self._lanes.start()

    async def aclose(self) -> None:
        await self._done.aclose()
        await self._lanes.aclose()
        await self._redis.aclose()


async def _serve_lambda_web_adapter() -> None:
    """The streaming function's server (docs/streaming.md): API Gateway checked the key already."""
    cfg = frontdoor_settings()
    # No watch of the event loop here: a Lambda environment serves one invocation at a time, so nothing
    # queues in its loop, and a frozen environment's clock runs on, which would read as lateness.
    server = FrontDoorServer(cfg)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        caller = adapter_caller(request.headers)
        if caller is None:  # every route of this function has the key authorizer: never run as anyone
            refused = Problem(403, "invalid_api_key", "the API key names no tenant")
            return problem_response(request.path, refused)
        return await server.serve(request, await request.read(), caller)

    runner = web.ServerRunner(web.Server(handle), handle_signals=True)
    await runner.setup()
    port = int(os.environ.get("AWS_LWA_PORT") or os.environ.get("PORT") or "8080")
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await server.aclose()


if __name__ == "__main__":
    configure_logging(frontdoor_settings().log_level, "frontdoor-stream")
    asyncio.run(_serve_lambda_web_adapter())
