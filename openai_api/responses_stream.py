"""A response's stream as OpenAI sends it: typed events, each with its `sequence_number`, from
`response.created` to `response.completed` (or `incomplete`, `failed`), built from the job's token events.

The events are a function of the job's token events alone, so a reader that comes back with
`starting_after=N` (GET /v1/responses/{id}?stream=true) gets the same events re-framed from the stored
token stream and is sent only those after N: every event once, in order, whichever gateway process
framed the first part. Text and calls are read as they come (`openai_api.tools.CallReader`); the items'
ids and the final response are those `responses_format.response_of` gives a GET. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contract import tokens
from openai_api.errors import Problem
from openai_api.format import Answer, Shape, call_id, chat_completion
from openai_api.responses_format import item_id, response_of
from openai_api.responses_schemas import ResponseObject, ResponseRequest, ResponseStatus
from openai_api.sampling import Usage
from openai_api.tools import ArgumentsPiece, CallOpened, CallReader, TextPiece, ToolEvent


@dataclass(slots=True)
class ResponseEvents:
    """The SSE events of one response's stream. `starting_after`: the last sequence number the client
    has; events up to it are framed but not sent. `queued`: a background response starts queued."""

    job_id: str
    response_id: str
    created_s: int
    model: str
    request: ResponseRequest
    shape: Shape
    max_tokens: int
    queued: bool = False
    starting_after: int = -1
    _sequence: int = 0
    _reader: CallReader = field(default_factory=CallReader)
    _text: str = ""  # every text the job produced, as its deltas came
    _open_text: bool = False
    _calls: dict[int, tuple[str, str]] = field(default_factory=dict)  # (name, arguments) by call index
    _began: bool = False

    def delta(self, text: str, index: int = 0, logprobs: Sequence[Any] = ()) -> str:
        """The job's new text (a response has one choice: others are not asked for)."""
        if index != 0:
            return ""
        self._text += text
        return self._begin() + "".join(self._item_events(e) for e in self._read(text))

    def finish(self, end: tokens.End) -> str:
        """Closes the open items and ends with the whole response, completed or incomplete."""
        events = self._begin() + "".join(self._item_events(e) for e in self._reader.close())
        usage = Usage(
            prompt_tokens=end.prompt_tokens,
            completion_tokens=end.completion_tokens,
            total_tokens=end.prompt_tokens + end.completion_tokens,
        )
        finish = (end.finish_reasons or (end.finish_reason,))[0]
        answer = Answer(self.job_id, self.model, self.created_s, self._text, usage, self.max_tokens, finish)
        final = self._snapshot("completed", chat_completion(answer, self.shape))
        for place, item in enumerate(final.output):
            events += self._done(place, item.model_dump(mode="json"))
        kind = "response.incomplete" if final.status == "incomplete" else "response.completed"
        return events + self._event(kind, response=final.model_dump(mode="json"))

    def error(self, problem: Problem) -> str:
        """A response that ended without its answer: `response.failed`, with why."""
        failed = self._snapshot("failed", None, (problem.code, problem.message))
        return self._begin() + self._event("response.failed", response=failed.model_dump(mode="json"))

    # ------------------------------------------------------------------ items ------------------------

    def _read(self, text: str) -> list[ToolEvent]:
        if self.shape.tools is None:
            return [TextPiece(text)] if text else []
        return self._reader.feed(text)

    def _item_events(self, event: ToolEvent) -> str:
        if isinstance(event, TextPiece):
            return self._open_message() + self._event(
                "response.output_text.delta", item_id=self._message_id, output_index=0, content_index=0,
                delta=event.text, logprobs=[],
            )  # fmt: skip
        if isinstance(event, CallOpened):
            self._calls[event.index] = (event.name, "")
            item = {"type": "function_call", "id": self._call_item_id(event.index),
                    "call_id": call_id(self.job_id, 0, event.index), "name": event.name, "arguments": "",
                    "status": "in_progress"}  # fmt: skip
            return self._event("response.output_item.added", output_index=event.index, item=item)
        return self._arguments_delta(event)

    def _open_message(self) -> str:
        if self._open_text:
            return ""
        self._open_text = True
        item = {"type": "message", "id": self._message_id, "status": "in_progress", "role": "assistant",
                "content": []}  # fmt: skip
        return self._event("response.output_item.added", output_index=0, item=item) + self._event(
            "response.content_part.added", item_id=self._message_id, output_index=0, content_index=0,
            part={"type": "output_text", "text": "", "annotations": []},
        )  # fmt: skip

    def _arguments_delta(self, event: ArgumentsPiece) -> str:
        name, arguments = self._calls[event.index]
        self._calls[event.index] = (name, arguments + event.text)
        return self._event(
            "response.function_call_arguments.delta", item_id=self._call_item_id(event.index),
            output_index=event.index, delta=event.text,
        )  # fmt: skip

    def _done(self, place: int, item: dict[str, Any]) -> str:
        """An output item's closing events; one the stream never opened (a named call cut before it
        began) is opened first, so the client's list of items matches the final response's."""
        events = ""
        if item["type"] == "message":
            events += self._open_message()
            text = "".join(part["text"] for part in item["content"])
            events += self._event(
                "response.output_text.done", item_id=item["id"], output_index=place, content_index=0,
                text=text, logprobs=[],
            )  # fmt: skip
            events += self._event(
                "response.content_part.done", item_id=item["id"], output_index=place, content_index=0,
                part=item["content"][0],
            )  # fmt: skip
        else:
            if place not in self._calls:
                events += self._item_events(CallOpened(place, item["name"]))
            events += self._event(
                "response.function_call_arguments.done", item_id=item["id"], output_index=place,
                name=item["name"], arguments=item["arguments"],
            )  # fmt: skip
        return events + self._event("response.output_item.done", output_index=place, item=item)

    @property
    def _message_id(self) -> str:
        return item_id("msg", self.response_id, "out0")

    def _call_item_id(self, index: int) -> str:
        return item_id("fc", self.response_id, f"out{index}")

    # ------------------------------------------------------------------ the response -----------------

    def _begin(self) -> str:
        if self._began:
            return ""
        self._began = True
        first: ResponseStatus = "queued" if self.queued else "in_progress"
        created = self._event("response.created", response=self._snapshot(first).model_dump(mode="json"))
        running = self._snapshot("in_progress").model_dump(mode="json")
        return created + self._event("response.in_progress", response=running)

    def _snapshot(
        self, status: ResponseStatus, chat: Any = None, error: tuple[str, str] | None = None
    ) -> ResponseObject:
        return response_of(
            response_id=self.response_id, created_s=self.created_s, status=status, model=self.model,
            request=self.request, chat=chat, error=error,
        )  # fmt: skip

    def _event(self, kind: str, **body: Any) -> str:
        """One SSE event (`event:` its type, `data:` its JSON); past `starting_after` only."""
        number = self._sequence
        self._sequence += 1
        if number <= self.starting_after:
            return ""
        data = json.dumps({"type": kind, "sequence_number": number, **body}, separators=(",", ":"))
        return f"event: {kind}\ndata: {data}\n\n"
