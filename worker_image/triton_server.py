"""Finds and launches the Triton Inference Server binary.

In the worker image Triton lives at /opt/tritonserver and is on PATH. Locally the binary comes from
the `nvidia-pytriton` wheel; its Python backend needs the stub built for the running Python copied
next to the backend library, and the stub needs the wheel's bundled CUDA runtime on the loader path.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TritonInstall:
    binary: Path
    backend_dir: Path | None
    env: dict[str, str]


def _pytriton_root() -> Path:
    import pytriton  # the local/test extra installs it; the worker image uses its own Triton

    return Path(pytriton.__file__).parent / "tritonserver"


def locate(state_dir: Path) -> TritonInstall:
    """The Triton to run: the image's own if on PATH, else the wheel's, prepared under state_dir."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonInstall(Path(on_path), None, {})
    root = _pytriton_root()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend_dir = state_dir / "triton" / "backends"
    python_backend = backend_dir / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for source in (root / "backends" / "python").iterdir():
        if source.is_file():
            _copy_if_changed(source, python_backend / source.name)
    _copy_if_changed(
        root / "python_backend_stubs" / version / "triton_python_backend_stub",
        python_backend / "triton_python_backend_stub",
    )
    libs = root.parent.parent / "nvidia_pytriton.libs"
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(libs), os.environ.get("LD_LIBRARY_PATH", "")) if p
        ),
        # The stub runs Python isolated; our models add this to sys.path (see their model.py).
        "SYNAPSE_MODEL_PYTHONPATH": os.pathsep.join(
            dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        ),
    }
    return TritonInstall(root / "bin" / "tritonserver", backend_dir, env)


def _copy_if_changed(source: Path, target: Path) -> None:
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    shutil.copy2(source, tmp)
    tmp.replace(target)


def command(
    install: TritonInstall,
    *,
    model_repository: Path,
    models: list[str],
    host: str,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    preload: bool = True,
) -> list[str]:
    """Explicit model control: the agent decides what is loaded; ports bound to `host` only.

    With preload, Triton loads `models` before it opens its ports; without, it starts empty and the
    caller loads them through the repository API.
    """
    args = [
        str(install.binary),
        f"--model-repository={model_repository}",
        "--model-control-mode=explicit",
        f"--http-address={host}",
        f"--grpc-address={host}",
        f"--metrics-address={host}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        "--allow-metrics=true",
        "--log-verbose=0",
        "--exit-timeout-secs=10",
    ]
    if install.backend_dir is not None:
        args.append(f"--backend-directory={install.backend_dir}")
    if preload:
        args += [f"--load-model={m}" for m in models]
    return args
