"""The pure half of the OpenAI-compatible API: chat template, option checks, response shaping."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from contract.job_record import JobRecord
from frontdoor.openai_stream import ChunkFraming
from openai_api.answer_schemas import ChatCompletion, ChatCompletionChunk, Completion, CompletionChunk
from openai_api.format import (
    Answer,
    answer_from,
    chat_completion,
    completion,
    max_tokens,
    outcome_problem,
    render_chat,
)
from openai_api.schemas import ChatCompletionRequest, ChatMessage, CompletionRequest, TextPart


def job_fields(status: str = "COMPLETED", completion_tokens: int = 3, max_tokens: int = 16) -> dict[str, str]:
    fields = {
        "id": "0abfe04e-84ca-42bc-922f-4d62fd3b270f",
        "model": "gpu-sim",
        "status": status,
        "created_ms": "1700000000123",
        "max_tokens": str(max_tokens),
    }
    if status == "COMPLETED":
        total = 2 + completion_tokens
        usage = {"prompt_tokens": 2, "completion_tokens": completion_tokens, "total_tokens": total}
        fields["result"] = json.dumps({"text": "eerht ehT", "usage": usage})
    return fields


def job_record(status: str = "COMPLETED", completion_tokens: int = 3, max_tokens: int = 16) -> JobRecord:
    return JobRecord.of(job_fields(status, completion_tokens, max_tokens))


def test_a_chat_becomes_one_prompt_with_a_line_per_message_and_an_open_assistant_turn():
    messages = [
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="developer", content="No emoji."),
        ChatMessage(role="user", content=[TextPart(type="text", text=t) for t in ("Name ", "3.")]),
        ChatMessage(role="assistant", content="Red."),
        ChatMessage(role="user", content="More."),
    ]
    assert render_chat(messages) == (
        "System: You are terse.\nSystem: No emoji.\nUser: Name 3.\nAssistant: Red.\nUser: More.\nAssistant:"
    )


def test_max_completion_tokens_wins_and_16_is_the_default():
    chat = ChatCompletionRequest(
        model="m", messages=[ChatMessage(role="user", content="x")], max_tokens=5, max_completion_tokens=7
    )
    assert max_tokens(chat) == 7
    assert max_tokens(CompletionRequest(model="m", prompt="x", max_tokens=5)) == 5
    assert max_tokens(CompletionRequest(model="m", prompt="x")) == 16


def test_neutral_values_of_unsupported_options_are_accepted():
    CompletionRequest(
        model="m",
        prompt="x",
        n=1,
        best_of=1,
        echo=False,
        stop=[],
        presence_penalty=0,
        frequency_penalty=0.0,
        logit_bias={},
        temperature=0.7,
        top_p=0.9,
        seed=3,
        user="u-1",
    )
    ChatCompletionRequest(model="m", messages=[ChatMessage(role="user", content="x")], logprobs=False, n=1)


def test_a_completed_job_becomes_an_openai_completion():
    body = completion(answer_from(job_record())).model_dump(mode="json")
    assert body == {
        "id": "cmpl-0abfe04e-84ca-42bc-922f-4d62fd3b270f",
        "object": "text_completion",
        "created": 1700000000,
        "model": "gpu-sim",
        "choices": [{"index": 0, "text": "eerht ehT", "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
    }
    Completion.model_validate(body)


def test_a_completed_job_becomes_a_chat_completion_cut_at_max_tokens():
    body = chat_completion(answer_from(job_record(completion_tokens=4, max_tokens=4))).model_dump(mode="json")
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "eerht ehT"}
    assert body["choices"][0]["finish_reason"] == "length"
    ChatCompletion.model_validate(body)


def events(text: str) -> list[str]:
    assert text.endswith("\n\n")
    return [block.removeprefix("data: ") for block in text[:-2].split("\n\n")]


def buffered(kind: Literal["chat", "completion"], answer: Answer, include_usage: bool) -> str:
    """A finished answer as a buffered stream sends it: the whole text, then the end."""
    chunks = ChunkFraming(kind, answer.job_id, answer.model, answer.created_s, include_usage)
    return chunks.delta(answer.text) + chunks.end(answer.finish_reason, answer.usage)


def test_a_stream_is_the_text_then_the_finish_reason_then_done():
    stream = buffered("chat", answer_from(job_record()), include_usage=False)
    data = events(stream)
    assert data[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(d) for d in data[:-1]]
    assert [c.choices[0].delta.content for c in chunks] == ["eerht ehT", None]
    assert [c.choices[0].finish_reason for c in chunks] == [None, "stop"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.usage is None for c in chunks)


def test_include_usage_adds_a_last_chunk_with_the_counts_and_no_choices():
    data = events(buffered("completion", answer_from(job_record()), include_usage=True))
    chunks = [CompletionChunk.model_validate_json(d) for d in data[:-1]]
    assert [c.choices[0].text for c in chunks[:2]] == ["eerht ehT", ""]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 5


def test_a_job_still_running_after_the_wait_is_a_504_naming_it():
    problem = outcome_problem(job_record(status="RUNNING"), waited_s=25)
    assert problem is not None
    assert (problem.status, problem.code, problem.job_id) == (504, "timeout", job_fields()["id"])
    assert f"/results/{problem.job_id}" in problem.message


@pytest.mark.parametrize(
    ("code", "status"), [("model_error", 400), ("deadline_exceeded", 504), ("max_attempts_exceeded", 502)]
)
def test_a_failed_job_maps_to_a_status_by_its_error_code(code: str, status: int):
    fields = {**job_fields(status="FAILED"), "error_code": code, "error_message": "why"}
    problem = outcome_problem(JobRecord.of(fields), waited_s=25)
    assert problem is not None
    assert (problem.status, problem.code, problem.message) == (status, code, "why")


def test_a_cancelled_job_is_a_409_and_not_a_server_error():
    fields = {**job_fields(status="CANCELLED"), "error_code": "cancelled", "error_message": "the client left"}
    problem = outcome_problem(JobRecord.of(fields), waited_s=25)
    assert problem is not None
    assert (problem.status, problem.code, problem.message) == (409, "cancelled", "the client left")


def test_the_engines_finish_reason_wins_over_counting_tokens():
    fields = job_fields(completion_tokens=16, max_tokens=16)
    assert answer_from(JobRecord.of(fields)).finish_reason == "length"
    result = json.loads(fields["result"])
    stopped = {
        **fields,
        "result": json.dumps({**result, "finish_reason": "stop"}),
    }  # a stop string, at the limit
    assert answer_from(JobRecord.of(stopped)).finish_reason == "stop"


def test_a_completed_job_is_no_problem():
    assert outcome_problem(job_record(), waited_s=25) is None
