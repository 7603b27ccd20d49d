"""Turns a chat into the prompt a model expects: its own chat template when it has one.

The worker publishes a generative model's template (worker_image/chat_template.py); rendering it
here, in a sandbox, is what an OpenAI-compatible server does with the tokenizer's template. A model
without one (gpu-sim, or a generative model no worker has loaded yet) gets the plain template of
`openai_format.render_chat`. Templates are cached per execution environment for `CACHE_S`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cache

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from contract.keys import limits_key
from contract.redis_client import SyncRedis
from frontdoor.openai_format import message_text, render_chat
from frontdoor.openai_schemas import ChatMessage

CACHE_S = 60.0
_cached: dict[str, tuple[float, Mapping[str, str]]] = {}


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)


def model_template(client: SyncRedis, model: str, now: float | None = None) -> Mapping[str, str]:
    """The model's published template and special tokens (empty: none), at most CACHE_S old."""
    now = time.monotonic() if now is None else now
    hit = _cached.get(model)
    if hit is not None and now - hit[0] < CACHE_S:
        return hit[1]
    fields: dict[str, str] = client.hgetall(limits_key(model))  # type: ignore[assignment]
    shared = {k: v for k, v in fields.items() if k in ("chat_template", "bos_token", "eos_token")}
    _cached[model] = (now, shared)
    return shared


def render_with(template: Mapping[str, str], messages: Sequence[ChatMessage]) -> str:
    """The chat through `template` with a generation prompt; the plain template when there is none or
    it fails (a template is data from the model's checkpoint: it must not break the route)."""
    source = template.get("chat_template")
    if not source:
        return render_chat(messages)
    chat = [{"role": m.role, "content": message_text(m)} for m in messages]
    try:
        return (
            _environment()
            .from_string(source)
            .render(
                messages=chat,
                add_generation_prompt=True,
                bos_token=template.get("bos_token", ""),
                eos_token=template.get("eos_token", ""),
            )
        )
    except TemplateError:
        return render_chat(messages)
