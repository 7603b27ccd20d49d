"""A client of an engine model in a real Triton, as the manager drives Triton's vLLM-backend contract:
the request's tensors, and one unstreamed answer read off its gRPC stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient

CLOSE_TIMEOUT_S = 30.0  # for Triton to end a stream whose answer is in, once the client half-closes


def inputs(prompt: str, params: dict[str, Any], stream: bool, flags: dict[str, bool]) -> list[Any]:
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    sampling = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
    sampling.set_data_from_numpy(np.array([json.dumps(params).encode()], dtype=np.object_))
    tensors = [text, sampling]
    for name, value in {"stream": stream, **flags}.items():
        tensor = grpcclient.InferInput(name, [1], "BOOL")
        tensor.set_data_from_numpy(np.array([value], dtype=bool))
        tensors.append(tensor)
    return tensors


async def whole_answer(
    client: grpcclient.InferenceServerClient, model: str, prompt: str, params: dict[str, Any]
) -> tuple[str, int]:
    """An unstreamed request's text (without the prompt) and its prompt's token count: its one response.

    The stream then ends as the manager ends its own (manager/triton.py): the client half-closes and
    reads to the end, rather than cancel a call whose answer is in. A cancel racing the answer's
    release is not what Triton sees from the platform, and Triton's exit at the end of the test
    sometimes waited past its timeout after one."""
    sent = asyncio.Event()

    async def requests() -> AsyncIterator[dict[str, Any]]:
        flags = {"exclude_input_in_output": True, "return_num_input_tokens": True}
        yield {"model_name": model, "inputs": inputs(prompt, params, False, flags)}
        await sent.wait()

    responses = client.stream_infer(requests())
    answer: tuple[str, int] | None = None
    try:
        async for result, error in responses:
            if error is not None:
                raise RuntimeError(f"{model} refused the request: {error.message()}")
            text = result.as_numpy("text_output").reshape(-1)[0].decode()
            answer = text, int(result.as_numpy("num_input_tokens").reshape(-1)[0])
            break
        if answer is None:
            raise RuntimeError(f"{model} closed the stream without an answer")
        sent.set()
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            async for _ in responses:  # a graceful close: Triton ends the stream
                pass
        return answer
    except BaseException:
        responses.cancel()
        raise
    finally:
        sent.set()
