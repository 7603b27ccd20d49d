"""Pure translation between OpenAI's Responses API and a chat: a response's request becomes a chat request
over the conversation so far, and the chat's answer becomes the response's output. No I/O: the caller
loads the previous response's conversation and stores this one's.

A conversation is the chat messages of every turn's input and answer, without instructions: OpenAI does
not carry a response's instructions over to the next one. Ids derive from the job's id, so that reading a
response again gives the same ids: `resp_<hex>` for the response, `<kind>_<hex>_out<i>` for its output
items and `<kind>_<hex>_in<i>` for its input items.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from itertools import groupby
from typing import Any, Literal

from pydantic import ValidationError

from openai_api.answer_schemas import AssistantMessage, ChatChoice, ChatCompletion
from openai_api.batch_schemas import OutputTokensDetails
from openai_api.errors import Problem
from openai_api.responses_schemas import (
    FunctionCallInput,
    FunctionCallItem,
    FunctionCallOutputInput,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolChoice,
    IncompleteDetails,
    InputItemList,
    InputMessageItem,
    InputText,
    JsonSchemaTextFormat,
    ListedItem,
    MessageInput,
    OutputItem,
    OutputMessage,
    OutputText,
    PlainTextFormat,
    ResponseError,
    ResponseErrorCode,
    ResponseInputTokensDetails,
    ResponseObject,
    ResponseRequest,
    ResponseStatus,
    ResponseUsage,
    TextConfig,
    TextFormat,
    ToolChoice,
)
from openai_api.sampling import Usage
from openai_api.schemas import ChatCompletionRequest, ChatMessage

RESPONSE_PREFIX = "resp_"
_RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")
# A job's failure codes (manager/outcomes.py) that blame the input; any other is the server's.
_ERROR_CODES: dict[str, ResponseErrorCode] = {
    "model_error": "invalid_prompt",
    "input_too_long": "invalid_prompt",
}
# A chat request's fields as the Responses request names them, for a 400's `param`.
_PARAMS = {"messages": "input", "max_completion_tokens": "max_output_tokens", "response_format": "text"}


def response_id(job_id: str) -> str:
    """The response's id: the job's UUID as 32 hex digits."""
    return RESPONSE_PREFIX + uuid.UUID(job_id).hex


def job_id_of(response_id: str) -> str | None:
    """The job behind a response id, or None for anything not exactly `resp_` and 32 lowercase hex
    digits: a made-up id is a 404 without a lookup."""
    if _RESPONSE_ID.fullmatch(response_id) is None:
        return None
    return str(uuid.UUID(hex=response_id.removeprefix(RESPONSE_PREFIX)))


def item_id(kind: Literal["msg", "fc", "fco"], response_id: str, place: str) -> str:
    return f"{kind}_{response_id.removeprefix(RESPONSE_PREFIX)}_{place}"


def chat_request_of(
    request: ResponseRequest, history: Sequence[ChatMessage], *, default_max_output_tokens: int | None = None
) -> ChatCompletionRequest | Problem:
    """The chat that answers a response: its instructions, the conversation so far (`history`, from
    `previous_response_id`) and this input. OpenAI's default length is what the model's context leaves,
    which only the caller knows (`default_max_output_tokens`; None leaves a chat's default)."""
    try:
        instructions = [_message(role="system", content=request.instructions)] if request.instructions else []
        messages = [*instructions, *conversation_of(history, request)]
    except ValidationError as error:
        return _problem(error, "input")
    text_format = request.text.format if request.text is not None else None
    chat = {
        "model": request.model,
        "messages": messages,
        "max_completion_tokens": request.max_output_tokens or default_max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "tools": [_chat_tool(tool) for tool in request.tools] if request.tools else None,
        "tool_choice": _chat_tool_choice(request.tool_choice),
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": _response_format(text_format),
        "user": request.user,
    }
    try:
        return ChatCompletionRequest.model_validate(chat)
    except ValidationError as error:
        return _problem(error, None)


def _problem(error: ValidationError, param: str | None) -> Problem:
    first = error.errors()[0]
    location = [str(part) for part in first["loc"]]
    name = param or (_PARAMS.get(location[0], location[0]) if location else "input")
    return Problem(400, "invalid_request", f"{name}: {first['msg']}", param=name)


def _chat_tool(tool: FunctionTool) -> dict[str, Any]:
    return {"type": "function", "function": tool.model_dump(exclude={"type"})}


def _chat_tool_choice(choice: ToolChoice | None) -> str | dict[str, Any] | None:
    if isinstance(choice, FunctionToolChoice):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def _response_format(text_format: TextFormat | None) -> dict[str, Any] | None:
    if isinstance(text_format, JsonSchemaTextFormat):
        return {"type": "json_schema", "json_schema": text_format.model_dump(exclude={"type"})}
    return None if text_format is None else {"type": text_format.type}


def conversation_of(history: Sequence[ChatMessage], request: ResponseRequest) -> list[ChatMessage]:
    """The conversation with this response's input added, without instructions: what to store."""
    messages = list(history)
    # Calls made together (consecutive function_call items) are one assistant turn, as a chat has them.
    for is_call, items in groupby(request.input, key=lambda item: isinstance(item, FunctionCallInput)):
        if is_call:
            calls = [_tool_call(item) for item in items if isinstance(item, FunctionCallInput)]
            messages.append(_message(role="assistant", tool_calls=calls))
        else:
            messages.extend(_chat_message(item) for item in items if not isinstance(item, FunctionCallInput))
    return messages


def continued(conversation: Sequence[ChatMessage], answer: AssistantMessage) -> list[ChatMessage]:
    """The conversation with the answer as its last turn: the next response's history."""
    content = None if answer.tool_calls and not answer.content else _chat_content(answer.content or "")
    return [*conversation, _message(role="assistant", content=content, tool_calls=answer.tool_calls)]


def _message(**fields: object) -> ChatMessage:
    return ChatMessage.model_validate(fields)


def _tool_call(item: FunctionCallInput) -> dict[str, Any]:
    return {
        "id": item.call_id,
        "type": "function",
        "function": {"name": item.name, "arguments": item.arguments},
    }


def _chat_message(item: MessageInput | FunctionCallOutputInput) -> ChatMessage:
    if isinstance(item, FunctionCallOutputInput):
        return _message(role="tool", tool_call_id=item.call_id, content=_chat_content(_output_text(item)))
    if isinstance(item.content, str):
        return _message(role=item.role, content=item.content)
    return _message(role=item.role, content=[_text_part(part.text) for part in item.content])


def _output_text(item: FunctionCallOutputInput) -> str:
    return item.output if isinstance(item.output, str) else "".join(part.text for part in item.output)


def _text_part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _chat_content(text: str) -> str | list[dict[str, str]]:
    """A chat's text content; an empty text (a function that printed nothing, an empty answer) is one
    empty part, since a chat's content string may not be empty."""
    return text or [_text_part("")]


def response_of(
    *,
    response_id: str,
    created_s: int,
    status: ResponseStatus,
    model: str,
    request: ResponseRequest,
    chat: ChatCompletion | None,
    error: tuple[str, str] | None,
) -> ResponseObject:
    """A response as OpenAI shows it: the stored request's options and, once completed, the chat's answer.
    An answer cut at max_output_tokens is `incomplete`, its partial output kept."""
    choice = chat.choices[0] if chat is not None and chat.choices else None
    cut = status == "completed" and choice is not None and choice.finish_reason == "length"
    text_format = request.text.format if request.text is not None else None
    return ResponseObject(
        id=response_id,
        created_at=created_s,
        status="incomplete" if cut else status,
        model=model,
        output=_output(response_id, choice, cut),
        usage=_usage(chat.usage) if chat is not None else None,
        error=ResponseError(code=_ERROR_CODES.get(error[0], "server_error"), message=error[1])
        if error
        else None,
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if cut else None,
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls is not False,
        previous_response_id=request.previous_response_id,
        temperature=request.temperature,
        top_p=request.top_p,
        text=TextConfig(format=text_format or PlainTextFormat(type="text")),
        tool_choice=request.tool_choice or "auto",
        tools=request.tools or [],
        background=request.in_background(),
        store=request.stores(),
        user=request.user,
    )


def _output(response_id: str, choice: ChatChoice | None, cut: bool) -> list[OutputItem]:
    """The answer's text as one message, then each call as a function_call item."""
    if choice is None:
        return []
    status: Literal["completed", "incomplete"] = "incomplete" if cut else "completed"
    answer = choice.message
    output: list[OutputItem] = []
    if answer.content or not answer.tool_calls:
        text = OutputText(text=answer.content or "")
        output.append(OutputMessage(id=item_id("msg", response_id, "out0"), status=status, content=[text]))
    for call in answer.tool_calls or ():
        place = f"out{len(output)}"
        output.append(
            FunctionCallItem(
                id=item_id("fc", response_id, place),
                call_id=call.id,
                name=call.function.name,
                arguments=call.function.arguments,
                status=status,
            )
        )
    return output


def _usage(usage: Usage) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=ResponseInputTokensDetails(cached_tokens=0),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=usage.total_tokens,
    )


def input_items_of(response_id: str, request: ResponseRequest) -> list[ListedItem]:
    """The request's own input items in the order sent, as OpenAI lists them (instructions and the
    previous responses' items are not among them)."""
    return [_listed(item, response_id, f"in{i}") for i, item in enumerate(request.input)]


def _listed(
    item: MessageInput | FunctionCallInput | FunctionCallOutputInput, rid: str, place: str
) -> ListedItem:
    status = item.status or "completed"
    if isinstance(item, FunctionCallInput):
        return FunctionCallItem(
            id=item_id("fc", rid, place),
            call_id=item.call_id,
            name=item.name,
            arguments=item.arguments,
            status=status,
        )
    if isinstance(item, FunctionCallOutputInput):
        output = (
            item.output if isinstance(item.output, str) else [InputText(text=p.text) for p in item.output]
        )
        return FunctionCallOutputItem(
            id=item_id("fco", rid, place), call_id=item.call_id, output=output, status=status
        )
    texts = [item.content] if isinstance(item.content, str) else [part.text for part in item.content]
    if item.role == "assistant":
        content = [OutputText(text=text) for text in texts]
        return OutputMessage(id=item_id("msg", rid, place), status=status, content=content)
    inputs = [InputText(text=text) for text in texts]
    return InputMessageItem(id=item_id("msg", rid, place), role=item.role, content=inputs, status=status)


def page_of(
    items: Sequence[ListedItem], *, after: str | None, limit: int, order: Literal["asc", "desc"]
) -> InputItemList:
    """One page of items (listed in the order sent): `desc` lists the newest first, `after` starts past
    that item (past the end when no item has that id), `limit` as InputItemsQuery bounds it."""
    ordered = list(reversed(items)) if order == "desc" else list(items)
    ids = [item.id for item in ordered]
    start = 0 if after is None else ids.index(after) + 1 if after in ids else len(ordered)
    page = ordered[start : start + limit]
    return InputItemList(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=start + limit < len(ordered),
    )
