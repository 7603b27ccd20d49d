"""Turns a chat into the prompt a model expects: its own chat template when it has one.

The template comes from the model catalog (contract/catalog.py), which reads it from the model's
checkpoint; rendering it here, in a sandbox, is what an OpenAI-compatible server does with the
tokenizer's template. A model without one (gpu-sim) gets the plain template of
`openai_api.format.render_chat`. Tools reach a template that offers them (one that reads `tools`) as
transformers passes them; any other gets them in its system message (`openai_api.tools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from contract.catalog import ChatTemplate
from openai_api.format import render_chat
from openai_api.schemas import ChatMessage, Tool
from openai_api.tools import function_specs, generic_turns, native_turns


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)


def offers_tools(template: ChatTemplate) -> bool:
    """Whether the template renders tools itself (transformers' convention: it reads `tools`)."""
    return "tools" in template.source


def render_with(
    template: ChatTemplate | None, messages: Sequence[ChatMessage], tools: Sequence[Tool] = ()
) -> str:
    """The chat through `template` with a generation prompt; the plain template when there is none or
    it fails (a template is data from the model's checkpoint: it must not break the route). `tools`:
    those the answer may call (none with tool_choice none)."""
    if template is None:
        return render_chat(messages, tools)
    context: dict[str, Any] = {"messages": generic_turns(messages, tools)}
    if offers_tools(template):
        context = {"messages": native_turns(messages), "tools": function_specs(tools) or None}
    try:
        return (
            _environment()
            .from_string(template.source)
            .render(
                **context,
                add_generation_prompt=True,
                bos_token=template.bos_token,
                eos_token=template.eos_token,
            )
        )
    except TemplateError:
        return render_chat(messages, tools)
