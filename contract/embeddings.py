"""An embedding job's result: how the manager stores its vectors and how clients read them.

The record keeps the vectors as one base64 string of little-endian float32 rows (a 384-wide row is 2 KB
of text, against about 8 KB as JSON numbers), with each text's truncation flag and the tokens read.
Clients choose the encoding, as OpenAI's `encoding_format` has it: `base64`, each row's own float32
bytes, exact; or `float`, JSON numbers rounded to `FLOAT_DECIMALS` places (an absolute error under
5e-9, two thousand times finer than the model's agreement with sentence-transformers), which keeps a
1,000-row answer under Lambda's 6 MB response limit. Pure Python: the front door's Lambda carries no numpy.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Literal

FLOAT32_BYTES = 4
FLOAT_DECIMALS = 8
EncodingFormat = Literal["float", "base64"]


def stored_record(vectors: bytes, dimensions: int, truncated: Sequence[bool], prompt_tokens: int) -> str:
    """The result field of an embedding job's record, as JSON: its vectors (little-endian float32, a row
    per text, in input order) with their width, each text's truncation flag and the tokens read."""
    result = {
        "embeddings": base64.b64encode(vectors).decode(),
        "dimensions": dimensions,
        "truncated": [bool(t) for t in truncated],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return json.dumps(result, separators=(",", ":"))


def rows_of(result: Mapping[str, Any]) -> list[bytes]:
    """Each stored vector's float32 bytes, in input order."""
    raw = base64.b64decode(result["embeddings"])
    width = int(result["dimensions"]) * FLOAT32_BYTES
    return [raw[start : start + width] for start in range(0, len(raw), width)]


def encoded(row: bytes, encoding: EncodingFormat) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(row).decode()
    values = struct.unpack(f"<{len(row) // FLOAT32_BYTES}f", row)
    return [round(value, FLOAT_DECIMALS) for value in values]


def data_items(result: Mapping[str, Any], encoding: EncodingFormat) -> list[dict[str, Any]]:
    """OpenAI's `data` list: an `embedding` object per text, in input order, with its truncation flag."""
    truncated = result.get("truncated") or []
    return [
        {
            "object": "embedding",
            "index": index,
            "embedding": encoded(row, encoding),
            "truncated": bool(truncated[index]) if index < len(truncated) else False,
        }
        for index, row in enumerate(rows_of(result))
    ]


def result_view(result: Mapping[str, Any], encoding: EncodingFormat) -> dict[str, Any]:
    """An embedding job's result as `GET /results/{jobId}` shows it: the data list and the usage."""
    return {"data": data_items(result, encoding), "usage": dict(result["usage"])}
