"""gpu-sim's fault markers (`!fail`, `!crash`) are test fixtures: honoured only where its config turns
fault injection on, never in the served `triton_models/gpu-sim/config.pbtxt`."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.models import MODELS, InferenceResponse, fault_injection_repository, model_py

PARAMETER = re.compile(r'parameters: \{ key: "([^"]+)" value: \{ string_value: "([^"]*)" \} \}')


@pytest.fixture
def gpu_sim(monkeypatch: pytest.MonkeyPatch) -> Any:
    return model_py("gpu-sim", monkeypatch)


def parameters(config: Path) -> dict[str, dict[str, str]]:
    """config.pbtxt's parameters as Triton hands them to `initialize` (in the model config's JSON)."""
    return {key: {"string_value": value} for key, value in PARAMETER.findall(config.read_text())}


def served(gpu_sim: Any, params: dict[str, dict[str, str]], prompts: list[str]) -> InferenceResponse:
    model = gpu_sim.TritonPythonModel()
    quick = {**params, "base_ms": {"string_value": "0"}, "per_item_ms": {"string_value": "0"}}
    model.initialize({"model_config": json.dumps({"parameters": quick})})
    request = types.SimpleNamespace(
        values={"PROMPT": np.array([[p.encode()] for p in prompts], dtype=np.object_)}
    )
    (response,) = model.execute([request])
    return response  # type: ignore[no-any-return]


def texts_and_errors(response: InferenceResponse) -> list[tuple[str, str]]:
    columns = (response.outputs["TEXT"], response.outputs["ERROR"])
    return [(text[0].decode(), error[0].decode()) for text, error in zip(*columns, strict=True)]


def test_the_served_config_leaves_the_markers_off_and_they_are_answered_like_any_prompt(gpu_sim: Any):
    params = parameters(MODELS / "gpu-sim" / "config.pbtxt")
    assert not gpu_sim.fault_injection(params)
    response = served(gpu_sim, params, ["!fail on purpose", "!crash the device"])
    assert response.error is None
    assert texts_and_errors(response) == [("esoprup no liaf!", ""), ("ecived eht hsarc!", "")]


def test_a_config_without_the_parameter_leaves_the_markers_off(gpu_sim: Any):
    assert not gpu_sim.fault_injection({})
    assert served(gpu_sim, {}, ["!crash now"]).error is None


def test_with_fault_injection_on_fail_fails_its_prompt_and_crash_its_request(gpu_sim: Any, tmp_path: Path):
    params = parameters(fault_injection_repository(tmp_path) / "gpu-sim" / "config.pbtxt")
    assert gpu_sim.fault_injection(params)
    one_fails = texts_and_errors(served(gpu_sim, params, ["!fail on purpose", "fine"]))
    assert one_fails[0][0] == "" and "!fail" in one_fails[0][1]
    assert one_fails[1] == ("enif", "")
    crashed = served(gpu_sim, params, ["fine", "!crash the device"])
    assert crashed.error is not None and "simulated device fault" in crashed.error.message


def test_the_tests_repository_is_the_served_one_with_only_fault_injection_switched_on(tmp_path: Path):
    copy = fault_injection_repository(tmp_path)
    served_files = sorted(p.relative_to(MODELS) for p in MODELS.rglob("*") if "__pycache__" not in p.parts)
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == served_files
    config = Path("gpu-sim", "config.pbtxt")
    for path in served_files:
        if path != config and (MODELS / path).is_file():
            assert (copy / path).read_bytes() == (MODELS / path).read_bytes(), path
    assert parameters(copy / config) == {
        **parameters(MODELS / config),
        "fault_injection": {"string_value": "true"},
    }
