"""Finds and launches the Triton Inference Server binary.

In the worker image Triton lives at /opt/tritonserver and is on PATH. Locally the binary comes from
the `nvidia-pytriton` wheel; its Python backend needs the stub built for the running Python copied
next to the backend library, and the stub needs the wheel's bundled CUDA runtime on the loader path.

The project's own Python-based backends (`triton_backends/<name>/model.py`, named by a model's
`backend: "<name>"`, the way Triton's vLLM backend is) sit beside the Python backend: copied there
locally, and by the image build to /opt/tritonserver/backends/<name>/.

Triton dies with the process that starts it (its agent), leads its own process group so that stopping it
stops its Python-backend stubs too, and names its shared-memory regions after that agent, so a region
left by a dead one can be told apart and removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import contract
from contract.processes import PROC, alive, with_parent_death_signal

log = logging.getLogger(__name__)

# The model-repository API (load, unload, index) answers only requests carrying this header with the
# agent's secret; gRPC expects it as metadata named "triton-grpc-protocol-" + this.
REPOSITORY_API_HEADER = "x-synapse-agent"
# The Python backend's shared-memory regions: /dev/shm/<prefix><agent pid>_<Triton's own suffix>.
SHM_DIR = Path("/dev/shm")
SHM_REGION_PREFIX = "synapse_triton_"
# The project's Python-based backends, one folder each (the local worker's; the image copies them).
PROJECT_BACKENDS = Path(__file__).parents[1] / "triton_backends"
# How long Triton waits on SIGTERM for its models to unload: twice the generative engine's own unload
# bound (STOP_TIMEOUT_S, 10 s, in triton_backends/synapse_llm/engine_lifecycle.py), so a loaded host
# that slows the unload still exits cleanly rather than leaving its Python stubs behind.
EXIT_TIMEOUT_S = 20


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
    # The stub runs Python isolated; our models add this to sys.path (see their model.py): in the image,
    # the worker's virtual environment, ahead of the system Python's own packages.
    model_path = {"SYNAPSE_MODEL_PYTHONPATH": os.pathsep.join(model_python_path())}
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonInstall(Path(on_path), None, model_path)
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
    for backend in PROJECT_BACKENDS.iterdir():
        if (backend / "model.py").is_file():
            _sync_sources(backend, backend_dir / backend.name)
    libs = root.parent.parent / "nvidia_pytriton.libs"
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(libs), os.environ.get("LD_LIBRARY_PATH", "")) if p
        ),
        **model_path,
    }
    return TritonInstall(root / "bin" / "tritonserver", backend_dir, env)


def model_python_path() -> list[str]:
    """What the models' Python needs on sys.path: this Python's site-packages, and the folder that holds
    the `contract` package (the synapse_llm engine reads its limits there). An editable install of the
    project finds `contract` through an import hook a .pth file installs, and the stub, which adds these
    folders to sys.path by hand, processes no .pth file."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"], str(Path(contract.__file__).parents[1])]))


def _copy_if_changed(source: Path, target: Path) -> None:
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    shutil.copy2(source, tmp)
    tmp.replace(target)


def _sync_sources(source: Path, target: Path) -> None:
    """A backend's Python files, each replaced when its bytes differ (an edit of the same size too)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("*.py"):
        copy = target / path.name
        if not copy.exists() or copy.read_bytes() != path.read_bytes():
            tmp = copy.with_suffix(f".tmp{os.getpid()}")
            shutil.copy2(path, tmp)
            tmp.replace(copy)


def command(
    install: TritonInstall,
    *,
    model_repository: Path,
    models: list[str],
    host: str,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    repository_secret: str | None = None,
) -> list[str]:
    """Explicit model control: the agent decides what is loaded; ports bound to `host` only.

    With a `repository_secret`, only callers that send it (the agent) may load or unload models. Triton
    takes it on its command line only (no flag file, no environment variable): `hide_argument` scrubs it
    from there once Triton has read it.

    The command runs Triton through an exec wrapper: SIGTERM when the caller dies, its own process group.
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
        # Ready means serving: a model loading on demand must not take the worker's others out of rotation.
        "--strict-readiness=false",
        "--log-verbose=0",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
        f"--backend-config=python,shm-region-prefix-name={shm_region_prefix(os.getpid())}",
    ]
    if install.backend_dir is not None:
        args.append(f"--backend-directory={install.backend_dir}")
    if repository_secret is not None:
        restriction = f"model-repository:{REPOSITORY_API_HEADER}={repository_secret}"
        args += [f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"]
    args += [f"--load-model={m}" for m in models]
    # SIGKILL: a Triton stopped (SIGSTOP) when its agent dies would never act on a SIGTERM.
    return with_parent_death_signal(args, own_group=True, signum=signal.SIGKILL)


def shm_region_prefix(owner_pid: int) -> str:
    return f"{SHM_REGION_PREFIX}{owner_pid}_"


def _region_owner(name: str) -> int:
    owner = name.removeprefix(SHM_REGION_PREFIX).split("_", 1)[0]
    return int(owner) if name.startswith(SHM_REGION_PREFIX) and owner.isdigit() else 0


def remove_stale_regions(shm_dir: Path = SHM_DIR) -> list[Path]:
    """Removes the Python-backend regions of Tritons whose agent is dead (a killed Triton leaves its
    1 MiB+ regions behind). Only ours: Synapse's prefix, this user's files, a dead owner."""
    removed = []
    for path in shm_dir.glob(f"{SHM_REGION_PREFIX}*"):
        owner = _region_owner(path.name)
        with contextlib.suppress(OSError):
            if owner and not alive(owner) and path.stat().st_uid == os.getuid():
                path.unlink()
                removed.append(path)
    if removed:
        log.info("removed %d shared-memory regions of dead Tritons", len(removed))
    return removed


STUB = "triton_python_backend_stub"


def reap_orphaned_stubs() -> list[int]:
    """Kills the Python-backend stubs of Tritons whose agent is dead. A Triton dies with its agent
    (parent-death signal), but its stubs are its own children, with none: one whose Triton was killed
    sits on, sleeping, for good. A stub names its region prefix, so its agent, on its command line."""
    reaped = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            owners = [_region_owner(arg) for arg in args if arg.startswith(SHM_REGION_PREFIX)]
            mine = entry.stat().st_uid == os.getuid()
            if mine and args[0].endswith(STUB) and owners and owners[0] and not alive(owners[0]):
                os.kill(int(entry.name), signal.SIGKILL)
                reaped.append(int(entry.name))
    if reaped:
        log.info("killed %d Python-backend stubs of dead Tritons", len(reaped))
    return reaped


def clean_up_after_dead_tritons() -> None:
    """What a Triton killed with its agent leaves behind: its stubs, then their shared-memory regions."""
    reap_orphaned_stubs()
    remove_stale_regions()


def _argument_area(pid: int) -> tuple[int, int]:
    """Where the kernel keeps pid's command line in its memory (/proc/<pid>/stat fields 48 and 49)."""
    fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[45]), int(fields[46])


def hide_argument(pid: int, secret: str) -> int:
    """Overwrites `secret` in our child's command line (/proc/<pid>/cmdline, readable by every local user)
    with random characters; returns how many places changed.

    Call it only once the child has parsed its options (Triton: once ready). Too early fails closed: the
    child would expect a value nobody knows. Best effort: 0 where the kernel refuses the write.
    """
    needle = secret.encode()
    try:
        start, end = _argument_area(pid)
        with (PROC / str(pid) / "mem").open("r+b", buffering=0) as memory:
            memory.seek(start)
            area = memory.read(end - start)
            offsets = _occurrences(area, needle)
            for offset in offsets:
                memory.seek(start + offset)
                memory.write(secrets.token_hex(len(needle))[: len(needle)].encode())
    except (OSError, ValueError, IndexError) as exc:
        log.warning("could not hide the secret in the command line of pid %d: %s", pid, exc)
        return 0
    return len(offsets)


def _occurrences(data: bytes, needle: bytes) -> list[int]:
    found, at = [], data.find(needle)
    while needle and at >= 0:
        found.append(at)
        at = data.find(needle, at + len(needle))
    return found
