"""The pure rules of the synapse_llm engine: no Triton, no torch, so unit tests import this file directly.

- `EngineSettings`: config.pbtxt's parameters, checked once at load.
- `parse_sampling_parameters`, `check_context`: a request's sampling parameters and its fit in the
  context, refused with a `RequestError` whose message starts with "invalid request: " and says what to
  change; the limits the front door checks too come from `contract.engine_limits`, so that the two
  refuse the same requests.
- `uniform_draw`: the seeded random number a sampled token is drawn with (see engine_sampler.py).

How a request wants its responses, its progress and the responses are engine_generation.py's. Triton
puts a Python-based backend's folder on `sys.path`, so the other modules import this as `engine_rules`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contract.engine_limits import (
    BIAS_LIMIT,
    MAX_CHOICES,
    MAX_GRAMMAR_CHARS,
    MAX_TOP_LOGPROBS,
    PENALTY_LIMIT,
    SAMPLING_PARAMETERS,
    context_overflow,
)

REFUSAL = "invalid request: "
DEFAULT_MAX_TOKENS = 16  # vLLM's SamplingParams default
GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a temperature under this is greedy decoding
# The kinds of structured output (vLLM's StructuredOutputsParams names) this engine compiles.
STRUCTURED_KINDS = ("json", "json_object", "grammar")
# Sampling parameters of vLLM this engine does not implement, accepted only at their neutral value, so a
# client that spells out vLLM's defaults is not refused.
NEUTRAL: dict[str, Any] = {
    "best_of": 1,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "min_tokens": 0,
    "ignore_eos": False,
    "skip_special_tokens": True,
    "include_stop_str_in_output": False,
}
INTEGER = re.compile(r"\s*[+-]?\d+\s*")


class RequestError(ValueError):
    """A request this engine refuses; the message is for the API client and starts with REFUSAL."""

    def __init__(self, reason: str) -> None:
        super().__init__(REFUSAL + reason)


# ------------------------------------------------------------------ config.pbtxt ----------------------


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The engine's sizes, from config.pbtxt's string parameters (defaults: the tiny checkpoint's)."""

    checkpoint: str = "checkpoint"
    max_num_seqs: int = 32  # sequences in the engine at once; the manager reads this name
    max_model_len: int = 256  # prompt + max_tokens must fit; the manager reads this name
    max_batch_tokens: int = 512  # tokens in one forward pass (decodes + prompt chunks)
    block_size: int = 32  # tokens per KV-cache block (HF's page_size)
    num_blocks: int = 256  # KV-cache blocks: max_num_seqs full contexts by default
    # A prompt's complete blocks kept, by the hash of their tokens, for every later prompt that starts
    # the same way (HF's block sharing); "false" only to measure or rule it out.
    prefix_caching: bool = True

    @classmethod
    def from_parameters(cls, params: Mapping[str, Any]) -> EngineSettings:
        """From the model config's `parameters` (each `{"string_value": "..."}`), checked."""

        defaults = cls()

        def value(name: str) -> str:
            return str(params.get(name, {}).get("string_value", getattr(defaults, name))).strip()

        def positive(name: str) -> int:
            raw = value(name)
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"config parameter {name} must be a positive integer, got {raw!r}")
            return int(raw)

        def flag(name: str) -> bool:
            raw = value(name).lower()
            if raw not in ("true", "false"):
                raise ValueError(f"config parameter {name} must be true or false, got {raw!r}")
            return raw == "true"

        settings = cls(
            checkpoint=value("checkpoint"),
            max_num_seqs=positive("max_num_seqs"),
            max_model_len=positive("max_model_len"),
            max_batch_tokens=positive("max_batch_tokens"),
            block_size=positive("block_size"),
            num_blocks=positive("num_blocks"),
            prefix_caching=flag("prefix_caching"),
        )
        if settings.max_model_len < 2:
            raise ValueError("config parameter max_model_len must leave room for a prompt and one token")
        if settings.block_size < 4:
            raise ValueError("config parameter block_size must be at least 4")
        if settings.num_blocks * settings.block_size < settings.max_model_len:
            raise ValueError(
                f"num_blocks {settings.num_blocks} x block_size {settings.block_size} cannot hold one "
                f"context of max_model_len {settings.max_model_len} tokens"
            )
        return settings

    def check_model(self, positions: int) -> None:
        """A context longer than the checkpoint's positions would crash the engine for every request."""
        if self.max_model_len > positions:
            raise ValueError(
                f"config parameter max_model_len {self.max_model_len} is over the checkpoint's "
                f"{positions} positions"
            )


# ------------------------------------------------------------------ requests -------------------------


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What a request asked for; defaults are vLLM's (sampling at temperature 1, 16 tokens)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token (vLLM's -1 and 0)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    logprobs: int | None = None  # None: none; k: the sampled token's and the k likeliest (vLLM's meaning)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    structured: Structured | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def choice_seed(self, index: int, random_seed: int) -> int:
        """Choice `index`'s seed: the request's (or a random one), apart for each choice, so that one seed
        gives the same n choices again."""
        base = random_seed if self.seed is None else self.seed
        return (base + index * 0x9E3779B97F4A7C15) % (1 << 63)


@dataclass(frozen=True, slots=True)
class Structured:
    """A constraint on the text: `json` (a JSON schema, as JSON text), `json_object` (any object) or
    `grammar` (a Lark grammar in llguidance's dialect, which tool calls compile to)."""

    kind: str
    schema: str = ""  # the JSON schema's or the grammar's text


def parse_sampling_parameters(raw: str | bytes | None, max_model_len: int) -> SamplingParams:
    """The `sampling_parameters` JSON object; numbers may come as JSON numbers or strings of numbers."""
    given = _json_object(raw)
    _check_keys(given)
    params = SamplingParams(
        max_tokens=_integer(given, "max_tokens", DEFAULT_MAX_TOKENS),
        temperature=_number(given, "temperature", 1.0),
        top_p=_number(given, "top_p", 1.0),
        top_k=_integer(given, "top_k", 0),
        seed=_integer(given, "seed", None),
        stop=_stop_strings(given.get("stop")),
        n=_integer(given, "n", 1),
        logprobs=_integer(given, "logprobs", None),
        presence_penalty=_number(given, "presence_penalty", 0.0),
        frequency_penalty=_number(given, "frequency_penalty", 0.0),
        logit_bias=_logit_bias(given.get("logit_bias")),
        structured=_structured(given.get("structured_outputs")),
    )
    _check_ranges(params, max_model_len)
    return dataclasses.replace(params, top_k=max(params.top_k, 0))


def _json_object(raw: str | bytes | None) -> dict[str, Any]:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw or ""
    if not text.strip():
        return {}
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"sampling_parameters is not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(given, dict):
        raise RequestError("sampling_parameters must be a JSON object")
    return {key: value for key, value in given.items() if value is not None}  # null: the default


def _check_ranges(params: SamplingParams, max_model_len: int) -> None:
    if params.max_tokens < 1:
        raise RequestError(f"max_tokens must be at least 1, got {params.max_tokens}")
    if params.max_tokens > max_model_len - 1:
        raise RequestError(
            f"max_tokens {params.max_tokens} is over this model's limit of {max_model_len - 1} "
            f"(its context of {max_model_len} tokens less one prompt token)"
        )
    if params.temperature < 0:
        raise RequestError(f"temperature must be at least 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < -1:
        raise RequestError(f"top_k must be -1 or 0 (every token) or at least 1, got {params.top_k}")
    if params.seed is not None and not -(2**63) <= params.seed < 2**63:
        raise RequestError("seed must fit in 64 bits")
    _check_extras(params)


def _check_extras(params: SamplingParams) -> None:
    if not 1 <= params.n <= MAX_CHOICES:
        raise RequestError(f"n must be between 1 and {MAX_CHOICES}, got {params.n}")
    if params.logprobs is not None and not 0 <= params.logprobs <= MAX_TOP_LOGPROBS:
        raise RequestError(f"logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {params.logprobs}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(params, name)
        if not -PENALTY_LIMIT <= value <= PENALTY_LIMIT:
            raise RequestError(
                f"{name} must be between -{PENALTY_LIMIT:g} and {PENALTY_LIMIT:g}, got {value}"
            )


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """{token id: bias}; ids as JSON object keys are strings of integers."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise RequestError("logit_bias must be an object of token ids to numbers")
    biases = []
    for key, bias in value.items():
        if not isinstance(key, str) or not INTEGER.fullmatch(key) or int(key) < 0:
            raise RequestError(f"logit_bias keys must be token ids (integers), got {json.dumps(key)}")
        number = _as_float(bias)
        if number is None or not -BIAS_LIMIT <= number <= BIAS_LIMIT:
            raise RequestError(
                f"logit_bias[{key}] must be a number in [-{BIAS_LIMIT}, {BIAS_LIMIT}], got {json.dumps(bias)}"
            )
        biases.append((int(key), number))
    return tuple(biases)


def _structured(value: Any) -> Structured | None:
    """vLLM's `structured_outputs`: exactly one kind, of those this engine compiles."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError("structured_outputs must be an object")
    kinds = [key for key, given in value.items() if given is not None and given is not False]
    unknown = [key for key in kinds if key not in STRUCTURED_KINDS]
    if unknown:
        raise RequestError(
            f"structured_outputs.{unknown[0]} is not supported; this model supports "
            f"{', '.join(STRUCTURED_KINDS)}"
        )
    if len(kinds) != 1:
        raise RequestError(f"structured_outputs must set exactly one of {', '.join(STRUCTURED_KINDS)}")
    if kinds[0] == "json_object":
        return Structured("json_object")
    if kinds[0] == "grammar":
        return _grammar(value["grammar"])
    schema = value["json"]
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise RequestError(f"structured_outputs.json is not JSON ({exc.msg})") from None
    if not isinstance(schema, dict):
        raise RequestError("structured_outputs.json must be a JSON schema (an object)")
    return Structured("json", json.dumps(schema, separators=(",", ":")))


def _grammar(grammar: Any) -> Structured:
    """A Lark grammar (llguidance's dialect), compiled when the request is admitted."""
    if not isinstance(grammar, str) or not grammar.strip() or len(grammar) > MAX_GRAMMAR_CHARS:
        raise RequestError(
            f"structured_outputs.grammar must be a Lark grammar of 1 to {MAX_GRAMMAR_CHARS} characters"
        )
    return Structured("grammar", grammar)


def _check_keys(given: Mapping[str, Any]) -> None:
    for key, value in given.items():
        if key in SAMPLING_PARAMETERS:
            continue
        if key not in NEUTRAL:
            raise RequestError(
                f"unknown sampling parameter {key!r}; this model supports {', '.join(SAMPLING_PARAMETERS)}"
            )
        neutral = NEUTRAL[key]
        coerced = _as_bool(value) if isinstance(neutral, bool) else _as_float(value)
        if coerced is None or coerced != neutral:
            raise RequestError(
                f"sampling parameter {key!r} = {json.dumps(value)} is not supported by this model "
                f"(only its neutral value {json.dumps(neutral)})"
            )


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _number(given: Mapping[str, Any], key: str, default: float) -> float:
    if key not in given:
        return default
    number = _as_float(given[key])
    if number is None or not math.isfinite(number):
        raise RequestError(f"{key} must be a number, got {json.dumps(given[key])}")
    return number


def _integer(given: Mapping[str, Any], key: str, default: int | None) -> Any:
    if key not in given:
        return default
    value = given[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and INTEGER.fullmatch(value):
        return int(value)  # exact, however large
    number = _as_float(value)
    if number is None or not math.isfinite(number) or not number.is_integer():
        raise RequestError(f"{key} must be an integer, got {json.dumps(value)}")
    return int(number)


def _stop_strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError("stop must be a string or a list of strings")
    if any(s == "" for s in stops):
        raise RequestError("stop strings must not be empty")
    return tuple(dict.fromkeys(stops))


# How torch's OpenMP threads wait between parallel regions, set before torch loads. libgomp's default
# spins for a while first, which a worker cannot afford on a host it shares with Triton's own threads,
# the agent and (locally) the rest of the stack: a spinning thread holds the core its descheduled peer
# needs. SmolLM2 decoding one sequence on 2 cores beside a busy process took 209 ms of CPU a token
# spinning and 106 waiting passively (a decode loop timed by hand); BENCHMARKS.md's "LLM serving" shows
# the worker's tokens per core-second with it. The engine-alone benchmark runs under the same setting.
THREAD_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}


def end_ids(*given: int | list[int] | None) -> frozenset[int]:
    """The tokens that end a generation: the tokenizer's end of sequence and the generation config's (an
    instruct model's end of turn, one id or a list). The engine-alone benchmark reads them the same way."""
    ids: set[int] = set()
    for value in given:
        ids.update([] if value is None else [value] if isinstance(value, int) else value)
    return frozenset(int(i) for i in ids)


def check_context(prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
    """Prompt and answer must fit the context: over it, the engine would fail every request it runs."""
    if prompt_tokens == 0:
        raise RequestError("the prompt is empty: text_input must hold at least one token")
    overflow = context_overflow(prompt_tokens, max_tokens, max_model_len)
    if overflow is not None:
        raise RequestError(overflow)


# ------------------------------------------------------------------ sampling -------------------------


def uniform_draw(seed: int, position: int) -> float:
    """The number in [0, 1) that picks the token at `position` (prompt + generated tokens before it) of a
    request seeded with `seed`: a hash, so it depends on nothing else (not the batch, not the order).
    24 bits, so float32 holds it exactly."""
    digest = hashlib.blake2b(struct.pack("<qq", seed, position), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 40) / float(1 << 24)
