import json
from pathlib import Path
from typing import Any, cast

import aiohttp

from contract.catalog_build import triton_config
from tests.models import MODELS
from worker_image.device import Device
from worker_image.loader import ModelLoader, TritonRepository, least_recently_used
from worker_image.model_store import DirectorySource, ModelStore
from worker_image.placement import gpu_override, is_gpu_capable
from worker_image.triton_server import TritonInstall, command


def test_within_budget_nothing_is_unloaded() -> None:
    assert least_recently_used({"a": 5, "b": 9}, keep=2) == []
    assert least_recently_used({}, keep=0) == []


def test_past_budget_the_models_used_longest_ago_are_unloaded() -> None:
    recency = {"busy": 900, "idle": 100, "warm": 500}
    assert least_recently_used(recency, keep=2) == ["idle"]
    assert least_recently_used(recency, keep=0) == ["idle", "warm", "busy"]


def test_ties_are_broken_by_name_so_the_choice_is_stable() -> None:
    assert least_recently_used({"b": 1, "a": 1, "c": 2}, keep=1) == ["a", "b"]


def triton_args(**extra: str) -> list[str]:
    install = TritonInstall(binary=Path("/opt/tritonserver/bin/tritonserver"), backend_dir=None, env={})
    return command(
        install, model_repository=Path("/m"), models=[], host="127.0.0.1",
        http_port=1, grpc_port=2, metrics_port=3, **extra,
    )  # fmt: skip


def test_triton_restricts_its_model_repository_api_to_the_agent() -> None:
    args = triton_args(repository_secret="s3cret")
    assert "--http-restricted-api=model-repository:x-synapse-agent=s3cret" in args
    assert "--grpc-restricted-protocol=model-repository:x-synapse-agent=s3cret" in args
    assert not any("restricted" in arg for arg in triton_args())


# ------------------------------------------------------------------ placement: the GPU by override


def config_of(model: str) -> dict[str, Any]:
    return triton_config((MODELS / model / "config.pbtxt").read_text())


def test_a_gpu_capable_model_is_overridden_onto_gpu_0_and_nothing_else_changes() -> None:
    override = gpu_override(MODELS / "tiny-gpt2")
    assert override is not None
    placed = json.loads(override)
    assert placed["instance_group"] == [{"count": 1, "kind": "KIND_GPU", "gpus": [0]}]
    written = config_of("tiny-gpt2")
    # The file stays as the local stack and the tests run it.
    assert written["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert {k: v for k, v in placed.items() if k != "instance_group"} == {
        k: v for k, v in written.items() if k != "instance_group"
    }


def test_a_model_that_does_not_opt_in_keeps_its_files_instance_group() -> None:
    assert not is_gpu_capable(config_of("gpu-sim"))
    assert gpu_override(MODELS / "gpu-sim") is None


def test_only_a_gpu_worker_overrides(tmp_path: Path) -> None:
    (tmp_path / "tiny-gpt2").symlink_to(MODELS / "tiny-gpt2")
    store = ModelStore(DirectorySource(MODELS), tmp_path / "cache", budget_bytes=0)
    triton = TritonRepository(cast(aiohttp.ClientSession, None), "http://127.0.0.1:1", "s")

    def loader(device: Device) -> ModelLoader:
        return ModelLoader(store, triton, tmp_path, 1, publish=nothing, device=device)

    assert loader(Device.CPU).placement("tiny-gpt2") is None
    assert loader(Device.GPU).placement("tiny-gpt2") == gpu_override(MODELS / "tiny-gpt2")


async def nothing(models: frozenset[str]) -> None:
    return None
