"""How the manager reads a generative model's stream of responses: deltas in order, the end at the
first finish reason, and an error response told apart as the request's fault or the worker's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from manager.triton import BatchError, _follow


class Response:
    """What tritonclient's InferResult offers: outputs by name as numpy arrays."""

    def __init__(self, text: str, tokens: int, finish: str = "None", prompt: int = 3) -> None:
        self._outputs = {
            "text_output": np.array([text.encode()], dtype=np.object_),
            "num_output_tokens": np.array([tokens], dtype=np.uint32),
            "num_input_tokens": np.array(prompt, dtype=np.uint32),
            "finish_reason": np.array([finish.encode()], dtype=np.object_),
        }

    def as_numpy(self, name: str) -> Any:
        return self._outputs.get(name)


async def stream(*items: tuple[Any, Any]) -> AsyncIterator[tuple[Any, Any]]:
    for item in items:
        yield item


async def test_deltas_arrive_in_order_and_the_first_finish_reason_ends_the_generation():
    seen: list[tuple[str, int]] = []
    responses = stream(
        (Response("The", 1), None), (Response(" three", 1), None), (Response("", 1, "length"), None)
    )
    generated = await _follow(responses, lambda text, n: seen.append((text, n)), 5.0)
    assert seen == [("The", 1), (" three", 1), ("", 1)]
    assert (generated.text, generated.completion_tokens, generated.prompt_tokens) == ("The three", 3, 3)
    assert generated.finish_reason == "length"


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
        await _follow(responses, lambda text, n: None, 5.0)
    assert failed.value.worker_fault is worker_fault
    assert str(failed.value) == message


async def test_a_stream_that_ends_without_a_finish_reason_is_the_workers_fault():
    with pytest.raises(BatchError) as failed:
        await _follow(stream((Response("The", 1), None)), lambda text, n: None, 5.0)
    assert failed.value.worker_fault
