"""synapse_llm: a decoupled, streaming, continuous-batching engine for any causal LM transformers loads.

A Triton Python-based backend: a model folder says `backend: "synapse_llm"` and names its checkpoint;
this file serves every such model (tiny-gpt2, smollm2-135m-instruct), as Triton's vLLM backend serves
the folders that name it.

Tensor contract: Triton's vLLM backend's (decoupled, max_batch_size 0, one prompt per request; the
backend adds it to a model's config, auto_complete_config below):
  inputs   text_input               BYTES [1]   UTF-8 prompt
           stream                   BOOL  [1]   optional: a response per engine step and choice, each
                                                with the new text only; else one response at the end
           sampling_parameters      BYTES [1]   optional JSON, vLLM's SamplingParams names: max_tokens
                                                (16), temperature (1; 0 is greedy), top_p (1), top_k
                                                (-1/0: off), seed, stop (a string or a list), n (1),
                                                logprobs (k), presence_penalty, frequency_penalty,
                                                logit_bias ({"id": bias}), structured_outputs ({"json":
                                                schema} or {"json_object": true}); numbers or strings
                                                of numbers
           exclude_input_in_output  BOOL  [1]   optional: a non-streamed answer starts with the
                                                prompt unless true; streaming refuses false
           return_finish_reason     BOOL  [1]   optional: send finish_reason
           return_num_input_tokens  BOOL  [1]   optional: send num_input_tokens
           return_num_output_tokens BOOL  [1]   optional: send num_output_tokens
  outputs  an element per choice (n), except num_input_tokens:
           text_output              BYTES [-1]  the text (streamed: this response's new text)
           finish_reason            BYTES [-1]  "stop" (EOS or a stop string) or "length" on the
                                                response that ends the choice, "None" otherwise
           num_input_tokens         UINT32 [1]  prompt tokens
           num_output_tokens        UINT32 [-1] generated tokens in this response (EOS counts, as in
                                                vLLM; after a stop string, none); their sum is the usage
           logprobs                 BYTES [-1]  when sampling_parameters ask for them: JSON, OpenAI's
                                                chat `logprobs.content` entries of this response's tokens
The last response carries TRITONSERVER_RESPONSE_COMPLETE_FINAL. A refused request gets one error response
starting "invalid request: "; a request Triton reports cancelled leaves the engine at once and gets a
CANCELLED error; an engine failure fails the requests it held and the engine is rebuilt.

The parts, one module each in this folder (Triton puts it on `sys.path`, so they import each other by
name); this file is the entry Triton calls, and leaves the work to them:
  engine_rules.py       the pure rules: the config's settings, the sampling parameters and their limits
  engine_intake.py      a request's inputs read and checked, each choice's sampler row
  engine_lifecycle.py   the checkpoint, HF's continuous batching, the dispatcher thread, rebuilds
  engine_stream.py      what each engine step sends: responses, log-probabilities, cancellation, metrics
  engine_generation.py  a choice's progress: incremental detokenisation, stop strings, the output tensors
  engine_sampler.py     the engine's one logits processor
  engine_prefix_cache.py what the prefix cache (HF's block sharing) finds and evicts, as metrics

Sampling (engine_sampler.py): HF CB decodes greedily and the engine's one logits processor picks each
row's token: argmax for greedy (temperature 0, never passed to HF, where it would kill the engine for
every request), else temperature, top-k and top-p for the rows that ask, and an inverse-CDF draw at a hash
of (seed, position): the same seed gives the same text in any batch; no seed, a random one.
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
# site-packages and the folder that holds its `contract` package here (engine_rules.py reads the engine's
# limits from contract.engine_limits). In the worker image the packages are installed system-wide and
# this is unset.
sys.path[:0] = [p for p in os.environ.get("SYNAPSE_MODEL_PYTHONPATH", "").split(os.pathsep) if p]

from engine_rules import THREAD_ENVIRONMENT  # noqa: E402

for _name, _value in THREAD_ENVIRONMENT.items():  # before torch loads OpenMP (engine_rules says why)
    os.environ.setdefault(_name, _value)

import triton_python_backend_utils as pb_utils  # noqa: E402
from engine_intake import Intake  # noqa: E402
from engine_lifecycle import Engine, instance_device  # noqa: E402
from engine_rules import EngineSettings, RequestError  # noqa: E402
from engine_stream import FINAL, error_response  # noqa: E402

INPUTS = (  # name, type, optional: each of shape [1]
    ("text_input", "TYPE_STRING", False),
    ("stream", "TYPE_BOOL", True),
    ("sampling_parameters", "TYPE_STRING", True),
    ("exclude_input_in_output", "TYPE_BOOL", True),
    ("return_finish_reason", "TYPE_BOOL", True),
    ("return_num_input_tokens", "TYPE_BOOL", True),
    ("return_num_output_tokens", "TYPE_BOOL", True),
)
OUTPUTS = (  # name, type, dims
    ("text_output", "TYPE_STRING", [-1]),
    ("finish_reason", "TYPE_STRING", [-1]),
    ("num_input_tokens", "TYPE_UINT32", [1]),
    ("num_output_tokens", "TYPE_UINT32", [-1]),
    ("logprobs", "TYPE_STRING", [-1]),
)


class TritonPythonModel:
    """What Triton calls: the model's config completed, the engine started, requests taken, unloaded."""

    @staticmethod
    def auto_complete_config(config: Any) -> Any:
        """The engine's tensor contract (above), so a model folder states only what is its own: name,
        backend, decoupled (the model catalog reads it there), instances and the parameters."""
        present = {tensor["name"] for tensor in config.as_dict().get("input", [])}
        for name, data_type, optional in INPUTS:
            if name not in present:
                config.add_input({"name": name, "data_type": data_type, "dims": [1], "optional": optional})
        present = {tensor["name"] for tensor in config.as_dict().get("output", [])}
        for name, data_type, dims in OUTPUTS:
            if name not in present:
                config.add_output({"name": name, "data_type": data_type, "dims": dims})
        config.set_max_batch_size(0)
        return config

    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.name = str(args.get("model_name", "synapse_llm"))
        settings = EngineSettings.from_parameters(config.get("parameters", {}))
        checkpoint = Path(settings.checkpoint)
        if not checkpoint.is_absolute():
            checkpoint = Path(args["model_repository"]) / checkpoint
        self.engine = Engine(self.name, settings, checkpoint, instance_device(args))
        self.intake = Intake(
            self.engine.tokenizer,
            self.engine.grammar_tokenizer,
            self.engine.vocab_size,
            settings.max_model_len,
        )
        # torch and transformers leave ~200,000 objects that a full collection walks in ~95 ms, a pause
        # in the middle of some step; frozen, they are never walked again.
        gc.collect()
        gc.freeze()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            try:
                self._admit(request)
            except Exception as exc:  # this request only: the others in the call go on
                pb_utils.Logger.log_error(f"{self.name}: taking a request: {traceback.format_exc()}")
                request.get_response_sender().send(error_response(f"the model failed: {exc}"), flags=FINAL)

    def _admit(self, request: Any) -> None:
        sender = request.get_response_sender()
        try:
            admission = self.intake.read(request)
        except RequestError as exc:
            sender.send(error_response(str(exc)), flags=FINAL)
            return
        if not self.engine.add(request, sender, admission):
            sender.send(error_response("the engine is restarting; retry"), flags=FINAL)

    def finalize(self) -> None:
        pb_utils.Logger.log_info(f"{self.name}: finalize: stopping the engine")
        self.engine.stop()
