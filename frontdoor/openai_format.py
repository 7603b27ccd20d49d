"""Pure translation between OpenAI's API and Synapse jobs: no I/O, so tests can call it directly.

Chat template: a chat becomes one prompt, one line per message, `<Role>: <content>`, then a last
line `Assistant:` for the model to continue. System and developer messages are labelled `System`:

    System: You are terse.
    User: Name three colours.
    Assistant:
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from contract.jobs import JobStatus
from frontdoor.errors import Problem
from frontdoor.openai_schemas import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionChunkChoice,
    CompletionRequest,
    Delta,
    FinishReason,
)
from frontdoor.schemas import Usage

DEFAULT_MAX_TOKENS = 16
ROLE_LABELS = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant"}


def message_text(message: ChatMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(part.text for part in message.content)


def render_chat(messages: Sequence[ChatMessage]) -> str:
    """The chat template of the module docstring."""
    lines = [f"{ROLE_LABELS[m.role]}: {message_text(m)}" for m in messages]
    lines.append("Assistant:")
    return "\n".join(lines)


def max_tokens(request: CompletionRequest | ChatCompletionRequest) -> int:
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS


@dataclass(frozen=True, slots=True)
class Answer:
    """A completed job, as the OpenAI responses need it."""

    job_id: str
    model: str
    created_s: int
    text: str
    usage: Usage
    max_tokens: int

    @property
    def finish_reason(self) -> FinishReason:
        return "length" if self.usage.completion_tokens >= self.max_tokens else "stop"


def answer_from(fields: Mapping[str, str]) -> Answer:
    """The answer of a COMPLETED job hash (`contract.jobs` layout)."""
    result = json.loads(fields["result"])
    return Answer(
        job_id=fields["id"],
        model=fields["model"],
        created_s=int(fields["created_ms"]) // 1000,
        text=result["text"],
        usage=Usage.model_validate(result["usage"]),
        max_tokens=int(fields["max_tokens"]),
    )


def outcome_problem(
    fields: Mapping[str, str], waited_s: float, prompt_param: str = "prompt"
) -> Problem | None:
    """Why a job has no answer to give (failed, or still running after the wait), or None."""
    job_id = fields["id"]
    status = JobStatus(fields["status"])
    if not status.is_final:
        message = (
            f"the job did not finish within {waited_s:g} s; it is still running: "
            f"fetch its result from GET /results/{job_id}"
        )
        return Problem(504, "timeout", message, job_id=job_id)
    if status is JobStatus.COMPLETED:
        return None
    code = fields.get("error_code") or "failed"
    message = fields.get("error_message") or "the job failed"
    if code == "model_error":
        return Problem(400, code, message, param=prompt_param, job_id=job_id)
    if code == "deadline_exceeded":
        return Problem(504, code, message, job_id=job_id)
    return Problem(502, code, message, job_id=job_id)


def completion_id(answer: Answer) -> str:
    return f"cmpl-{answer.job_id}"


def chat_id(answer: Answer) -> str:
    return f"chatcmpl-{answer.job_id}"


def completion(answer: Answer) -> Completion:
    choice = CompletionChoice(index=0, text=answer.text, finish_reason=answer.finish_reason)
    return Completion(
        id=completion_id(answer),
        created=answer.created_s,
        model=answer.model,
        choices=[choice],
        usage=answer.usage,
    )


def chat_completion(answer: Answer) -> ChatCompletion:
    message = AssistantMessage(content=answer.text)
    choice = ChatChoice(index=0, message=message, finish_reason=answer.finish_reason)
    return ChatCompletion(
        id=chat_id(answer),
        created=answer.created_s,
        model=answer.model,
        choices=[choice],
        usage=answer.usage,
    )


def completion_chunks(answer: Answer, include_usage: bool) -> list[CompletionChunk]:
    """The whole text in one chunk, then the finish reason; API Gateway REST cannot stream."""

    def chunk(choices: list[CompletionChunkChoice], usage: Usage | None = None) -> CompletionChunk:
        return CompletionChunk(
            id=completion_id(answer),
            created=answer.created_s,
            model=answer.model,
            choices=choices,
            usage=usage,
        )

    chunks = [
        chunk([CompletionChunkChoice(index=0, text=answer.text, finish_reason=None)]),
        chunk([CompletionChunkChoice(index=0, text="", finish_reason=answer.finish_reason)]),
    ]
    if include_usage:
        chunks.append(chunk([], answer.usage))
    return chunks


def chat_chunks(answer: Answer, include_usage: bool) -> list[ChatCompletionChunk]:
    """The same framing as `completion_chunks`, with the text in a `delta`."""

    def chunk(choices: list[ChatChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=chat_id(answer), created=answer.created_s, model=answer.model, choices=choices, usage=usage
        )

    first = ChatChunkChoice(index=0, delta=Delta(role="assistant", content=answer.text), finish_reason=None)
    last = ChatChunkChoice(index=0, delta=Delta(), finish_reason=answer.finish_reason)
    chunks = [chunk([first]), chunk([last])]
    if include_usage:
        chunks.append(chunk([], answer.usage))
    return chunks


def server_sent_events(chunks: Iterable[BaseModel]) -> str:
    """OpenAI's stream framing: one `data:` event per chunk, then `data: [DONE]`."""
    events = [f"data: {chunk.model_dump_json(exclude_none=False)}\n\n" for chunk in chunks]
    events.append("data: [DONE]\n\n")
    return "".join(events)
