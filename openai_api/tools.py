"""Function tools for any generative model: how the tools and the tool turns reach the prompt, the
grammar the engine decodes a tool-using answer under, and how the answer's text reads back as calls.

One syntax for every model and every `tool_choice`, Hermes' (which Qwen2.5's and Hermes' own chat
templates use): a call is `<tool_call>{"name":"<function>","arguments":{...}}</tool_call>`, compact
JSON, `name` first; parallel calls follow one another. A template that offers tools renders them itself
(it is given `tools` and the turns as transformers passes them); for one that does not (SmolLM2's), the
tools go into the system message with `GENERIC_INSTRUCTIONS`, an earlier call is written back in the
same syntax and a tool's result becomes a user turn `<tool_response>...</tool_response>`, as llama.cpp
does for templates without tools.

The grammar (llguidance's Lark dialect, compiled by the engine) makes every answer either plain text,
which never starts with the call marker, or well-formed calls whose arguments validate against their
function's `parameters`: `auto` allows both, `required` only calls, a named choice one call of that
function; `parallel_tool_calls: false` allows one call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from openai_api.schemas import ChatMessage, Tool

OPEN, CLOSE = "<tool_call>", "</tool_call>"
ToolMode = Literal["", "auto", "required", "named"]

GENERIC_INSTRUCTIONS = (
    "You may call functions. To call one, answer with nothing but "
    '<tool_call>{"name": <the function\'s name>, "arguments": <its arguments, a JSON object>}</tool_call>, '
    "one such block per call. Otherwise answer the user in plain text. A call's result comes back "
    "as <tool_response>...</tool_response>. The functions, one JSON object each:"
)
_HEADER = re.compile(r'\{"name":"([A-Za-z0-9_-]{1,64})","arguments":')


# ------------------------------------------------------------------ the prompt -----------------------


def call_text(name: str, arguments: str) -> str:
    """A call as the model writes it (the grammar's compact form), to show it its own earlier calls."""
    try:
        value = json.dumps(json.loads(arguments), separators=(",", ":"))
    except ValueError:
        value = json.dumps(arguments)
    return f'{OPEN}{{"name":{json.dumps(name)},"arguments":{value}}}{CLOSE}'


def function_specs(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The tools as transformers' chat templates take them (OpenAI's chat shape)."""
    return [tool.model_dump(mode="json", exclude_none=True) for tool in tools]


def generic_turns(messages: Sequence[ChatMessage], tools: Sequence[Tool]) -> list[dict[str, str]]:
    """The chat as plain role/content turns for a template without tools: the tools described in the
    system message (none offered: `tools` empty), calls in the call syntax, results as user turns
    (consecutive results in one, for templates that want roles to alternate)."""
    turns: list[dict[str, str]] = []
    for message in messages:
        if message.role == "tool":
            result = f"<tool_response>{text_of(message)}</tool_response>"
            if turns and turns[-1]["role"] == "user" and turns[-1]["content"].endswith("</tool_response>"):
                turns[-1]["content"] += "\n" + result
            else:
                turns.append({"role": "user", "content": result})
            continue
        content = text_of(message)
        calls = "".join(call_text(c.function.name, c.function.arguments) for c in message.tool_calls or ())
        turns.append({"role": message.role, "content": content + calls})
    if tools:
        described = "\n".join(json.dumps(spec["function"]) for spec in function_specs(tools))
        offer = f"{GENERIC_INSTRUCTIONS}\n{described}"
        if turns and turns[0]["role"] in ("system", "developer"):
            turns[0] = {"role": turns[0]["role"], "content": f"{turns[0]['content']}\n\n{offer}"}
        else:
            turns.insert(0, {"role": "system", "content": offer})
    return turns


def native_turns(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The chat as transformers passes it to a template that offers tools: calls with their arguments
    as objects, results with the id of the call they answer."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        turn: dict[str, Any] = {"role": message.role, "content": text_of(message)}
        if message.tool_calls:
            turn["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": _value(c)},
                }
                for c in message.tool_calls
            ]
        if message.tool_call_id is not None:
            turn["tool_call_id"] = message.tool_call_id
        turns.append(turn)
    return turns


def text_of(message: ChatMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(part.text for part in message.content or ())


def _value(call: Any) -> Any:
    try:
        return json.loads(call.function.arguments)
    except ValueError:
        return call.function.arguments


# ------------------------------------------------------------------ the grammar ----------------------


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """What the answer may be: `mode` auto (text or calls), required (calls), named (one call of
    `name`); `parallel` allows more than one call."""

    mode: ToolMode
    name: str = ""
    parallel: bool = True


def grammar(tools: Sequence[Tool], choice: ToolChoice, text_schema: Mapping[str, Any] | None = None) -> str:
    """The Lark grammar of a tool-using answer. `text_schema`: with `auto`, a plain answer must be JSON
    that validates against it (a response_format next to the tools)."""
    offered = [t for t in tools if choice.mode != "named" or t.function.name == choice.name]
    body = _calls_schema(offered)
    calls = "call" if choice.mode == "named" or not choice.parallel else "call+"
    lines = [
        f'call: "{OPEN}" body "{CLOSE}"',
        f"body: %json {json.dumps(body)}",
    ]
    if choice.mode == "auto":
        if text_schema is None:
            lines += ["start: TEXT | " + calls, "TEXT: /(.|\\n)+/ & ~/" + OPEN + "(.|\\n)*/"]
        else:
            lines += ["start: answer | " + calls, f"answer: %json {json.dumps(_compact(dict(text_schema)))}"]
    else:
        lines.insert(0, "start: " + calls)
    return "\n".join(lines) + "\n"


def _compact(schema: dict[str, Any]) -> dict[str, Any]:
    """No free whitespace: a small model can fill it forever."""
    return {**schema, "x-guidance": {"whitespace_flexible": False}}


def _calls_schema(tools: Sequence[Tool]) -> dict[str, Any]:
    """`{"name", "arguments"}` of any one of `tools`, name first; each function's `$defs` lifted to the
    root under a name of its own, since a `$ref` points from the document's root."""
    definitions: dict[str, Any] = {}
    options = []
    for index, tool in enumerate(tools):
        parameters = dict(tool.function.parameters)
        prefix = f"t{index}_"
        for key in ("$defs", "definitions"):
            lifted: Any = parameters.pop(key, None) or {}
            for name, definition in lifted.items():
                definitions[prefix + name] = _renamed_refs(definition, prefix)
        parameters = _renamed_refs(parameters, prefix)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.function.name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    body: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    return _compact({**body, "$defs": definitions} if definitions else body)


def _renamed_refs(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        renamed = {k: _renamed_refs(v, prefix) for k, v in value.items()}
        ref = renamed.get("$ref")
        if isinstance(ref, str):
            for root in ("#/$defs/", "#/definitions/"):
                if ref.startswith(root):
                    renamed["$ref"] = "#/$defs/" + prefix + ref[len(root) :]
        return renamed
    if isinstance(value, list):
        return [_renamed_refs(v, prefix) for v in value]
    return value


# ------------------------------------------------------------------ reading the answer ---------------


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str


@dataclass(frozen=True, slots=True)
class CallOpened:
    index: int  # the call's place among this answer's calls
    name: str


@dataclass(frozen=True, slots=True)
class ArgumentsPiece:
    index: int
    text: str


ToolEvent = TextPiece | CallOpened | ArgumentsPiece


@dataclass(slots=True)
class CallReader:
    """Reads an answer's text as it comes, piece by piece, into plain text and calls with their
    arguments in fragments: what a stream sends as deltas, and what a whole answer is made of. Text that
    may still turn out to be a call's marker is held until it is known."""

    calls: int = 0
    _state: Literal["start", "text", "header", "arguments", "close"] = "start"
    _held: str = ""
    _depth: int = 0
    _in_string: bool = False
    _escaped: bool = False

    def feed(self, text: str) -> list[ToolEvent]:
        events: list[ToolEvent] = []
        self._held += text
        while self._held:
            before = (self._state, len(self._held))
            self._step(events)
            if (self._state, len(self._held)) == before:
                break  # waiting for more text
        return events

    def _step(self, events: list[ToolEvent]) -> None:
        held = self._held
        if self._state == "text":
            events.append(TextPiece(held))
            self._held = ""
        elif self._state == "start":
            if held.startswith(OPEN):
                self._state, self._held = "header", held[len(OPEN) :]
            elif not OPEN.startswith(held):
                self._state = "text"
        elif self._state == "header":
            self._header(held, events)
        elif self._state == "arguments":
            self._arguments(held, events)
        elif held.startswith(CLOSE):  # "close"
            self._state, self._held = "start", held[len(CLOSE) :]

    def _header(self, held: str, events: list[ToolEvent]) -> None:
        found = _HEADER.match(held)
        if found is not None:
            events.append(CallOpened(self.calls, found.group(1)))
            self._state, self._held, self._depth = "arguments", held[found.end() :], 1

    def _arguments(self, held: str, events: list[ToolEvent]) -> None:
        end = self._arguments_end(held)
        piece = held if end is None else held[:end]
        if piece:
            events.append(ArgumentsPiece(self.calls, piece))
        if end is None:
            self._held = ""
        else:
            self._state, self._held = "close", held[end + 1 :]
            self.calls += 1

    def _arguments_end(self, text: str) -> int | None:
        """Where the call's object closes (the `}` after its arguments), scanning JSON strings aside."""
        for at, char in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return at
        return None

    def close(self) -> list[ToolEvent]:
        """The text still held when the answer ends: a marker's beginning the answer stopped at is text."""
        held, self._held = self._held, ""
        return [TextPiece(held)] if self._state == "start" and held and self.calls == 0 else []


@dataclass(slots=True)
class ReadAnswer:
    """An answer's text and calls, whole."""

    text: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments) each

    def add(self, events: Sequence[ToolEvent]) -> None:
        for event in events:
            if isinstance(event, TextPiece):
                self.text += event.text
            elif isinstance(event, CallOpened):
                self.calls.append((event.name, ""))
            else:
                name, arguments = self.calls[event.index]
                self.calls[event.index] = (name, arguments + event.text)


def read_answer(text: str) -> ReadAnswer:
    reader, answer = CallReader(), ReadAnswer()
    answer.add(reader.feed(text))
    answer.add(reader.close())
    return answer
