"""The local gateway's own answers: what aiohttp refuses before any handler runs is JSON in the API's
error shape, and requests that wait on a job run on their own pool, never on the general one."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from contract.settings import Settings
from frontdoor import http_server
from frontdoor.handler import build_app
from frontdoor.powertools_adapter import IsolatedResolver
from frontdoor.route_traits import traits_for
from frontdoor.stream_handle import StreamSink
from local_stack import gateway
from local_stack.gateway import MAX_LINE_BYTES, Gateway, JsonErrorServer
from tests.processes import free_port

OK = b"GET /ok HTTP/1.1\r\nHost: x\r\n"


async def echo_or_fail(request: web.BaseRequest) -> web.StreamResponse:
    if request.path == "/fail":
        raise RuntimeError("a bug in the handler")
    return web.json_response({"path": request.path})


@pytest.fixture
async def server() -> AsyncIterator[int]:
    """JsonErrorServer with the gateway's parser limits, on a free port."""
    runner = web.ServerRunner(
        JsonErrorServer(
            echo_or_fail, access_log=None, max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES
        )
    )
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


async def raw(port: int, request: bytes) -> tuple[int, str, dict[str, Any]]:
    """Sends bytes no HTTP client would; returns the status, Content-Type and JSON body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers.get("Content-Type", ""), json.loads(body)


TOO_LONG = b"a" * (MAX_LINE_BYTES + 1)
PARSER_REFUSALS = {
    "CR in a header": (OK + b"X-Bad: a\rb\r\n\r\n", "invalid_header"),
    "NUL in a header": (OK + b"X-Bad: a\x00b\r\n\r\n", "invalid_header"),
    "space in a name": (OK + b"X Bad: a\r\n\r\n", "invalid_header"),
    "huge header": (OK + b"X-Big: " + TOO_LONG + b"\r\n\r\n", "request_line_or_header_too_large"),
    "long URL": (b"GET /" + TOO_LONG + b" HTTP/1.1\r\nHost: x\r\n\r\n", "request_line_or_header_too_large"),
    "bad method": (b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_request_line"),
    "TLS": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", "invalid_request_line"),
    "bad chunk size": (OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "bad_request"),
}


@pytest.mark.parametrize(("request_bytes", "code"), PARSER_REFUSALS.values(), ids=PARSER_REFUSALS.keys())
async def test_what_the_parser_refuses_is_a_json_400(server: int, request_bytes: bytes, code: str):
    status, content_type, body = await raw(server, request_bytes)
    assert (status, content_type.split(";")[0]) == (400, "application/json")
    assert body["error"]["code"] == code
    assert body["error"]["message"]


async def test_a_header_or_url_within_api_gateways_limit_is_served(server: int):
    close = b"Connection: close\r\n"
    status, _, body = await raw(server, OK + close + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n")
    assert (status, body) == (200, {"path": "/ok"})
    path = "/" + "a" * 9000
    status, _, body = await raw(server, f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + close + b"\r\n")
    assert (status, body) == (200, {"path": path})


async def test_a_handler_failure_is_a_json_500_in_the_paths_shape(server: int):
    status, content_type, body = await raw(server, b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, content_type.split(";")[0]) == (500, "application/json")
    assert body["error"]["code"] == "internal_error"


@pytest.fixture(scope="module")
def routes() -> IsolatedResolver:
    return build_app()


@pytest.mark.parametrize(
    ("method", "path", "query", "lane"),
    [
        ("GET", "/results/abc", {"wait": "20"}, "waits"),
        ("GET", "/results/abc", {"wait": "0.5"}, "waits"),
        ("POST", "/v1/completions", None, "waits"),
        ("POST", "/v1/chat/completions", None, "waits"),
        ("POST", "/jobs/abc/cancel", None, "cancels"),
        ("POST", "/v1/embeddings", None, "waits"),
        ("GET", "/results/abc", {"wait": "0"}, "general"),
        ("GET", "/results/abc", {"wait": "soon"}, "general"),
        ("GET", "/results/abc", None, "general"),
        ("POST", "/async-infer", None, "general"),
        ("GET", "/healthz", None, "general"),
        ("GET", "/v1/models", None, "general"),
        ("GET", "/results/abc/stream", None, "general"),
        ("POST", "/nowhere/cancel", None, "general"),
    ],
)
def test_requests_that_wait_on_a_job_or_cancel_one_have_lanes_of_their_own(
    routes: IsolatedResolver, method: str, path: str, query: dict[str, str] | None, lane: str
):
    assert traits_for(routes, method, path).lane(query or {}) == lane


async def test_long_polls_run_on_their_own_threads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The handler sees each request on a thread of the pool its kind belongs to."""

    def thread_name(event: dict[str, Any], context: object, sink: StreamSink) -> dict[str, Any]:
        body = json.dumps({"thread": threading.current_thread().name})
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": body}

    monkeypatch.setattr(http_server, "invoke", thread_name)
    settings = Settings(api_key="k", api_port=free_port(), gateway_concurrency=2, state_dir=tmp_path)
    front = Gateway(settings)
    await front.start()
    api = f"http://127.0.0.1:{settings.api_port}"
    try:
        async with aiohttp.ClientSession(headers={"x-api-key": "k"}) as session:

            async def pool_of(method: str, url: str) -> str:
                async with session.request(method, api + url, json={}) as response:
                    return str((await response.json())["thread"]).rsplit("_", 1)[0]

            assert await pool_of("GET", "/results/x?wait=20") == "lambda-wait-quick"  # it waits on no thread
            assert await pool_of("POST", "/v1/completions") == "lambda-wait"
            assert await pool_of("POST", "/jobs/abc/cancel") == "lambda-cancel"
            assert await pool_of("GET", "/healthz") == "lambda"
            assert await pool_of("POST", "/async-infer") == "lambda"
            assert await pool_of("GET", "/results/x") == "lambda"
    finally:
        await front.aclose()


@pytest.mark.parametrize(
    ("status", "code"), [(500, "internal_error"), (504, "gateway_timeout"), (413, "request_entity_too_large")]
)
def test_other_server_errors_get_a_code_from_their_status(status: int, code: str):
    problem = gateway.server_problem(status, None)
    assert (problem.status, problem.code) == (status, code)
    assert problem.message
