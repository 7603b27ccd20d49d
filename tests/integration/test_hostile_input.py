"""Hostile requests against the real gateway: each gets a JSON 4xx in the API's error shape (never a
500, never aiohttp's plain text) and enqueues nothing, whether the handler refuses it or the HTTP
parser does before any handler runs."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added
from tests.integration.tenants import new_tenant_key

pytestmark = pytest.mark.integration

DEEP = 1000  # 2 KB of brackets: past the interpreter's recursion limit, were json.loads to take it
OVERSIZE = 16 * 1024  # past API Gateway's 10,240 bytes for a request line and its headers together
VALID = {"model": "gpu-sim", "prompt": "fine"}


def deep_array() -> bytes:
    return b"[" * DEEP + b"]" * DEEP


def deep_object() -> bytes:
    return b'{"a":' * DEEP + b"1" + b"}" * DEEP


def with_max_tokens(route: str, value: object) -> bytes:
    if route == "/async-infer":
        return json.dumps({**VALID, "parameters": {"max_tokens": value}}).encode()
    return json.dumps({**VALID, "max_tokens": value}).encode()


@dataclass(frozen=True)
class Case:
    name: str
    route: str
    body: bytes
    status: int
    code: str
    headers: dict[str, str] = field(default_factory=dict)
    query: str = ""


def with_huge_integer(route: str) -> bytes:
    """An integer of 5,000 digits, past the 4,300 Python reads from text (json.dumps cannot write it)."""
    digits = b"9" * 5000
    if route == "/async-infer":
        return b'{"model": "gpu-sim", "prompt": "fine", "parameters": {"max_tokens": ' + digits + b"}}"
    if route == "/v1/embeddings":
        return b'{"model": "minilm", "input": "fine", "dimensions": ' + digits + b"}"
    return b'{"model": "gpu-sim", "prompt": "fine", "max_tokens": ' + digits + b"}"


SUBMISSION = json.dumps(VALID).encode()
JSONX = {"Content-Type": "application/jsonx"}
CASES = [
    Case("deep array", "/async-infer", deep_array(), 400, "json_too_deep"),
    Case("deep object", "/async-infer", deep_object(), 400, "json_too_deep"),
    Case("deep array", "/v1/completions", deep_array(), 400, "json_too_deep"),
    Case("deep object", "/v1/chat/completions", deep_object(), 400, "json_too_deep"),
    Case("huge header", "/async-infer", SUBMISSION, 400, "request_line_or_header_too_large",
         headers={"X-Note": "a" * OVERSIZE}),
    Case("long URL", "/async-infer", SUBMISSION, 400, "request_line_or_header_too_large",
         query="?note=" + "a" * OVERSIZE),
    Case("string max_tokens", "/async-infer", with_max_tokens("/async-infer", "16"), 400, "invalid_request"),
    Case("bool max_tokens", "/async-infer", with_max_tokens("/async-infer", True), 400, "invalid_request"),
    Case("string max_tokens", "/v1/completions", with_max_tokens("/v1", "16"), 400, "invalid_request"),
    Case("bool max_tokens", "/v1/completions", with_max_tokens("/v1", True), 400, "invalid_request"),
    Case("application/jsonx", "/async-infer", SUBMISSION, 415, "unsupported_media_type", headers=JSONX),
    Case("application/jsonx", "/v1/completions", SUBMISSION, 415, "unsupported_media_type", headers=JSONX),
    Case("body over 4 MiB", "/async-infer", b"[" + b" " * (5 * 1024 * 1024) + b"]", 413, "body_too_large"),
    Case("huge integer", "/async-infer", with_huge_integer("/async-infer"), 400, "invalid_json"),
    Case("huge integer", "/v1/completions", with_huge_integer("/v1/completions"), 400, "invalid_json"),
    Case("huge integer", "/v1/embeddings", with_huge_integer("/v1/embeddings"), 400, "invalid_json"),
]  # fmt: skip


def enqueued(stack: Stack) -> int:
    return entries_added(stack.redis())


def assert_json_error(
    status: int, content_type: str, payload: dict[str, Any], expected: tuple[int, str]
) -> None:
    assert content_type.split(";", maxsplit=1)[0].strip() == "application/json"
    assert (status, payload["error"]["code"]) == expected, payload
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.name} {c.route}" for c in CASES])
async def test_a_hostile_request_gets_a_json_4xx_and_enqueues_nothing(stack: Stack, case: Case):
    before = enqueued(stack)
    sent = {"x-api-key": stack.api_key, "Content-Type": "application/json", **case.headers}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.api}{case.route}{case.query}", data=case.body, headers=sent) as response,
    ):
        payload = await response.json(content_type=None)
        content_type = response.headers.get("Content-Type", "")
    added = enqueued(stack) - before
    where = f"{case.name} {case.route}"
    print(f"\nFAULT-TALLY hostile {where}: status={response.status} accepted=0 enqueued={added}")
    assert_json_error(response.status, content_type, payload, (case.status, case.code))
    if case.route.startswith("/v1/"):
        assert payload["error"]["type"] == "invalid_request_error"
    assert added == 0


async def raw_request(api: str, request: bytes) -> tuple[int, str, dict[str, Any]]:
    """Bytes no HTTP client would send; returns the status, Content-Type and JSON body."""
    address = urlsplit(api)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), fields.get("content-type", ""), json.loads(body)


@pytest.mark.parametrize("bad", [b"a\rb", b"a\x00b"], ids=["CR", "NUL"])
async def test_a_control_character_in_a_header_gets_a_json_400_and_enqueues_nothing(stack: Stack, bad: bytes):
    body = json.dumps(VALID).encode()
    request = (
        b"POST /async-infer HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"x-api-key: {stack.api_key}\r\nContent-Length: {len(body)}\r\n".encode()
        + b"X-Note: "
        + bad
        + b"\r\n\r\n"
        + body
    )
    before = enqueued(stack)
    status, content_type, payload = await raw_request(stack.api, request)
    assert_json_error(status, content_type, payload, (400, "invalid_header"))
    assert enqueued(stack) == before


async def test_a_header_within_api_gateways_limit_is_served(stack: Stack):
    """The parser's limits are API Gateway's, not aiohttp's 8,190 bytes: what AWS takes, this takes."""
    headers = {"x-api-key": stack.api_key, "X-Note": "a" * 9000}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.api}/async-infer", json=VALID, headers=headers) as response,
    ):
        assert response.status == 202, await response.text()


@pytest.mark.parametrize(
    "credentials",
    [
        [("X-Api-Key", "{own}"), ("x-api-key", "{other}"), ("X-Api-Key", "{own}")],
        [("Authorization", "Bearer {own}"), ("authorization", "Bearer {other}")],
        [("x-api-key", "{own}"), ("x-api-key", "{own}")],
    ],
    ids=["three x-api-key lines", "two bearer tokens", "one key twice"],
)
async def test_a_repeated_credential_header_is_refused_before_anything_else(
    stack: Stack, credentials: list[tuple[str, str]]
):
    """Were one copy authenticated and another to scope idempotency, a tenant would get another
    tenant's job back as a replay of its own request. Sent as raw bytes: aiohttp's client folds
    repeated headers."""
    other = new_tenant_key(stack, "credential-other")
    key = f"credentials-{uuid.uuid4()}"
    body = json.dumps({**VALID, "prompt": "whose job is this"}).encode()
    headers = {"x-api-key": other, "Idempotency-Key": key, "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.api}/async-infer", data=body, headers=headers) as theirs,
    ):
        assert theirs.status == 202
        their_job = (await theirs.json())["jobId"]
    lines = "".join(
        f"{name}: {value.format(own=stack.api_key, other=other)}\r\n" for name, value in credentials
    )
    request = (
        "POST /async-infer HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Idempotency-Key: {key}\r\n{lines}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    before = enqueued(stack)
    status, content_type, payload = await raw_request(stack.api, request)
    assert_json_error(status, content_type, payload, (400, "ambiguous_api_key"))
    assert their_job not in json.dumps(payload)
    assert enqueued(stack) == before
