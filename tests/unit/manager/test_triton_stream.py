"""How the manager reads a generative model's stream of responses: deltas in order, the end once every
choice has its finish reason, log-probabilities carried along, and an error response told apart as the
request's fault or the worker's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from manager.triton import BatchError, Gaps, _follow

GAPS = Gaps(first=5.0, between=5.0)


class Response:
    """What tritonclient's InferResult offers: outputs by name as numpy arrays, an element per choice."""

    def __init__(
        self, text: str | list[str], tokens: int | list[int], finish: str | list[str] = "None",
        prompt: int = 3, logprobs: list[str] | None = None,
    ) -> None:  # fmt: skip
        texts, counts = (
            (text if isinstance(text, list) else [text]),
            (tokens if isinstance(tokens, list) else [tokens]),
        )
        finishes = finish if isinstance(finish, list) else [finish]
        self._outputs = {
            "text_output": np.array([t.encode() for t in texts], dtype=np.object_),
            "num_output_tokens": np.array(counts, dtype=np.uint32),
            "num_input_tokens": np.array(prompt, dtype=np.uint32),
            "finish_reason": np.array([f.encode() for f in finishes], dtype=np.object_),
        }
        if logprobs is not None:
            self._outputs["logprobs"] = np.array([lp.encode() for lp in logprobs], dtype=np.object_)

    def as_numpy(self, name: str) -> Any:
        return self._outputs.get(name)


async def stream(*items: tuple[Any, Any]) -> AsyncIterator[tuple[Any, Any]]:
    for item in items:
        yield item


async def test_deltas_arrive_in_order_and_the_first_finish_reason_ends_the_generation():
    seen: list[tuple[int, str, int]] = []
    responses = stream(
        (Response("The", 1), None), (Response(" three", 1), None), (Response("", 1, "length"), None)
    )
    generated = await _follow(responses, lambda i, text, n, lp: seen.append((i, text, n)), GAPS)
    assert seen == [(0, "The", 1), (0, " three", 1), (0, "", 1)]
    (choice,) = generated.choices
    assert (choice.text, generated.completion_tokens, generated.prompt_tokens) == ("The three", 3, 3)
    assert choice.finish_reason == "length" and choice.logprobs is None


async def test_every_choice_runs_to_its_own_finish_and_usage_counts_them_all():
    seen: list[tuple[int, str, list[Any]]] = []
    first = '[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]'
    responses = stream(
        (Response(["a", ""], [1, 0], logprobs=[first, "[]"]), None),
        (Response(["", "b"], [1, 1], ["stop", "None"], logprobs=["[]", "[]"]), None),
        (Response(["", "c"], [0, 1], ["None", "length"], logprobs=["[]", "[]"]), None),
    )
    generated = await _follow(responses, lambda i, text, n, lp: seen.append((i, text, lp)), GAPS)
    assert [(c.text, c.finish_reason, c.completion_tokens) for c in generated.choices] == [
        ("a", "stop", 2), ("bc", "length", 2),
    ]  # fmt: skip
    assert generated.completion_tokens == 4
    assert generated.choices[0].logprobs == [
        {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}
    ]
    assert seen[0][0] == 0 and seen[0][2][0]["token"] == "a"


@pytest.mark.parametrize(
    ("message", "worker_fault"),
    [
        ("invalid request: max_tokens 300 plus the prompt's 12 tokens is over the context of 256", False),
        ("Request for unknown model: 'tiny-gpt2' is not found", True),
    ],
)
async def test_an_error_response_is_the_requests_fault_only_when_the_engine_refused_it(
    message: str, worker_fault: bool
):
    responses = stream((None, InferenceServerException(msg=message)))
    with pytest.raises(BatchError) as failed:
        await _follow(responses, lambda i, text, n, lp: None, GAPS)
    assert failed.value.worker_fault is worker_fault
    assert str(failed.value) == message


async def test_a_stream_that_ends_without_a_finish_reason_is_the_workers_fault():
    with pytest.raises(BatchError) as failed:
        await _follow(stream((Response("The", 1), None)), lambda i, text, n, lp: None, GAPS)
    assert failed.value.worker_fault


async def late(delays: list[float], *items: tuple[Any, Any]) -> AsyncIterator[tuple[Any, Any]]:
    for delay, item in zip(delays, items, strict=True):
        await asyncio.sleep(delay)
        yield item


async def test_the_first_response_may_take_the_first_gap_and_later_ones_only_the_gap_between():
    gaps = Gaps(first=2.0, between=0.1)
    first_late = late([0.3, 0.0], (Response("The", 1), None), (Response(" end", 1, "stop"), None))
    generated = await _follow(first_late, lambda i, text, n, lp: None, gaps)  # queued in the engine: fine
    assert generated.choices[0].text == "The end"

    second_late = late([0.0, 0.3], (Response("The", 1), None), (Response(" end", 1, "stop"), None))
    with pytest.raises(TimeoutError):  # a step that long mid-answer is a hang
        await _follow(second_late, lambda i, text, n, lp: None, gaps)
