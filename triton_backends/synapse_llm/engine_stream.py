"""What each engine step sends: the requests in the engine and their responses.

The dispatcher thread (engine_lifecycle.py) hands each of the engine's outputs here. An output is
cumulative (a backlog collapses into one response per request); its choice's `Generation`
(engine_generation.py) detokenises it incrementally and matches stop strings (held back until they
cannot start; the engine drops the choice when one matches). This module sends the responses, with the
log-probabilities the sampler recorded, ends a request Triton reports cancelled at once, and keeps the
engine's metrics.

Metrics (Triton's /metrics, label model): synapse_engine_sequences (requests being answered),
synapse_engine_scheduled (sequences HF's scheduler holds: a cancelled or stopped request leaves it at the
next step), synapse_engine_generated_tokens_total, synapse_engine_cancelled_total (dropped on Triton's
cancellation), synapse_engine_restarts_total.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import triton_python_backend_utils as pb_utils
from engine_generation import ChoiceStep, Generation, Options, response_outputs
from engine_rules import SamplingParams
from engine_sampler import Row

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def error_response(message: str, code: Any = None) -> Any:
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(error=error)


def as_response(outputs: dict[str, Any]) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


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


class Metrics:
    """The engine's own counters on Triton's metrics endpoint; inert where Triton has metrics off."""

    def __init__(self, model: str) -> None:
        self._metrics: dict[str, Any] = {}
        self._families: list[Any] = []
        self._gauges: dict[str, float] = {}  # the value each gauge was last set to
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
            "synapse_engine_prefix_cache_queries_tokens_total": (
                "prompt tokens looked up in the prefix cache",
                "COUNTER",
            ),
            "synapse_engine_prefix_cache_hits_tokens_total": (
                "prompt tokens found in the prefix cache, not computed again",
                "COUNTER",
            ),
            "synapse_engine_prefix_cache_evicted_blocks_total": (
                "cached KV blocks evicted for live sequences",
                "COUNTER",
            ),
            "synapse_engine_kv_cache_usage": ("share of the KV cache live sequences hold", "GAUGE"),
            "synapse_engine_kv_blocks_cached": ("KV blocks kept only for later prompts", "GAUGE"),
        }
        try:
            for name, (description, kind) in kinds.items():
                family = pb_utils.MetricFamily(name, description, getattr(pb_utils.MetricFamily, kind))
                self._families.append(family)
                self._metrics[name] = family.Metric(labels=labels)
        except Exception as exc:  # metrics disabled in this Triton
            pb_utils.Logger.log_warn(f"{model}: no engine metrics ({exc})")
            self._metrics.clear()

    def close(self) -> None:
        """No more updates: the model unloads, and a metric call blocks once Triton is shutting down
        (a dispatcher caught in one held the unload past Triton's exit timeout, and its stub lived on)."""
        self._metrics.clear()

    def add(self, name: str, value: float) -> None:
        if value and name in self._metrics:
            self._metrics[name].increment(value)

    def set(self, name: str, value: float) -> None:
        """Moves a gauge to `value` by incrementing it by the change, where it changed (an idle engine
        makes no call). Each call is a round trip to Triton, which stops answering as it shuts down; the
        Python backend releases the GIL while it waits on an increment but not on a set, so one set
        caught in flight froze the whole stub, its finalize included, past Triton's exit timeout
        (python_backend src/metric.cc, SendIncrementRequest against SendSetValueRequest)."""
        last = self._gauges.get(name, 0.0)  # a new gauge reads 0
        if name in self._metrics and value != last:
            self._metrics[name].increment(value - last)
            self._gauges[name] = value


class Streamer:
    """The requests in the engine, an entry per choice by engine request id, and what reaches their
    clients. `cancel` drops a choice from the engine that runs now (the lifecycle swaps it on a rebuild)."""

    def __init__(
        self,
        name: str,
        eos_ids: frozenset[int],
        grammar_tokenizer: Any,
        metrics: Metrics,
        cancel: Callable[[str], None],
    ) -> None:
        self.name = name
        self.eos_ids = eos_ids
        self.grammar_tokenizer = grammar_tokenizer
        self.metrics = metrics
        self._cancel = cancel
        self.lock = threading.RLock()  # the active requests and the engine (swapped on a rebuild)
        self.active: dict[str, tuple[Active, int]] = {}  # by engine request id: the request, the choice
        self.rows: dict[str, Row] = {}  # the sampler's per-sequence state, by engine request id

    def register(self, active: Active) -> None:
        with self.lock:
            for index, rid in enumerate(active.ids):
                self.active[rid] = (active, index)
                row = active.rows[index]
                if row is not None:
                    self.rows[rid] = row

    def deliver(self, out: Any) -> int:
        """Sends what this output adds to its choice; returns the tokens it accounts for."""
        found = self.active.get(out.request_id)
        if found is None:  # cancelled, stopped or failed already
            return 0
        active, index = found
        if out.error is not None or out.status.name == "FAILED":
            self.finish(active, error_response(f"generation failed: {out.error}"))
            return 0
        generation, row = active.generations[index], active.rows[index]
        step = generation.advance(out.generated_tokens, engine_finished=out.is_finished())
        if row is not None and row.grammar_error:
            self.finish(active, error_response(f"structured output failed: {row.grammar_error}"))
            return step.tokens
        if generation.finished:
            if not out.is_finished():
                self._cancel(out.request_id)  # a stop string: the engine drops it now
            self.release((out.request_id,))
        with_logprobs = active.params.logprobs is not None
        if active.options.stream and (step.tokens or generation.finished):
            choices = [ChoiceStep() for _ in active.ids]
            choices[index] = ChoiceStep(
                step.text, step.finish_reason, step.tokens, self._logprobs(active, index, generation)
            )
            outputs = response_outputs(active.options, choices, active.prompt_tokens, with_logprobs)
            self.send(active, as_response(outputs), FINAL if active.finished else 0)
        elif active.finished:
            prefix = active.prompt if active.options.prepend_prompt else ""
            choices = [
                ChoiceStep(
                    prefix + "".join(g.text), g.finish_reason, g.consumed, self._logprobs(active, i, g)
                )
                for i, g in enumerate(active.generations)
            ]
            outputs = response_outputs(active.options, choices, active.prompt_tokens, with_logprobs)
            self.send(active, as_response(outputs), FINAL)
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

    def requests(self) -> list[Active]:
        """Every request in the engine, once each."""
        return list({id(active): active for active, _ in self.active.values()}.values())

    def take_all(self) -> list[Active]:
        """Every request in the engine, which no longer holds any (it failed, or the model unloads)."""
        with self.lock:
            taken, self.active = self.requests(), {}
        return taken

    def release(self, engine_ids: tuple[str, ...]) -> None:
        with self.lock:
            for rid in engine_ids:
                self.active.pop(rid, None)
                self.rows.pop(rid, None)

    def finish(self, active: Active, response: Any) -> None:
        """Ends the whole request with this response: its choices still running leave the engine."""
        for rid, generation in zip(active.ids, active.generations, strict=True):
            if not generation.finished and rid in self.active:
                self._cancel(rid)
        self.release(active.ids)
        self.send(active, response, FINAL)

    def fail(self, requests: list[Active], message: str) -> None:
        for active in requests:
            self.send(active, error_response(message), FINAL)

    def send(self, active: Active, response: Any, flags: int) -> None:
        try:
            active.sender.send(response, flags=flags)
        except Exception as exc:  # the client is gone; nothing else to tell it
            pb_utils.Logger.log_warn(f"{self.name}: could not send a response: {exc}")

    def drop_cancelled(self) -> None:
        for active in self.requests():
            if active.sender.is_cancelled():
                code = getattr(pb_utils.TritonError, "CANCELLED", None)
                self.finish(active, error_response("the request was cancelled", code))
                self.metrics.add("synapse_engine_cancelled_total", 1)

    def publish_sequences(self, scheduled: int) -> None:
        """The two occupancy gauges: the requests answered now, and what HF's scheduler holds."""
        self.metrics.set("synapse_engine_sequences", len(self.active))
        self.metrics.set("synapse_engine_scheduled", scheduled)
