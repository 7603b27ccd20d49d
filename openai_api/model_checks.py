"""Which requests a model takes, as the model catalog (contract/catalog.py) says: an embedding model
embeds texts sent as `input`, every other model answers a `prompt`, and a generative model produces at
most its context less one prompt token. A request the model cannot take is a 4xx that names the route,
field or limit, before anything is stored."""

from __future__ import annotations

from collections.abc import Sequence

from contract.catalog import Catalog, ModelKind
from contract.jobs import Sampling as JobSampling
from contract.settings import Settings
from openai_api.errors import Problem

EMBEDDINGS_ROUTE = "POST /v1/embeddings"


def is_embedding(model: str, catalog: Catalog) -> bool:
    served = catalog.get(model)
    return served is not None and served.embeds


def not_for_prompts(model: str) -> Problem:
    """A completion or chat asked of an embedding model."""
    message = f"{model!r} is an embedding model: it answers vectors, not text; use {EMBEDDINGS_ROUTE}"
    return Problem(400, "embedding_model", message, param="model")


def not_for_embeddings(model: str, catalog: Catalog) -> Problem:
    """Texts to embed sent to a model that answers text."""
    known = ", ".join(catalog.names(ModelKind.EMBEDDING)) or "none is served"
    message = f"{model!r} answers text, not vectors; embedding models: {known}"
    return Problem(400, "not_an_embedding_model", message, param="model")


def not_served(model: str, catalog: Catalog) -> Problem | None:
    """The /v1 routes answer a model that is not served as OpenAI does: 404 `model_not_found`."""
    if catalog.get(model) is not None:
        return None
    message = f"The model {model!r} does not exist; served models: {', '.join(catalog.names())}"
    return Problem(404, "model_not_found", message, param="model")


def generative_context(model: str, catalog: Catalog) -> int | None:
    """The tokens a generative model's context holds, prompt and answer; None for any other model."""
    served = catalog.get(model)
    return served.max_model_len if served is not None and served.generates else None


def tokens_problem(model: str, max_tokens: int, catalog: Catalog) -> Problem | None:
    """A 400 when the model cannot produce max_tokens (its context less one prompt token), or None."""
    context = generative_context(model, catalog)
    if not context or max_tokens <= context - 1:
        return None
    message = (
        f"max_tokens {max_tokens} is over the limit of {context - 1} for {model} "
        f"(its context holds {context} tokens, prompt included)"
    )
    return Problem(400, "max_tokens_too_large", message, param="max_tokens")


# What only a generative model's engine does: a one-shot model (one text per prompt, no token choices)
# would ignore them, so they are refused by name rather than dropped.
ENGINE_ONLY = ("n", "logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "structured_outputs")
# Their values that ask for nothing, which any model honours (OpenAI clients often spell them out).
NEUTRAL: dict[str, object] = {"n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.0, "logit_bias": {}}


def engine_only_problem(model: str, sampling: JobSampling, catalog: Catalog) -> Problem | None:
    """A 400 naming the first option a one-shot model cannot honour, or None."""
    served = catalog.get(model)
    if served is None or served.generates:
        return None
    for name in ENGINE_ONLY:
        value = getattr(sampling, name)
        if value is not None and value != NEUTRAL.get(name):
            message = f"{name} needs a generative model; {model} answers one text per prompt"
            return Problem(400, "unsupported_parameter", message, param=name)
    return None


def too_long(what: str, text: str, cfg: Settings, param: str) -> Problem | None:
    """A 413 for a text over SYNAPSE_MAX_PROMPT_CHARS, naming `what` it is, or None."""
    if len(text) <= cfg.max_prompt_chars:
        return None
    message = f"{what} has {len(text)} characters; the limit is {cfg.max_prompt_chars}"
    return Problem(413, "prompt_too_large", message, param=param)


def texts_problem(texts: Sequence[str], cfg: Settings, param: str = "input") -> Problem | None:
    """A 413 for the first text over SYNAPSE_MAX_PROMPT_CHARS, or None."""
    return next(
        (found for i, text in enumerate(texts) if (found := too_long(f"input {i}", text, cfg, param))), None
    )
