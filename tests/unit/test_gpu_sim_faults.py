"""gpu-sim's fault markers (`!fail`, `!crash`) are test fixtures: honoured only where its config turns
fault injection on, never in the served `triton_models/gpu-sim/config.pbtxt`."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.models import MODELS, fault_injection_repository

MODEL = MODELS / "gpu-sim" / "1" / "model.py"
PARAMETER = re.compile(r'parameters: \{ key: "([^"]+)" value: \{ string_value: "([^"]*)" \} \}')


class Tensor:
    def __init__(self, name: str, array: Any) -> None:
        self.name, self.array = name, array


class TritonError:
    def __init__(self, message: str) -> None:
        self.message = message


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self.outputs = {t.name: t.array for t in output_tensors or []}
        self.error = error


def fake_pb_utils() -> types.ModuleType:
    """The few names of Triton's `triton_python_backend_utils` gpu-sim uses (it exists only in Triton)."""
    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = Tensor  # type: ignore[attr-defined]
    module.TritonError = TritonError  # type: ignore[attr-defined]
    module.InferenceResponse = InferenceResponse  # type: ignore[attr-defined]
    module.get_input_tensor_by_name = lambda request, name: types.SimpleNamespace(  # type: ignore[attr-defined]
        as_numpy=lambda: request[name]
    )
    return module


@pytest.fixture
def gpu_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils())
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ inside the served repository
    spec = importlib.util.spec_from_file_location("gpu_sim_model_under_test", MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # initialize() freezes the heap for Triton's stub process; not this test process's.
    monkeypatch.setattr(module, "gc", types.SimpleNamespace(collect=lambda: 0, freeze=lambda: None))
    yield module


def parameters(config: Path) -> dict[str, dict[str, str]]:
    """config.pbtxt's parameters as Triton hands them to `initialize` (in the model config's JSON)."""
    return {key: {"string_value": value} for key, value in PARAMETER.findall(config.read_text())}


def served(gpu_sim: Any, params: dict[str, dict[str, str]], prompts: list[str]) -> InferenceResponse:
    model = gpu_sim.TritonPythonModel()
    quick = {**params, "base_ms": {"string_value": "0"}, "per_item_ms": {"string_value": "0"}}
    model.initialize({"model_config": json.dumps({"parameters": quick})})
    request = {"PROMPT": np.array([[p.encode()] for p in prompts], dtype=np.object_)}
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
