# mypy: ignore-errors
"""gpt2-static: batched greedy generation with any GPT-2 family checkpoint (tiny, distilgpt2, gpt2).

The static request-batching model that triton_models/tiny-gpt2 was before its continuous-batching
engine, kept unchanged for `synapse bench llm`; like triton_models/, it runs inside Triton and mypy
leaves it alone.

Tensor contract: the same as gpu-sim (see triton_models/gpu-sim/1/model.py). Prompts in one batch
are left-padded and generated together; each row stops at its own MAX_TOKENS or end of text.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

# Triton's stub runs Python isolated (PYTHONPATH is ignored); the local worker names the project's
# site-packages here. In the worker image the packages are installed system-wide and this is unset.
sys.path[:0] = [p for p in os.environ.get("SYNAPSE_MODEL_PYTHONPATH", "").split(os.pathsep) if p]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

DEFAULT_MAX_TOKENS = 16


def requested_tokens(request: Any, batch: int, limit: int) -> list[int]:
    tensor = pb_utils.get_input_tensor_by_name(request, "MAX_TOKENS")
    if tensor is None:
        return [DEFAULT_MAX_TOKENS] * batch
    return [max(1, min(int(v[0]), limit)) for v in tensor.as_numpy()]


def trim(tokens: list[int], limit: int, eos_id: int | None) -> list[int]:
    """A row's own answer: at most `limit` tokens, cut at end of text."""
    tokens = tokens[:limit]
    if eos_id is not None and eos_id in tokens:
        tokens = tokens[: tokens.index(eos_id)]
    return tokens


def bytes_column(values: list[str]) -> np.ndarray:
    return np.array([[v.encode("utf-8")] for v in values], dtype=np.object_)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        params = json.loads(args["model_config"]).get("parameters", {})
        checkpoint = Path(params.get("checkpoint", {}).get("string_value", "checkpoint"))
        if not checkpoint.is_absolute():
            checkpoint = Path(args["model_repository"]) / checkpoint
        self.limit = int(params.get("max_new_tokens_limit", {}).get("string_value", "256"))
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.tokenizer.padding_side = "left"
        self.tokenizer.truncation_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint).to(self.device).eval()
        self.context = int(self.model.config.max_position_embeddings)
        # torch and transformers leave ~200,000 objects that a full collection walks in ~95 ms, a pause
        # in the middle of some batch; frozen, they are never walked again.
        gc.collect()
        gc.freeze()

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._generate(r) for r in requests]

    def _generate(self, request: Any) -> Any:
        prompts = [
            p[0].decode("utf-8", "replace")
            for p in pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
        ]
        wanted = requested_tokens(request, len(prompts), min(self.limit, self.context // 2))
        new_tokens = max(wanted)
        encoded = self.tokenizer(
            prompts, return_tensors="pt", padding=True, truncation=True, max_length=self.context - new_tokens
        ).to(self.device)
        with torch.inference_mode():
            output = self.model.generate(
                **encoded,
                max_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        generated = output[:, encoded["input_ids"].shape[1] :].tolist()
        rows = [trim(g, n, self.tokenizer.eos_token_id) for g, n in zip(generated, wanted, strict=True)]
        texts = [self.tokenizer.decode(r, skip_special_tokens=True) for r in rows]
        prompt_tokens = encoded["attention_mask"].sum(dim=1).tolist()
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("TEXT", bytes_column(texts)),
                pb_utils.Tensor("PROMPT_TOKENS", np.array([[n] for n in prompt_tokens], dtype=np.int32)),
                pb_utils.Tensor("COMPLETION_TOKENS", np.array([[len(r)] for r in rows], dtype=np.int32)),
                pb_utils.Tensor("ERROR", bytes_column([""] * len(prompts))),
            ]
        )
