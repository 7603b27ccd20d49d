"""What OpenAI clients send beyond a plain chat, through the official `openai` client on the local stack,
against the real chat model: log-probabilities equal to transformers' own forward pass, n choices,
JSON that validates against its schema (constrained decoding), tool calls, penalties and logit_bias."""

# ruff: noqa: E501  (the schemas below read best one to a line)
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from contract.catalog import CHAT_MODEL
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.models import shared_checkpoints

# The model's answers, not the store's flavour, are under test: plain Redis only (the job path runs on
# both elsewhere).
pytestmark = [
    pytest.mark.integration,
    PLAIN_REDIS_ONLY,
]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=180)


@cache
def reference() -> tuple[Any, Any, dict[bytes, int]]:
    """The checkpoint the stack serves, loaded by transformers (float32, as the CPU engine runs it), and
    each token's id by its bytes (OpenAI's logprobs name tokens by text and bytes, not ids)."""
    import llguidance.hf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(shared_checkpoints()) / CHAT_MODEL
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    lltok = llguidance.hf.from_tokenizer(tokenizer)
    ids = {bytes(lltok.decode_bytes([i])): i for i in range(len(tokenizer))}
    return tokenizer, model, ids


def forward_logprobs(messages: list[Any], generated: list[int]) -> Any:
    """log_softmax of the model's logits at each generated position, by a plain forward pass."""
    import torch

    tokenizer, model, _ = reference()
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)[
        "input_ids"
    ]
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + generated])).logits[0]
    return torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(generated)], dim=-1)


def test_logprobs_equal_a_direct_forward_pass_over_the_same_tokens(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=CHAT_MODEL, messages=QUESTION, temperature=0, max_tokens=12, logprobs=True, top_logprobs=3
    )  # type: ignore[call-overload]
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    content = choice.logprobs.content
    assert "".join(bytes(t.bytes or []).decode("utf-8", "replace") for t in content) == choice.message.content
    _, _, ids = reference()
    generated = [ids[bytes(t.bytes or [])] for t in content]
    expected = forward_logprobs(QUESTION, generated)
    for position, token in enumerate(content):
        assert token.logprob == pytest.approx(float(expected[position, generated[position]]), abs=1e-3)
        assert len(token.top_logprobs) == 3
        top = expected[position].topk(3)
        assert [ids[bytes(t.bytes or [])] for t in token.top_logprobs] == top.indices.tolist()
        for listed, value in zip(token.top_logprobs, top.values.tolist(), strict=True):
            assert listed.logprob == pytest.approx(value, abs=1e-3)
    assert token.logprob == max(t.logprob for t in token.top_logprobs), "greedy: the likeliest token"

    stream = client.chat.completions.create(
        model=CHAT_MODEL, messages=QUESTION, temperature=0, max_tokens=12, logprobs=True, top_logprobs=3,
        stream=True,
    )  # type: ignore[call-overload]  # fmt: skip
    streamed = [
        t
        for chunk in stream
        if chunk.choices and chunk.choices[0].logprobs
        for t in chunk.choices[0].logprobs.content or []
    ]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [
        (t.token, round(t.logprob, 4)) for t in content
    ]


def test_completions_logprobs_come_in_the_legacy_layout(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=CHAT_MODEL, prompt="The capital of France is", temperature=0, max_tokens=5, logprobs=2
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs and logprobs.top_logprobs
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 5
    assert all(len(top) <= 2 for top in logprobs.top_logprobs)
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(5)]


def test_n_choices_come_from_one_request_and_a_seed_repeats_each(client: openai.OpenAI) -> None:
    def ask(**extra: Any) -> Any:
        return client.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": "Name a fruit."}], n=3, temperature=1.0,
            max_tokens=12, seed=7, **extra,
        )  # fmt: skip

    first, again = ask(), ask()
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in again.choices], "the same seed gives the same choices"
    assert len(set(texts)) > 1, "choices are sampled apart"
    assert first.usage is not None
    single = client.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": "Name a fruit."}], temperature=1.0,
        max_tokens=12, seed=7,
    )  # fmt: skip
    assert single.usage is not None and first.usage.completion_tokens > single.usage.completion_tokens

    stream = ask(stream=True)
    streamed: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert [streamed[i] for i in range(3)] == texts


SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    ("A person named Ada, aged 36.", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"], "additionalProperties": False}),
    ("Three primary colours.", {"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3}}, "required": ["colours"], "additionalProperties": False}),
    ("Is the sky blue?", {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"], "additionalProperties": False}),
    ("The weather today.", {"type": "object", "properties": {"sky": {"enum": ["sunny", "cloudy", "rainy"]}, "celsius": {"type": "integer", "minimum": -50, "maximum": 60}}, "required": ["sky", "celsius"], "additionalProperties": False}),
    ("A book and its author.", {"type": "object", "properties": {"book": {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}, "author": {"type": "string", "maxLength": 30}}, "required": ["title", "author"], "additionalProperties": False}}, "required": ["book"], "additionalProperties": False}),
    ("A US zip code.", {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"], "additionalProperties": False}),
    ("A date in 2024.", {"type": "object", "properties": {"date": {"type": "string", "pattern": "^2024-[01][0-9]-[0-3][0-9]$"}}, "required": ["date"], "additionalProperties": False}),
    ("Rate this film from 1 to 5.", {"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": {"type": "string", "maxLength": 12}}, "required": ["stars"], "additionalProperties": False}),
    ("A shopping list.", {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "quantity": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["name", "quantity"], "additionalProperties": False}, "minItems": 1, "maxItems": 3}}, "required": ["items"], "additionalProperties": False}),
    ("A city and its country.", {"type": "object", "properties": {"city": {"type": "string", "minLength": 2, "maxLength": 30}, "country": {"type": "string", "minLength": 2, "maxLength": 30}}, "required": ["city", "country"], "additionalProperties": False}),
    ("A traffic light colour.", {"enum": ["red", "amber", "green"]}),
    ("A temperature in Kelvin.", {"type": "integer", "minimum": 0, "maximum": 1000}),
    ("Two prime numbers below 20.", {"type": "array", "items": {"type": "integer", "enum": [2, 3, 5, 7, 11, 13, 17, 19]}, "minItems": 2, "maxItems": 2}),
    ("A user with an optional nickname.", {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99999}, "nickname": {"type": "string", "maxLength": 20}}, "required": ["id"], "additionalProperties": False}),
    ("An HTTP status and its meaning.", {"type": "object", "properties": {"code": {"type": "integer", "minimum": 100, "maximum": 599}, "meaning": {"type": "string", "maxLength": 40}}, "required": ["code", "meaning"], "additionalProperties": False}),
    ("A point on a plane.", {"type": "object", "properties": {"x": {"type": "integer", "minimum": -10, "maximum": 10}, "y": {"type": "integer", "minimum": -10, "maximum": 10}}, "required": ["x", "y"], "additionalProperties": False}),
    ("An animal and whether it can fly.", {"type": "object", "properties": {"animal": {"type": "string", "maxLength": 20}, "flies": {"type": "boolean"}, "legs": {"type": "integer", "enum": [0, 2, 4, 6, 8]}}, "required": ["animal", "flies", "legs"], "additionalProperties": False}),
    ("A hex colour code.", {"type": "object", "properties": {"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}}, "required": ["hex"], "additionalProperties": False}),
    ("A short to-do list with priorities.", {"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object", "properties": {"task": {"type": "string", "maxLength": 30}, "priority": {"enum": ["low", "high"]}}, "required": ["task", "priority"], "additionalProperties": False}, "maxItems": 2}}, "required": ["todos"], "additionalProperties": False}),
    ("A planet, its order from the Sun and its moons.", {"type": "object", "properties": {"planet": {"type": "string", "maxLength": 12}, "order": {"type": "integer", "minimum": 1, "maximum": 8}, "moons": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2}}, "required": ["planet", "order", "moons"], "additionalProperties": False}),
]  # fmt: skip


def test_every_answer_validates_against_its_json_schema(client: openai.OpenAI) -> None:
    def ask(case: tuple[str, dict[str, Any]]) -> tuple[str, str | None]:
        """Streamed: a generation is not bound by the synchronous call's 25 s on a busy 2-core machine."""
        prompt, schema = case
        stream = client.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": f"Answer in JSON. {prompt}"}], temperature=0,
            max_tokens=100, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
        )  # fmt: skip
        text, finish = "", None
        for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        return text, finish

    assert len(SCHEMAS) >= 20
    with ThreadPoolExecutor(5) as pool:  # rows of one continuous batch, each under its own grammar
        answers = list(pool.map(ask, SCHEMAS))
    for (prompt, schema), (text, finish) in zip(SCHEMAS, answers, strict=True):
        assert finish == "stop", (prompt, text)
        jsonschema.validate(json.loads(text), schema)


def test_json_object_mode_answers_an_object_and_a_plain_row_beside_it_is_unconstrained(
    client: openai.OpenAI,
) -> None:
    def ask(response_format: Any) -> Any:
        return client.chat.completions.create(
            model=CHAT_MODEL, messages=QUESTION, temperature=0, max_tokens=48, response_format=response_format
        )

    with ThreadPoolExecutor(2) as pool:
        constrained, plain = pool.map(ask, [{"type": "json_object"}, {"type": "text"}])
    assert isinstance(json.loads(constrained.choices[0].message.content or ""), dict)
    assert plain.choices[0].message.content == "The capital of France is Paris."


class City(BaseModel):
    name: str
    country: str
    population_millions: float
    landmarks: list[str]
    climate: Literal["warm", "temperate", "cold"]


def test_the_sdks_parse_helper_gets_its_pydantic_model_back(client: openai.OpenAI) -> None:
    reply = client.beta.chat.completions.parse(
        model=CHAT_MODEL, messages=[{"role": "user", "content": "Describe Paris."}], temperature=0,
        max_tokens=200, response_format=City,
    )  # fmt: skip
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, City)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, "required": ["zone"], "additionalProperties": False},
    },
}  # fmt: skip
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize(
    "tool_choice", [{"type": "function", "function": {"name": "get_weather"}}, "required"]
)
def test_a_required_tool_call_comes_back_as_tool_calls_with_valid_arguments(
    client: openai.OpenAI, tool_choice: Any
) -> None:
    reply = client.chat.completions.create(
        model=CHAT_MODEL, messages=ASK_WEATHER, tools=[WEATHER, TIME], tool_choice=tool_choice, temperature=0,
        max_tokens=64, parallel_tool_calls=False,
    )  # type: ignore[arg-type]  # fmt: skip
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    jsonschema.validate(
        json.loads(call.function.arguments), schemas[call.function.name]["function"]["parameters"]
    )  # type: ignore[index]
    if isinstance(tool_choice, dict):
        assert call.function.name == "get_weather"

    stream = client.chat.completions.create(
        model=CHAT_MODEL, messages=ASK_WEATHER, tools=[WEATHER, TIME], tool_choice=tool_choice, temperature=0,
        max_tokens=64, stream=True, parallel_tool_calls=False,
    )  # type: ignore[arg-type]  # fmt: skip
    name, arguments, finish = "", "", None
    for chunk in stream:
        for delta_call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            name += delta_call.function.name or "" if delta_call.function else ""
            arguments += delta_call.function.arguments or "" if delta_call.function else ""
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert (name, arguments, finish) == (call.function.name, call.function.arguments, "tool_calls")

    # the call and its result go back into the conversation, rendered by the model's chat template
    follow_up = [
        *ASK_WEATHER,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny", "celsius": 21}'},
    ]
    answer = client.chat.completions.create(
        model=CHAT_MODEL, messages=follow_up, temperature=0, max_tokens=48
    )  # type: ignore[arg-type]
    assert answer.choices[0].message.content


def streamed_tool_answer(stream: Any) -> tuple[str, dict[int, list[str]], str | None]:
    """A streamed chat's content, its calls by index ([id, name, arguments]) and its finish reason, as
    a client puts the deltas together."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for part in delta.tool_calls or []:
            call = calls.setdefault(part.index, ["", "", ""])
            call[0] += part.id or ""
            call[1] += part.function.name or "" if part.function else ""
            call[2] += part.function.arguments or "" if part.function else ""
        finish = chunk.choices[0].finish_reason or finish
    return content, calls, finish


ASK_SEVERAL = [
    "What is the weather in Paris?",
    "What time is it in Tokyo?",
    "Say hello to me.",
    "Tell me the weather in Rome and the time in Oslo.",
]


@pytest.mark.parametrize("question", ASK_SEVERAL)
def test_with_tools_and_no_choice_the_model_answers_text_or_valid_calls_streamed_alike(
    client: openai.OpenAI, question: str
) -> None:
    """OpenAI's default with tools is auto: the model picks text or calls; either way the answer is
    well-formed, the stream puts together to the same answer, and the loop's next turn is taken."""
    asked = [{"role": "user", "content": question}]
    reply = client.chat.completions.create(
        model=CHAT_MODEL, messages=asked, tools=[WEATHER, TIME], temperature=0, max_tokens=96
    )  # type: ignore[arg-type]
    choice = reply.choices[0]
    calls = choice.message.tool_calls or []
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    if calls:
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        for call in calls:
            jsonschema.validate(
                json.loads(call.function.arguments), schemas[call.function.name]["function"]["parameters"]
            )  # type: ignore[index]
        assert len({call.id for call in calls}) == len(calls)
    else:
        assert choice.finish_reason in ("stop", "length") and choice.message.content
        assert "<tool_call>" not in choice.message.content

    stream = client.chat.completions.create(
        model=CHAT_MODEL, messages=asked, tools=[WEATHER, TIME], temperature=0, max_tokens=96, stream=True
    )  # type: ignore[arg-type]
    content, streamed, finish = streamed_tool_answer(stream)
    assert finish == choice.finish_reason
    assert content == (choice.message.content or "")
    assert [streamed[i] for i in sorted(streamed)] == [
        [c.id, c.function.name, c.function.arguments] for c in calls
    ]

    results = [
        {"role": "tool", "tool_call_id": call.id, "content": '{"answer": "sunny, 21 C, 14:05"}'}
        for call in calls
    ]
    turn = [*asked, choice.message.model_dump(exclude_none=True), *results]
    second = client.chat.completions.create(
        model=CHAT_MODEL, messages=turn, tools=[WEATHER, TIME], temperature=0, max_tokens=48
    )  # type: ignore[arg-type]
    assert second.choices[0].message.content or second.choices[0].message.tool_calls


def test_a_named_call_cut_by_max_tokens_is_still_that_call(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(
        model=CHAT_MODEL, messages=ASK_WEATHER, tools=[WEATHER, TIME], tool_choice=named, max_tokens=14
    )  # type: ignore[arg-type]
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"


def test_logit_bias_and_penalties_change_what_the_model_says(client: openai.OpenAI) -> None:
    tokenizer, _, _ = reference()
    paris = tokenizer.encode(" Paris", add_special_tokens=False)
    assert len(paris) == 1
    banned = client.chat.completions.create(
        model=CHAT_MODEL, messages=QUESTION, temperature=0, max_tokens=24, logit_bias={str(paris[0]): -100}
    )
    assert "Paris" not in (banned.choices[0].message.content or "")

    emoji = [{"role": "user", "content": "Give me a happy emoji."}]
    plain = client.chat.completions.create(model=CHAT_MODEL, messages=emoji, temperature=0, max_tokens=16)
    penalised = client.chat.completions.create(
        model=CHAT_MODEL,
        messages=emoji,
        temperature=0,
        max_tokens=16,
        frequency_penalty=2.0,
        presence_penalty=2.0,
    )
    repeated = plain.choices[0].message.content or ""
    assert len(set(repeated)) <= 2, "greedy, this model repeats one emoji"
    assert len(set(penalised.choices[0].message.content or "")) > len(set(repeated))
