"""An embeddings request's job, or why it is refused, and a finished job's OpenAI body: one place for
`POST /v1/embeddings` and the Batch API's lines (openai_api/batch_lines.py)."""

from __future__ import annotations

from dataclasses import replace

from contract.catalog import Catalog
from contract.embeddings import data_items
from contract.job_record import JobRecord
from contract.jobs import EmbeddingOptions, Job, Priority
from contract.settings import Settings
from openai_api.embedding_schemas import EmbeddingRequest, texts_of
from openai_api.errors import Problem
from openai_api.model_checks import is_embedding, not_for_embeddings, not_served, texts_problem


def embedding_problem(request: EmbeddingRequest, cfg: Settings, catalog: Catalog) -> Problem | None:
    """A model not served or not an embedding model, or a text over the size limit; None when it fits."""
    found = not_served(request.model, catalog)
    if found is None and not is_embedding(request.model, catalog):
        found = not_for_embeddings(request.model, catalog)
    return found or texts_problem(texts_of(request.input), cfg)


def embedding_job(
    request: EmbeddingRequest,
    *,
    cfg: Settings,
    catalog: Catalog,
    tenant: str,
    timeout_ms: int,
    priority: Priority = Priority.INTERACTIVE,
    job_id: str | None = None,
) -> Job | Problem:
    """The job an embeddings request stands for, or why it is refused: shared with the Batch API's lines."""
    found = embedding_problem(request, cfg, catalog)
    if found is not None:
        return found
    job = Job.new(
        model=request.model,
        prompt="",
        max_tokens=0,
        parameters=EmbeddingOptions(request.encoding_format, request.truncate),
        inputs=texts_of(request.input),
        timeout_ms=timeout_ms,
        tenant=tenant,
        priority=priority,
    )
    return job if job_id is None else replace(job, id=job_id)


def embedding_list(request: EmbeddingRequest, record: JobRecord) -> dict[str, object]:
    """The answer's body, built as a dict: a thousand vectors through a pydantic model cost more than the
    rest of the call (EmbeddingList documents the same shape)."""
    result = record.result_json()
    return {
        "object": "list",
        "data": data_items(result, request.encoding_format),
        "model": request.model,
        "usage": result["usage"],
    }
