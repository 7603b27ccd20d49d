"""Pure translation between OpenAI's API and Synapse jobs: no I/O, so tests can call it directly.

Chat template: a chat becomes one prompt, one line per message, `<Role>: <content>`, then a last
line `Assistant:` for the model to continue. System and developer messages are labelled `System`:

    System: You are terse.
    User: Name three colours.
    Assistant:
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contract.job_record import JobRecord
from contract.jobs import JobStatus
from frontdoor.errors import Problem
from frontdoor.openai_schemas import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    Completion,
    CompletionChoice,
    CompletionRequest,
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
    engine_finish: str = ""  # what a generative model's engine said; one-shot models say nothing

    @property
    def finish_reason(self) -> FinishReason:
        if self.engine_finish in ("stop", "length"):
            return "length" if self.engine_finish == "length" else "stop"
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
        engine_finish=result.get("finish_reason") or "",
    )


def outcome_problem(
    fields: Mapping[str, str], waited_s: float, prompt_param: str = "prompt"
) -> Problem | None:
    """Why a job has no answer to give (failed, or not final after the wait), or None."""
    record = JobRecord.of(fields)
    job_id, status = record.id, record.status
    if not status.is_final:
        message = (
            f"the job did not finish within {waited_s:g} s, the deadline of a synchronous call; "
            f"GET /results/{job_id} tells how it ended (POST /async-infer waits longer)"
        )
        return Problem(504, "timeout", message, job_id=job_id)
    if status is JobStatus.COMPLETED:
        return None
    return failure_problem(status, record.error_code, record.error_message, job_id, prompt_param)


def failure_problem(
    status: JobStatus, code: str, message: str, job_id: str, prompt_param: str = "prompt"
) -> Problem:
    """The HTTP error of a job that ended without an answer, buffered or streamed alike."""
    message = message or "the job failed"
    if code in ("model_error", "input_too_long"):
        return Problem(400, code, message, param=prompt_param, job_id=job_id)
    if code == "deadline_exceeded":
        return Problem(504, code, message, job_id=job_id)
    if status is JobStatus.CANCELLED:
        return Problem(409, "cancelled", message, job_id=job_id)
    return Problem(502, code or "failed", message, job_id=job_id)


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
