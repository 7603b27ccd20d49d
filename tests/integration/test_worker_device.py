"""A worker as ECS runs it, on this machine without a GPU: it refuses to serve when told to use a GPU,
serves on the CPU by default from the models baked into its image (no bucket), and Triton takes the
config override that places a model, with nothing else of its config changed."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
import redis.asyncio as aioredis

from contract.catalog_build import triton_config
from contract.keys import worker_key
from contract.settings import Settings
from contract.workers import WorkerInfo, WorkerState, request_model_load
from manager.triton import Gaps, TritonClient
from tests.integration.conftest import base_env, env_client, start_worker
from tests.models import MODELS
from tests.processes import free_port, start, stop, synapse, wait_until
from worker_image import triton_server
from worker_image.agent import EXIT_DEVICE_UNAVAILABLE, WorkerAgent
from worker_image.bake import bake
from worker_image.device import Device
from worker_image.loader import TritonRepository
from worker_image.placement import with_instance_group

pytestmark = pytest.mark.integration

REFUSAL_TIMEOUT_S = 120
LOAD_TIMEOUT_S = 180


def worker_env(redis_url: str, state_dir: Path, **settings: str) -> dict[str, str]:
    """A worker on its own Redis database (no manager sees it) and free ports."""
    env = base_env(redis_url.rsplit("/", 1)[0] + "/4", state_dir)
    env.update(
        SYNAPSE_TRITON_HTTP_PORT=str(free_port()),
        SYNAPSE_TRITON_GRPC_PORT=str(free_port()),
        SYNAPSE_TRITON_METRICS_PORT=str(free_port()),
    )
    env.update({f"SYNAPSE_{name.upper()}": value for name, value in settings.items()})
    return env


def test_a_gpu_worker_without_cuda_registers_failed_with_the_reason_and_exits(
    redis_url: str, tmp_path: Path, logs: Path
) -> None:
    env = worker_env(redis_url, tmp_path, worker_id="no-gpu-worker", device="gpu")
    log = logs / "no-gpu-worker.log"
    client = env_client(env)
    proc = start(synapse("worker"), env, log)
    states: list[str] = []
    record: dict[str, str] = {}
    deadline = time.monotonic() + REFUSAL_TIMEOUT_S
    while time.monotonic() < deadline and not record:
        exited = proc.poll() is not None
        fields = cast(dict[str, str], client.hgetall(worker_key("no-gpu-worker")))
        states.append(fields.get("state", ""))
        if fields.get("state") == WorkerState.FAILED:
            record = fields
        elif exited:  # it registers before it exits: one more read sees the registration
            break
        time.sleep(0.05)
    try:
        returncode = proc.wait(REFUSAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop(proc)
        pytest.fail(f"a GPU worker without a GPU kept running\n{log.read_text()[-3000:]}")

    assert returncode == EXIT_DEVICE_UNAVAILABLE
    assert WorkerState.READY not in states
    info = WorkerInfo.from_hash(record)
    assert info.state is WorkerState.FAILED
    assert "no NVIDIA GPU is visible to this container" in info.reason
    text = log.read_text()
    assert "refusing to serve: no NVIDIA GPU is visible" in text
    assert "starting Triton" not in text


@pytest.fixture(scope="module")
def baked_worker(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory, logs: Path
) -> Iterator[dict[str, str]]:
    """An image's worker on the CPU: models baked as the Dockerfile bakes them, no bucket, no repository."""
    baked = tmp_path_factory.mktemp("image") / "baked-models"
    for folder in sorted(p for p in MODELS.iterdir() if (p / "config.pbtxt").is_file()):
        bake(folder, baked)
    env = worker_env(
        redis_url,
        tmp_path_factory.mktemp("baked-state"),
        device="auto",
        baked_model_dir=str(baked),
        model_repository=str(tmp_path_factory.mktemp("no-local-models")),
    )
    proc = start_worker(env, "baked-worker", logs, models="none")
    yield env
    assert stop(proc) == 0


@pytest.fixture
async def registry(baked_worker: dict[str, str]) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(baked_worker["SYNAPSE_REDIS_URL"], decode_responses=True)
    yield client
    await client.aclose()


async def test_a_worker_with_no_bucket_serves_tiny_gpt2_from_its_image_on_first_use(
    baked_worker: dict[str, str], registry: aioredis.Redis, logs: Path
) -> None:
    log = logs / "baked-worker.log"
    assert "runs its models on the CPU" in log.read_text()
    client = env_client(baked_worker)

    def registration() -> WorkerInfo:
        return WorkerInfo.from_hash(cast(dict[str, str], client.hgetall(worker_key("baked-worker"))))

    await request_model_load(registry, "baked-worker", "tiny-gpt2")
    wait_until(lambda: registration().models == {"tiny-gpt2"}, LOAD_TIMEOUT_S, "tiny-gpt2 loaded", log=log)
    assert registration().state is WorkerState.READY

    triton = TritonClient(registration().grpc_url, timeout_s=60)
    try:
        sampling = {"max_tokens": 8, "temperature": 0}
        gaps = Gaps(first=60, between=60)
        generated = await triton.generate("tiny-gpt2", "The warm pool", sampling, lambda *_: None, gaps)
    finally:
        await triton.close()
    assert generated.choices[0].text


async def test_a_gpu_worker_loads_its_startup_models_through_the_api_where_overrides_apply(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton's --load-model reads the files as written: a GPU worker starts Triton empty and loads each
    model through the repository API. gpu-sim does not opt in to the GPU, so this path runs here too."""
    env = worker_env(redis_url, tmp_path, worker_id="api-loads", worker_models="gpu-sim")
    settings = Settings.from_env(env, pushgateway_url="http://127.0.0.1:9")
    agent = WorkerAgent(settings)
    agent.device = Device.GPU  # what select_device decides where CUDA works
    caplog.set_level(logging.INFO)
    async with agent:
        assert agent.info.state is WorkerState.READY
        assert agent.info.models == {"gpu-sim"}
    assert "starting Triton with no models" in caplog.text
    assert "loaded gpu-sim" in caplog.text


# ------------------------------------------------------------------ a config override, on Triton itself


@pytest.fixture(scope="module")
def bare_triton(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[str]:
    """Triton on a repository holding tiny-gpt2 (with its checkpoint), nothing loaded, no agent."""
    repository = tmp_path_factory.mktemp("override-repo")
    bake(MODELS / "tiny-gpt2", repository)
    state = tmp_path_factory.mktemp("override-state")
    install = triton_server.locate(state)
    http_port = free_port()
    args = triton_server.command(
        install, model_repository=repository, models=[], host="127.0.0.1",
        http_port=http_port, grpc_port=free_port(), metrics_port=free_port(),
    )  # fmt: skip
    log = logs / "override-triton.log"
    proc = start(args, install.env, log)
    url = f"http://127.0.0.1:{http_port}"

    def live() -> bool:
        try:
            import urllib.request

            with urllib.request.urlopen(f"{url}/v2/health/live", timeout=1) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    wait_until(live, 120, "Triton", proc, log)
    yield url
    stop(proc)


async def served_config(http: aiohttp.ClientSession, url: str, model: str) -> dict[str, Any]:
    async with http.get(f"{url}/v2/models/{model}/config") as reply:
        assert reply.status == 200, await reply.text()
        config: dict[str, Any] = await reply.json()
        return config


async def test_a_load_with_a_config_override_changes_the_instance_group_only(bare_triton: str) -> None:
    async with aiohttp.ClientSession() as http:
        triton = TritonRepository(http, bare_triton, secret="")
        await triton.load("tiny-gpt2")
        from_file = await served_config(http, bare_triton, "tiny-gpt2")
        assert from_file["instance_group"][0]["kind"] == "KIND_CPU"
        assert from_file["instance_group"][0]["count"] == 1

        written = triton_config((MODELS / "tiny-gpt2" / "config.pbtxt").read_text())
        await triton.load("tiny-gpt2", with_instance_group(written, "KIND_CPU", count=2))
        overridden = await served_config(http, bare_triton, "tiny-gpt2")
        assert await triton.ready_models() == {"tiny-gpt2"}

    group = overridden["instance_group"]
    assert [(g["kind"], g["count"]) for g in group] == [("KIND_CPU", 2)]

    def besides_instances(config: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in config.items() if k != "instance_group"}, sort_keys=True)

    assert besides_instances(overridden) == besides_instances(from_file)
