"""A response's stream: OpenAI's event order, numbered from 0 with no gap, the same events whenever the
same token events are framed again, so a client resuming after N gets exactly the rest; calls as
function_call items with their arguments in deltas. The SDK's own event types parse every event."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from contract import tokens
from contract.jobs import JobStatus
from openai_api.format import Shape
from openai_api.responses_format import response_id
from openai_api.responses_schemas import ResponseRequest
from openai_api.responses_stream import ResponseEvents
from openai_api.tools import ToolChoice

JOB = str(uuid.UUID(int=7))
EVENT = TypeAdapter(ResponseStreamEvent)
ADD = {
    "type": "function",
    "name": "add",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
}


def framer(starting_after: int = -1, choice: ToolChoice | None = None, **request: Any) -> ResponseEvents:
    body = ResponseRequest.model_validate({"model": "m", "input": "hi", **request})
    return ResponseEvents(
        job_id=JOB, response_id=response_id(JOB), created_s=1, model="m", request=body,
        shape=Shape(tools=choice), max_tokens=16, starting_after=starting_after,
    )  # fmt: skip


def end(finish: str = "stop", completion_tokens: int = 3) -> tokens.End:
    return tokens.End(
        "", JobStatus.COMPLETED, finish_reason=finish, prompt_tokens=5, completion_tokens=completion_tokens
    )


def events(text: str) -> list[dict[str, Any]]:
    """Each SSE event's data, checked against its `event:` line and the SDK's own event types."""
    found = []
    for block in text.split("\n\n"):
        if not block:
            continue
        kind_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert kind_line == f"event: {data['type']}"
        EVENT.validate_python(data)
        found.append(data)
    return found


def run(frames: ResponseEvents, pieces: list[str], last: tokens.End) -> list[dict[str, Any]]:
    return events("".join(frames.delta(p) for p in pieces) + frames.finish(last))


def test_a_text_answer_streams_in_openais_order_numbered_without_gaps() -> None:
    sent = run(framer(), ["Hel", "lo", "!"], end())
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))
    assert [e["type"] for e in sent] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 3,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    final = sent[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "Hello!"
    assert final["output"][0]["id"] == sent[2]["item"]["id"] == sent[4]["item_id"]
    assert final["usage"]["output_tokens"] == 3


@pytest.mark.parametrize("after", [0, 1, 4, 7, 10])
def test_framing_the_same_tokens_again_after_n_gives_exactly_the_rest(after: int) -> None:
    whole = run(framer(), ["Hel", "lo", "!"], end())
    rest = run(framer(starting_after=after), ["Hel", "lo", "!"], end())
    assert rest == whole[after + 1 :]


def test_an_answer_cut_by_max_output_tokens_ends_incomplete() -> None:
    sent = run(framer(), ["a", "b"], end("length", 16))
    assert sent[-1]["type"] == "response.incomplete"
    assert sent[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_calls_stream_as_function_call_items_with_argument_deltas() -> None:
    text = "".join(f'<tool_call>{{"name":"add","arguments":{{"a":{a}}}}}</tool_call>' for a in (1, 2))
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    sent = run(framer(choice=ToolChoice("auto"), tools=[ADD]), pieces, end())
    added = [e["item"] for e in sent if e["type"] == "response.output_item.added"]
    assert [(i["type"], i["name"]) for i in added] == [("function_call", "add")] * 2
    arguments: dict[int, str] = {}
    for e in sent:
        if e["type"] == "response.function_call_arguments.delta":
            arguments[e["output_index"]] = arguments.get(e["output_index"], "") + e["delta"]
    assert arguments == {0: '{"a":1}', 1: '{"a":2}'}
    final = sent[-1]["response"]["output"]
    assert [(o["id"], o["arguments"]) for o in final] == [
        (i["id"], arguments[n]) for n, i in enumerate(added)
    ]
    assert not any(e["type"].startswith("response.output_text") for e in sent)


def test_a_named_call_cut_before_it_began_is_still_opened_and_closed() -> None:
    sent = run(framer(choice=ToolChoice("named", "add"), tools=[ADD]), ["<tool_"], end("length", 16))
    kinds = [e["type"] for e in sent]
    assert kinds[-4:] == [
        "response.output_item.added", "response.function_call_arguments.done", "response.output_item.done",
        "response.incomplete",
    ]  # fmt: skip


def test_a_failure_mid_stream_ends_with_response_failed() -> None:
    from openai_api.errors import Problem

    frames = framer()
    sent = events(frames.delta("par") + frames.error(Problem(502, "worker_lost", "the worker went away")))
    assert sent[-1]["type"] == "response.failed"
    assert sent[-1]["response"]["status"] == "failed" and sent[-1]["response"]["error"]["message"]
