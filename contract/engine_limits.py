"""The synapse_llm engine's limits on sampling, declared once for both sides that enforce them.

The engine (triton_backends/synapse_llm/engine_rules.py) refuses a request past them, and the front
door (openai_api/sampling.py, openai_api/schemas.py) refuses it before it queues, so that a job never
fails on the worker for what the front door could have said at once. Pure constants and rules, standard
library only: the engine imports this inside Triton's Python stub, where nothing else of the project loads.
"""

from __future__ import annotations

MAX_CHOICES = 16  # choices (n) of one request: each is a sequence of the engine's batch
MAX_TOP_LOGPROBS = 20  # likeliest tokens listed per position (OpenAI's and vLLM's limit)
# Integers, so the OpenAPI spec states the bounds as OpenAI's does (2, not 2.0).
PENALTY_LIMIT = 2  # presence and frequency penalties lie in [-2, 2] (OpenAI's range)
BIAS_LIMIT = 100  # a logit bias lies in [-100, 100] (OpenAI's range)
MAX_GRAMMAR_CHARS = 1 << 20  # a structured output's Lark grammar: a request's tools fit many times over


def context_overflow(prompt_tokens: int, max_tokens: int, max_model_len: int) -> str | None:
    """Why a prompt and its answer do not fit the model's context (None: they do): the engine would
    fail the request, so the front door refuses it first where it can count the prompt's tokens."""
    if prompt_tokens + max_tokens <= max_model_len:
        return None
    return (
        f"max_tokens {max_tokens} plus the prompt's {prompt_tokens} tokens is over the model's context of "
        f"{max_model_len} tokens"
    )


# The engine's sampling parameters, vLLM's names, in the order its refusals list them.
SAMPLING_PARAMETERS = (
    "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "logprobs", "presence_penalty",
    "frequency_penalty", "logit_bias", "structured_outputs",
)  # fmt: skip
# Those a job carries apart from the others: its token budget and its stop sequences.
CARRIED_APART = ("max_tokens", "stop")
