"""What `POST /async-infer` checks of a request against its model, beyond its schema: the request's
kind (a `prompt`, or texts as `input` for an embedding model) and the options only the other kind takes."""

from __future__ import annotations

from contract.catalog import Catalog
from contract.settings import Settings
from frontdoor.schemas import SubmitRequest
from openai_api.embedding_schemas import texts_of
from openai_api.errors import Problem
from openai_api.model_checks import (
    engine_only_problem,
    is_embedding,
    not_for_embeddings,
    texts_problem,
    tokens_problem,
    too_long,
)
from openai_api.prompt_tokens import context_problem


def input_problem(request: SubmitRequest, cfg: Settings, catalog: Catalog) -> Problem | None:
    """For `POST /async-infer`: the 4xx for a request of the wrong kind for its model, an option of the
    other kind, a text over the size limit, or a prompt over its model's context; None when the request
    fits its model."""
    if is_embedding(request.model, catalog):
        return _embedding_job_problem(request, cfg)
    if request.prompt is None:
        return not_for_embeddings(request.model, catalog)
    if request.encoding_format is not None or request.truncate is not None:
        message = "encoding_format and truncate apply to embedding models only"
        return Problem(400, "invalid_parameter", message, param="encoding_format")
    max_tokens = request.parameters.max_tokens
    found = tokens_problem(request.model, max_tokens, catalog)
    found = found or engine_only_problem(request.model, request.parameters.for_job(), catalog)
    found = found or too_long("prompt", request.prompt, cfg, "prompt")
    return found or context_problem(request.model, request.prompt, max_tokens, catalog, "prompt")


def _embedding_job_problem(request: SubmitRequest, cfg: Settings) -> Problem | None:
    if request.input is None:
        message = f"{request.model!r} is an embedding model: send its texts as input, not prompt"
        return Problem(400, "input_required", message, param="prompt")
    if request.parameters.model_fields_set:
        message = "parameters (max_tokens, sampling) do not apply to an embedding model"
        return Problem(400, "invalid_parameter", message, param="parameters")
    return texts_problem(texts_of(request.input), cfg)
