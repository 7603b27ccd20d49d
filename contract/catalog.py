"""The model catalog: what each served model is (its kind), what it can hold (its limits) and how a chat
becomes its prompt (its chat template), known before any worker starts.

It is derived from the model repository (each model's `config.pbtxt` and chat template) and read the same
way by the front door and the manager (`contract.catalog_build.catalog_of`): from SYNAPSE_MODEL_CATALOG,
the JSON that the AWS stacks write at synth and `synapse up` builds once, or, where that is unset (the
tests' processes), built from SYNAPSE_MODEL_REPOSITORY at start. A model's kind decides everything
downstream of it: which routes take it, which runner the manager gives it, whether its jobs stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

# A generative model's sequences per worker when its config names none (vLLM's own default is larger;
# ours is what a small engine on the CPU keeps up with).
DEFAULT_MAX_NUM_SEQS = 32
# The default chat model: SmolLM2-135M-Instruct (triton_models/smollm2-135m-instruct), served by `make up`
# and by a deploy unless told otherwise, and the one the README's examples talk to.
CHAT_MODEL = "smollm2-135m-instruct"


class ModelKind(StrEnum):
    """How a model answers, and so how its jobs run."""

    ONE_SHOT = "one-shot"  # a prompt in, a text out: a row per job in batches cut by size and time window
    EMBEDDING = "embedding"  # texts in, vectors out: a job's texts are rows of the model's batches
    GENERATIVE = "generative"  # one request per job on a continuously batching engine, streamed


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A checkpoint's chat template (Jinja) and the special tokens it may name."""

    source: str
    bos_token: str = ""
    eos_token: str = ""


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One model's entry. max_batch_size: rows in one request (one-shot and embedding models);
    max_num_seqs: sequences one worker runs at once (generative); max_model_len: prompt plus generated
    tokens a generative model can hold, or the window an embedding model reads (None: not stated);
    kv_tokens: the tokens one worker's KV cache holds for a generative model, its sequences together
    (num_blocks x block_size; None: not stated); tokenizer: the `tokenizer.json` of the checkpoint a
    generative model runs, with which the front door counts a prompt's tokens before it queues anything
    (openai_api/prompt_tokens.py; None: the engine alone counts them)."""

    name: str
    kind: ModelKind
    max_batch_size: int = 1
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_model_len: int | None = None
    chat_template: ChatTemplate | None = None
    kv_tokens: int | None = None
    tokenizer: str | None = None

    @property
    def embeds(self) -> bool:
        return self.kind is ModelKind.EMBEDDING

    @property
    def generates(self) -> bool:
        return self.kind is ModelKind.GENERATIVE

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServedModel:
        template = data.get("chat_template")
        return cls(
            name=str(data["name"]),
            kind=ModelKind(data["kind"]),
            max_batch_size=int(data.get("max_batch_size", 1)),
            max_num_seqs=int(data.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS)),
            max_model_len=None if data.get("max_model_len") is None else int(data["max_model_len"]),
            chat_template=None if not template else ChatTemplate(**template),
            kv_tokens=None if data.get("kv_tokens") is None else int(data["kv_tokens"]),
            tokenizer=None if not data.get("tokenizer") else str(data["tokenizer"]),
        )


def from_triton_config(
    name: str, config: Mapping[str, Any], template: ChatTemplate | None = None, tokenizer: str | None = None
) -> ServedModel:
    """The entry of a model with this Triton JSON model config: the one rule that tells the kinds apart.
    A decoupled model (one request in, a stream of responses out) generates; a model with an
    EMBEDDING output embeds; any other answers a row per job."""
    params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
    if (config.get("model_transaction_policy") or {}).get("decoupled", False):
        kind = ModelKind.GENERATIVE
    elif any(output.get("name") == "EMBEDDING" for output in config.get("output") or ()):
        kind = ModelKind.EMBEDDING
    else:
        kind = ModelKind.ONE_SHOT
    max_len = params.get("max_model_len", "")
    blocks, block_size = params.get("num_blocks", ""), params.get("block_size", "")
    generative = kind is ModelKind.GENERATIVE
    return ServedModel(
        name=name,
        kind=kind,
        max_batch_size=int(config.get("max_batch_size", 1)) or 1,
        max_num_seqs=max(1, int(params.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS)),
        max_model_len=int(max_len) if max_len else None,
        chat_template=template if generative else None,
        kv_tokens=int(blocks) * int(block_size) if generative and blocks and block_size else None,
        tokenizer=tokenizer if generative else None,
    )


@dataclass(frozen=True, slots=True)
class Catalog:
    """The served models by name."""

    models: Mapping[str, ServedModel]

    @classmethod
    def of(cls, entries: Iterable[ServedModel]) -> Catalog:
        return cls({entry.name: entry for entry in entries})

    def get(self, name: str) -> ServedModel | None:
        return self.models.get(name)

    def __getitem__(self, name: str) -> ServedModel:
        return self.models[name]

    def names(self, kind: ModelKind | None = None) -> tuple[str, ...]:
        """The served models' names (of one kind when given), in the order served."""
        return tuple(name for name, entry in self.models.items() if kind is None or entry.kind is kind)

    def to_json(self) -> str:
        # Unset fields left out (each entry's reader has their defaults): the Lambda's copy is an env var.
        entries = [
            {k: v for k, v in asdict(entry).items() if v is not None} for entry in self.models.values()
        ]
        return json.dumps(entries, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Catalog:
        return cls.of(ServedModel.from_dict(entry) for entry in json.loads(text))


class CatalogError(ValueError):
    """A served model the catalog cannot describe: a deploy or start-up mistake, reported by name."""
