from pathlib import Path

from worker_image.loader import least_recently_used
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
