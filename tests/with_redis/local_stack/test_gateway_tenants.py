"""The local gateway names each request's tenant from the keys file and holds each tenant to its rate, in
front of the real handler on a real Redis: what it turns away never reaches the queue."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from contract.keys import COUNTS_KEY, job_key, stream_key
from contract.settings import Settings
from contract.tenants import KeyBook, keys_file
from frontdoor import services
from local_stack.gateway import Gateway, prepare_keys
from local_stack.stack import banner, for_local_stack
from tests.processes import free_port

DATABASE = 7  # a store of its own: nothing else writes gpu-sim's stream here, and no manager reads it
BANNER_KEY = "sk-banner-key"
SUBMIT = {"model": "gpu-sim", "prompt": "hello"}


@dataclass
class Front:
    api: str
    redis: redis.Redis
    state_dir: Path
    keys: dict[str, str]

    def queued(self) -> int:
        return int(self.redis.xlen(stream_key("gpu-sim")))


def clear_front_door_caches() -> None:
    for cached in (services.settings, services.catalog, services.redis_client, services.store):
        cached.cache_clear()


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The handler's Redis (it reads its settings from the environment, as in Lambda), emptied."""
    url = redis_url.rsplit("/", 1)[0] + f"/{DATABASE}"
    monkeypatch.setenv("SYNAPSE_REDIS_URL", url)
    clear_front_door_caches()
    redis.Redis.from_url(url).flushdb()
    yield url
    clear_front_door_caches()


@pytest.fixture
async def front(store: str, tmp_path: Path) -> AsyncIterator[Front]:
    """A gateway whose keys file has acme (2 requests at once, then one every 2 s) and beta (one job in
    flight at most), besides the banner's key of the default tenant."""
    with KeyBook.editing(keys_file(tmp_path)) as book:
        book.tenant("acme", rate_per_s=0.5, burst=2)
        book.tenant("beta", max_inflight=1)
        keys = {name: book.add_key(name)[0] for name in ("acme", "beta")}
    settings = Settings(
        api_key=BANNER_KEY, api_port=free_port(), redis_url=store, state_dir=tmp_path,
        gateway_concurrency=4, gateway_long_waits=4, gateway_long_waits_per_tenant=4,
    )  # fmt: skip
    gateway = Gateway(settings)
    await gateway.start()
    client = redis.Redis.from_url(store, decode_responses=True)
    try:
        yield Front(f"http://127.0.0.1:{settings.api_port}", client, tmp_path, keys)
    finally:
        await gateway.aclose()
        client.close()


async def post(front: Front, key: str, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    async with (
        aiohttp.ClientSession(headers={"x-api-key": key, **(headers or {})}) as session,
        session.post(f"{front.api}/async-infer", json=SUBMIT) as response,
    ):
        return response.status, await response.json(), response.headers


def test_the_banner_key_is_the_default_tenants_and_without_any_key_the_gateway_will_not_start(
    tmp_path: Path,
):
    with pytest.raises(ValueError, match="no API key"):
        prepare_keys(Settings(state_dir=tmp_path))
    prepare_keys(Settings(state_dir=tmp_path, api_key=BANNER_KEY))
    prepare_keys(Settings(state_dir=tmp_path, api_key=BANNER_KEY))
    book = KeyBook.load(keys_file(tmp_path))
    tenant = book.resolve(BANNER_KEY)
    assert tenant is not None and tenant.name == "default"
    assert len(book.keys) == 1
    prepare_keys(Settings(state_dir=tmp_path))  # without SYNAPSE_API_KEY: the file's keys are enough


def test_synapse_up_keeps_its_banner_key_from_one_start_to_the_next_until_it_is_revoked(tmp_path: Path):
    first = for_local_stack(Settings(state_dir=tmp_path), {})
    assert first.api_key and for_local_stack(Settings(state_dir=tmp_path), {}).api_key == first.api_key
    prepare_keys(first)
    with KeyBook.editing(keys_file(tmp_path)) as book:
        book.revoke(book.keys[0].id)
    renewed = for_local_stack(Settings(state_dir=tmp_path), {})
    assert renewed.api_key and renewed.api_key != first.api_key
    assert "synapse keys create --tenant NAME" in banner(renewed)
    assert for_local_stack(Settings(state_dir=tmp_path, api_key="mine"), {}).api_key == "mine"


async def test_a_tenant_over_its_rate_gets_429_with_retry_after_and_nothing_is_queued(front: Front):
    answers = [await post(front, front.keys["acme"]) for _ in range(3)]
    assert [status for status, _, _ in answers] == [202, 202, 429]
    _, body, headers = answers[2]
    assert body["error"]["code"] == "rate_limited"
    assert int(headers["Retry-After"]) >= 1
    assert front.queued() == 2
    assert front.redis.hget(COUNTS_KEY, "acme|rejected:rate_limited") == "1"
    status, _, _ = await post(front, BANNER_KEY)
    assert status == 202, "another tenant's requests take nothing from acme's bucket"


async def test_the_tenant_is_the_keys_whatever_request_context_the_client_sends(front: Front):
    forged = json.dumps({"authorizer": {"tenant": "default", "maxInflight": "0"}})
    status, body, _ = await post(front, front.keys["beta"], {"x-amzn-request-context": forged})
    assert status == 202
    assert front.redis.hget(job_key(body["jobId"]), "tenant") == "beta"
    status, body, _ = await post(front, front.keys["beta"], {"x-amzn-request-context": forged})
    assert (status, body["error"]["code"]) == (429, "quota_exceeded"), "beta's quota of one still holds"
    assert front.queued() == 1


async def test_a_key_added_or_revoked_while_the_gateway_runs_takes_effect_without_a_restart(front: Front):
    with KeyBook.editing(keys_file(front.state_dir)) as book:
        key, record = book.add_key("gamma")
    assert await status_within(front, key, 202, seconds=10)
    with KeyBook.editing(keys_file(front.state_dir)) as book:
        book.revoke(record.id)
    assert await status_within(front, key, 403, seconds=10)


async def status_within(front: Front, key: str, wanted: int, seconds: float) -> bool:
    """Whether a submission with the key gets the wanted status within so many seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (await post(front, key))[0] == wanted:
            return True
        await asyncio.sleep(0.1)
    return False
