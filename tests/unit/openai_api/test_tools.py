"""Tools for any generative model: the grammar llguidance compiles (checked here over a byte-level
vocabulary, so every string's bytes are its tokens), the reader that turns an answer's text into calls
whole or piece by piece, and the prompt a template without tools gets."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import pytest

from openai_api.format import Shape, chat_completion, render_chat
from openai_api.sampling import Usage
from openai_api.schemas import ChatMessage, Tool
from openai_api.tools import (
    GENERIC_INSTRUCTIONS,
    ArgumentsPiece,
    CallOpened,
    CallReader,
    TextPiece,
    ToolChoice,
    grammar,
    read_answer,
)

ADD = Tool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }
)
# As pydantic writes a nested model: a $ref into the parameters' own $defs.
LOOKUP = Tool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"], "additionalProperties": False}},
                "properties": {"place": {"$ref": "#/$defs/Place"}},
                "required": ["place"],
                "additionalProperties": False,
            },
        },
    }
)  # fmt: skip
CALL_ADD = '<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>'
CALL_LOOKUP = '<tool_call>{"name":"lookup","arguments":{"place":{"city":"Paris }"}}}</tool_call>'


class _Bytes:
    """A vocabulary of the 256 bytes and an end-of-sequence token."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"</s>"]
    special_token_ids = [256]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def accepts(lark: str, text: str) -> bool:
    """Whether the grammar takes `text` whole and may end there."""
    matcher = llguidance.LLMatcher(TOKENIZER, llguidance.LLMatcher.grammar_from_lark(lark))
    assert not matcher.is_error(), matcher.get_error()
    return all(matcher.consume_token(b) for b in text.encode()) and matcher.is_accepting()


AUTO = ToolChoice("auto")


@pytest.mark.parametrize(
    ("choice", "text", "taken"),
    [
        (AUTO, "The sum is 3.", True),
        (AUTO, CALL_ADD, True),
        (AUTO, CALL_ADD + CALL_LOOKUP, True),
        (AUTO, "<b>bold</b> text is fine", True),
        (AUTO, '<tool_call>{"name":"add","arguments":{"a":"one","b":2}}</tool_call>', False),
        (AUTO, '<tool_call>{"name":"sub","arguments":{"a":1,"b":2}}</tool_call>', False),
        (AUTO, '<tool_call>{"name": "add","arguments":{"a":1,"b":2}}</tool_call>', False),
        (AUTO, "<tool_call> I will add them", False),
        (AUTO, CALL_ADD + " and some text", False),
        (ToolChoice("auto", parallel=False), CALL_ADD + CALL_ADD, False),
        (ToolChoice("required"), "The sum is 3.", False),
        (ToolChoice("required"), CALL_LOOKUP, True),
        (ToolChoice("named", "add"), CALL_ADD, True),
        (ToolChoice("named", "add"), CALL_LOOKUP, False),
        (ToolChoice("named", "add"), CALL_ADD + CALL_ADD, False),
    ],
)
def test_the_grammar_takes_plain_text_or_valid_calls_as_the_choice_allows(
    choice: ToolChoice, text: str, taken: bool
) -> None:
    assert accepts(grammar([ADD, LOOKUP], choice), text) is taken


def test_with_a_response_format_a_plain_answer_must_be_its_json() -> None:
    lark = grammar(
        [ADD], AUTO, {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    )
    assert accepts(lark, '{"x":4}') and accepts(lark, CALL_ADD)
    assert not accepts(lark, "four")


def test_a_whole_answer_reads_as_its_calls_with_their_arguments() -> None:
    read = read_answer(CALL_ADD + CALL_LOOKUP)
    assert read.text == ""
    assert read.calls == [("add", '{"a":1,"b":2}'), ("lookup", '{"place":{"city":"Paris }"}}')]
    assert read_answer("Just text <tool_call>").calls == []
    assert read_answer("Just text <tool_call>").text == "Just text <tool_call>"
    assert read_answer("<tool_c").text == "<tool_c"


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_piece_by_piece_the_reader_gives_what_it_gives_whole(size: int) -> None:
    text = CALL_LOOKUP + CALL_ADD
    reader, events = CallReader(), []
    for at in range(0, len(text), size):
        events += reader.feed(text[at : at + size])
    events += reader.close()
    assert [e for e in events if isinstance(e, CallOpened)] == [CallOpened(0, "lookup"), CallOpened(1, "add")]
    arguments: dict[int, str] = {}
    for event in events:
        if isinstance(event, ArgumentsPiece):
            arguments[event.index] = arguments.get(event.index, "") + event.text
    assert arguments == {0: '{"place":{"city":"Paris }"}}', 1: '{"a":1,"b":2}'}
    assert not any(isinstance(e, TextPiece) for e in events)


def test_text_that_only_began_like_a_call_is_given_as_text_once_it_is_known() -> None:
    reader = CallReader()
    assert reader.feed("<tool") == []
    assert reader.feed("kit> is") == [TextPiece("<toolkit> is")]
    assert reader.feed(" here") == [TextPiece(" here")]


def chat_answer(text: str, finish: str, choice: ToolChoice) -> Any:
    from openai_api.format import Answer

    answer = Answer(
        "job-1", "m", 0, text, Usage(prompt_tokens=1, completion_tokens=9, total_tokens=10), 9, finish
    )
    return chat_completion(answer, Shape(tools=choice)).choices[0]


def test_an_answer_with_calls_finishes_with_tool_calls_and_one_without_is_text() -> None:
    called = chat_answer(CALL_ADD, "stop", AUTO)
    assert called.finish_reason == "tool_calls" and called.message.content is None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in called.message.tool_calls] == [
        ("add", {"a": 1, "b": 2})
    ]
    talked = chat_answer("It is 3.", "stop", AUTO)
    assert (talked.finish_reason, talked.message.content, talked.message.tool_calls) == (
        "stop",
        "It is 3.",
        None,
    )


def test_a_named_choice_cut_by_max_tokens_still_answers_its_call() -> None:
    cut = chat_answer('<tool_call>{"name":"add","arguments":{"a":1', "length", ToolChoice("named", "add"))
    assert cut.finish_reason == "length" and cut.message.content is None
    (call,) = cut.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("add", '{"a":1')
    early = chat_answer("<tool_ca", "length", ToolChoice("named", "add"))
    assert [(c.function.name, c.function.arguments) for c in early.message.tool_calls] == [("add", "")]


def test_a_template_without_tools_is_told_of_them_and_sees_the_tool_turns() -> None:
    messages = [
        ChatMessage.model_validate(m)
        for m in [
            {"role": "user", "content": "Add 1 and 2."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        ]
    ]  # fmt: skip
    prompt = render_chat(messages, [ADD])
    lines = prompt.split("\n")
    assert lines[0] == f"System: {GENERIC_INSTRUCTIONS}"
    assert json.loads(lines[1]) == ADD.function.model_dump(exclude_none=True)
    assert lines[2:] == [
        "User: Add 1 and 2.",
        f"Assistant: {CALL_ADD}",
        "User: <tool_response>3</tool_response>",
        "Assistant:",
    ]
    assert "<tool_call>" not in render_chat(messages[:1])
