"""An embedding job's result: how the manager stores its vectors and how clients read them.

The record keeps the vectors as one base64 string of little-endian float32 rows (a 384-wide row is 2 KB
of text, against about 8 KB as JSON numbers), with each text's truncation flag and the tokens read.
Clients choose the encoding, as OpenAI's `encoding_format` has it: `base64`, each row's own float32
bytes, exact; or `float`, JSON numbers rounded to `FLOAT_DECIMALS` places (an absolute error under
5e-9, far below what a float32 vector of unit length resolves), which keeps a 1,000-row answer under
Lambda's 6 MB response limit.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

DTYPE = np.dtype("<f4")
# A job's vectors: [texts, dimensions] float32.
Vectors = npt.NDArray[np.float32]
FLOAT_DECIMALS = 8
EncodingFormat = Literal["float", "base64"]
ENCODING_FORMATS: tuple[EncodingFormat, ...] = ("float", "base64")


def stored_result(vectors: Vectors, truncated: Sequence[bool], prompt_tokens: int) -> dict[str, Any]:
    """The result field of an embedding job's record: its vectors, one row per text, in input order."""
    dimensions = vectors.shape[1]
    return {
        "embeddings": base64.b64encode(np.ascontiguousarray(vectors, dtype=DTYPE).tobytes()).decode(),
        "dimensions": dimensions,
        "truncated": [bool(t) for t in truncated],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def is_embedding_result(result: Mapping[str, Any]) -> bool:
    return "embeddings" in result


def vectors_of(result: Mapping[str, Any]) -> Vectors:
    """The stored vectors as a [rows, dimensions] float32 array."""
    flat = np.frombuffer(base64.b64decode(result["embeddings"]), dtype=DTYPE)
    return flat.reshape(-1, int(result["dimensions"]))


def encoded(vector: Vectors, encoding: EncodingFormat) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype=DTYPE).tobytes()).decode()
    rounded: list[float] = np.round(vector.astype(np.float64), FLOAT_DECIMALS).tolist()
    return rounded


def data_items(result: Mapping[str, Any], encoding: EncodingFormat) -> list[dict[str, Any]]:
    """OpenAI's `data` list: an `embedding` object per text, in input order, with its truncation flag."""
    truncated = result.get("truncated") or []
    return [
        {
            "object": "embedding",
            "index": index,
            "embedding": encoded(vector, encoding),
            "truncated": bool(truncated[index]) if index < len(truncated) else False,
        }
        for index, vector in enumerate(vectors_of(result))
    ]


def result_view(result: Mapping[str, Any], encoding: EncodingFormat) -> dict[str, Any]:
    """An embedding job's result as `GET /results/{jobId}` shows it: the data list and the usage."""
    return {"data": data_items(result, encoding), "usage": dict(result["usage"])}


def encoding_of(parameters: str | None) -> EncodingFormat:
    """The encoding a job asked for in its parameters (JSON), float when it named none."""
    value = json.loads(parameters or "{}").get("encoding_format")
    return "base64" if value == "base64" else "float"
