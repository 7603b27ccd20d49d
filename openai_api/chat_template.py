"""Turns a chat into the prompt a model expects: its own chat template when it has one.

The template comes from the model catalog (contract/catalog.py), which reads it from the model's
checkpoint; rendering it here, in a sandbox, is what an OpenAI-compatible server does with the
tokenizer's template. A model without one (gpu-sim) gets the plain template of
`openai_api.format.render_chat`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from contract.catalog import ChatTemplate
from openai_api.format import message_text, render_chat
from openai_api.schemas import ChatMessage


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)


def render_with(template: ChatTemplate | None, messages: Sequence[ChatMessage]) -> str:
    """The chat through `template` with a generation prompt; the plain template when there is none or
    it fails (a template is data from the model's checkpoint: it must not break the route)."""
    if template is None:
        return render_chat(messages)
    chat = [{"role": m.role, "content": message_text(m)} for m in messages]
    try:
        return (
            _environment()
            .from_string(template.source)
            .render(
                messages=chat,
                add_generation_prompt=True,
                bos_token=template.bos_token,
                eos_token=template.eos_token,
            )
        )
    except TemplateError:
        return render_chat(messages)
