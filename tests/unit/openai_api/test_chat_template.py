"""A chat becomes the prompt its model's own template makes, as the model catalog reads it from the
model's folder (contract/catalog_build.py) and the front door renders it (openai_api/chat_template.py)."""

from __future__ import annotations

import json
from pathlib import Path

from contract.catalog import ChatTemplate
from contract.catalog_build import chat_template_of
from openai_api.chat_template import render_with
from openai_api.format import render_chat
from openai_api.schemas import ChatMessage

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CHAT = [
    ChatMessage.model_validate({"role": "system", "content": "Be brief."}),
    ChatMessage.model_validate({"role": "user", "content": [{"type": "text", "text": "Hi"}]}),
]


def checkpoint_with(tmp_path: Path, config: dict[str, object]) -> Path:
    (tmp_path / "checkpoint").mkdir(parents=True)
    (tmp_path / "checkpoint" / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_catalog_takes_the_checkpoints_template_and_special_tokens(tmp_path: Path):
    folder = checkpoint_with(
        tmp_path, {"chat_template": TEMPLATE, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}
    )
    assert chat_template_of(folder) == ChatTemplate(TEMPLATE, bos_token="<s>", eos_token="</s>")


def test_a_checkpoints_template_file_wins_and_a_model_without_one_has_none(tmp_path: Path):
    folder = checkpoint_with(tmp_path, {"eos_token": "</s>", "chat_template": "{{ 'from the config' }}"})
    (folder / "checkpoint" / "chat_template.jinja").write_text(TEMPLATE)
    assert chat_template_of(folder) == ChatTemplate(TEMPLATE, eos_token="</s>")
    bare = checkpoint_with(tmp_path / "bare", {"eos_token": "</s>"})
    assert chat_template_of(bare) is None
    assert chat_template_of(tmp_path / "no-such-model") is None


def test_a_folder_whose_checkpoint_comes_later_gives_the_template_beside_its_config(tmp_path: Path):
    (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
    assert chat_template_of(tmp_path) == ChatTemplate(TEMPLATE)


def test_the_front_door_renders_the_models_template_with_a_generation_prompt():
    prompt = render_with(ChatTemplate(TEMPLATE, bos_token="<s>"), CHAT)
    assert prompt == "<s><|system|>Be brief.\n<|user|>Hi\n<|assistant|>"


def test_without_a_template_or_with_a_broken_one_the_plain_template_is_used():
    assert render_with(None, CHAT) == render_chat(CHAT)
    assert render_with(ChatTemplate("{% for %}"), CHAT) == render_chat(CHAT)
    # The sandbox refuses what a template must not do; the chat still gets an answer.
    unsafe = "{{ messages.__class__.__mro__ }}"
    assert render_with(ChatTemplate(unsafe), CHAT) == render_chat(CHAT)
