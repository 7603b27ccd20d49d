"""A stored response: a job whose record carries the Responses request it answers (`Job.request`).

The job is the response's durable state: its status is the response's, its result the answer, and it
lives in Redis per tenant with the job's TTL, counted in the tenant's quotas like any job. Beside the
request, the record keeps the conversation the response continued (its own input and every earlier
turn of a `previous_response_id` chain, without instructions, which OpenAI does not carry over), so
that the next turn reads one record, not the whole chain.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from contract.job_record import JobRecord
from contract.jobs import JobStatus
from openai_api.answer_schemas import AssistantMessage, ChatCompletion
from openai_api.errors import Problem
from openai_api.format import Shape, answer_from, chat_completion, shape_of
from openai_api.responses_format import chat_request_of, continued, response_id, response_of
from openai_api.responses_schemas import ResponseObject, ResponseRequest, ResponseStatus
from openai_api.schemas import ChatMessage

STATUSES: dict[JobStatus, ResponseStatus] = {
    JobStatus.QUEUED: "queued",
    JobStatus.RUNNING: "in_progress",
    JobStatus.COMPLETED: "completed",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELLED: "cancelled",
}


class StoredResponse(BaseModel):
    """What a response's job record carries for the API to read back."""

    request: ResponseRequest
    conversation: list[ChatMessage]

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


def stored_of(record: JobRecord) -> StoredResponse | None:
    """The stored response a job's record carries; None for a job that is not a response."""
    if not record.request:
        return None
    try:
        return StoredResponse.model_validate_json(record.request)
    except ValidationError:
        return None


def shape_for(request: ResponseRequest) -> Shape:
    """How the answer's text reads (its tool choice): the chat request it ran as tells."""
    chat = chat_request_of(request, [])
    return Shape() if isinstance(chat, Problem) else shape_of(chat)


def answer_chat(record: JobRecord, stored: StoredResponse) -> ChatCompletion | None:
    """A completed response's answer, as the chat it ran as."""
    if record.status is not JobStatus.COMPLETED:
        return None
    return chat_completion(answer_from(record), shape_for(stored.request))


def view(record: JobRecord, stored: StoredResponse) -> ResponseObject:
    """The response as GET /v1/responses/{id} shows it."""
    error = None
    if record.status in (JobStatus.FAILED, JobStatus.CANCELLED) and record.error_code:
        error = (record.error_code, record.error_message)
    if record.status is JobStatus.FAILED and error is None:
        error = ("failed", "the response failed")
    return response_of(
        response_id=response_id(record.id), created_s=record.created_ms // 1000,
        status=STATUSES[record.status], model=record.model, request=stored.request,
        chat=answer_chat(record, stored), error=error if record.status is JobStatus.FAILED else None,
    )  # fmt: skip


def history_after(record: JobRecord, stored: StoredResponse) -> tuple[list[ChatMessage], int] | None:
    """The conversation a response continued, with its answer (the next turn's history), and at least
    how many tokens a turn continuing it starts with; None while it has no answer to continue from.

    The count is the engine's own: the response's prompt and answer, less its instructions (not carried
    over), which take at most a token per byte. So a chain past the model's context is refused before
    anything is queued, even where the front door has no tokenizer (the Lambda)."""
    chat = answer_chat(record, stored)
    if chat is None or not chat.choices:
        return None
    message: AssistantMessage = chat.choices[0].message
    instructions = len((stored.request.instructions or "").encode())
    carried = max(0, chat.usage.prompt_tokens + chat.usage.completion_tokens - instructions)
    return continued(stored.conversation, message), carried
