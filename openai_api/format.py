"""Pure translation between OpenAI's API and Synapse jobs: no I/O, so tests can call it directly.

Chat template: a chat becomes one prompt, one line per message, `<Role>: <content>`, then a last
line `Assistant:` for the model to continue. System and developer messages are labelled `System`:

    System: You are terse.
    User: Name three colours.
    Assistant:
"""

from __future__ import annotations

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
    Tool,
    ToolCall,
)
from openai_api.tools import ToolChoice, generic_turns, grammar, read_answer

DEFAULT_MAX_TOKENS = 16
ROLE_LABELS = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant"}


def render_chat(messages: Sequence[ChatMessage], tools: Sequence[Tool] = ()) -> str:
    """The chat template of the module docstring; tools and tool turns as `openai_api.tools` writes
    them for a template without tools."""
    lines = [f"{ROLE_LABELS[turn['role']]}: {turn['content']}" for turn in generic_turns(messages, tools)]
    lines.append("Assistant:")
    return "\n".join(lines)


def max_tokens(request: CompletionRequest | ChatCompletionRequest) -> int:
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS


@dataclass(frozen=True, slots=True)
class Shape:
    """How a job's text becomes OpenAI's choices: how many, with which log-probabilities' layout, and
    the tool choice its text is read under (None: plain text)."""

    n: int = 1
    logprobs: Literal["", "chat", "completion"] = ""
    tools: ToolChoice | None = None


def shape_of(request: CompletionRequest | ChatCompletionRequest) -> Shape:
    logprobs: Literal["", "chat", "completion"] = ""
    if request.top_logprob_count() is not None:
        logprobs = "completion" if isinstance(request, CompletionRequest) else "chat"
    if isinstance(request, CompletionRequest):
        return Shape(request.n or 1, logprobs)
    return Shape(request.n or 1, logprobs, tool_choice_of(request))


def tool_choice_of(request: ChatCompletionRequest) -> ToolChoice | None:
    """The request's tool choice; None without tools or with `none`. OpenAI's default with tools: auto."""
    choice = request.tool_choice
    if not request.tools or choice == "none":
        return None
    parallel = request.parallel_tool_calls is not False
    if isinstance(choice, NamedToolChoice):
        return ToolChoice("named", choice.function.name, parallel)
    return ToolChoice("required" if choice == "required" else "auto", parallel=parallel)


def offered_tools(request: ChatCompletionRequest) -> Sequence[Tool]:
    """The tools the prompt describes: none with tool_choice none."""
    return request.tools or () if tool_choice_of(request) is not None else ()


def structured_outputs(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The constraint the engine decodes under (vLLM's `structured_outputs`): a tool choice's grammar,
    whose plain answer keeps to `response_format`, or `response_format` alone."""
    response_format = request.response_format
    text_schema: dict[str, Any] | None = None
    if response_format is not None and response_format.type == "json_object":
        text_schema = {"type": "object"}
    elif response_format is not None and response_format.json_schema is not None:
        text_schema = response_format.json_schema.schema_
    choice = tool_choice_of(request)
    if choice is not None:
        return {"grammar": grammar(request.tools or (), choice, text_schema)}
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return {"json_object": True}
    return {"json": text_schema}


def tools_problem(request: ChatCompletionRequest) -> Problem | None:
    """A tool choice that names no tool, or a constraint that contradicts another."""
    choice = request.tool_choice
    if request.tools is None:
        if choice is not None and choice != "none":
            return Problem(400, "invalid_request", "tool_choice needs tools", param="tool_choice")
        return None
    names = {tool.function.name for tool in request.tools}
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        message = f"tool_choice names {choice.function.name!r}, which is not among the tools"
        return Problem(400, "invalid_request", message, param="tool_choice")
    forced = isinstance(choice, NamedToolChoice) or choice == "required"
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
        if shape.tools is not None:
            message, finish = tool_message(shape.tools, choice.text, finish, answer.job_id, index)
        logprobs = ChatLogprobs(content=chat_logprobs(choice.logprobs or [])) if shape.logprobs else None
        choices.append(ChatChoice(index=index, message=message, finish_reason=finish, logprobs=logprobs))
    return ChatCompletion(
        id=chat_id(answer),
        created=answer.created_s,
        model=answer.model,
        choices=choices,
        usage=answer.usage,
    )


def call_id(job_id: str, choice: int, call: int = 0) -> str:
    """A tool call's id: OpenAI's `call_` prefix, the job's id, the choice's index and the call's."""
    return f"call_{job_id.replace('-', '')[:24]}_{choice}_{call}"


def tool_message(
    choice: ToolChoice, text: str, finish: FinishReason, job_id: str, index: int
) -> tuple[AssistantMessage, FinishReason]:
    """A tool-using answer's message: its calls, or its text when it called none (auto). A named or
    required choice answers calls even when cut by max_tokens (a named one its function's, with the
    arguments it got to)."""
    read = read_answer(text)
    calls = [
        ToolCall(id=call_id(job_id, index, k), function=FunctionCall(name=name, arguments=arguments))
        for k, (name, arguments) in enumerate(read.calls)
    ]
    if not calls and choice.mode == "named":
        calls = [ToolCall(id=call_id(job_id, index), function=FunctionCall(name=choice.name, arguments=""))]
    if not calls and choice.mode == "auto":
        return AssistantMessage(content=read.text), finish
    return AssistantMessage(content=None, tool_calls=calls), "tool_calls" if finish == "stop" else finish


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
