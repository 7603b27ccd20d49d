"""`POST /v1/responses` bodies: what OpenAI's clients send validates, anything else is a 400 naming it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, ValidationError

from openai_api.json_body import describe_validation_errors
from openai_api.responses_schemas import (
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    UNSUPPORTED,
    DeletedResponse,
    FunctionCallInput,
    FunctionCallOutputInput,
    InputItemsQuery,
    MessageInput,
    ResponseRequest,
)

WEATHER_TOOL = {
    "name": "weather",
    "parameters": {
        "properties": {"city": {"title": "City", "type": "string"}},
        "required": ["city"],
        "title": "weather_args",
        "type": "object",
        "additionalProperties": False,
    },
    "strict": True,
    "type": "function",
    "description": "The weather in a city.",
}
FINAL_OUTPUT = {
    "format": {
        "type": "json_schema",
        "name": "final_output",
        "schema": {"properties": {"answer": {"type": "string"}}, "required": ["answer"], "type": "object"},
        "strict": True,
    }
}

# Bodies openai-agents 0.24 sends through `responses.create`, as captured from an agent run: an agent with
# instructions, a function tool and a structured output, on its second turn (the call and its output
# replayed); a plain agent; and one with model settings on a later turn, its earlier answer replayed.
AGENTS_SDK_BODIES: list[dict[str, Any]] = [
    {
        "model": "gpu-sim",
        "include": [],
        "input": [
            {"content": "Weather in Paris?", "role": "user"},
            {
                "arguments": '{"city": "Paris"}',
                "call_id": "call_1",
                "name": "weather",
                "type": "function_call",
                "id": "fc_1",
                "status": "completed",
            },
            {"call_id": "call_1", "output": "sunny", "type": "function_call_output"},
        ],
        "instructions": "Be terse.",
        "text": FINAL_OUTPUT,
        "tools": [WEATHER_TOOL],
    },
    {"model": "gpu-sim", "include": [], "input": [{"content": "hi", "role": "user"}], "tools": []},
    {
        "model": "gpu-sim",
        "include": [],
        "input": [
            {"content": "hi", "role": "user"},
            {
                "id": "msg_1",
                "content": [{"annotations": [], "text": "Hello", "type": "output_text"}],
                "role": "assistant",
                "status": "completed",
                "type": "message",
            },
            {"role": "user", "content": "again"},
        ],
        "max_output_tokens": 50,
        "metadata": {"a": "b"},
        "store": True,
        "temperature": 0.2,
        "tool_choice": "none",
        "tools": [],
        "top_p": 0.9,
        "truncation": "disabled",
    },
]


class Forecast(BaseModel):
    answer: str


def refusal(body: dict[str, Any]) -> tuple[str | None, str]:
    """The 400 a client gets for the body: the parameter it names and its message."""
    with pytest.raises(ValidationError) as caught:
        ResponseRequest.model_validate(body)
    problem = describe_validation_errors(caught.value.errors())
    assert (problem.status, problem.code) == (400, "invalid_request")
    return problem.param, problem.message


@pytest.mark.parametrize("body", AGENTS_SDK_BODIES)
def test_what_the_agents_sdk_sends_validates(body: dict[str, Any]):
    request = ResponseRequest.model_validate(body)
    assert request.model == "gpu-sim"
    assert request.stores() and not request.in_background()


async def test_a_live_agents_sdk_run_sends_only_bodies_that_validate():
    agents = pytest.importorskip("agents")
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        called = any(item.get("type") == "function_call_output" for item in body["input"])
        output = (
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": '{"answer": "sunny"}', "annotations": []}]}
            if called
            else {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
                  "arguments": '{"city": "Paris"}', "status": "completed"}
        )  # fmt: skip
        return httpx.Response(
            200,
            json={"id": f"resp_{len(sent)}", "object": "response", "created_at": 1, "model": "gpu-sim",
                  "output": [output], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []},
        )  # fmt: skip

    @agents.function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    agents.set_tracing_disabled(True)
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        client = openai.AsyncOpenAI(api_key="k", base_url="http://synapse/v1", http_client=http)
        model = agents.OpenAIResponsesModel(model="gpu-sim", openai_client=client)
        agent = agents.Agent(
            name="a", instructions="Be terse.", model=model, tools=[weather], output_type=Forecast
        )
        result = await agents.Runner.run(agent, "Weather in Paris?")
    assert result.final_output == Forecast(answer="sunny")

    assert len(sent) == 2, "a call, then the answer once its output is sent"
    assert sent[0]["include"] == [] and sent[0]["text"]["format"]["type"] == "json_schema"
    for body in sent:
        ResponseRequest.model_validate(body)


def test_the_openai_sdk_spells_each_option_as_the_request_reads_it():
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(400, json={"error": {"message": "captured", "type": "invalid_request_error"}})

    client = openai.OpenAI(
        api_key="k", base_url="http://synapse/v1", max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
    )  # fmt: skip
    with pytest.raises(openai.BadRequestError):
        client.responses.create(
            model="gpu-sim",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]}],
            instructions="Be terse.",
            max_output_tokens=64,
            temperature=0.5,
            top_p=0.9,
            text={"format": {"type": "json_object"}},
            tools=[{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": True}],
            tool_choice={"type": "function", "name": "weather"},
            parallel_tool_calls=False,
            previous_response_id="resp_0123",
            metadata={"team": "blue"},
            store=True,
            background=False,
            user="u-1",
            include=[],
            truncation="disabled",
            reasoning=None,
        )
    request = ResponseRequest.model_validate(sent[0])
    assert request.tool_choice is not None and request.tool_choice != "auto"
    assert request.text is not None and request.text.format is not None
    assert request.text.format.type == "json_object"


@pytest.mark.parametrize("field", ["frequency_penalty", "messages", "max_tokens", "n", "Model"])
def test_an_unknown_field_is_refused_by_name(field: str):
    param, message = refusal({"model": "m", "input": "x", field: 1})
    assert param == field
    assert message == f"{field}: unknown or unsupported parameter"


@pytest.mark.parametrize(
    ("field", "neutral", "refused"),
    [
        ("truncation", "disabled", "auto"),
        ("include", [], ["message.output_text.logprobs"]),
        ("reasoning", {"effort": None}, {"effort": "high"}),
        ("service_tier", "default", "flex"),
        ("stream_options", {"include_obfuscation": False}, {"include_obfuscation": True}),
        ("top_logprobs", 0, 5),
        ("top_logprobs", 0, False),
        ("context_management", [], [{"type": "compaction"}]),
        ("conversation", None, "conv_1"),
        ("prompt", None, {"id": "pmpt_1"}),
        ("max_tool_calls", None, 3),
        ("prompt_cache_retention", None, "24h"),
    ],
)
def test_an_option_that_cannot_be_honoured_takes_only_its_neutral_value(
    field: str, neutral: Any, refused: Any
):
    ResponseRequest.model_validate({"model": "m", "input": "x", field: neutral})
    ResponseRequest.model_validate({"model": "m", "input": "x", field: None})
    param, message = refusal({"model": "m", "input": "x", field: refused})
    assert param == field
    assert message == f"{field}: {UNSUPPORTED[field]}"


def test_verbosity_is_refused_where_openai_puts_it():
    param, message = refusal({"model": "m", "input": "x", "text": {"verbosity": "low"}})
    assert (param, message) == ("text.verbosity", f"text.verbosity: {UNSUPPORTED['verbosity']}")


def test_a_background_response_must_be_stored():
    assert ResponseRequest.model_validate({"model": "m", "input": "x", "background": True}).in_background()
    param, message = refusal({"model": "m", "input": "x", "background": True, "store": False})
    assert param == "background"
    assert "store: true" in message
    assert not ResponseRequest.model_validate({"model": "m", "input": "x", "store": False}).stores()


def test_metadata_is_held_to_openais_limits():
    most = {f"k{i}".ljust(MAX_METADATA_KEY_CHARS, "x"): "v" * MAX_METADATA_VALUE_CHARS for i in range(16)}
    assert len(most) == MAX_METADATA_PAIRS
    ResponseRequest.model_validate({"model": "m", "input": "x", "metadata": most})
    too_many = {**most, "one": "more"}
    long_key = {"k" * (MAX_METADATA_KEY_CHARS + 1): "v"}
    long_value = {"k": "v" * (MAX_METADATA_VALUE_CHARS + 1)}
    for metadata in (too_many, long_key, long_value):
        param, _ = refusal({"model": "m", "input": "x", "metadata": metadata})
        assert param is not None and param.startswith("metadata")


def test_a_text_input_is_one_user_message_and_items_keep_their_kinds():
    text = ResponseRequest.model_validate({"model": "m", "input": "Hello"})
    assert text.input == [MessageInput(role="user", content="Hello")]
    items = ResponseRequest.model_validate(AGENTS_SDK_BODIES[0]).input
    assert [type(item) for item in items] == [MessageInput, FunctionCallInput, FunctionCallOutputInput]


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ("", "input"),
        ([], "input"),
        ([{"type": "item_reference", "id": "msg_1"}], "input.0"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input.0.function_call.call_id"),
        ([{"role": "tool", "content": "x"}], "input.0.message.role"),
    ],
)
def test_a_bad_input_is_refused_naming_the_item(value: Any, param: str):
    found, _ = refusal({"model": "m", "input": value})
    assert found is not None and found.startswith(param)


def test_a_stored_request_reads_back_as_it_was_sent():
    request = ResponseRequest.model_validate(AGENTS_SDK_BODIES[0])
    stored = request.model_dump(mode="json", exclude_none=True)
    assert stored["text"] == FINAL_OUTPUT, "the schema keeps its name, `schema`"
    assert ResponseRequest.model_validate(stored) == request


def test_the_input_items_query_defaults_to_openais_and_bounds_the_page():
    assert InputItemsQuery.model_validate({}).model_dump() == {
        "after": None,
        "limit": 20,
        "order": "desc",
        "include": None,
    }
    assert InputItemsQuery.model_validate({"limit": "100", "order": "asc"}).limit == 100
    for query in ({"limit": "0"}, {"limit": "101"}, {"order": "newest"}, {"include": ["x"]}):
        with pytest.raises(ValidationError):
            InputItemsQuery.model_validate(query)


def test_a_deleted_response_is_openais_shape():
    assert DeletedResponse(id="resp_1").model_dump() == {
        "id": "resp_1",
        "object": "response",
        "deleted": True,
    }
