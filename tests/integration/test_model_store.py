"""A real worker that starts empty and loads models on demand from S3 (moto_server on loopback)."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import boto3
import pytest
import redis
import redis.asyncio as aioredis
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from contract.keys import worker_key
from contract.workers import WorkerInfo, request_model_load
from manager.triton import Gaps, TritonClient
from tests.integration.conftest import base_env, start_worker
from tests.processes import REPO, free_port, port_open, start, stop, wait_until
from worker_image.checkpoint import build_tiny_gpt2
from worker_image.publish import publish

pytestmark = pytest.mark.integration

BUCKET = "synapse-models"
WORKER = "store-worker"
LOAD_TIMEOUT_S = 180
DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class StoreWorker:
    redis_url: str
    state_dir: Path
    log: Path
    client: redis.Redis

    def registration(self) -> WorkerInfo:
        return WorkerInfo.from_hash(self.client.hgetall(worker_key(WORKER)))

    def wait_for_models(self, models: set[str]) -> set[str]:
        """Waits until the registration lists exactly these models; returns the states seen meanwhile."""
        states: set[str] = set()

        def listed() -> bool:
            info = self.registration()
            states.add(info.state.value)
            return info.models == models

        wait_until(listed, LOAD_TIMEOUT_S, f"models {models}", log=self.log)
        return states


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[str]:
    """moto_server with gpu-sim and tiny-gpt2 published, tiny-gpt2 with its weights as a real one."""
    port = free_port()
    server = start([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                   {}, logs / "moto.log")  # fmt: skip
    wait_until(lambda: port_open(port), 60, "moto_server", server, logs / "moto.log")
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=DUMMY_AWS["AWS_DEFAULT_REGION"],
        aws_access_key_id=DUMMY_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    folders = tmp_path_factory.mktemp("publish")
    publish(REPO / "triton_models" / "gpu-sim", client, BUCKET)
    gpt2 = shutil.copytree(REPO / "triton_models" / "tiny-gpt2", folders / "tiny-gpt2")
    build_tiny_gpt2(gpt2 / "checkpoint")
    publish(gpt2, client, BUCKET)
    yield endpoint
    stop(server)


@pytest.fixture(scope="module")
def worker(
    redis_url: str, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory, logs: Path
) -> Iterator[StoreWorker]:
    """Its own Redis database (no manager sees it), an empty local repository, a budget of one model."""
    url = redis_url.rsplit("/", 1)[0] + "/3"
    state_dir = tmp_path_factory.mktemp("store-state")
    env = {
        **base_env(url, state_dir),
        **DUMMY_AWS,
        "AWS_ENDPOINT_URL_S3": s3_endpoint,
        "SYNAPSE_MODEL_BUCKET": BUCKET,
        "SYNAPSE_MODEL_REPOSITORY": str(tmp_path_factory.mktemp("no-local-models")),
        "SYNAPSE_WORKER_MODEL_BUDGET": "1",
    }
    proc = start_worker(env, WORKER, logs, models="none")
    client = redis.Redis.from_url(url, decode_responses=True)
    started = StoreWorker(url, state_dir, logs / f"{WORKER}.log", client)
    assert started.registration().models == frozenset()  # it starts empty, before any test asks for a model
    yield started
    assert stop(proc) == 0
    client.close()


@pytest.fixture
async def manager_redis(worker: StoreWorker) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(worker.redis_url, decode_responses=True)
    yield client
    await client.aclose()


async def test_a_worker_can_start_with_no_model_loaded(worker: StoreWorker) -> None:
    assert "starting Triton with no models" in worker.log.read_text()
    assert worker.registration().state == "READY"


async def reversed_by(worker: StoreWorker, model: str, prompt: str) -> str:
    client = TritonClient(worker.registration().grpc_url, timeout_s=60)
    try:
        return (await client.infer(model, [prompt], [8]))[0].text
    finally:
        await client.close()


async def generated_by(worker: StoreWorker, model: str, prompt: str) -> str:
    client = TritonClient(worker.registration().grpc_url, timeout_s=60)
    try:
        sampling = {"max_tokens": 8, "temperature": 0}
        generated = await client.generate(model, prompt, sampling, lambda *_: None, Gaps(60, 60))
        return generated.choices[0].text
    finally:
        await client.close()


async def test_the_model_repository_api_refuses_callers_without_the_agents_secret(
    worker: StoreWorker,
) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/v2/repository/index", "/v2/repository/models/gpu-sim/load"):
            async with http.post(
                worker.registration().http_url + path, headers={"x-synapse-agent": "guess"}
            ) as reply:
                assert reply.status == 403, path
    grpc = grpcclient.InferenceServerClient(worker.registration().grpc_url)
    with pytest.raises(InferenceServerException, match="restricted"):
        grpc.load_model("gpu-sim")
    grpc.close()
    assert "gpu-sim" not in worker.registration().models


async def test_a_load_request_brings_a_model_from_s3_into_triton(
    worker: StoreWorker, manager_redis: aioredis.Redis
) -> None:
    await request_model_load(manager_redis, WORKER, "gpu-sim")
    await asyncio.to_thread(worker.wait_for_models, {"gpu-sim"})
    assert await reversed_by(worker, "gpu-sim", "model store") == "erots ledom"
    assert (worker.state_dir / "model-cache" / "gpu-sim" / "manifest.json").is_file()


async def test_past_its_budget_the_worker_unloads_its_least_recently_used_model(
    worker: StoreWorker, manager_redis: aioredis.Redis
) -> None:
    await request_model_load(manager_redis, WORKER, "gpu-sim")
    await asyncio.to_thread(worker.wait_for_models, {"gpu-sim"})

    await request_model_load(manager_redis, WORKER, "tiny-gpt2")
    states_while_loading = await asyncio.to_thread(worker.wait_for_models, {"tiny-gpt2"})

    assert states_while_loading == {"READY"}
    assert (await generated_by(worker, "tiny-gpt2", "The three laws")) != ""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{worker.registration().http_url}/v2/models/gpu-sim/ready") as reply,
    ):
        assert reply.status != 200
    cache = worker.state_dir / "model-cache"
    checkpoint = cache / "tiny-gpt2" / "checkpoint"
    assert checkpoint.is_dir() and not checkpoint.is_symlink()  # the published weights, not seeded ones
    assert (cache / "gpu-sim" / "manifest.json").is_file()  # unloaded, still cached on disk


async def test_a_request_for_an_unknown_model_fails_alone(
    worker: StoreWorker, manager_redis: aioredis.Redis
) -> None:
    await request_model_load(manager_redis, WORKER, "no-such-model")
    await request_model_load(manager_redis, WORKER, "gpu-sim")
    await asyncio.to_thread(worker.wait_for_models, {"gpu-sim"})
    assert "cannot load no-such-model" in worker.log.read_text()
    assert worker.registration().state == "READY"
