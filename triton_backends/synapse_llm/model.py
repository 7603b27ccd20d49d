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

Inside: Hugging Face transformers' continuous batching (`init_continuous_batching`). New requests join
the running batch at the next step; one dispatcher thread reads the engine's streamed outputs (cumulative
tokens, so a backlog collapses into one response per request), detokenises incrementally, matches stop
strings (held back until they cannot start; the engine drops the request when one matches), sends the
responses, polls Triton for cancellations every few milliseconds, and watches the engine thread.

Sampling (engine_sampler.py): HF CB decodes greedily and the engine's one logits processor picks each
row's token: argmax for greedy (temperature 0, never passed to HF, where it would kill the engine for
every request), else temperature, top-k and top-p for the rows that ask, and an inverse-CDF draw at a hash
of (seed, position): the same seed gives the same text in any batch; no seed, a random one.

Metrics (Triton's /metrics, label model): synapse_engine_sequences (requests being answered),
synapse_engine_scheduled (sequences HF's scheduler holds: a cancelled or stopped request leaves it at the
next step), synapse_engine_generated_tokens_total, synapse_engine_cancelled_total (dropped on Triton's
cancellation), synapse_engine_restarts_total.
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import os
import secrets
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Triton's stub runs Python isolated (PYTHONPATH is ignored); the local worker names the project's
# site-packages here. In the worker image the packages are installed system-wide and this is unset.
sys.path[:0] = [p for p in os.environ.get("SYNAPSE_MODEL_PYTHONPATH", "").split(os.pathsep) if p]

from engine_rules import THREAD_ENVIRONMENT  # noqa: E402

for _name, _value in THREAD_ENVIRONMENT.items():  # before torch loads OpenMP (engine_rules says why)
    os.environ.setdefault(_name, _value)

import llguidance  # noqa: E402
import llguidance.hf  # noqa: E402
import llguidance.numpy  # noqa: E402
import torch  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from engine_rules import (  # noqa: E402
    OPTIONAL_OUTPUTS,
    ChoiceStep,
    EngineSettings,
    Generation,
    Options,
    RequestError,
    SamplingParams,
    check_context,
    end_ids,
    parse_sampling_parameters,
    read_options,
    response_outputs,
)
from engine_sampler import GREEDY, SEED_KWARG, Row, install  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
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
POLL_S = 0.005  # how often the dispatcher wakes without output
# How often it asks Triton whether each request was cancelled, and looks at the engine's health: each
# is_cancelled() is a round trip to the server, per request (every 5 ms at 64 requests: 12,800 a
# second). A cancelled request leaves within 50 ms, under a step of the engine on the CPU.
CHECK_S = 0.05
COLLECT_AT_MOST = 4096  # outputs read before the dispatcher answers, so a flood cannot starve the polls
WARMUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class Active:
    """A request in the engine: its n choices, each a sequence of the engine's batch under its own id."""

    request: Any
    sender: Any
    options: Options
    params: SamplingParams
    prompt: str
    prompt_tokens: int
    ids: tuple[str, ...]  # the engine's request id of each choice
    generations: list[Generation]
    rows: list[Row | None]  # each choice's sampler row, where it asked for more than HF's sampling
    sent_logprobs: list[int]  # log-probabilities sent so far, per choice

    @property
    def finished(self) -> bool:
        return all(generation.finished for generation in self.generations)


class _QuietPsutil(logging.Filter):
    """HF CB logs an ERROR on CPU when psutil is absent, though the cache is sized from the config."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "psutil" not in record.getMessage()


class _Metrics:
    """The engine's own counters on Triton's metrics endpoint; inert where Triton has metrics off."""

    def __init__(self, model: str) -> None:
        self._metrics: dict[str, Any] = {}
        self._families: list[Any] = []
        labels = {"model": model}
        kinds = {
            "synapse_engine_sequences": ("requests being answered now", "GAUGE"),
            "synapse_engine_scheduled": (
                "sequences the engine's scheduler holds, running or waiting",
                "GAUGE",
            ),
            "synapse_engine_generated_tokens_total": ("tokens the engine generated", "COUNTER"),
            "synapse_engine_cancelled_total": ("requests dropped on Triton's cancellation", "COUNTER"),
            "synapse_engine_restarts_total": ("engine rebuilds after a failure", "COUNTER"),
        }
        try:
            for name, (description, kind) in kinds.items():
                family = pb_utils.MetricFamily(name, description, getattr(pb_utils.MetricFamily, kind))
                self._families.append(family)
                self._metrics[name] = family.Metric(labels=labels)
        except Exception as exc:  # metrics disabled in this Triton
            pb_utils.Logger.log_warn(f"{model}: no engine metrics ({exc})")
            self._metrics.clear()

    def add(self, name: str, value: float) -> None:
        if value and name in self._metrics:
            self._metrics[name].increment(value)

    def set(self, name: str, value: float) -> None:
        if name in self._metrics:
            self._metrics[name].set(value)


def first_value(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


def optional_bool(request: Any, name: str) -> bool | None:
    value = first_value(request, name)
    return None if value is None else bool(value)


def error_response(message: str, code: Any = None) -> Any:
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(error=error)


def as_response(outputs: dict[str, Any]) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


def instance_device(args: dict[str, Any]) -> torch.device:
    """The device Triton placed this instance on (its instance group): never a silent fallback.

    An instance placed on a GPU where CUDA does not work fails to load, so that its worker fails too;
    running on the CPU instead would serve far slower while the GPU is billed.
    """
    if args.get("model_instance_kind") != "GPU":
        return torch.device("cpu")
    gpu = int(args.get("model_instance_device_id", 0))
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"synapse_llm: Triton placed this instance on GPU {gpu}, but torch {torch.__version__} (built "
            f"for CUDA {torch.version.cuda}) cannot use CUDA here: the host's NVIDIA driver is missing or "
            "older than that CUDA, or the container was given no GPU"
        )
    if gpu >= torch.cuda.device_count():
        raise RuntimeError(f"synapse_llm: placed on GPU {gpu}, but torch sees {torch.cuda.device_count()}")
    return torch.device("cuda", gpu)


class TritonPythonModel:
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
        self.settings = EngineSettings.from_parameters(config.get("parameters", {}))
        checkpoint = Path(self.settings.checkpoint)
        if not checkpoint.is_absolute():
            checkpoint = Path(args["model_repository"]) / checkpoint
        self.device = instance_device(args)
        on_gpu = self.device.type == "cuda"
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        # bfloat16 on a GPU (float16 overflows in llama-family activations); float32 on the CPU, where
        # half precision has no fast kernels.
        self.model = AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=torch.bfloat16 if on_gpu else torch.float32
        )
        self.model = self.model.to(self.device).eval()
        self.settings.check_model(int(self.model.config.max_position_embeddings))
        self.eos_ids = end_ids(self.tokenizer.eos_token_id, self.model.generation_config.eos_token_id)
        self.vocab_size = int(self.model.config.vocab_size)
        self.grammar_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer)
        self._rows: dict[str, Row] = {}  # the sampler's per-sequence state, by engine request id
        logging.getLogger("ContinuousBatchingLogger").addFilter(_QuietPsutil())
        self.metrics = _Metrics(self.name)
        self._ids = itertools.count()
        self._lock = threading.RLock()  # the active requests and the manager (swapped on a rebuild)
        self._active: dict[str, Active] = {}
        self._closing = threading.Event()
        self._manager = self._start_manager()
        self._warm_up()
        self._dispatcher = threading.Thread(target=self._dispatch, name=f"{self.name}-dispatch", daemon=True)
        self._dispatcher.start()
        # torch and transformers leave ~200,000 objects that a full collection walks in ~95 ms, a pause
        # in the middle of some step; frozen, they are never walked again.
        gc.collect()
        gc.freeze()

    # ---------------------------------------------------------------- engine lifecycle

    def _start_manager(self) -> Any:
        s = self.settings
        eos = min(self.eos_ids, default=-1)
        # Greedy for HF: the sampler (engine_sampler.py) leaves one possible token per row.
        generation = GenerationConfig(
            do_sample=False, max_new_tokens=16, eos_token_id=eos, pad_token_id=max(eos, 0)
        )
        batching = ContinuousBatchingConfig(
            page_size=s.block_size,
            num_blocks=s.num_blocks,
            max_batch_tokens=s.max_batch_tokens,
            max_requests_per_batch=s.max_num_seqs,
            # Prompts here are short and answers long: no prefix sharing, each request's cache its own.
            allow_block_sharing=False,
            # One step at a time: the sampler keeps a step's parameters from its preparation to its logits.
            use_async_batching=False,
            use_cuda_graph=False,
        )
        manager = self.model.init_continuous_batching(generation, batching)
        # llguidance's numpy helpers: its torch ones import torch's compiler, which Triton's stub cannot load.
        bitmask = (llguidance.numpy.allocate_token_bitmask, llguidance.numpy.fill_next_token_bitmask)
        install(manager, self._rows, bitmask)
        manager.start()
        return manager

    def _warm_up(self) -> None:
        """One short request, so the first client's time to first token is not the cache's creation."""
        token = next(iter(self.eos_ids), 0)
        rid = self._manager.add_request([token], request_id="warmup", max_new_tokens=2, streaming=False)
        deadline = time.monotonic() + WARMUP_TIMEOUT_S
        while rid is not None and time.monotonic() < deadline:
            out = self._manager.get_result(timeout=0.5)
            if out is not None and out.request_id == rid:
                return
            if self._manager.background_thread_status.fatal_error is not None:
                raise RuntimeError(
                    f"engine failed while warming up: {self._manager.background_thread_status.fatal_error}"
                )
        raise RuntimeError("engine did not answer its warm-up request")

    def _restart(self, reason: str) -> None:
        """The generation thread died: every request it held fails, and a new engine takes over."""
        pb_utils.Logger.log_error(f"{self.name}: engine failed ({reason}); rebuilding it")
        with self._lock:
            failed, self._active = self._requests(), {}
            self._rows.clear()
            old = self._manager
            try:
                old.stop(block=True, timeout=STOP_TIMEOUT_S)
            except Exception:
                failure = traceback.format_exc()
                pb_utils.Logger.log_error(f"{self.name}: stopping the failed engine: {failure}")
            self._manager = self._start_manager()
        for active in failed:
            self._send(active, error_response(f"the engine failed while generating ({reason}); retry"), FINAL)
        self.metrics.add("synapse_engine_restarts_total", 1)

    def finalize(self) -> None:
        pb_utils.Logger.log_info(f"{self.name}: finalize: stopping the engine")
        self._closing.set()
        self._dispatcher.join(timeout=STOP_TIMEOUT_S)
        with self._lock:
            left, self._active = self._requests(), {}
            self._manager.stop(block=True, timeout=STOP_TIMEOUT_S)  # its thread is not a daemon
        for active in left:
            self._send(active, error_response("the model is unloading; retry"), FINAL)

    # ---------------------------------------------------------------- intake

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
            options, params, prompt = self._read(request)
            ids = self.tokenizer(prompt)["input_ids"] if prompt else []
            check_context(len(ids), params.max_tokens, self.settings.max_model_len)
            rows = self._rows_of(params)
        except RequestError as exc:
            sender.send(error_response(str(exc)), flags=FINAL)
            return
        base = f"r{next(self._ids)}"
        engine_ids = (base,) if params.n == 1 else tuple(f"{base}.{i}" for i in range(params.n))
        active = Active(
            request, sender, options, params, prompt, len(ids), engine_ids,
            [Generation(self._decode, params.stop, self.eos_ids, params.max_tokens) for _ in engine_ids],
            rows, [0] * params.n,
        )  # fmt: skip
        random_seed = secrets.randbits(63)
        added = 0
        with self._lock:
            for index, rid in enumerate(engine_ids):
                self._active[rid] = (active, index)
                if rows[index] is not None:
                    self._rows[rid] = rows[index]  # type: ignore[assignment]
            try:
                for index, rid in enumerate(engine_ids):
                    kwargs = self._engine_kwargs(params, index, random_seed)
                    if self._manager.add_request(
                        ids, request_id=rid, max_new_tokens=params.max_tokens, streaming=True, **kwargs
                    ) is None:  # fmt: skip
                        break  # refused: a failing engine, which the dispatcher rebuilds
                    added += 1
            finally:
                if added < len(engine_ids):
                    for rid in engine_ids[:added]:
                        self._manager.cancel_request(rid)
                    self._release(engine_ids)
        if added < len(engine_ids):
            sender.send(error_response("the engine is restarting; retry"), flags=FINAL)

    def _rows_of(self, params: SamplingParams) -> list[Row | None]:
        """Each choice's sampler row, or None where HF's sampling alone does; a grammar compiled per
        choice (a matcher follows one sequence)."""
        for token, _ in params.logit_bias:
            if token >= self.vocab_size:
                raise RequestError(f"logit_bias names token {token}, past this model's {self.vocab_size}")
        plain = (
            params.logprobs is None
            and not params.presence_penalty
            and not params.frequency_penalty
            and not params.logit_bias
            and params.structured is None
        )
        if plain:
            return [None] * params.n
        return [
            Row(
                logprobs=params.logprobs,
                presence_penalty=params.presence_penalty,
                frequency_penalty=params.frequency_penalty,
                logit_bias=params.logit_bias,
                matcher=self._matcher(params),
            )
            for _ in range(params.n)
        ]

    def _matcher(self, params: SamplingParams) -> Any:
        """The structured output's grammar as an llguidance matcher, or None; compact JSON (no free
        whitespace, which a small model can fill forever)."""
        structured = params.structured
        if structured is None:
            return None
        schema = json.loads(structured.schema) if structured.kind == "json" else {"type": "object"}
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}
            )
            matcher = llguidance.LLMatcher(self.grammar_tokenizer, grammar)
        except (ValueError, TypeError) as exc:
            raise RequestError(f"structured_outputs.{structured.kind} does not compile: {exc}") from None
        if matcher.is_error():
            raise RequestError(
                f"structured_outputs.{structured.kind} does not compile: {matcher.get_error()}"
            )
        return matcher

    def _read(self, request: Any) -> tuple[Options, SamplingParams, str]:
        text = first_value(request, "text_input")
        prompt = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text or "")
        options = read_options(
            optional_bool(request, "stream"),
            optional_bool(request, "exclude_input_in_output"),
            {name: optional_bool(request, name) for name in OPTIONAL_OUTPUTS},
        )
        params = parse_sampling_parameters(
            first_value(request, "sampling_parameters"), self.settings.max_model_len
        )
        return options, params, prompt

    def _engine_kwargs(self, params: SamplingParams, choice: int, random_seed: int) -> dict[str, Any]:
        """The sampler's per-sequence arguments (engine_sampler.py); greedy never passes a temperature."""
        if params.greedy:
            return {SEED_KWARG: GREEDY}
        return {
            SEED_KWARG: params.choice_seed(choice, random_seed),
            "temperature": float(params.temperature),
            "top_k": int(params.top_k),
            "top_p": float(params.top_p),
        }

    def _decode(self, tokens: Any) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))

    # ---------------------------------------------------------------- dispatcher

    def _dispatch(self) -> None:
        last_poll = 0.0
        sequences = (-1, -1)
        while not self._closing.is_set():
            try:
                latest = self._collect()
                generated = sum(self._deliver(out) for out in latest.values())
                self.metrics.add("synapse_engine_generated_tokens_total", generated)
                now = time.monotonic()
                if now - last_poll >= CHECK_S:
                    last_poll = now
                    self._drop_cancelled()
                    self._check_engine()
                    sequences = self._publish_sequences(sequences)
            except Exception:
                pb_utils.Logger.log_error(f"{self.name}: dispatcher: {traceback.format_exc()}")
                time.sleep(POLL_S)

    def _collect(self) -> dict[str, Any]:
        """The engine's outputs so far, the latest per request (they are cumulative)."""
        manager = self._manager
        latest: dict[str, Any] = {}
        out = manager.get_result(timeout=POLL_S)
        for _ in range(COLLECT_AT_MOST):
            if out is None:
                break
            latest[out.request_id] = out
            out = manager.get_result(timeout=0)
        if out is not None:
            latest[out.request_id] = out
        if not latest and manager.background_thread_status.fatal_error is not None:
            time.sleep(POLL_S)  # get_result returns at once from a dead engine
        return latest

    def _deliver(self, out: Any) -> int:
        """Sends what this output adds to its choice; returns the tokens it accounts for."""
        found = self._active.get(out.request_id)
        if found is None:  # cancelled, stopped or failed already
            return 0
        active, index = found
        if out.error is not None or out.status.name == "FAILED":
            self._finish(active, error_response(f"generation failed: {out.error}"))
            return 0
        generation, row = active.generations[index], active.rows[index]
        step = generation.advance(out.generated_tokens, engine_finished=out.is_finished())
        if row is not None and row.grammar_error:
            self._finish(active, error_response(f"structured output failed: {row.grammar_error}"))
            return step.tokens
        if generation.finished:
            if not out.is_finished():
                self._manager.cancel_request(out.request_id)  # a stop string: the engine drops it now
            self._release((out.request_id,))
        with_logprobs = active.params.logprobs is not None
        if active.options.stream and (step.tokens or generation.finished):
            choices = [ChoiceStep() for _ in active.ids]
            choices[index] = ChoiceStep(
                step.text, step.finish_reason, step.tokens, self._logprobs(active, index, generation)
            )
            outputs = response_outputs(active.options, choices, active.prompt_tokens, with_logprobs)
            self._send(active, as_response(outputs), FINAL if active.finished else 0)
        elif active.finished:
            prefix = active.prompt if active.options.prepend_prompt else ""
            choices = [
                ChoiceStep(
                    prefix + "".join(g.text), g.finish_reason, g.consumed, self._logprobs(active, i, g)
                )
                for i, g in enumerate(active.generations)
            ]
            outputs = response_outputs(active.options, choices, active.prompt_tokens, with_logprobs)
            self._send(active, as_response(outputs), FINAL)
        return step.tokens

    def _logprobs(self, active: Active, index: int, generation: Generation) -> str:
        """The log-probabilities of the choice's tokens not sent yet (end-of-sequence tokens, which add no
        text, left out), in the shape of OpenAI's chat `logprobs.content`."""
        row = active.rows[index]
        if row is None or active.params.logprobs is None:
            return "[]"
        start, end = active.sent_logprobs[index], min(generation.consumed, len(row.recorded))
        active.sent_logprobs[index] = end
        entries = [
            {
                **self._token(item.token, item.logprob),
                "top_logprobs": [self._token(t, lp) for t, lp in item.top],
            }
            for item in row.recorded[start:end]
            if item.token not in self.eos_ids
        ]
        return json.dumps(entries, separators=(",", ":"), ensure_ascii=False)

    def _token(self, token: int, logprob: float) -> dict[str, Any]:
        raw = bytes(self.grammar_tokenizer.decode_bytes([token]))
        return {"token": raw.decode("utf-8", "replace"), "bytes": list(raw), "logprob": logprob}

    def _requests(self) -> list[Active]:
        """Every request in the engine, once each."""
        return list({id(active): active for active, _ in self._active.values()}.values())

    def _release(self, engine_ids: tuple[str, ...]) -> None:
        with self._lock:
            for rid in engine_ids:
                self._active.pop(rid, None)
                self._rows.pop(rid, None)

    def _finish(self, active: Active, response: Any) -> None:
        """Ends the whole request with this response: its choices still running leave the engine."""
        for rid, generation in zip(active.ids, active.generations, strict=True):
            if not generation.finished and rid in self._active:
                self._manager.cancel_request(rid)
        self._release(active.ids)
        self._send(active, response, FINAL)

    def _send(self, active: Active, response: Any, flags: int) -> None:
        try:
            active.sender.send(response, flags=flags)
        except Exception as exc:  # the client is gone; nothing else to tell it
            pb_utils.Logger.log_warn(f"{self.name}: could not send a response: {exc}")

    def _drop_cancelled(self) -> None:
        for active in self._requests():
            if active.sender.is_cancelled():
                code = getattr(pb_utils.TritonError, "CANCELLED", None)
                self._finish(active, error_response("the request was cancelled", code))
                self.metrics.add("synapse_engine_cancelled_total", 1)

    def _publish_sequences(self, published: tuple[int, int]) -> tuple[int, int]:
        """The two occupancy gauges, set when they change (each set is a round trip to Triton)."""
        scheduler = getattr(getattr(self._manager, "batch_processor", None), "scheduler", None)
        held = len(scheduler.active_requests) + len(scheduler.waiting_requests) if scheduler else 0
        now = (len(self._active), held)
        if now[0] != published[0]:
            self.metrics.set("synapse_engine_sequences", now[0])
        if now[1] != published[1]:
            self.metrics.set("synapse_engine_scheduled", now[1])
        return now

    def _check_engine(self) -> None:
        manager = self._manager
        fatal = manager.background_thread_status.fatal_error
        if fatal is not None or not manager.is_running():
            self._restart(str(fatal) if fatal is not None else "the generation thread exited")
