"""Which requests a model takes: an embedding model (SYNAPSE_EMBEDDING_MODELS) embeds texts sent as
`input`; every other model answers a `prompt`. A request of the wrong kind is a 400 that names the
route or field to use, before anything is stored."""

from __future__ import annotations

from collections.abc import Sequence

from contract.settings import Settings
from frontdoor.embedding_schemas import texts_of
from frontdoor.errors import Problem
from frontdoor.schemas import SubmitRequest

EMBEDDINGS_ROUTE = "POST /v1/embeddings"


def is_embedding(model: str, cfg: Settings) -> bool:
    return model in cfg.embedding_models


def not_for_prompts(model: str) -> Problem:
    """A completion or chat asked of an embedding model."""
    message = f"{model!r} is an embedding model: it answers vectors, not text; use {EMBEDDINGS_ROUTE}"
    return Problem(400, "embedding_model", message, param="model")


def not_for_embeddings(model: str, cfg: Settings) -> Problem:
    """Texts to embed sent to a model that answers text."""
    known = ", ".join(cfg.embedding_models) or "none is served"
    message = f"{model!r} answers text, not vectors; embedding models: {known}"
    return Problem(400, "not_an_embedding_model", message, param="model")


def not_served(model: str, cfg: Settings) -> Problem | None:
    """The /v1 routes answer a model that is not served as OpenAI does: 404 `model_not_found`."""
    if model in cfg.models:
        return None
    message = f"The model {model!r} does not exist; served models: {', '.join(cfg.models)}"
    return Problem(404, "model_not_found", message, param="model")


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


def input_problem(request: SubmitRequest, cfg: Settings) -> Problem | None:
    """For `POST /async-infer`: the 4xx for a request of the wrong kind for its model, an option of the
    other kind, or a text over the size limit; None when the request fits its model."""
    if is_embedding(request.model, cfg):
        return _embedding_job_problem(request, cfg)
    if request.prompt is None:
        return not_for_embeddings(request.model, cfg)
    if request.encoding_format is not None or request.truncate is not None:
        message = "encoding_format and truncate apply to embedding models only"
        return Problem(400, "invalid_parameter", message, param="encoding_format")
    return too_long("prompt", request.prompt, cfg, "prompt")


def _embedding_job_problem(request: SubmitRequest, cfg: Settings) -> Problem | None:
    if request.input is None:
        message = f"{request.model!r} is an embedding model: send its texts as input, not prompt"
        return Problem(400, "input_required", message, param="prompt")
    if request.parameters.model_fields_set:
        message = "parameters (max_tokens, sampling) do not apply to an embedding model"
        return Problem(400, "invalid_parameter", message, param="parameters")
    return texts_problem(texts_of(request.input), cfg)
