"""minilm: sentence embeddings (all-MiniLM-L6-v2, 384 dimensions) for the embeddings API.

Tensor contract:
  inputs   PROMPT        BYTES [b, 1]    UTF-8 text
  outputs  EMBEDDING     FP32  [b, 384]  unit-length vector (zeros where ERROR is set)
           PROMPT_TOKENS INT32 [b, 1]    tokens the model read, after truncation ([CLS] and [SEP] count)
           TRUNCATED     BOOL  [b, 1]    the text was longer than the window (`max_model_len`) and was cut
           ERROR         BYTES [b, 1]    empty, or why this one text failed (not UTF-8)

The manager batches (there is no dynamic batching here), so Triton hands `execute` one request at a
time; should it hand several, they run in one forward pass all the same (embedder.py: what
sentence-transformers computes, in float32 on the CPU or on the GPU Triton places the instance on).
A failing pass fails each of its requests with an error response.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

# Triton's stub runs Python isolated (PYTHONPATH is ignored); the local worker names the project's
# site-packages here. In the worker image the packages are installed system-wide and this is unset.
sys.path[:0] = [p for p in os.environ.get("SYNAPSE_MODEL_PYTHONPATH", "").split(os.pathsep) if p]

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import torch  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from embedder import Embedder, Embeddings  # noqa: E402


def parameter(params: dict[str, Any], name: str) -> str:
    value = params.get(name, {}).get("string_value")
    if value is None:
        raise ValueError(f"minilm: config.pbtxt has no parameter {name!r}")
    return str(value)


def instance_device(args: dict[str, Any]) -> torch.device:
    """The device Triton placed this instance on: a GPU that torch cannot use fails the load rather than
    fall back to the CPU, which would serve far slower while the GPU is billed."""
    if args.get("model_instance_kind") != "GPU":
        return torch.device("cpu")
    gpu = int(args.get("model_instance_device_id", 0))
    if not torch.cuda.is_available() or gpu >= torch.cuda.device_count():
        raise RuntimeError(
            f"minilm: Triton placed this instance on GPU {gpu}, but torch {torch.__version__} (CUDA "
            f"{torch.version.cuda}) sees {torch.cuda.device_count()} usable GPUs"
        )
    return torch.device("cuda", gpu)


def decode(texts: list[bytes]) -> tuple[list[str], list[str]]:
    """Each text as a string ("" where it fails), and each one's error ("" where it does not)."""
    strings, errors = [], []
    for raw in texts:
        try:
            strings.append(raw.decode("utf-8"))
            errors.append("")
        except UnicodeDecodeError as exc:
            strings.append("")
            errors.append(f"the text is not valid UTF-8: {exc}")
    return strings, errors


def as_bytes_column(values: list[str]) -> npt.NDArray[np.object_]:
    return np.array([[v.encode("utf-8")] for v in values], dtype=np.object_)


def error_response(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        params = json.loads(args["model_config"]).get("parameters", {})
        checkpoint = Path(parameter(params, "checkpoint"))
        if not checkpoint.is_absolute():
            checkpoint = Path(args["model_repository"]) / checkpoint
        self.embedder = Embedder(checkpoint, instance_device(args))
        window = int(parameter(params, "max_model_len"))
        if window != self.embedder.window:  # the manager holds texts to max_model_len: the two must agree
            raise ValueError(
                f"minilm: max_model_len {window} in config.pbtxt, but the checkpoint's window is "
                f"{self.embedder.window} (sentence_bert_config.json)"
            )
        self.embedder.embed(["warm-up"])  # the first pass's one-off costs are not a client's
        # torch and transformers leave objects that a full collection would walk inside some batch;
        # frozen, they are never walked again.
        gc.collect()
        gc.freeze()

    def execute(self, requests: list[Any]) -> list[Any]:
        columns = [
            [t[0] for t in pb_utils.get_input_tensor_by_name(r, "PROMPT").as_numpy()] for r in requests
        ]
        texts, errors = decode([t for column in columns for t in column])
        good = [i for i, e in enumerate(errors) if not e]
        try:
            embeddings = self.embedder.embed([texts[i] for i in good])
        except Exception as exc:  # every request of the pass failed with it
            pb_utils.Logger.log_error(f"minilm: forward pass: {traceback.format_exc()}")
            return [error_response(f"the model failed: {exc}") for _ in requests]
        vectors, tokens, truncated = self._scatter(embeddings, good, len(texts))
        responses, start = [], 0
        for column in columns:
            end = start + len(column)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("EMBEDDING", vectors[start:end]),
                        pb_utils.Tensor("PROMPT_TOKENS", tokens[start:end]),
                        pb_utils.Tensor("TRUNCATED", truncated[start:end]),
                        pb_utils.Tensor("ERROR", as_bytes_column(errors[start:end])),
                    ]
                )
            )
            start = end
        return responses

    def _scatter(
        self, embeddings: Embeddings, rows: list[int], total: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
        """The embedded texts' outputs at their rows of the whole batch; failed texts' rows stay empty."""
        vectors = np.zeros((total, self.embedder.dimensions), dtype=np.float32)
        tokens = np.zeros((total, 1), dtype=np.int32)
        truncated = np.zeros((total, 1), dtype=np.bool_)
        vectors[rows] = embeddings.vectors
        tokens[rows, 0] = embeddings.tokens
        truncated[rows, 0] = embeddings.truncated
        return vectors, tokens, truncated
