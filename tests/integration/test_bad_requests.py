"""Hand-written bad requests on every submitting route: each gets its documented 4xx, in the route's
error shape, and nothing reaches the queue."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from contract.keys import COUNTS_KEY
from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added
from tests.integration.tenants import new_tenant_key

pytestmark = pytest.mark.integration

JSON = "application/json"
MAX_PROMPT_CHARS = 32_768  # the SYNAPSE_MAX_PROMPT_CHARS default the stack runs with


def async_body(**fields: Any) -> dict[str, Any]:
    body = {"model": "gpu-sim", "prompt": "fine", **fields}
    if "max_tokens" in body:
        body["parameters"] = {"max_tokens": body.pop("max_tokens")}
    return body


def completion_body(**fields: Any) -> dict[str, Any]:
    return {"model": "gpu-sim", "prompt": "fine", **fields}


def chat_body(**fields: Any) -> dict[str, Any]:
    body = {"model": "gpu-sim", **fields}
    body["messages"] = [{"role": "user", "content": body.pop("prompt", "fine")}]
    return body


ROUTES: dict[str, Callable[..., dict[str, Any]]] = {
    "/async-infer": async_body,
    "/v1/completions": completion_body,
    "/v1/chat/completions": chat_body,
}
UNKNOWN_MODEL = {"/async-infer": (400, "unknown_model")}  # OpenAI's answer is 404 model_not_found


def as_json(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


# (case, route -> (body bytes, content type), status, code). json.dumps escapes the lone surrogate.
CASES: list[tuple[str, Callable[[str], tuple[bytes, str]], int, str]] = [
    ("empty prompt", lambda r: (as_json(ROUTES[r](prompt="")), JSON), 400, "invalid_request"),
    ("huge prompt", lambda r: (as_json(ROUTES[r](prompt="x" * (MAX_PROMPT_CHARS + 1))), JSON), 413,
     "prompt_too_large"),
    ("body over 4 MiB", lambda r: (as_json(ROUTES[r](prompt="x" * (5 * 1024 * 1024))), JSON), 413,
     "body_too_large"),
    ("prompt of the wrong type", lambda r: (as_json(ROUTES[r](prompt=5)), JSON), 400, "invalid_request"),
    ("max_tokens of the wrong type", lambda r: (as_json(ROUTES[r](max_tokens="many")), JSON), 400,
     "invalid_request"),
    ("negative max_tokens", lambda r: (as_json(ROUTES[r](max_tokens=-1)), JSON), 400, "invalid_request"),
    ("unknown model", lambda r: (as_json(ROUTES[r](model="llama-9000")), JSON), 404, "model_not_found"),
    ("unknown field", lambda r: (as_json(ROUTES[r](colour="red")), JSON), 400, "invalid_request"),
    ("non-JSON body", lambda r: (b"model=gpu-sim, prompt=fine", JSON), 400, "invalid_json"),
    ("form content type", lambda r: (b"model=gpu-sim&prompt=fine", "application/x-www-form-urlencoded"), 415,
     "unsupported_media_type"),
    ("text content type", lambda r: (as_json(ROUTES[r]()), "text/plain"), 415, "unsupported_media_type"),
    ("lone surrogate", lambda r: (as_json(ROUTES[r](prompt="\ud800")), JSON), 400, "invalid_json"),
    ("bytes that are not UTF-8", lambda r: (b'{"model": "gpu-sim", "prompt": "\xff\xfe"}', JSON), 400,
     "invalid_json"),
]  # fmt: skip


def enqueued(stack: Stack) -> int:
    return entries_added(stack.redis(), ("gpu-sim", "tiny-gpt2", "llama-9000"))


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
async def test_a_bad_request_gets_its_4xx_and_enqueues_nothing(
    stack: Stack, route: str, case: tuple[str, Callable[[str], tuple[bytes, str]], int, str]
):
    name, request_for, status, code = case
    if name == "unknown model":
        status, code = UNKNOWN_MODEL.get(route, (status, code))
    body, content_type = request_for(route)
    before = enqueued(stack)
    headers = {"x-api-key": stack.api_key, "Content-Type": content_type}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.api}{route}", data=body, headers=headers) as response,
    ):
        assert response.content_type == "application/json"
        payload = await response.json()
    assert (response.status, payload["error"]["code"]) == (status, code), payload
    assert payload["error"]["message"]
    if route.startswith("/v1/"):
        assert payload["error"]["type"] == "invalid_request_error"
    assert enqueued(stack) == before


@pytest.mark.parametrize("route", list(ROUTES))
async def test_unicode_prompts_go_through_intact(stack: Stack, route: str):
    prompt = "héllo wörld 世界 🎉"
    headers = {"x-api-key": stack.api_key}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{stack.api}{route}", json=ROUTES[route](prompt=prompt)) as response:
            assert response.status in (200, 202)
            payload = await response.json()
        if route == "/async-infer":
            url = f"{stack.api}/results/{payload['jobId']}?wait=20"
            async with session.get(url) as response:
                text = (await response.json())["result"]["text"]
        elif route == "/v1/completions":
            text = payload["choices"][0]["text"]
        else:
            text = payload["choices"][0]["message"]["content"]
    sent = prompt if route != "/v1/chat/completions" else f"User: {prompt}\nAssistant:"
    assert text == sent[::-1]


def raw_request(stack: Stack, head: bytes, body: bytes = b"") -> bytes:
    """A request as bytes on the wire, for header bytes no HTTP client would send."""
    port = int(stack.api.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + b"Connection: close\r\n\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_header_bytes_that_are_not_utf8_get_4xx_not_5xx(stack: Stack):
    bad_key = raw_request(stack, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: sk-\xff\xfe\r\n")
    assert bad_key.startswith(b"HTTP/1.1 403"), bad_key[:200]
    body = b'{"model": "gpu-sim", "prompt": "x"}'
    head = (
        b"POST /async-infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"x-api-key: {stack.api_key}\r\nContent-Length: {len(body)}\r\n".encode()
        + b"Idempotency-Key: \xff\xfe\r\n"
    )
    before = enqueued(stack)
    bad_idempotency_key = raw_request(stack, head, body)
    assert bad_idempotency_key.startswith(b"HTTP/1.1 400"), bad_idempotency_key[:300]
    assert enqueued(stack) == before


# Each over tiny-gpt2's context of 256 tokens, and each under SYNAPSE_MAX_PROMPT_CHARS: only counting
# the prompt's tokens tells. The chat is the attack run's (issue 41): 3,000 messages.
OVER_CONTEXT: dict[str, dict[str, Any]] = {
    "/async-infer": {"model": "tiny-gpt2", "prompt": "the " * 2_000},
    "/v1/completions": {"model": "tiny-gpt2", "prompt": "the " * 2_000},
    "/v1/chat/completions": {"model": "tiny-gpt2", "messages": [{"role": "user", "content": "hi"}] * 3_000},
}
PROMPT_PARAM = {"/async-infer": "prompt", "/v1/completions": "prompt", "/v1/chat/completions": "messages"}


def submitted(stack: Stack, tenant: str) -> int:
    """The jobs the tenant was ever counted for."""
    return int(stack.redis().hget(COUNTS_KEY, f"{tenant}|submitted") or 0)


@pytest.mark.parametrize("route", list(OVER_CONTEXT))
async def test_a_prompt_over_the_models_context_is_refused_before_anything_is_queued(
    stack: Stack, route: str
):
    """The engine used to find it after the submit: a FAILED job, counted for the tenant, and a 400
    `model_error` with a jobId. The front door now counts the prompt with the model's tokenizer."""
    tenant = f"over-context-{PROMPT_PARAM[route]}-{len(route)}"
    key = new_tenant_key(stack, tenant)
    before = enqueued(stack)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.api}{route}", json=OVER_CONTEXT[route], headers={"x-api-key": key}) as reply,
    ):
        payload = await reply.json()
    assert (reply.status, payload["error"]["code"]) == (400, "context_length_exceeded"), payload
    assert "context of 256 tokens" in payload["error"]["message"]
    assert "jobId" not in payload and "jobId" not in payload["error"]
    if route.startswith("/v1/"):
        assert payload["error"]["param"] == PROMPT_PARAM[route]
    assert (enqueued(stack), submitted(stack, tenant)) == (before, 0)
