"""Sentence embeddings from a sentence-transformers checkpoint with plain torch + transformers.

Computes what sentence-transformers computes for all-MiniLM-L6-v2 (its Transformer, mean Pooling and
Normalize modules) without importing it: one tokenisation of the batch, padded to its longest text
and cut at the checkpoint's window, one forward pass, the mean of the token vectors under the
attention mask, L2-normalised. Kept free of Triton so that tests and benchmarks import it directly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModel, AutoTokenizer

WINDOW_FILE = "sentence_bert_config.json"  # max_seq_length: the window sentence-transformers cuts at
POOLING_FILE = Path("1_Pooling") / "config.json"


@dataclass(frozen=True, slots=True)
class Embeddings:
    """One row per text: its unit vector, the tokens the model read, and whether the text was cut."""

    vectors: npt.NDArray[np.float32]  # [n, dimensions]
    tokens: npt.NDArray[np.int32]  # [n], special tokens included, after truncation
    truncated: npt.NDArray[np.bool_]  # [n], the text had more tokens than the window


class Embedder:
    """A checkpoint folder loaded once on one device; `embed` turns a batch of texts into vectors."""

    def __init__(self, checkpoint: Path, device: torch.device) -> None:
        self.device = device
        self.window = int(json.loads((checkpoint / WINDOW_FILE).read_text())["max_seq_length"])
        _check_mean_pooling(checkpoint / POOLING_FILE)
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
        if not self.tokenizer.is_fast:  # `embed` reads each text's overflow from the Rust encodings
            raise ValueError(f"{checkpoint}: no fast tokenizer (tokenizer.json)")
        # float32 on a GPU too: half precision would move the vectors off sentence-transformers' by ~1e-3.
        model = AutoModel.from_pretrained(checkpoint, local_files_only=True, dtype=torch.float32)
        self.model = model.to(device).eval()
        positions = int(self.model.config.max_position_embeddings)
        if self.window > positions:
            raise ValueError(f"{checkpoint}: window {self.window} exceeds the model's {positions} positions")
        self.dimensions = int(self.model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """The batch's embeddings, in the order of `texts`."""
        if not texts:
            return Embeddings(
                np.zeros((0, self.dimensions), np.float32), np.zeros(0, np.int32), np.zeros(0, np.bool_)
            )
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.window, return_tensors="pt"
        )
        # The tokenizer keeps what truncation cut off in each encoding: a text was cut iff it has some,
        # so one tokenisation tells both the window's tokens and the overflow.
        truncated = np.array([bool(e.overflowing) for e in batch.encodings], dtype=np.bool_)
        with torch.inference_mode():
            inputs = {name: tensor.to(self.device) for name, tensor in batch.items()}
            hidden = self.model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            counts = mask.sum(dim=1)
            mean = (hidden * mask).sum(dim=1) / counts.clamp(min=1e-9)
            vectors = torch.nn.functional.normalize(mean, p=2, dim=1)
            return Embeddings(
                vectors.float().cpu().numpy(),
                counts.squeeze(-1).to(torch.int32).cpu().numpy(),
                truncated,
            )


def _check_mean_pooling(config_file: Path) -> None:
    """A checkpoint pooled any other way would get wrong vectors silently: refused at load instead."""
    config = json.loads(config_file.read_text())
    modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode_") and v is True)
    if modes != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"{config_file}: only mean pooling is supported, the checkpoint asks for {modes}")
