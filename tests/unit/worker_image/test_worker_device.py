"""Where a worker runs its models (worker_image/device.py), and tiny-gpt2 running where Triton put it.

`SYNAPSE_DEVICE=gpu` without a usable GPU is refused, never served on the CPU; `auto` uses a GPU only
when CUDA works. This machine has no GPU: the real CUDA check and the model see that here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contract.settings import Settings
from tests.models import model_py
from worker_image.device import (
    CudaProbe,
    Device,
    DeviceUnavailableError,
    choose_device,
    driver_version,
    probe_cuda,
    visible_gpus,
)

DRIVER = "580.178.04"


def never_probed() -> CudaProbe:
    raise AssertionError("the CUDA check ran where the decision needed none")


def test_cpu_never_looks_for_a_gpu() -> None:
    assert choose_device("cpu", ["nvidia0"], never_probed, DRIVER) is Device.CPU


def test_auto_without_a_visible_gpu_runs_on_the_cpu_without_importing_torch() -> None:
    assert choose_device("auto", [], never_probed, DRIVER) is Device.CPU


def test_gpu_without_a_visible_gpu_is_refused_with_what_to_fix() -> None:
    with pytest.raises(DeviceUnavailableError, match=r"no NVIDIA GPU is visible to this container") as caught:
        choose_device("gpu", [], never_probed, DRIVER)
    assert "resourceRequirements GPU" in str(caught.value)


def test_a_visible_gpu_that_cuda_cannot_use_is_refused_naming_the_driver_and_the_build() -> None:
    def too_old() -> CudaProbe:
        return CudaProbe(False, "torch 2.13.0 built for CUDA 13.0: RuntimeError: driver too old")

    with pytest.raises(DeviceUnavailableError) as caught:
        choose_device("gpu", ["nvidia0"], too_old, "470.256.02")
    message = str(caught.value)
    assert "CUDA does not work" in message
    assert "built for CUDA 13.0" in message
    assert "host driver 470.256.02" in message
    assert "driver/CUDA mismatch" in message


def test_auto_with_a_gpu_that_cuda_cannot_use_warns_and_runs_on_the_cpu(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> CudaProbe:
        return CudaProbe(False, "no CUDA")

    assert choose_device("auto", ["nvidia0"], broken, DRIVER) is Device.CPU
    assert "running the models on the CPU" in caplog.text


@pytest.mark.parametrize("mode", ["auto", "gpu"])
def test_a_usable_gpu_is_used(mode: str) -> None:
    def works() -> CudaProbe:
        return CudaProbe(True, "torch built for CUDA 13.0, 1 device(s)")

    assert choose_device(mode, ["nvidia0"], works, DRIVER) is Device.GPU


def test_the_real_cuda_check_on_this_cpu_only_machine_says_why_cuda_is_unusable() -> None:
    import torch

    found = probe_cuda()
    assert not found.usable
    assert f"torch {torch.__version__}" in found.detail
    if torch.version.cuda is None:
        assert "a CPU-only build" in found.detail


def test_a_cuda_check_that_hangs_is_given_up(tmp_path: Path) -> None:
    hanging = tmp_path / "python"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    found = probe_cuda(str(hanging), timeout_s=0.5)
    assert not found.usable
    assert "did not answer within" in found.detail


def test_gpus_are_the_nvidia_device_nodes_the_runtime_passed_in(tmp_path: Path) -> None:
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert visible_gpus(tmp_path) == ["nvidia0", "nvidia1"]
    assert visible_gpus(tmp_path / "nothing") == []


def test_the_driver_version_comes_from_the_kernel_module(tmp_path: Path) -> None:
    version = tmp_path / "version"
    version.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.178.04  Release Build  (dvs-builder)\n"
        "GCC version:  gcc version 11.4.1\n"
    )
    assert driver_version(version) == "580.178.04"
    assert driver_version(tmp_path / "missing").startswith("unknown")


def test_the_device_setting_takes_three_values() -> None:
    assert Settings.from_env({}).device == "auto"
    assert Settings.from_env({"SYNAPSE_DEVICE": "gpu"}).device == "gpu"
    with pytest.raises(ValidationError):
        Settings.from_env({"SYNAPSE_DEVICE": "cuda"})


# ------------------------------------------------------------------ tiny-gpt2's own placement


@pytest.fixture
def tiny_gpt2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """model.py as Triton's stub imports it."""
    yield model_py("tiny-gpt2", monkeypatch)


def test_tiny_gpt2_runs_on_the_cpu_where_triton_put_it_there(tiny_gpt2: Any) -> None:
    device = tiny_gpt2.instance_device({"model_instance_kind": "CPU", "model_instance_device_id": "0"})
    assert str(device) == "cpu"


def test_tiny_gpt2_placed_on_a_gpu_without_cuda_fails_to_load_rather_than_use_the_cpu(tiny_gpt2: Any) -> None:
    with pytest.raises(RuntimeError, match=r"placed this instance on GPU 0, but torch .* cannot use CUDA"):
        tiny_gpt2.instance_device({"model_instance_kind": "GPU", "model_instance_device_id": "0"})
