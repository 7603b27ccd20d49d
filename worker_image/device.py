"""Where a worker runs its models: the GPU, or the CPU, decided once before Triton starts.

`SYNAPSE_DEVICE=gpu` (the ECS worker) needs a GPU that CUDA can use: without one the worker must not
serve at all: a model silently running on the CPU of a GPU instance answers far slower while the GPU
is billed. `auto` (the default) uses a GPU when CUDA works and the CPU otherwise; `cpu` never
looks. The agent never imports torch: the CUDA check runs torch in a child process, with a timeout, the
way the models' Triton stubs will run it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0  # importing torch on a cold, busy instance takes seconds, never minutes
DEV_DIR = Path("/dev")
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
# One JSON line: torch's version, the CUDA it was built for, and whether CUDA initialises (else why not).
PROBE = """
import json, torch
found = {"torch": torch.__version__, "cuda": torch.version.cuda}
try:
    torch.cuda.init()
    found["devices"] = torch.cuda.device_count()
except Exception as exc:
    found["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


class Device(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class DeviceUnavailableError(RuntimeError):
    """The worker was told to use a GPU that it cannot use; it must not serve."""


@dataclass(frozen=True, slots=True)
class CudaProbe:
    usable: bool
    detail: str  # torch's build, the devices it found, or why CUDA failed


def visible_gpus(dev_dir: Path = DEV_DIR) -> list[str]:
    """The NVIDIA GPUs passed into this container: the runtime adds /dev/nvidia<N> for each one."""
    return sorted(p.name for p in dev_dir.glob("nvidia[0-9]*"))


def driver_version(version_file: Path = DRIVER_VERSION_FILE) -> str:
    """The host's NVIDIA kernel driver, as its /proc file states it, or why it cannot be read."""
    try:
        line = version_file.read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown (no NVIDIA kernel driver loaded)"
    words = line.split()
    return next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), line.strip())


def probe_cuda(python: str = sys.executable, timeout_s: float = PROBE_TIMEOUT_S) -> CudaProbe:
    """Asks torch, in a child process, whether CUDA initialises (a hung driver cannot hang the agent)."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return CudaProbe(False, f"torch's CUDA check did not answer within {timeout_s:.0f} s")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return CudaProbe(False, f"torch's CUDA check failed: {done.stderr.strip()[-500:]}")
    found = json.loads(lines[-1])
    build = f"torch {found['torch']} built for CUDA {found['cuda'] or '(none: a CPU-only build)'}"
    if "error" in found:
        return CudaProbe(False, f"{build}: {found['error']}")
    return CudaProbe(True, f"{build}, {found['devices']} device(s)")


def choose_device(mode: str, gpus: Sequence[str], probe: Callable[[], CudaProbe], driver: str) -> Device:
    """The device for `mode` (auto, cpu, gpu); raises DeviceUnavailableError when `gpu` cannot be had."""
    if mode == Device.CPU:
        return Device.CPU
    if not gpus:
        if mode == Device.GPU:
            raise DeviceUnavailableError(
                "no NVIDIA GPU is visible to this container (no /dev/nvidia<N>): the task must ask for a "
                "GPU (ECS resourceRequirements GPU; docker run --gpus all) on an instance that has one"
            )
        return Device.CPU
    found = probe()
    if found.usable:
        log.info("CUDA is usable: %s; driver %s", found.detail, driver)
        return Device.GPU
    reason = (
        f"{len(gpus)} NVIDIA GPU(s) visible, but CUDA does not work: {found.detail}; host driver {driver}. "
        "A driver older than the CUDA of the image's torch is a driver/CUDA mismatch (worker_image/README.md)"
    )
    if mode == Device.GPU:
        raise DeviceUnavailableError(reason)
    log.warning("%s; SYNAPSE_DEVICE=auto: running the models on the CPU", reason)
    return Device.CPU


def select_device(mode: str) -> Device:
    """`choose_device` on this machine: its /dev, its driver, its torch."""
    return choose_device(mode, visible_gpus(), probe_cuda, driver_version())
