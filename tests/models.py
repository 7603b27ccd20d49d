"""Model repositories for tests: copies of `triton_models/` with gpu-sim's fault injection switched on.

The fault markers (`!fail`, `!crash`: triton_models/gpu-sim/1/model.py) are test fixtures; the served
config leaves them off. Tests serve a copy generated from the real repository, so the two never drift.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import re
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.llm import set_parameter
from bench.model_code import code_folder, load_model_module
from bench.stack import http_ok
from tests.processes import REPO, free_port, start, stop, wait_until

MODELS = REPO / "triton_models"
FAULT_INJECTION = re.compile(r'(key: "fault_injection" value: \{ string_value: )"[^"]*"')


def enable_fault_injection(config: Path) -> None:
    """Sets gpu-sim's `fault_injection` parameter to "true" in this config.pbtxt."""
    text, found = FAULT_INJECTION.subn(r'\1"true"', config.read_text())
    if found != 1:
        raise ValueError(f"{config}: expected one fault_injection parameter, found {found}")
    config.write_text(text)


def fault_injection_repository(dest: Path, models: tuple[str, ...] | None = None) -> Path:
    """A copy of `triton_models/` (or of the named models only) in dest, gpu-sim's faults on."""
    dest.mkdir(parents=True, exist_ok=True)
    names = models or tuple(sorted(p.name for p in MODELS.iterdir() if (p / "config.pbtxt").is_file()))
    for name in names:
        shutil.copytree(MODELS / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    if "gpu-sim" in names:
        enable_fault_injection(dest / "gpu-sim" / "config.pbtxt")
    return dest


@functools.cache
def served_by_tests() -> Path:
    """The repository the integration tests' workers serve: built once per test process, removed at exit.

    A plain function (not a fixture) so that helpers building a worker's environment can call it.
    """
    root = Path(tempfile.mkdtemp(prefix="synapse-test-models-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return fault_injection_repository(root / "models")


@functools.cache
def shared_checkpoints() -> Path:
    """Where the tests' workers build the project's checkpoints (SYNAPSE_CHECKPOINT_DIR): one folder for
    the whole run, so SmolLM2 is converted once, not once per stack. Removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="synapse-test-checkpoints-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def model_module(model: str, name: str) -> types.ModuleType:
    """A module of a model's code (bench/model_code.py: code_folder), as its model.py imports it."""
    return load_model_module(code_folder(MODELS / model), name)


@dataclass(frozen=True)
class ServedAlone:
    """A Triton serving one model, with no agent: its addresses and where it logs."""

    grpc_url: str
    metrics_url: str
    folder: Path
    log: Path


def engine_series(metrics_page: str, model: str) -> dict[str, float]:
    """One model's engine series (`synapse_engine_*`) on a Triton /metrics page, by name: a worker serving
    two generative models lists each series once per model."""
    label = re.escape(f'model="{model}"')
    pattern = rf"^(synapse_engine_\w+)\{{[^}}]*{label}[^}}]*\}} (\S+)$"
    found = re.findall(pattern, metrics_page, flags=re.MULTILINE)
    return {name: float(value) for name, value in found}


@contextmanager
def served_alone(
    model: str, state: Path, log: Path, parameters: dict[str, str] | None = None
) -> Iterator[ServedAlone]:
    """One Triton serving a copy of the model with the checkpoint a worker adds to it (its config's
    parameters changed where given); stopped cleanly (exit 0) at the end."""
    from worker_image import triton_server
    from worker_image.agent import project_checkpoint

    folder = shutil.copytree(
        MODELS / model, state / "models" / model, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = folder / "config.pbtxt"
    for key, value in (parameters or {}).items():
        config.write_text(set_parameter(config.read_text(), key, value))
    project_checkpoint(shared_checkpoints())(model, folder)
    install = triton_server.locate(state)
    http, grpc, metrics = free_port(), free_port(), free_port()
    argv = triton_server.command(
        install, model_repository=folder.parent, models=[model], host="127.0.0.1",
        http_port=http, grpc_port=grpc, metrics_port=metrics,
    )  # fmt: skip
    proc = start(argv, install.env, log)
    try:
        ready = f"http://127.0.0.1:{http}/v2/models/{model}/ready"
        wait_until(lambda: http_ok(ready), 120, f"Triton serving {model}", proc, log)
        yield ServedAlone(f"127.0.0.1:{grpc}", f"http://127.0.0.1:{metrics}/metrics", folder, log)
    finally:
        code = stop(proc)
    assert code == 0, log.read_text()[-3000:]


class TritonError:
    CANCELLED = "cancelled"

    def __init__(self, message: str, code: Any = None) -> None:
        self.message, self.code = message, code


class InferenceResponse:
    def __init__(self, output_tensors: list[Any] | None = None, error: TritonError | None = None) -> None:
        self.outputs = {name: array for name, array in output_tensors or []}
        self.error = error


def model_py(model: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A model folder's model.py in this test's process, as Triton's stub imports it: with the fake
    Triton utilities below, its version folder on sys.path (for its sibling modules), under a name of
    its own (every folder has a model.py), and with a gc that leaves this process's heap alone
    (initialize() collects and freezes it for the stub). Undone with the monkeypatch."""
    version = code_folder(MODELS / model)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils())
    monkeypatch.syspath_prepend(str(version))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ inside the served repository
    name = f"{model.replace('-', '_')}_model_under_test"
    spec = importlib.util.spec_from_file_location(name, version / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "gc", types.SimpleNamespace(collect=lambda: 0, freeze=lambda: None))
    return module


def fake_pb_utils() -> types.ModuleType:
    """What the Python-backend models use of Triton's `triton_python_backend_utils`, for running a model.py
    in a test's process (metrics: none, so inert)."""
    module = types.ModuleType("triton_python_backend_utils")
    quiet = types.SimpleNamespace(log_info=print, log_warn=print, log_error=print)
    module.__dict__.update(
        TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
        Tensor=lambda name, array: (name, array),
        TritonError=TritonError,
        InferenceResponse=InferenceResponse,
        Logger=quiet,
        get_input_tensor_by_name=lambda request, name: (
            types.SimpleNamespace(as_numpy=lambda: request.values[name]) if name in request.values else None
        ),
    )
    return module
