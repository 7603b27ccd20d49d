"""The front door and the synapse_llm engine refuse the same sampling requests (contract/engine_limits.py):
a request the front door takes never fails on the worker for a limit, and the front door refuses nothing
the engine would run. Each limit is tried at its edges on both sides: the job route's `Sampling`, the
OpenAI routes' request bodies, and the engine's own parser, imported from the backend's folder as
Triton imports it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from contract.engine_limits import BIAS_LIMIT, MAX_CHOICES, MAX_TOP_LOGPROBS, PENALTY_LIMIT
from contract.jobs import Sampling as JobSampling
from openai_api.sampling import Sampling
from openai_api.schemas import ChatCompletionRequest, CompletionRequest
from tests.models import model_module
from worker_image.triton_server import PROJECT_BACKENDS, model_python_path

rules: Any = model_module("tiny-gpt2", "engine_rules")
CONTEXT = 256  # tiny-gpt2's max_model_len
CHAT = {"model": "tiny-gpt2", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "tiny-gpt2", "prompt": "hi"}

# (engine parameter, value, accepted): at each limit, just past it, on both sides.
EDGES = [
    *[("n", n, 1 <= n <= MAX_CHOICES) for n in (0, 1, MAX_CHOICES, MAX_CHOICES + 1)],
    *[("logprobs", k, 0 <= k <= MAX_TOP_LOGPROBS) for k in (-1, 0, MAX_TOP_LOGPROBS, MAX_TOP_LOGPROBS + 1)],
    *[
        (name, sign * size, size <= PENALTY_LIMIT)
        for name in ("presence_penalty", "frequency_penalty")
        for sign in (-1, 1)
        for size in (PENALTY_LIMIT, PENALTY_LIMIT + 0.01)
    ],
    *[
        ("logit_bias", {"7": sign * size}, size <= BIAS_LIMIT)
        for sign in (-1, 1)
        for size in (BIAS_LIMIT, BIAS_LIMIT + 0.5)
    ],
    ("mirostat_tau", 5.0, False),  # a sampling parameter neither side knows
]


def engine_accepts(parameters: dict[str, Any]) -> bool:
    try:
        rules.parse_sampling_parameters(json.dumps(parameters), CONTEXT)
    except rules.RequestError:
        return False
    return True


def front_door_accepts(model: type[BaseModel], body: dict[str, Any]) -> bool:
    try:
        model.model_validate_json(json.dumps(body))
    except ValidationError:
        return False
    return True


def front_door_bodies(name: str, value: Any) -> dict[str, tuple[type[BaseModel], dict[str, Any]]]:
    """The request each route would carry this engine parameter in, by route. Chat asks for k likeliest
    tokens as `top_logprobs`; the legacy completions route keeps OpenAI's own, narrower limit of 5."""
    if name == "logprobs":
        return {
            "POST /async-infer": (Sampling, {"logprobs": value}),
            "POST /v1/chat/completions": (
                ChatCompletionRequest,
                {**CHAT, "logprobs": True, "top_logprobs": value},
            ),
        }
    return {
        "POST /async-infer": (Sampling, {name: value}),
        "POST /v1/chat/completions": (ChatCompletionRequest, {**CHAT, name: value}),
        "POST /v1/completions": (CompletionRequest, {**COMPLETION, name: value}),
    }


@pytest.mark.parametrize(
    ("name", "value", "accepted"), EDGES, ids=[f"{n}={json.dumps(v)}" for n, v, _ in EDGES]
)
def test_the_front_door_and_the_engine_accept_and_refuse_the_same_edges(
    name: str, value: Any, accepted: bool
):
    assert engine_accepts({name: value}) is accepted, f"the engine on {name}={value}"
    for route, (model, body) in front_door_bodies(name, value).items():
        assert front_door_accepts(model, body) is accepted, f"{route} on {name}={value}"


def engine_supported() -> list[str]:
    """The sampling parameters the engine says it supports, in its refusal of one it does not."""
    with pytest.raises(rules.RequestError) as refused:
        rules.parse_sampling_parameters('{"mirostat_tau": 5}', CONTEXT)
    return str(refused.value).split("this model supports ", 1)[1].split(", ")


# A value the engine takes for each option a job can carry; an option added to the job without one here
# fails the test below by name.
EVERY_OPTION: dict[str, Any] = {
    "temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": 7, "stop": ("end",), "n": 2,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"7": 1.0}, "logprobs": 2,
    "structured_outputs": {"json_object": True},
}  # fmt: skip


def test_a_job_carries_exactly_the_sampling_parameters_the_engine_takes():
    job = JobSampling(**{field.name: EVERY_OPTION[field.name] for field in dataclasses.fields(JobSampling)})
    options = job.engine_options(max_tokens=8)
    assert sorted(options) == sorted(engine_supported())
    assert set(job.stored()) == set(options) - {"max_tokens"}  # the job keeps its token budget apart
    params = rules.parse_sampling_parameters(json.dumps(options), CONTEXT)
    assert (params.max_tokens, params.n, params.logprobs, params.stop, params.logit_bias) == (
        8, 2, 2, ("end",), ((7, 1.0),),
    )  # fmt: skip
    assert set(Sampling.model_fields) == set(options) - {"max_tokens"}  # the job route takes each one


def test_the_engine_reads_its_limits_in_a_python_that_has_only_the_path_the_local_triton_gives_it():
    """Triton's stub adds SYNAPSE_MODEL_PYTHONPATH to sys.path by hand, so no .pth file runs there (an
    editable install's import hook is one); `-S` starts a Python the same way."""
    code = "import sys; sys.path[:0] = sys.argv[1:]; import engine_rules; print(engine_rules.MAX_CHOICES)"
    paths = [*model_python_path(), str(PROJECT_BACKENDS / "synapse_llm")]
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *paths],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(MAX_CHOICES)
