"""A completion or chat request's job, or why it is refused: one place for the /v1 routes and the Batch
API's lines (openai_api/batch_lines.py), so both refuse and run the same."""

from __future__ import annotations

from dataclasses import replace

from contract.catalog import Catalog, ChatTemplate
from contract.jobs import Job, Priority
from contract.settings import Settings
from openai_api.chat_template import render_with
from openai_api.errors import Problem
from openai_api.format import max_tokens, offered_tools, structured_outputs, tools_problem
from openai_api.model_checks import (
    engine_only_problem,
    is_embedding,
    not_for_prompts,
    not_served,
    tokens_problem,
    too_long,
)
from openai_api.prompt_tokens import context_problem
from openai_api.sampling import StructuredOutputs
from openai_api.schemas import ChatCompletionRequest, CompletionRequest


def template_of(model: str, catalog: Catalog) -> ChatTemplate | None:
    """The served model's chat template; None for one without, or a model not served (refused later)."""
    served = catalog.get(model)
    return None if served is None else served.chat_template


def model_problem(
    model: str, prompt: str, tokens: int, *, cfg: Settings, catalog: Catalog, prompt_param: str
) -> Problem | None:
    """OpenAI answers an unknown model with 404 `model_not_found`; a prompt over the limit gets 413, a
    max_tokens past the model's context 400, as does a prompt that with it is over the context. Before
    the capacity check: a request that can only be refused never wakes the pool."""
    found = not_served(model, catalog)
    if found is None and is_embedding(model, catalog):
        found = not_for_prompts(model)
    found = found or tokens_problem(model, tokens, catalog)
    found = found or too_long("the prompt", prompt, cfg, prompt_param)
    return found or context_problem(model, prompt, tokens, catalog, prompt_param)


def prompt_of(request: CompletionRequest | ChatCompletionRequest, catalog: Catalog) -> str:
    """The text the model continues: a completion's prompt, or a chat rendered with the model's template."""
    if isinstance(request, CompletionRequest):
        return request.prompt
    return render_with(template_of(request.model, catalog), request.messages, offered_tools(request))


def completion_job(
    request: CompletionRequest | ChatCompletionRequest,
    *,
    cfg: Settings,
    catalog: Catalog,
    tenant: str,
    timeout_ms: int,
    priority: Priority = Priority.INTERACTIVE,
    job_id: str | None = None,
) -> Job | Problem:
    """The job a completion or chat request stands for, or why it is refused: one place for the /v1
    routes and the Batch API's lines, so both refuse and run the same."""
    prompt = prompt_of(request, catalog)
    prompt_param = "prompt" if isinstance(request, CompletionRequest) else "messages"
    tokens = max_tokens(request)
    found = model_problem(request.model, prompt, tokens, cfg=cfg, catalog=catalog, prompt_param=prompt_param)
    if found is None and isinstance(request, ChatCompletionRequest):
        found = tools_problem(request)
    if found is not None:
        return found
    options = request.sampling()
    if isinstance(request, ChatCompletionRequest):
        constraint = structured_outputs(request)
        if constraint is not None:
            options.structured_outputs = StructuredOutputs.model_validate(constraint)
    sampling = options.for_job()
    found = engine_only_problem(request.model, sampling, catalog)
    if found is not None:
        return found
    job = Job.new(
        model=request.model,
        prompt=prompt,
        max_tokens=tokens,
        parameters=sampling,
        timeout_ms=timeout_ms,
        tenant=tenant,
        priority=priority,
    )
    return job if job_id is None else replace(job, id=job_id)
