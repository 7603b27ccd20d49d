"""Imports a module of a Triton model folder outside Triton, for the benchmarks and the tests that run a
model's own code: `triton_models/<model>/1/<name>.py`, or, for a model served by one of the project's
Python-based backends (`backend: "synapse_llm"`), `triton_backends/<backend>/<name>.py`."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from contract.catalog_build import CONFIG_FILE, triton_config
from worker_image.triton_server import PROJECT_BACKENDS


def code_folder(model_folder: Path) -> Path:
    """Where Triton finds the model's code: its version folder for the Python backend, else the folder
    of the project's backend that its config names."""
    backend = str(triton_config((model_folder / CONFIG_FILE).read_text()).get("backend", "python"))
    return model_folder / "1" if backend == "python" else PROJECT_BACKENDS / backend


def load_model_module(version: Path, name: str) -> types.ModuleType:
    """The module under its own name, as the folder's model.py imports it (once per process), leaving
    no __pycache__ in the model folder. Another folder's module of that name already loaded is an
    error, not a silent stand-in."""
    path = (version / f"{name}.py").resolve()
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(loaded.__file__ or "").resolve() != path:  # model folders share file names (model.py)
            raise ImportError(f"{name} is already {loaded.__file__}, not {path}")
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module
