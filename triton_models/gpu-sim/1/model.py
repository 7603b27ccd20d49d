"""gpu-sim: answers each prompt with the prompt reversed, after the time a GPU batch would take.

Tensor contract (shared by every Synapse model):
  inputs   PROMPT            BYTES [b, 1]   UTF-8 prompt
           MAX_TOKENS        INT32 [b, 1]   optional, tokens to generate
  outputs  TEXT              BYTES [b, 1]   the answer
           PROMPT_TOKENS     INT32 [b, 1]   tokens read
           COMPLETION_TOKENS INT32 [b, 1]   tokens written
           ERROR             BYTES [b, 1]   empty, or why this one prompt failed

Fault markers, test fixtures: where the config turns fault injection on
(`parameters: { key: "fault_injection" value: { string_value: "true" } }`), a prompt starting with
`!fail` fails on its own and one starting with `!crash` fails its whole request. Only there: the
served config leaves fault injection off, and these prompts are answered like any other. The tests
serve a copy of the model repository with it on (tests/models.py).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

# Triton's stub runs Python isolated (PYTHONPATH is ignored); the local worker names the project's
# site-packages here. In the worker image the packages are installed system-wide and this is unset.
sys.path[:0] = [p for p in os.environ.get("SYNAPSE_MODEL_PYTHONPATH", "").split(os.pathsep) if p]

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

FAIL_MARKER = "!fail"  # with fault injection on, a prompt starting with this fails on its own
CRASH_MARKER = "!crash"  # with fault injection on, this fails its whole request, as a broken GPU would


def batch_seconds(batch_size: int, base_ms: float, per_item_ms: float) -> float:
    """T(b) = base + per_item * b, the latency profile of the GPU this model stands in for."""
    return (base_ms + per_item_ms * batch_size) / 1000.0


def fault_injection(params: dict[str, Any]) -> bool:
    """Whether the model config's `fault_injection` parameter turns the fault markers on (only "true")."""
    return str(params.get("fault_injection", {}).get("string_value", "")).strip().lower() == "true"


def answer(prompt: str, *, faults: bool) -> tuple[str, str]:
    """The reversed prompt, or, with fault injection on, an error for a prompt that asks to fail."""
    if faults and prompt.startswith(FAIL_MARKER):
        return "", f"prompt rejected by model: starts with {FAIL_MARKER!r}"
    return prompt[::-1], ""


def crashes(prompts: list[str], *, faults: bool) -> bool:
    """Whether, with fault injection on, a prompt of the request asks for a device fault."""
    return faults and any(p.startswith(CRASH_MARKER) for p in prompts)


def crashed() -> Any:
    return pb_utils.InferenceResponse(
        error=pb_utils.TritonError(f"simulated device fault ({CRASH_MARKER!r} prompt)")
    )


def as_bytes_column(values: list[str]) -> np.ndarray:
    return np.array([[v.encode("utf-8")] for v in values], dtype=np.object_)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        params = json.loads(args["model_config"]).get("parameters", {})
        self.base_ms = float(params.get("base_ms", {}).get("string_value", "20"))
        self.per_item_ms = float(params.get("per_item_ms", {}).get("string_value", "0.5"))
        self.faults = fault_injection(params)
        # Start-up objects frozen out of the collector, as in tiny-gpt2: no full-collection pause lands
        # inside a simulated batch.
        gc.collect()
        gc.freeze()

    def execute(self, requests: list[Any]) -> list[Any]:
        prompts = [
            [
                p[0].decode("utf-8", "replace")
                for p in pb_utils.get_input_tensor_by_name(r, "PROMPT").as_numpy()
            ]
            for r in requests
        ]
        # Requests Triton hands over together run as one GPU batch: one sleep for all of them.
        time.sleep(batch_seconds(sum(len(p) for p in prompts), self.base_ms, self.per_item_ms))
        return [
            crashed() if crashes(batch, faults=self.faults) else self._respond(batch) for batch in prompts
        ]

    def _respond(self, prompts: list[str]) -> Any:
        texts, errors = zip(*(answer(p, faults=self.faults) for p in prompts), strict=True)
        prompt_tokens = np.array([[len(p.split())] for p in prompts], dtype=np.int32)
        completion_tokens = np.array([[len(t.split())] for t in texts], dtype=np.int32)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("TEXT", as_bytes_column(list(texts))),
                pb_utils.Tensor("PROMPT_TOKENS", prompt_tokens),
                pb_utils.Tensor("COMPLETION_TOKENS", completion_tokens),
                pb_utils.Tensor("ERROR", as_bytes_column(list(errors))),
            ]
        )
