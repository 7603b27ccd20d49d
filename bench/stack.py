"""The local platform as processes for one benchmark: Redis, gpu-sim workers with the scenario's
latency profile, a manager, the gateway, and bare Triton servers for the baselines.

Every process runs on free loopback ports under one root folder that holds its log, and everything
started here is stopped by `close()`, newest first.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import redis

from contract.keys import worker_key
from local_stack.stack import redis_argv
from worker_image import triton_server

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 300.0
API_KEY = "sk-bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def gpu_sim_repository(
    dest: Path,
    *,
    base_ms: float,
    per_item_ms: float,
    max_batch: int = 100,
    instances: int = 1,
    queue_delay_us: int | None = None,
) -> Path:
    """A model repository whose gpu-sim takes base_ms + per_item_ms * b, for batches up to max_batch.

    instances: model instances, each running one batch at a time (GPUs, for the naive baseline);
    queue_delay_us: turn on Triton's own dynamic batcher with this queue delay.
    """
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(
        REPO / "triton_models" / "gpu-sim", dest / "gpu-sim", ignore=shutil.ignore_patterns("__pycache__")
    )
    config = dest / "gpu-sim" / "config.pbtxt"
    text = config.read_text()
    for key, value in (("base_ms", base_ms), ("per_item_ms", per_item_ms)):
        text = re.sub(rf'(key: "{key}" value: \{{ string_value: )"[^"]*"', rf'\g<1>"{value:g}"', text)
    text = re.sub(r"max_batch_size: \d+", f"max_batch_size: {max_batch}", text)
    text = re.sub(r"instance_group \[ \{ count: \d+", f"instance_group [ {{ count: {instances}", text)
    if queue_delay_us is not None:
        text += f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}\n"
    config.write_text(text)
    return dest


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class BenchStack:
    root: Path
    models: str = "gpu-sim"
    # The model repository the stack serves: its workers load from it, and its manager and gateway build
    # their model catalog from it (a staged gpu-sim's max_batch_size is the one the manager batches to).
    repository: Path | None = None
    checkpoint_dir: Path | None = None  # where its workers find the project's checkpoints built
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    triton_metrics: dict[str, str] = field(default_factory=dict)  # each worker's Triton /metrics, by name
    api: str = ""
    manager_metrics: str = ""  # the last manager's /metrics
    redis_port: int = 0

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.redis_port = self.redis_port or free_port()

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "SYNAPSE_REDIS_URL": self.redis_url,
            "SYNAPSE_STATE_DIR": str(self.state_dir),
            "SYNAPSE_MODELS": self.models,
            "SYNAPSE_WORKER_MODELS": self.models,
            "SYNAPSE_LOG_LEVEL": "WARNING",
            "SYNAPSE_HEARTBEAT_S": "1",
            **({"SYNAPSE_MODEL_REPOSITORY": str(self.repository)} if self.repository else {}),
            **({"SYNAPSE_CHECKPOINT_DIR": str(self.checkpoint_dir)} if self.checkpoint_dir else {}),
            **extra,
        }

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with self.log(name).open("ab") as out:
            proc = subprocess.Popen(
                argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                start_new_session=True,
            )  # fmt: skip
        self.procs[name] = proc
        return proc

    def wait_for(self, name: str, check: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
        """Returns once `check` holds; raises if the process `name` exits first, or at the deadline."""
        proc = self.procs[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode}:\n{self.log(name).read_text()[-2000:]}"
                )
            time.sleep(0.1)
        raise TimeoutError(f"{name} not ready after {timeout_s:.0f} s; see {self.log(name)}")

    def start_redis(self) -> None:
        """A fresh Redis: a benchmark starts from an empty store, never from an earlier run's data."""
        shutil.rmtree(self.root / "redis", ignore_errors=True)
        self._start("redis", redis_argv(self.redis_port, self.root / "redis"), {})
        self.wait_for("redis", self._redis_answers, 30)

    def _redis_answers(self) -> bool:
        try:
            return bool(self.redis().ping())
        except redis.RedisError:
            return False

    def start_worker(self, name: str, repository: Path) -> None:
        """A worker (agent + Triton) serving the repository, which becomes the stack's; returns once it is
        READY."""
        self.launch_worker(name, repository)
        client = self.redis()
        self.wait_for(name, lambda: client.hget(worker_key(name), "state") == "READY")

    def launch_worker(self, name: str, repository: Path | None = None) -> None:
        """A worker (agent + Triton) serving the repository (where given, it becomes the stack's), started
        and left to come up."""
        self.repository = repository or self.repository
        metrics = free_port()
        env = self.env(
            SYNAPSE_WORKER_ID=name,
            SYNAPSE_TRITON_HTTP_PORT=str(free_port()),
            SYNAPSE_TRITON_GRPC_PORT=str(free_port()),
            SYNAPSE_TRITON_METRICS_PORT=str(metrics),
        )
        self.triton_metrics[name] = f"http://127.0.0.1:{metrics}/metrics"
        self._start(name, [sys.executable, "-m", "local_stack.cli", "worker"], env)

    def process_roots(self) -> dict[str, int]:
        """The pid of each kind of process started (worker-a: worker), for `bench.llm_cpu.CpuSampler`."""
        return {name.split("-", 1)[0]: proc.pid for name, proc in self.procs.items()}

    def start_manager(self, name: str = "manager", **extra: str) -> int:
        """A manager process; returns its pid (for its CPU time). Its /metrics is `manager_metrics`."""
        port = free_port()
        env = self.env(SYNAPSE_METRICS_PORT=str(port), **extra)
        proc = self._start(name, [sys.executable, "-m", "local_stack.cli", "manager"], env)
        self.wait_for(name, lambda: port_open(port), 60)
        self.manager_metrics = f"http://127.0.0.1:{port}/metrics"
        return proc.pid

    def start_gateway(self, **extra: str) -> None:
        port = free_port()
        env = self.env(SYNAPSE_API_PORT=str(port), SYNAPSE_API_KEY=API_KEY, **extra)
        self._start("gateway", [sys.executable, "-m", "local_stack.cli", "gateway"], env)
        self.wait_for("gateway", lambda: port_open(port), 60)
        self.api = f"http://127.0.0.1:{port}"

    def start_triton(self, name: str, repository: Path, model: str = "gpu-sim") -> tuple[str, str]:
        """A bare Triton serving the repository's model (no agent, no manager); returns (gRPC url,
        metrics url)."""
        install = triton_server.locate(self.state_dir)
        http, grpc, metrics = free_port(), free_port(), free_port()
        argv = triton_server.command(
            install, model_repository=repository, models=[model], host="127.0.0.1",
            http_port=http, grpc_port=grpc, metrics_port=metrics,
        )  # fmt: skip
        self._start(name, argv, install.env)
        self.wait_for(name, lambda: http_ok(f"http://127.0.0.1:{http}/v2/models/{model}/ready"))
        return f"127.0.0.1:{grpc}", f"http://127.0.0.1:{metrics}/metrics"

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def stop(self, name: str, timeout_s: float = 30.0) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def close(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name, timeout_s=10)

    def __enter__(self) -> BenchStack:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
