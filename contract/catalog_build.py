"""Builds the model catalog (contract/catalog.py) from a model repository: each served model's folder, as
Triton loads it, holds everything its entry needs.

- Kind and limits: the folder's `config.pbtxt` (`contract.catalog.from_triton_config` reads it).
- Tokenizer: the `tokenizer.json` of the checkpoint the model runs, for the front door to count a
  prompt's tokens with: the folder's own checkpoint's, or where the folder has none, the one a worker
  builds for it in the checkpoints folder (`checkpoints_of`), which may not exist yet; the front door
  counts once it does. The AWS stacks leave it out: the Lambda carries no checkpoint.
- Chat template: the checkpoint's own (in the folder its config's `checkpoint` parameter names,
  `checkpoint/` by default: `chat_template.jinja`, else `chat_template` in `tokenizer_config.json`,
  with the tokenizer's `bos_token` and `eos_token`), and where the folder carries none (its checkpoint
  is one the project builds, or one the model store adds later) the `chat_template.jinja` beside
  `config.pbtxt`.

Built by `synapse up` and by the AWS stacks at synth (and by a process whose settings carry no catalog).
Inside the Lambda the catalog comes whole from SYNAPSE_MODEL_CATALOG: it builds nothing, so it needs
neither protobuf nor Triton's config schema (imported only to build).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from contract.catalog import Catalog, CatalogError, ChatTemplate, ServedModel, from_triton_config
from contract.settings import Settings

CONFIG_FILE = "config.pbtxt"
CHECKPOINT_DIR = "checkpoint"
TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_FILE = "tokenizer.json"  # a fast tokenizer whole, as transformers saves it


def triton_config(text: str) -> dict[str, Any]:
    """A config.pbtxt as Triton's JSON model config (proto field names, as the repository API takes them)."""
    from google.protobuf import json_format, text_format  # to build only: the Lambda carries neither
    from tritonclient.grpc import model_config_pb2

    parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
    config: dict[str, Any] = json_format.MessageToDict(parsed, preserving_proto_field_name=True)
    return config


def chat_template_of(folder: Path, checkpoint_dir: str = CHECKPOINT_DIR) -> ChatTemplate | None:
    """The template a chat with this model is rendered with, or None when it has none. checkpoint_dir:
    where the model loads its checkpoint from (its config's `checkpoint` parameter), from the folder."""
    checkpoint = folder / checkpoint_dir
    config_file = checkpoint / "tokenizer_config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    except (OSError, ValueError):
        config = {}
    # As transformers reads a checkpoint: its template file before the tokenizer config's entry.
    candidates = (
        _read(checkpoint / TEMPLATE_FILE),
        config.get("chat_template"),
        _read(folder / TEMPLATE_FILE),
    )
    template = next((found for found in candidates if isinstance(found, str) and found), None)
    if template is None:
        return None
    return ChatTemplate(template, _token(config.get("bos_token")), _token(config.get("eos_token")))


def _read(path: Path) -> str | None:
    try:
        return path.read_text() if path.is_file() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path} cannot be read: {exc}") from exc


def _token(value: object) -> str:
    if isinstance(value, dict):  # an AddedToken as saved
        value = value.get("content")
    return value if isinstance(value, str) else ""


def served_model(folder: Path) -> ServedModel:
    """The entry of the model in this folder."""
    from google.protobuf.text_format import ParseError

    config_file = folder / CONFIG_FILE
    try:
        config = triton_config(config_file.read_text())
    except OSError as exc:
        raise CatalogError(f"{folder.name}: no {CONFIG_FILE} in {folder} ({exc.strerror})") from exc
    except ParseError as exc:
        raise CatalogError(f"{folder.name}: {config_file} does not parse: {exc}") from exc
    checkpoint_dir = (config.get("parameters") or {}).get("checkpoint", {}).get(
        "string_value"
    ) or CHECKPOINT_DIR
    tokenizer = folder / checkpoint_dir / TOKENIZER_FILE
    found = str(tokenizer.resolve()) if tokenizer.is_file() else None
    return from_triton_config(folder.name, config, chat_template_of(folder, checkpoint_dir), found)


def checkpoints_of(settings: Settings) -> Path:
    """Where a worker builds the checkpoints the project provides (worker_image/agent.py), one folder
    per model."""
    return settings.checkpoint_dir or settings.state_dir / "checkpoints"


def with_built_tokenizers(catalog: Catalog, checkpoints: Path) -> Catalog:
    """Each generative model whose folder has no checkpoint of its own gets the tokenizer of the one a
    worker builds for it in `checkpoints`."""
    return Catalog.of(
        replace(entry, tokenizer=str((checkpoints / name / TOKENIZER_FILE).resolve()))
        if entry.generates and entry.tokenizer is None
        else entry
        for name, entry in catalog.models.items()
    )


def build_catalog(repository: Path, models: Iterable[str]) -> Catalog:
    """The entries of these models, from their folders in the repository."""
    return Catalog.of(served_model(repository / model) for model in models)


@cache
def catalog_of(settings: Settings) -> Catalog:
    """The catalog of the served models (SYNAPSE_MODELS) as these settings give it; raises CatalogError
    naming a served model it lacks, so that a mistake stops the start rather than a first request."""
    if settings.model_catalog:
        found = Catalog.from_json(settings.model_catalog)
    else:
        found = with_built_tokenizers(build_catalog(settings.model_repository, settings.models),
                                      checkpoints_of(settings))  # fmt: skip
    missing = [model for model in settings.models if found.get(model) is None]
    if missing:
        raise CatalogError(f"served models with no catalog entry: {', '.join(missing)}")
    return Catalog.of(found[model] for model in settings.models)
