"""The official `openai` client, pointed at the local stack, works unchanged: same queue, same batching."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from contract.catalog import CHAT_MODEL
from openai_api.format import render_chat
from openai_api.schemas import ChatMessage
from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added, start_gateway, with_unserved_model
from tests.processes import stop

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(stack: Stack) -> OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=60)


OpenAI = openai.OpenAI


def test_the_served_models_are_listed_and_retrievable(client: OpenAI):
    assert [m.id for m in client.models.list()] == ["gpu-sim", CHAT_MODEL, "tiny-gpt2", "minilm"]
    assert client.models.retrieve("tiny-gpt2").owned_by == "synapse"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("llama-9000")


def test_a_completion_is_answered_by_the_model_with_its_token_counts(client: OpenAI):
    completion = client.completions.create(model="gpu-sim", prompt="The three", max_tokens=16)
    assert completion.object == "text_completion"
    assert completion.id.startswith("cmpl-")
    assert completion.choices[0].text == "eerht ehT"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 2)
    assert completion.usage.total_tokens == 4


def test_a_chat_is_answered_through_the_chat_template(client: OpenAI):
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    reply = client.chat.completions.create(model="gpu-sim", messages=messages)
    expected = render_chat([ChatMessage.model_validate(m) for m in messages])[::-1]
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == expected
    assert reply.usage is not None and reply.usage.prompt_tokens == len(render_chat(
        [ChatMessage.model_validate(m) for m in messages]
    ).split())  # fmt: skip


def test_a_streamed_chat_arrives_as_chunks_with_the_usage_last(client: OpenAI):
    stream = client.chat.completions.create(
        model="gpu-sim",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    with_choices = [c for c in chunks if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert text == "User: stream me\nAssistant:"[::-1]
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_a_streamed_completion_carries_the_text_then_the_finish_reason(client: OpenAI):
    chunks = list(client.completions.create(model="gpu-sim", prompt="one two", max_tokens=2, stream=True))
    assert [c.choices[0].text for c in chunks] == ["owt eno", ""]
    assert [c.choices[0].finish_reason for c in chunks] == [None, "length"]


def test_tiny_gpt2_chats_within_max_tokens(client: OpenAI):
    reply = client.chat.completions.create(
        model="tiny-gpt2", messages=[{"role": "user", "content": "The three"}], max_completion_tokens=5
    )
    assert reply.usage is not None
    assert 1 <= reply.usage.completion_tokens <= 5
    assert reply.usage.prompt_tokens >= 1
    assert reply.choices[0].finish_reason in {"stop", "length"}


def test_errors_raise_the_clients_own_exceptions(client: OpenAI, stack: Stack):
    before = entries_added(stack.redis())
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="llama-9000", prompt="x")
    assert (unknown.value.code, unknown.value.param) == ("model_not_found", "model")
    with pytest.raises(openai.BadRequestError) as several:
        client.completions.create(model="gpu-sim", prompt="x", n=2)
    assert (several.value.code, several.value.param) == ("unsupported_parameter", "n")
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model="gpu-sim", messages=[])
    assert empty.value.param == "messages"
    wrong_key = openai.OpenAI(base_url=f"{stack.api}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        wrong_key.completions.create(model="gpu-sim", prompt="x")
    assert denied.value.code == "invalid_api_key"
    assert entries_added(stack.redis()) == before


def test_a_prompt_the_model_rejects_is_a_400_for_that_prompt(client: OpenAI):
    with pytest.raises(openai.BadRequestError) as rejected:
        client.completions.create(model="gpu-sim", prompt="!fail on purpose")
    assert (rejected.value.code, rejected.value.param) == ("model_error", "prompt")


@pytest.fixture(scope="module")
def impatient_gateway(stack: Stack) -> Iterator[str]:
    """A gateway that accepts a model no worker serves and waits only 1 s: its jobs never finish in time.
    The model is in its catalog (a one-shot model), and in no manager's."""
    settings = {**with_unserved_model(stack, "unserved"), "sync_timeout_s": "1"}
    proc, url = start_gateway(stack.env, stack.api_key, stack.logs, "gateway-impatient", **settings)
    yield url
    stop(proc)


def http(method: str, url: str, key: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "x-api-key": key}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(json.load(response))
    except urllib.error.HTTPError as error:
        return error.code, dict(json.load(error))


def test_past_the_timeout_a_504_names_the_job_which_is_cancelled_since_nobody_waits(
    stack: Stack, impatient_gateway: str
):
    status, payload = http(
        "POST", f"{impatient_gateway}/v1/completions", stack.api_key, {"model": "unserved", "prompt": "wait"}
    )
    assert status == 504
    error = payload["error"]
    assert (error["type"], error["code"]) == ("server_error", "timeout")
    assert f"/results/{error['jobId']}" in error["message"]
    status, job = http("GET", f"{stack.api}/results/{error['jobId']}", stack.api_key)
    # The caller has its 504: the job is not left to run for nobody (frontdoor/sync_call.py).
    assert (status, job["status"], job["model"]) == (200, "CANCELLED", "unserved")
