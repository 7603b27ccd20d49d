"""The Responses API through the official `openai` client on the local stack, with the real chat model:
create, retrieve, input items, delete, a three-turn `previous_response_id` chain, streamed events
put together by the SDK's own accumulator, background mode with polling and cancel, function tools
with their outputs sent back, and tenancy. Assertions are on structure (statuses, event order, valid
calls), not on what a 135M model knows."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from contract.catalog import CHAT_MODEL
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.helpers import api
from tests.integration.tenants import new_tenant_key

pytestmark = [pytest.mark.integration, PLAIN_REDIS_ONLY]

ADD = {
    "type": "function",
    "name": "add",
    "description": "Adds two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}
POLL_DEADLINE_S = 120
LONG_TOKENS = 1500


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=180)


def until_final(client: openai.OpenAI, response_id: str) -> Any:
    """The response once it is no longer queued or in progress; raises at the deadline."""
    deadline = time.monotonic() + POLL_DEADLINE_S
    seen = []
    while True:
        response = client.responses.retrieve(response_id)
        seen.append(response.status)
        if response.status not in ("queued", "in_progress"):
            return response, seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"response {response_id} still {response.status} after {POLL_DEADLINE_S} s")
        time.sleep(0.2)


def long_background(client: openai.OpenAI) -> Any:
    """A background response that runs for a minute if nobody stops it."""
    return client.responses.create(
        model=CHAT_MODEL, input="Tell a very long story.", background=True, max_output_tokens=LONG_TOKENS,
        temperature=0,
    )  # fmt: skip


def test_a_response_is_created_read_listed_and_deleted(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model=CHAT_MODEL, input="Name a colour.", instructions="Answer in one word.", max_output_tokens=8,
        temperature=0, metadata={"ticket": "42"},
    )  # fmt: skip
    assert created.id.startswith("resp_") and created.status in ("completed", "incomplete")
    assert created.output_text and created.usage is not None and created.usage.output_tokens > 0
    assert created.metadata == {"ticket": "42"} and created.instructions == "Answer in one word."

    again = client.responses.retrieve(created.id)
    assert again.model_dump() == created.model_dump()
    items = client.responses.input_items.list(created.id)
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]  # type: ignore[union-attr]

    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_three_turns_continue_with_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model=CHAT_MODEL, input="My name is Ada.", max_output_tokens=12, temperature=0
    )
    second = client.responses.create(
        model=CHAT_MODEL, input="What is my name?", previous_response_id=first.id, max_output_tokens=12,
        temperature=0,
    )  # fmt: skip
    third = client.responses.create(
        model=CHAT_MODEL, input="Say it again.", previous_response_id=second.id, max_output_tokens=12,
        temperature=0,
    )  # fmt: skip
    assert third.previous_response_id == second.id and third.output_text
    # each turn's prompt holds the whole chain before it: more input tokens every turn
    tokens = [r.usage.input_tokens for r in (first, second, third)]  # type: ignore[union-attr]
    assert tokens[0] < tokens[1] < tokens[2]
    assert tokens[2] > tokens[1] + len(second.output_text) // 8


def test_the_sdks_stream_helper_puts_the_events_together_into_the_final_response(
    client: openai.OpenAI,
) -> None:
    kinds, numbers, text = [], [], ""
    with client.responses.stream(
        model=CHAT_MODEL, input="Count from one to five.", max_output_tokens=64, temperature=0
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                text += event.delta
        final = stream.get_final_response()
    assert numbers == list(range(len(numbers)))
    assert kinds[:4] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added",
    ]  # fmt: skip
    assert kinds[-4:] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed" if final.status == "completed" else "response.incomplete",
    ]  # fmt: skip
    assert final.output_text == text and text
    assert client.responses.retrieve(final.id).output_text == text


def test_a_background_response_is_queued_then_polled_to_its_end(client: openai.OpenAI) -> None:
    queued = client.responses.create(
        model=CHAT_MODEL, input="Write a short poem.", background=True, max_output_tokens=16, temperature=0
    )
    # answered at once, as it is when read: queued, or already running
    assert queued.status in ("queued", "in_progress") and queued.background is True and queued.output == []
    final, seen = until_final(client, queued.id)
    assert final.status in ("completed", "incomplete") and final.output_text
    order = ["queued", "in_progress", "completed", "incomplete"]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)


def test_cancelling_a_background_response_stops_it(client: openai.OpenAI) -> None:
    long = long_background(client)
    cancelled = client.responses.cancel(long.id)
    final, _ = until_final(client, cancelled.id)
    assert final.status == "cancelled"
    assert (final.usage is None) or final.usage.output_tokens < LONG_TOKENS


def test_a_cancelled_response_retried_as_a_job_is_a_response_again(
    stack: Stack, client: openai.OpenAI
) -> None:
    created = long_background(client)
    until_final(client, client.responses.cancel(created.id).id)
    job_id = str(uuid.UUID(hex=created.id.removeprefix("resp_")))
    retried = api(stack).post(f"/jobs/{job_id}/retry").json()["jobId"]
    again = client.responses.retrieve("resp_" + uuid.UUID(retried).hex)
    assert again.status in ("queued", "in_progress") and again.model_dump(
        include={"model", "max_output_tokens"}
    ) == {"model": CHAT_MODEL, "max_output_tokens": LONG_TOKENS}
    client.responses.cancel(again.id)


def test_a_function_tool_is_called_and_its_output_answered(client: openai.OpenAI) -> None:
    asked = client.responses.create(
        model=CHAT_MODEL, input="What is 2 plus 3? Use the add tool.", tools=[ADD], tool_choice="required",
        max_output_tokens=48, temperature=0,
    )  # type: ignore[list-item]  # fmt: skip
    calls = [item for item in asked.output if item.type == "function_call"]
    assert calls and asked.status == "completed"
    for call in calls:
        assert call.name == "add" and call.call_id.startswith("call_")
        jsonschema.validate(json.loads(call.arguments), ADD["parameters"])

    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "5"} for c in calls]
    answered = client.responses.create(
        model=CHAT_MODEL, input=outputs, previous_response_id=asked.id, tools=[ADD], max_output_tokens=24,
        temperature=0,
    )  # type: ignore[arg-type, list-item]  # fmt: skip
    assert answered.status in ("completed", "incomplete")
    assert answered.output_text or any(i.type == "function_call" for i in answered.output)


def test_a_streamed_function_call_arrives_as_argument_deltas(client: openai.OpenAI) -> None:
    deltas, done = "", None
    with client.responses.stream(
        model=CHAT_MODEL, input="Add 4 and 9.", tools=[ADD], tool_choice={"type": "function", "name": "add"},
        max_output_tokens=48, temperature=0,
    ) as stream:  # type: ignore[list-item]  # fmt: skip
        for event in stream:
            if event.type == "response.function_call_arguments.delta":
                deltas += event.delta
            if event.type == "response.function_call_arguments.done":
                done = event.arguments
        final = stream.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert deltas == done == call.arguments
    jsonschema.validate(json.loads(call.arguments), ADD["parameters"])


def test_another_tenant_gets_404_for_every_route_of_my_response(stack: Stack, client: openai.OpenAI) -> None:
    mine = client.responses.create(model=CHAT_MODEL, input="Hello.", max_output_tokens=4, temperature=0)
    other = new_tenant_key(stack, f"other-{uuid.uuid4().hex[:8]}")
    headers = {"Authorization": f"Bearer {other}"}
    made_up = "resp_" + uuid.uuid4().hex
    with httpx.Client(base_url=f"{stack.api}/v1", headers=headers, timeout=60) as theirs:
        for rid in (mine.id, made_up):
            answers = [
                theirs.get(f"/responses/{rid}"),
                theirs.get(f"/responses/{rid}", params={"stream": "true"}),
                theirs.get(f"/responses/{rid}/input_items"),
                theirs.post(f"/responses/{rid}/cancel"),
                theirs.delete(f"/responses/{rid}"),
            ]
            assert [a.status_code for a in answers] == [404] * 5, [a.text for a in answers]
        continued = theirs.post(
            "/responses", json={"model": CHAT_MODEL, "input": "Go on.", "previous_response_id": mine.id}
        )
        assert continued.status_code == 404 and continued.json()["error"]["param"] == "previous_response_id"
    assert client.responses.retrieve(mine.id).model_dump() == mine.model_dump()


def test_unknown_fields_and_options_we_cannot_honour_are_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=CHAT_MODEL, input="x", extra_body={"frobnicate": True})
    assert "frobnicate" in str(refused.value.body)
    with pytest.raises(openai.BadRequestError) as background:
        client.responses.create(model=CHAT_MODEL, input="x", background=True, store=False)
    assert "store" in str(background.value.body)


def test_a_chain_past_the_models_context_is_refused_before_anything_is_queued(stack: Stack) -> None:
    small = openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=120)
    model = "tiny-gpt2"  # a context of 256 tokens
    first = small.responses.create(model=model, input="word " * 60, max_output_tokens=64, temperature=0)
    assert first.usage is not None and first.usage.total_tokens > 256 - 64
    jobs = api(stack).get("/jobs", params={"limit": 100}).json()["jobs"]
    with pytest.raises(openai.BadRequestError) as refused:
        small.responses.create(model=model, input="more", previous_response_id=first.id, max_output_tokens=64)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert refused.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert api(stack).get("/jobs", params={"limit": 100}).json()["jobs"] == jobs


def test_a_response_counts_in_its_tenants_in_flight_quota(stack: Stack) -> None:
    key = new_tenant_key(stack, f"quota-{uuid.uuid4().hex[:8]}", max_inflight=1)
    limited = openai.OpenAI(base_url=f"{stack.api}/v1", api_key=key, max_retries=0, timeout=120)
    running = long_background(limited)
    try:
        with pytest.raises(openai.RateLimitError):
            limited.responses.create(
                model=CHAT_MODEL, input="And another.", background=True, max_output_tokens=8
            )
    finally:
        limited.responses.cancel(running.id)
