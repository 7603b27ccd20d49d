"""Shares a generative model's chat template with the front door, which turns chats into prompts.

The template belongs to the checkpoint's tokenizer (`chat_template.jinja`, or `chat_template` in
`tokenizer_config.json`), and only the worker holds the checkpoint; the front door renders chats
without one. So the agent publishes it, with the tokenizer's special tokens the template may name,
to the model's limits hash in Redis (`contract.keys.limits_key`) once the model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

CHECKPOINT_DIR = "checkpoint"


def chat_template_of(model_folder: Path) -> dict[str, str]:
    """`chat_template`, `bos_token`, `eos_token` of the model's checkpoint; empty when it has no template."""
    checkpoint = model_folder / CHECKPOINT_DIR
    config_file = checkpoint / "tokenizer_config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    except (OSError, ValueError):
        config = {}
    jinja = checkpoint / "chat_template.jinja"
    template = jinja.read_text() if jinja.is_file() else config.get("chat_template")
    if not isinstance(template, str) or not template:
        return {}
    shared = {"chat_template": template}
    for token in ("bos_token", "eos_token"):
        value = config.get(token)
        if isinstance(value, dict):  # an AddedToken as saved
            value = value.get("content")
        if isinstance(value, str):
            shared[token] = value
    return shared
