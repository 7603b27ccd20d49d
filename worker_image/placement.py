"""Which device a model's instances use, decided at load time: the files never change.

Every `config.pbtxt` says `KIND_CPU`, which the local stack and the tests run. On a GPU worker the agent
loads a model that opts in (`parameters: { key: "gpu_capable" value: { string_value: "true" } }`) with
a config override (Triton's repository extension: the load request carries the whole config as JSON):
the model's own config, parsed from its file, with only `instance_group` replaced by one instance on
GPU 0. A model that does not opt in (gpu-sim, a CPU simulator) keeps its file's instance group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.catalog_build import CONFIG_FILE, triton_config

GPU_CAPABLE = "gpu_capable"


def with_instance_group(config: dict[str, Any], kind: str, count: int, gpus: list[int] | None = None) -> str:
    """The config as a load override with its instance group replaced, everything else as it was."""
    group: dict[str, Any] = {"count": count, "kind": kind}
    if gpus is not None:
        group["gpus"] = gpus
    return json.dumps({**config, "instance_group": [group]})


def is_gpu_capable(config: dict[str, Any]) -> bool:
    parameter = config.get("parameters", {}).get(GPU_CAPABLE, {})
    return str(parameter.get("string_value", "")).strip().lower() == "true"


def gpu_override(model_folder: Path) -> str | None:
    """The override that puts an opted-in model on GPU 0; None for a model that stays on the CPU."""
    config = triton_config((model_folder / CONFIG_FILE).read_text())
    if not is_gpu_capable(config):
        return None
    return with_instance_group(config, "KIND_GPU", count=1, gpus=[0])
