"""A Triton request read into what the engine runs, or refused before it takes a place in the batch.

The prompt and its tokens, how the request wants its responses, its sampling parameters (engine_rules.py
checks them), and each choice's sampler row (engine_sampler.py) where it asks for more than HF's
sampling: log-probabilities, penalties, a logit bias, a structured output's compiled grammar. Anything
refused raises a `RequestError`, whose message the client gets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import llguidance
import triton_python_backend_utils as pb_utils
from engine_generation import OPTIONAL_OUTPUTS, Options, read_options
from engine_rules import RequestError, SamplingParams, check_context, parse_sampling_parameters
from engine_sampler import GREEDY, SEED_KWARG, Row


def first_value(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


def optional_bool(request: Any, name: str) -> bool | None:
    value = first_value(request, name)
    return None if value is None else bool(value)


@dataclass(frozen=True, slots=True)
class Admission:
    """A request the engine can run: nothing in it is refused later but for the engine's own failures."""

    options: Options
    params: SamplingParams
    prompt: str
    tokens: list[int]  # the prompt's
    rows: list[Row | None]  # each choice's sampler row, where it asked for more than HF's sampling


class Intake:
    """Reads requests for one model: its tokenizer, its grammar tokenizer, its vocabulary and context."""

    def __init__(self, tokenizer: Any, grammar_tokenizer: Any, vocab_size: int, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.grammar_tokenizer = grammar_tokenizer
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len

    def read(self, request: Any) -> Admission:
        """The request, checked; raises RequestError."""
        options, params, prompt = self._inputs(request)
        tokens = self.tokenizer(prompt)["input_ids"] if prompt else []
        check_context(len(tokens), params.max_tokens, self.max_model_len)
        return Admission(options, params, prompt, tokens, self._rows_of(params))

    def _inputs(self, request: Any) -> tuple[Options, SamplingParams, str]:
        text = first_value(request, "text_input")
        prompt = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text or "")
        options = read_options(
            optional_bool(request, "stream"),
            optional_bool(request, "exclude_input_in_output"),
            {name: optional_bool(request, name) for name in OPTIONAL_OUTPUTS},
        )
        params = parse_sampling_parameters(first_value(request, "sampling_parameters"), self.max_model_len)
        return options, params, prompt

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
        try:
            if structured.kind == "grammar":
                grammar = llguidance.LLMatcher.grammar_from_lark(structured.schema)
            else:
                schema = json.loads(structured.schema) if structured.kind == "json" else {"type": "object"}
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


def engine_kwargs(params: SamplingParams, choice: int, random_seed: int) -> dict[str, Any]:
    """The sampler's per-sequence arguments (engine_sampler.py); greedy never passes a temperature."""
    if params.greedy:
        return {SEED_KWARG: GREEDY}
    return {
        SEED_KWARG: params.choice_seed(choice, random_seed),
        "temperature": float(params.temperature),
        "top_k": int(params.top_k),
        "top_p": float(params.top_p),
    }
