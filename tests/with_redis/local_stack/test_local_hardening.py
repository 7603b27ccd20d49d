"""The local stack's secrets stay out of `ps` and other users' reach; its admin endpoints stay closed."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from contract.settings import Settings
from local_stack.monitoring import prometheus_argv
from local_stack.stack import (
    REDIS_PASSWORD_FILE,
    banner,
    for_local_stack,
    local_redis_password,
    local_stack,
    redis_argv,
)
from tests.processes import free_port, port_open, wait_until
from worker_image import triton_server
from worker_image.triton_server import TritonInstall, hide_argument, remove_stale_regions


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_local_redis_password_is_made_once_and_only_its_owner_may_read_it(tmp_path: Path):
    password = local_redis_password(tmp_path)
    path = tmp_path / REDIS_PASSWORD_FILE
    assert len(password) >= 32
    assert mode(path) == 0o600
    assert local_redis_password(tmp_path) == password, "the same password every start"
    path.chmod(0o644)
    assert local_redis_password(tmp_path) == password
    assert mode(path) == 0o600, "a loosened file is tightened again"
    assert [p.name for p in tmp_path.iterdir()] == [REDIS_PASSWORD_FILE], "no temporary file is left"


def test_an_empty_password_file_gets_a_password_rather_than_running_redis_without_one(tmp_path: Path):
    (tmp_path / REDIS_PASSWORD_FILE).write_text("\n")
    assert local_redis_password(tmp_path)


def test_up_gives_every_process_the_redis_password_through_settings_never_through_argv(tmp_path: Path):
    settings = for_local_stack(Settings(state_dir=tmp_path), {})
    password = (tmp_path / REDIS_PASSWORD_FILE).read_text().strip()
    assert settings.redis_auth_token == password
    specs = {spec.name: spec for spec in local_stack(settings)}
    for spec in specs.values():
        assert not any(password in arg for arg in spec.argv), spec.name
    assert specs["manager"].env["SYNAPSE_REDIS_AUTH_TOKEN"] == password
    assert specs["gateway"].env["SYNAPSE_REDIS_AUTH_TOKEN"] == password
    assert specs["redis-exporter"].env == {"REDIS_PASSWORD": password}
    config = Path(specs["redis"].argv[1])
    assert config.read_text() == f"requirepass {password}\n"
    assert mode(config) == 0o600
    assert f"redis://:{password}@127.0.0.1:6390/0" in banner(settings), "the banner's URL connects"


def test_an_explicit_redis_token_wins_over_the_generated_password(tmp_path: Path):
    settings = for_local_stack(Settings(state_dir=tmp_path, redis_auth_token="mine"), {})
    assert settings.redis_auth_token == "mine"
    assert not (tmp_path / REDIS_PASSWORD_FILE).exists()


@pytest.fixture
def redis_with_password(tmp_path: Path) -> Iterator[tuple[int, str]]:
    port, password = free_port(), "s3cret-" + str(time.time_ns())
    log = (tmp_path / "redis.log").open("wb")
    proc = subprocess.Popen(redis_argv(port, tmp_path / "redis", password=password), stdout=log, stderr=log)
    try:
        wait_until(lambda: port_open(port), 30, "redis", proc, tmp_path / "redis.log")
        yield port, password
    finally:
        proc.kill()
        proc.wait()
        log.close()


def test_the_local_redis_refuses_clients_without_the_password(redis_with_password: tuple[int, str]):
    port, password = redis_with_password
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # what any local user sees
        sock.sendall(b"SET synapse:injected job\r\n")
        assert sock.recv(100).startswith(b"-NOAUTH")
    with redis.Redis(port=port, password=password) as client:
        assert client.ping()
    cmdline = Path(f"/proc/{_listener(port)}/cmdline").read_bytes()
    assert password.encode() not in cmdline


def _listener(port: int) -> int:
    """The pid of the redis-server on port (the test's own child)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if f":{port}".encode() in (entry / "cmdline").read_bytes() and entry.name != str(os.getpid()):
                    return int(entry.name)
    raise LookupError(port)


def test_prometheus_runs_without_its_lifecycle_api(tmp_path: Path):
    argv = prometheus_argv(tmp_path / "prometheus.yml", tmp_path / "data", 9390)
    assert not any("lifecycle" in arg for arg in argv), "POST /-/quit would let anyone stop it"


def triton_argv(secret: str) -> list[str]:
    install = TritonInstall(binary=Path("/opt/tritonserver/bin/tritonserver"), backend_dir=None, env={})
    return triton_server.command(
        install, model_repository=Path("/m"), models=[], host="127.0.0.1",
        http_port=1, grpc_port=2, metrics_port=3, repository_secret=secret,
    )  # fmt: skip


def test_triton_runs_through_the_exec_wrapper_in_its_own_group_with_regions_named_after_its_agent():
    argv = triton_argv("s3cret")
    wrapper = argv.index("-c")
    assert argv[0] == sys.executable and argv[wrapper + 4] == "group"
    assert argv[wrapper + 5] == "/opt/tritonserver/bin/tritonserver"
    prefix = f"--backend-config=python,shm-region-prefix-name=synapse_triton_{os.getpid()}_"
    assert prefix in argv


def test_triton_s_secret_is_scrubbed_from_its_command_line_and_still_works_inside():
    # tritonserver takes the secret on its command line only; hide_argument overwrites it there once
    # read. Python, like Triton once it has parsed its options, keeps its own copy of its arguments.
    secret = "a1b2c3d4" * 6
    code = "import sys; print(flush=True); sys.stdin.readline(); print(sys.argv[1].endswith(sys.argv[2]))"
    child = subprocess.Popen(
        [sys.executable, "-c", code, f"--http-restricted-api=x={secret}", secret],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        child.stdout.readline()  # it has read its arguments
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        before = cmdline.read_bytes()
        assert hide_argument(child.pid, secret) == 2
        after = cmdline.read_bytes()
        assert secret.encode() not in after
        assert len(after) == len(before) and b"--http-restricted-api=x=" in after
    finally:
        out, _ = child.communicate("\n", timeout=10)
    assert out.strip() == "True", "the process still knows its secret"


def test_stale_regions_of_dead_tritons_are_removed_and_nothing_else(tmp_path: Path):
    gone = _dead_pid()
    names = {
        "stale": f"synapse_triton_{gone}_1234-abcd",
        "live": f"synapse_triton_{os.getpid()}_1234-abcd",
        "foreign": "triton_python_backend_shm_region_1234-abcd",
        "odd": "synapse_triton_notapid_x",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"\0" * 16)
    assert remove_stale_regions(tmp_path) == [tmp_path / names["stale"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "stale")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
