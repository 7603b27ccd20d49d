"""Pure translation between OpenAI's API and Synapse jobs: no I/O, so tests can call it directly.

Chat template: a chat becomes one prompt, one line per message, `<Role>: <content>`, then a last
line `Assistant:` for the model to continue. System and developer messages are labelled `System`:

    System: You are terse.
    User: Name three colours.
    Assistant:
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from contract.job_record import JobRecord
from contract.jobs import JobStatus
from openai_api.answer_schemas import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatLogprobs,
    Completion,
    CompletionChoice,
    CompletionLogprobsBody,
    FinishReason,
    TokenLogprob,
)
from openai_api.errors import Problem
from openai_api.sampling import Usage
from openai_api.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    FunctionCall,
    NamedToolChoice,
    ToolCall,
)

DEFAULT_MAX_TOKENS = 16
ROLE_LABELS = {
    "system": "System",
    "developer": "System",
    "user": "User",
    "assistant": "Assistant",
    "tool": "Tool",
}


def message_text(message: ChatMessage) -> str:
    """A message's text; an assistant's tool calls with no text read as the JSON the model wrote them in
    (`{"name": ..., "arguments": ...}`, a line each), so a template without tools still shows them."""
    if isinstance(message.content, str):
        return message.content
    if message.content is not None:
        return "".join(part.text for part in message.content)
    calls = message.tool_calls or []
    return "\n".join(
        json.dumps({"name": c.function.name, "arguments": _arguments(c.function.arguments)}) for c in calls
    )


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def render_chat(messages: Sequence[ChatMessage]) -> str:
    """The chat template of the module docstring."""
    lines = [f"{ROLE_LABELS[m.role]}: {message_text(m)}" for m in messages]
    lines.append("Assistant:")
    return "\n".join(lines)


def max_tokens(request: CompletionRequest | ChatCompletionRequest) -> int:
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS


ToolMode = Literal["", "named", "required"]


@dataclass(frozen=True, slots=True)
class Shape:
    """How a job's text becomes OpenAI's choices: how many, with which log-probabilities' layout, and
    whether the text is a tool call (`named`: the arguments of `tool`; `required`: a JSON object
    `{"name", "arguments"}` naming one of the request's tools)."""

    n: int = 1
    logprobs: Literal["", "chat", "completion"] = ""
    tool_mode: ToolMode = ""
    tool: str = ""


def shape_of(request: CompletionRequest | ChatCompletionRequest) -> Shape:
    logprobs: Literal["", "chat", "completion"] = ""
    if request.top_logprob_count() is not None:
        logprobs = "completion" if isinstance(request, CompletionRequest) else "chat"
    mode: ToolMode = ""
    tool = ""
    if isinstance(request, ChatCompletionRequest) and request.tools:
        if isinstance(request.tool_choice, NamedToolChoice):
            mode, tool = "named", request.tool_choice.function.name
        elif request.tool_choice == "required":
            mode = "required"
    return Shape(request.n or 1, logprobs, mode, tool)


def structured_outputs(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The constraint the engine decodes under (vLLM's `structured_outputs`), from `response_format` or
    a call the request requires: its function's parameters, or any one of its tools as
    `{"name", "arguments"}`."""
    shape = shape_of(request)
    tools = {tool.function.name: tool.function.parameters for tool in request.tools or ()}
    if shape.tool_mode == "named":
        return {"json": tools[shape.tool]}
    if shape.tool_mode == "required":
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for name, parameters in tools.items()
        ]
        return {"json": calls[0] if len(calls) == 1 else {"anyOf": calls}}
    response_format = request.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return {"json_object": True}
    assert response_format.json_schema is not None
    return {"json": response_format.json_schema.schema_}


def tools_problem(request: ChatCompletionRequest, template_source: str | None) -> Problem | None:
    """A tool choice this model cannot honour, or a constraint that contradicts another."""
    choice = request.tool_choice
    if request.tools is None:
        if choice is not None and choice != "none":
            return Problem(400, "invalid_request", "tool_choice needs tools", param="tool_choice")
        return None
    names = {tool.function.name for tool in request.tools}
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        message = f"tool_choice names {choice.function.name!r}, which is not among the tools"
        return Problem(400, "invalid_request", message, param="tool_choice")
    if choice is None or choice == "auto":
        message = (
            "tool_choice auto needs a model whose chat template offers tools, and this model's does not"
            if template_source is None or "tools" not in template_source
            else "tool_choice auto is not supported yet: the model's own call syntax is not parsed"
        ) + '; send tool_choice "required" or {"type": "function", "function": {"name": ...}}'
        return Problem(400, "invalid_request", message, param="tool_choice")
    forced = choice != "none"
    if forced and request.response_format is not None and request.response_format.type != "text":
        message = "response_format and a required tool call both constrain the answer: send one"
        return Problem(400, "invalid_request", message, param="response_format")
    return None


@dataclass(frozen=True, slots=True)
class AnswerChoice:
    text: str
    engine_finish: str = ""
    logprobs: list[Any] | None = None


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
    choices: tuple[AnswerChoice, ...] = field(default=())  # every choice; () for one without details

    @property
    def finish_reason(self) -> FinishReason:
        return finish_of(self.engine_finish, self.usage.completion_tokens >= self.max_tokens)

    def all_choices(self) -> tuple[AnswerChoice, ...]:
        return self.choices or (AnswerChoice(self.text, self.engine_finish),)


def finish_of(engine_finish: str, used_all_tokens: bool) -> FinishReason:
    if engine_finish in ("stop", "length"):
        return "length" if engine_finish == "length" else "stop"
    return "length" if used_all_tokens else "stop"


def answer_from(record: JobRecord) -> Answer:
    """The answer of a COMPLETED job."""
    result = record.result_json()
    choices = tuple(
        AnswerChoice(c["text"], c.get("finish_reason") or "", c.get("logprobs"))
        for c in result.get("choices", ())
    )
    return Answer(
        job_id=record.id,
        model=record.model,
        created_s=record.created_ms // 1000,
        text=result["text"],
        usage=Usage.model_validate(result["usage"]),
        max_tokens=record.max_tokens,
        engine_finish=result.get("finish_reason") or "",
        choices=choices,
    )


def outcome_problem(record: JobRecord, waited_s: float, prompt_param: str = "prompt") -> Problem | None:
    """Why a job has no answer to give (failed, or not final after the wait), or None."""
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


def completion(answer: Answer, shape: Shape = Shape()) -> Completion:
    choices = []
    for index, choice in enumerate(answer.all_choices()):
        logprobs = completion_logprobs(choice.logprobs or [], 0) if shape.logprobs else None
        finish = finish_of(choice.engine_finish, False) if answer.choices else answer.finish_reason
        choices.append(
            CompletionChoice(index=index, text=choice.text, finish_reason=finish, logprobs=logprobs)
        )
    return Completion(
        id=completion_id(answer),
        created=answer.created_s,
        model=answer.model,
        choices=choices,
        usage=answer.usage,
    )


def chat_completion(answer: Answer, shape: Shape = Shape()) -> ChatCompletion:
    choices = []
    for index, choice in enumerate(answer.all_choices()):
        finish = finish_of(choice.engine_finish, False) if answer.choices else answer.finish_reason
        message = AssistantMessage(content=choice.text)
        call = tool_call(shape, choice.text, call_id(answer.job_id, index)) if finish == "stop" else None
        if call is not None:
            message, finish = AssistantMessage(content=None, tool_calls=[call]), "tool_calls"
        logprobs = ChatLogprobs(content=chat_logprobs(choice.logprobs or [])) if shape.logprobs else None
        choices.append(ChatChoice(index=index, message=message, finish_reason=finish, logprobs=logprobs))
    return ChatCompletion(
        id=chat_id(answer),
        created=answer.created_s,
        model=answer.model,
        choices=choices,
        usage=answer.usage,
    )


def call_id(job_id: str, index: int) -> str:
    """A tool call's id: OpenAI's `call_` prefix, the job's id and the choice's index."""
    return f"call_{job_id.replace('-', '')[:24]}_{index}"


def tool_call(shape: Shape, text: str, call_id: str) -> ToolCall | None:
    """The call a tool-call answer holds (its text was constrained to it); None for a plain answer."""
    if shape.tool_mode == "named":
        return ToolCall(id=call_id, function=FunctionCall(name=shape.tool, arguments=text))
    if shape.tool_mode == "required":
        try:
            call = json.loads(text)
            return ToolCall(
                id=call_id, function=FunctionCall(name=call["name"], arguments=json.dumps(call["arguments"]))
            )
        except (ValueError, KeyError, TypeError):
            return None
    return None


def chat_logprobs(entries: Sequence[Any]) -> list[TokenLogprob]:
    """The engine's entries (already in the chat shape), validated."""
    return [TokenLogprob.model_validate(entry) for entry in entries]


def completion_logprobs(entries: Sequence[Any], offset: int) -> CompletionLogprobsBody:
    """The legacy completions layout: the tokens, their log-probabilities, the likeliest per position and
    where each token starts in the text (from `offset`)."""
    tokens, offsets = [], []
    for entry in entries:
        offsets.append(offset)
        tokens.append(entry["token"])
        offset += len(entry["token"])
    return CompletionLogprobsBody(
        tokens=tokens,
        token_logprobs=[entry["logprob"] for entry in entries],
        top_logprobs=[{top["token"]: top["logprob"] for top in entry["top_logprobs"]} for entry in entries],
        text_offset=offsets,
    )
