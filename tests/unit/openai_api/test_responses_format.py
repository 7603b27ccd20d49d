"""A response runs as a chat: its request and the conversation so far become chat messages, and the chat's
answer becomes a response that OpenAI's own SDK reads."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from openai.types.responses import Response, ResponseItemList

from openai_api.answer_schemas import AssistantMessage, ChatCompletion
from openai_api.errors import Problem
from openai_api.responses_format import (
    chat_request_of,
    continued,
    conversation_of,
    input_items_of,
    job_id_of,
    page_of,
    response_id,
    response_of,
)
from openai_api.responses_schemas import ResponseObject, ResponseRequest, ResponseStatus
from openai_api.schemas import ChatCompletionRequest, ChatMessage

JOB_ID = "0abfe04e-84ca-42bc-922f-4d62fd3b270f"
RESPONSE_ID = "resp_0abfe04e84ca42bc922f4d62fd3b270f"
WEATHER = {"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": True}
CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}


def request(**fields: Any) -> ResponseRequest:
    return ResponseRequest.model_validate({"model": "gpu-sim", **fields})


def chat_of(
    req: ResponseRequest, history: list[ChatMessage] | None = None, **options: Any
) -> ChatCompletionRequest:
    chat = chat_request_of(req, history or [], **options)
    assert isinstance(chat, ChatCompletionRequest), chat
    return chat


def seen(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) for m in messages]


def answer(message: dict[str, Any], finish: str = "stop", completion_tokens: int = 5) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "created": 1700000000,
            "model": "gpu-sim",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": 7,
                "completion_tokens": completion_tokens,
                "total_tokens": 7 + completion_tokens,
            },
        }
    )


def response(
    req: ResponseRequest,
    chat: ChatCompletion | None,
    status: ResponseStatus = "completed",
    error: tuple[str, str] | None = None,
) -> ResponseObject:
    return response_of(
        response_id=RESPONSE_ID,
        created_s=1700000000,
        status=status,
        model="gpu-sim",
        request=req,
        chat=chat,
        error=error,
    )


def sdk(body: ResponseObject) -> Response:
    """The response as OpenAI's Python SDK reads it: what a client gets."""
    return Response.model_validate(body.model_dump(mode="json"))


def test_a_three_turn_conversation_with_a_call_and_its_output_renders_as_chat_messages():
    first = request(
        instructions="Be terse.", input="Weather in Paris?", tools=[WEATHER], tool_choice="required"
    )
    assert seen(chat_of(first).messages) == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    called = answer({"content": None, "tool_calls": [CALL]}, finish="tool_calls")
    history = continued(conversation_of([], first), called.choices[0].message)

    second = request(
        previous_response_id=RESPONSE_ID,
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
        tools=[WEATHER],
    )
    tool_turn = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]
    assert seen(chat_of(second, history).messages) == tool_turn, "instructions are not carried over"
    said = answer({"content": "Sunny in Paris."})
    history = continued(conversation_of(history, second), said.choices[0].message)

    third = request(instructions="Answer in French.", input="And tomorrow?", previous_response_id=RESPONSE_ID)
    assert seen(chat_of(third, history).messages) == [
        {"role": "system", "content": "Answer in French."},
        *tool_turn,
        {"role": "assistant", "content": "Sunny in Paris."},
        {"role": "user", "content": "And tomorrow?"},
    ]


def test_a_client_that_sends_the_whole_conversation_gets_the_same_chat():
    output = [{"type": "input_text", "text": "sunny"}]
    said = [{"type": "output_text", "text": "Sunny.", "annotations": []}]
    items = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": output},
        {"type": "message", "role": "assistant", "content": said},
    ]
    assert seen(chat_of(request(input=items)).messages) == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
    ]


def test_calls_made_together_are_one_assistant_turn_and_an_empty_output_still_answers_its_call():
    items = [
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": ""},
        {"type": "function_call_output", "call_id": "b", "output": "2"},
    ]
    messages = seen(chat_of(request(input=items)).messages)
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool"]
    assert [call["id"] for call in messages[0]["tool_calls"]] == ["a", "b"]
    assert messages[1] == {"role": "tool", "content": [{"type": "text", "text": ""}], "tool_call_id": "a"}


def test_the_options_become_the_chats():
    req = request(
        input="x",
        tools=[{**WEATHER, "description": "The weather."}],
        tool_choice={"type": "function", "name": "weather"},
        text={"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        max_output_tokens=64,
        temperature=0.5,
        top_p=0.9,
        parallel_tool_calls=False,
        user="u-1",
    )
    chat = chat_of(req).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather.",
                "parameters": {"type": "object"},
                "strict": True,
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
    }
    expected = {
        "max_completion_tokens": 64,
        "temperature": 0.5,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "user": "u-1",
    }
    assert {name: chat[name] for name in expected} == expected
    assert chat_of(request(input="x", text={"format": {"type": "json_object"}})).response_format is not None


def test_no_tools_is_no_tools_and_an_unset_length_takes_the_callers_default():
    chat = chat_of(request(input="x", tools=[], tool_choice="none"), default_max_output_tokens=100)
    assert (chat.tools, chat.tool_choice, chat.max_completion_tokens) == (None, "none", 100)
    assert chat_of(request(input="x")).max_completion_tokens is None
    assert (
        chat_of(request(input="x", max_output_tokens=8), default_max_output_tokens=100).max_completion_tokens
        == 8
    )


def test_a_chat_the_chat_layer_refuses_is_a_400_in_the_responses_names():
    problem = chat_request_of(request(input="x"), [], default_max_output_tokens=10**6)
    assert isinstance(problem, Problem)
    assert (problem.status, problem.code, problem.param) == (400, "invalid_request", "max_output_tokens")


def test_a_completed_text_answer_is_one_message_that_the_sdk_reads():
    req = request(input="Hi", metadata={"team": "blue"}, temperature=0.5)
    body = response(req, answer({"content": "Hello there."}))
    read = sdk(body)
    assert (read.id, read.status, read.output_text) == (RESPONSE_ID, "completed", "Hello there.")
    assert read.usage is not None
    assert (read.usage.input_tokens, read.usage.output_tokens, read.usage.total_tokens) == (7, 5, 12)
    assert (read.metadata, read.temperature, read.tool_choice, read.tools) == (
        {"team": "blue"},
        0.5,
        "auto",
        [],
    )
    assert read.error is None and read.incomplete_details is None
    assert "output_text" not in body.model_dump(), "the SDK computes it"
    assert response(req, answer({"content": "Hello there."})) == body, "a re-read gives the same ids"


def test_each_tool_call_is_a_function_call_item_with_the_chats_call_id():
    second = {**CALL, "id": "call_2"}
    req = request(input="Weather?", tools=[WEATHER], tool_choice="required")
    read = sdk(response(req, answer({"content": None, "tool_calls": [CALL, second]}, finish="tool_calls")))
    assert read.status == "completed" and read.output_text == ""
    assert [(item.type, getattr(item, "call_id", None)) for item in read.output] == [
        ("function_call", "call_1"),
        ("function_call", "call_2"),
    ]
    assert len({item.id for item in read.output}) == 2
    assert read.tool_choice == "required"
    assert read.tools[0].type == "function" and read.tools[0].name == "weather"


def test_an_answer_cut_at_max_output_tokens_is_incomplete_and_keeps_its_text():
    read = sdk(
        response(request(input="Count.", max_output_tokens=5), answer({"content": "1 2 3"}, finish="length"))
    )
    assert read.status == "incomplete"
    assert read.incomplete_details is not None and read.incomplete_details.reason == "max_output_tokens"
    assert read.output_text == "1 2 3"
    assert read.max_output_tokens == 5


@pytest.mark.parametrize(
    ("code", "sdk_code"),
    [
        ("input_too_long", "invalid_prompt"),
        ("model_error", "invalid_prompt"),
        ("deadline_exceeded", "server_error"),
    ],
)
def test_a_failed_job_is_a_failed_response_with_an_error_openai_clients_know(code: str, sdk_code: str):
    read = sdk(response(request(input="x"), None, status="failed", error=(code, "why")))
    assert read.status == "failed"
    assert read.error is not None and (read.error.code, read.error.message) == (sdk_code, "why")
    assert (read.output, read.usage) == ([], None)


@pytest.mark.parametrize("status", ["queued", "in_progress", "cancelled"])
def test_a_response_not_yet_answered_or_cancelled_has_no_output_and_no_error(status: ResponseStatus):
    read = sdk(response(request(input="x", background=True), None, status=status))
    assert (read.status, read.output, read.error, read.background) == (status, [], None, True)


def test_a_response_id_maps_back_to_its_job():
    assert response_id(JOB_ID) == RESPONSE_ID
    assert job_id_of(RESPONSE_ID) == JOB_ID
    job = str(uuid.uuid4())
    assert job_id_of(response_id(job)) == job


@pytest.mark.parametrize(
    "hostile",
    [
        "",
        "resp_",
        RESPONSE_ID.upper(),
        "RESP_" + RESPONSE_ID[5:],
        RESPONSE_ID[:-1],
        RESPONSE_ID + "0",
        RESPONSE_ID + "\n",
        " " + RESPONSE_ID,
        "resp_" + JOB_ID,
        JOB_ID,
        "resp_../../keys",
        "resp_" + "\u0660" * 32,  # Arabic-Indic zeros: digits to a regex's \d, not to a UUID
        "msg_" + RESPONSE_ID[5:],
    ],
)
def test_anything_but_a_response_id_maps_to_no_job(hostile: str):
    assert job_id_of(hostile) is None


ITEMS = [
    {"role": "developer", "content": "Be terse."},
    {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
    {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"role": "assistant", "content": "Sunny."},
]


def test_the_input_items_are_listed_newest_first_with_stable_ids_the_sdk_reads():
    req = request(input=ITEMS)
    items = input_items_of(RESPONSE_ID, req)
    page = page_of(items, after=None, limit=20, order="desc").model_dump(mode="json")
    listed = ResponseItemList.model_validate(page)
    assert [item.type for item in listed.data] == [
        "message",
        "function_call_output",
        "function_call",
        "message",
        "message",
    ]
    assert [getattr(item, "role", None) for item in listed.data] == [
        "assistant",
        None,
        None,
        "user",
        "developer",
    ]
    assert (listed.first_id, listed.last_id, listed.has_more) == (items[-1].id, items[0].id, False)
    assert input_items_of(RESPONSE_ID, req) == items, "a re-read gives the same ids"
    output_ids = {item.id for item in response(req, answer({"content": "x"})).output}
    assert len({item.id for item in items} | output_ids) == len(items) + 1


def test_a_text_input_is_listed_as_one_user_message():
    (item,) = input_items_of(RESPONSE_ID, request(input="Hi"))
    assert item.model_dump(include={"type", "role", "content"}) == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Hi"}],
    }


def test_pages_follow_after_in_either_order():
    items = input_items_of(RESPONSE_ID, request(input=ITEMS))
    ids = [item.id for item in items]
    first = page_of(items, after=None, limit=2, order="asc")
    assert ([i.id for i in first.data], first.has_more) == (ids[:2], True)
    second = page_of(items, after=first.last_id, limit=2, order="asc")
    third = page_of(items, after=second.last_id, limit=2, order="asc")
    assert [i.id for i in second.data + third.data] == ids[2:]
    assert third.has_more is False
    newest = page_of(items, after=ids[2], limit=20, order="desc")
    assert [i.id for i in newest.data] == [ids[1], ids[0]]
    nowhere = page_of(items, after="msg_unknown", limit=20, order="desc")
    assert (nowhere.data, nowhere.first_id, nowhere.last_id, nowhere.has_more) == ([], None, None, False)


def test_an_answer_continues_the_conversation_as_an_assistant_turn():
    base = [ChatMessage.model_validate({"role": "user", "content": "x"})]
    calls = AssistantMessage.model_validate({"content": None, "tool_calls": [CALL]})
    assert seen(continued(base, calls))[-1] == {"role": "assistant", "tool_calls": [CALL]}
    empty = AssistantMessage.model_validate({"content": ""})
    assert seen(continued(base, empty))[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": ""}],
    }
