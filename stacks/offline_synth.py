"""Synthesizing the app without the CDK CLI or AWS: for tests and for tools that read the templates."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType

from stacks.config import REPO_ROOT


def load_app_module() -> ModuleType:
    """app.py is a script, not a package module: load it by path, under a name of its own."""
    spec = importlib.util.spec_from_file_location("synapse_cdk_app", REPO_ROOT / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def offline_context() -> dict[str, object]:
    """cdk.json's context (feature flags, defaults) as the CLI would pass it, minus the network."""
    context: dict[str, object] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    context["synapse:skipBundling"] = True
    return context
