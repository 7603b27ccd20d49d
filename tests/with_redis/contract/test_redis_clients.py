"""The clients `contract.redis_client` builds, against a real Redis and a real Redis Cluster: one slot for
every key, IAM authentication as the ElastiCache user, and cancellations heard on any node."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import redis
from redis.crc import key_slot

from contract import keys
from contract.redis_client import STORE_ERRORS, async_client, async_subscriber, sync_client
from contract.settings import Settings
from tests.redis_cluster import LocalRedisCluster

IAM_USER = "synapse-app"


def every_key() -> list[str]:
    """Each key function of the layout called with a sample name, and each key constant."""
    functions = [
        value("x") for name, value in vars(keys).items()
        if inspect.isfunction(value) and value.__module__ == keys.__name__ and not name.startswith("_")
    ]  # fmt: skip
    constants = [
        value for name, value in vars(keys).items()
        if name.isupper() and isinstance(value, str) and name != "CONSUMER_GROUP"
    ]  # fmt: skip
    return [*functions, *constants, keys.stream_key("x", "batch")]


def test_every_key_lands_in_one_cluster_slot():
    layout = every_key()
    assert keys.job_key("x") in layout and keys.CANCEL_CHANNEL in layout
    assert {key_slot(key.encode()) for key in layout} == {key_slot(b"{synapse}")}


@pytest.fixture(params=["plain", "cluster"], ids=["redis", "redis-cluster"])
def store(request: pytest.FixtureRequest) -> Settings:
    """Settings for a real store of either kind."""
    if request.param == "cluster":
        cluster: LocalRedisCluster = request.getfixturevalue("redis_cluster")
        return Settings(redis_url=cluster.url, redis_cluster=True)
    return Settings(redis_url=request.getfixturevalue("redis_url"))


def node_ports(settings: Settings) -> list[int]:
    seed = redis.Redis.from_url(settings.redis_url)
    if not settings.redis_cluster:
        return [int(seed.connection_pool.connection_kwargs["port"])]
    return sorted({int(node[1]) for node in seed.cluster("SLOTS") for node in node[2:]})


@pytest.fixture
def iam_user(store: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The store with an ACL user named as the ElastiCache user (any password: the token is signed offline
    with fixed test keys and checked by AWS alone), and settings that authenticate with IAM."""
    for port in node_ports(store):
        with redis.Redis(port=port) as node:
            node.acl_setuser(
                IAM_USER, enabled=True, nopass=True, categories=["+@all"], keys=["*"], channels=["*"]
            )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    return store.model_copy(update={"redis_iam_user": IAM_USER, "redis_iam_cache": "synapse-cache"})


async def test_the_clients_authenticate_as_the_iam_user(iam_user: Settings):
    client = sync_client(iam_user, max_connections=4)
    aclient = async_client(iam_user)
    try:
        assert client.acl_whoami() == IAM_USER
        assert await aclient.acl_whoami() == IAM_USER  # type: ignore[misc]
    finally:
        client.close()
        await aclient.aclose()


async def test_a_cancellation_published_on_any_node_reaches_the_subscriber(store: Settings):
    subscriber = async_subscriber(store)
    pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.CANCEL_CHANNEL)
    try:
        for port in node_ports(store):
            with redis.Redis(port=port) as node:
                node.publish(keys.CANCEL_CHANNEL, f"job-from-{port}")
        heard = set()
        async with asyncio.timeout(5):
            while len(heard) < len(node_ports(store)):
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None:
                    heard.add(message["data"])
        assert heard == {f"job-from-{port}" for port in node_ports(store)}
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()


def test_an_unreachable_cluster_is_a_connection_error():
    """The front door answers 503 on redis.ConnectionError; a cluster client fails while it is built."""
    gone = Settings(redis_url="redis://127.0.0.1:1/0", redis_cluster=True)
    with pytest.raises(redis.ConnectionError):
        sync_client(gone, timeout_s=0.5)


async def test_a_loop_that_outlives_outages_catches_an_unreachable_cluster():
    """The manager's and worker's loops catch STORE_ERRORS: a cluster with no node raises no RedisError."""
    gone = Settings(redis_url="redis://127.0.0.1:1/0", redis_cluster=True)
    client = async_client(gone)
    try:
        with pytest.raises(STORE_ERRORS):
            await client.ping()
    finally:
        await client.aclose()
