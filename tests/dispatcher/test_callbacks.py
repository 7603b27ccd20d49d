"""The callback sender against a real Redis (plain and cluster) and a real HTTP receiver in-process.

Jobs end the way they do in production: submitted by the front door's script and written final by the
manager's completion script (or cancelled by the front door's), which makes their callbacks due.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
import redis.asyncio as aioredis
from aiohttp import web
from prometheus_client import REGISTRY

from contract.job_record import JobRecord, public_view
from contract.job_store import JobStore
from contract.jobs import DEFAULT_TENANT, Job, JobStatus, Outcome, now_ms
from contract.keys import CALLBACKS_KEY, job_key
from contract.redis_client import AsyncRedis
from contract.settings import Settings
from contract.tenants import KeyBook, keys_file
from contract.webhooks import ATTEMPT_HEADER, JOB_ID_HEADER, SIGNATURE_HEADER, verify
from local_stack.stack import redis_argv
from manager import callback_ledger, callbacks
from manager.callback_address import AddressPolicy, IPAddress
from manager.callbacks import CallbackSender
from manager.queue import JobQueue
from manager.webhook_secrets import KeysFileSecrets
from tests.dispatcher.harness import JOB_TTL_S, WAIT_S, eventually
from tests.moto_aws import moto_aws
from tests.processes import free_port, port_open, start, stop, wait_until

HANG = -1  # a receiver's answer: hold the request until the test ends
LIMITS = Settings.from_env({})  # the bounds on deliveries in flight, as a manager runs by default
LOOPBACK = AddressPolicy.of(["127.0.0.0/8"])  # the receivers here are on loopback: allowlisted, as locally


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A webhook receiver on loopback; each `url(...)` answers its requests as scripted, then 200."""

    base: str = ""
    scripts: dict[str, list[int]] = field(default_factory=dict)
    requests: dict[str, list[Received]] = field(default_factory=lambda: defaultdict(list))
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, *answers: int, host: str = "") -> str:
        """A URL of its own, answered as scripted; `host`: another name or alias of the receiver's."""
        name = uuid.uuid4().hex
        self.scripts[name] = list(answers)
        base = self.base.replace("127.0.0.1", host) if host else self.base
        return f"{base}/{name}"

    def got(self, url: str) -> list[Received]:
        return self.requests[url.rsplit("/", 1)[1]]

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests[name].append(Received(dict(request.headers), await request.read()))
        script = self.scripts.get(name, [])
        answer = script.pop(0) if script else 200
        if answer == HANG:
            await self.release.wait()
            answer = 200
        if answer in (301, 302):
            return web.Response(status=answer, headers={"Location": self.url()})
        return web.Response(status=answer)


@contextlib.asynccontextmanager
async def serving(bind: str = "127.0.0.1") -> AsyncIterator[Receiver]:
    """A receiver on 127.0.0.1; bound to 0.0.0.0, every loopback alias (127.0.0.2, ...) reaches it too."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/{name}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, bind, port).start()
    receiver.base = f"http://127.0.0.1:{port}"
    yield receiver
    receiver.release.set()
    await runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serving() as receiver:
        yield receiver


@pytest.fixture
async def elsewhere() -> AsyncIterator[Receiver]:
    """A receiver on another port: another host, as the sender's bound per host counts them."""
    async with serving() as receiver:
        yield receiver


@dataclass
class Bench:
    """One test's store, model, receiver and keys file (the default tenant's secret), and its managers'
    callback senders: on quick retries, all stopped when the test ends."""

    r: AsyncRedis
    store: JobStore
    model: str
    receiver: Receiver
    state_dir: Path
    secret: str
    senders: list[CallbackSender] = field(default_factory=list)

    async def start(self, **options: Any) -> CallbackSender:
        settings: dict[str, Any] = {
            "timeout_s": 5.0, "retry_for_s": 60.0, "https_only": False, "first_retry_s": 0.05, "poll_s": 0.02,
            "max_in_flight": LIMITS.callback_max_in_flight, "max_per_tenant": LIMITS.callback_max_per_tenant,
            "max_per_address": LIMITS.callback_max_per_address, "policy": LOOPBACK,
        }  # fmt: skip
        settings.update(options)
        sender = CallbackSender(self.r, KeysFileSecrets(keys_file(self.state_dir)), **settings)
        await sender.start()
        self.senders.append(sender)
        return sender

    def submit(self, callback: str = "", tenant: str = DEFAULT_TENANT, ttl_s: int = 0) -> Job:
        job = Job.new(
            model=self.model, prompt="hello", max_tokens=4, timeout_ms=30_000,
            callback=callback, tenant=tenant, ttl_s=ttl_s,
        )  # fmt: skip
        assert self.store.submit(job)
        return job

    async def ended(
        self,
        callback: str = "",
        *,
        status: JobStatus = JobStatus.COMPLETED,
        tenant: str = DEFAULT_TENANT,
        notify_all: bool = False,
        ttl_s: int = 0,
    ) -> Job:
        """A job submitted by the front door's script and ended by the manager's completion script."""
        job = self.submit(callback, tenant, ttl_s)
        queue = JobQueue(self.r, "manager-a", JOB_TTL_S, notify_all=notify_all)
        await queue.ensure_group(self.model)
        entry = (await self.record(job))["entry"]
        now = now_ms()
        if status is JobStatus.COMPLETED:
            outcome = Outcome(job.id, status, now, now, 1, text="olleh", prompt_tokens=1, completion_tokens=1)
        else:
            outcome = Outcome(job.id, status, now, now, 1, error_code="model_error", error_message="it broke")
        assert await queue.complete(self.model, [outcome], {job.id: (entry, job)}) == {job.id}
        return job

    async def record(self, job: Job) -> dict[str, str]:
        fields: dict[str, str] = await self.r.hgetall(job_key(job.id))  # type: ignore[misc]
        return fields

    async def settled(self, job: Job) -> dict[str, str]:
        """The job's record once its callback was delivered or given up."""

        async def done() -> bool:
            return (await self.record(job)).get("callback_status") in ("delivered", "undeliverable")

        await eventually(done, f"job {job.id}'s callback settled")
        return await self.record(job)

    async def due(self, job_id: str) -> bool:
        return await self.r.zscore(CALLBACKS_KEY, job_id) is not None


@pytest.fixture
async def bench(
    r: AsyncRedis, store: JobStore, model: str, receiver: Receiver, tmp_path: Path
) -> AsyncIterator[Bench]:
    await r.delete(CALLBACKS_KEY)
    book = KeyBook()
    book.tenant(DEFAULT_TENANT)
    book.save(keys_file(tmp_path))
    bench = Bench(r, store, model, receiver, tmp_path, book.tenants[DEFAULT_TENANT].webhook_secret)
    yield bench
    for sender in bench.senders:
        await sender.aclose()


def metric(channel: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value("synapse_callbacks_total", {"channel": channel, "outcome": outcome})
    return value or 0.0


async def test_a_callback_reaches_its_receiver_signed_with_the_tenants_secret(bench: Bench):
    await bench.start()
    url = bench.receiver.url()
    job = await bench.ended(url)

    fields = await bench.settled(job)

    [request] = bench.receiver.got(url)
    assert verify(bench.secret, request.headers[SIGNATURE_HEADER], request.body, now=time.time())
    assert request.headers[JOB_ID_HEADER] == job.id
    assert request.headers[ATTEMPT_HEADER] == "1"
    assert request.headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    assert body["jobId"] == job.id
    assert body["status"] == "COMPLETED"
    assert body["result"]["text"] == "olleh"
    assert public_view(JobRecord.of(fields))["callback"] == {"url": url, "status": "delivered", "attempts": 1}
    assert not await bench.due(job.id)


async def test_a_receiver_that_answers_500_twice_gets_it_on_the_third_try(bench: Bench):
    retried, delivered = metric("callback", "retried"), metric("callback", "delivered")
    await bench.start()
    url = bench.receiver.url(500, 500)
    job = await bench.ended(url)

    fields = await bench.settled(job)

    requests = bench.receiver.got(url)
    assert [q.headers[ATTEMPT_HEADER] for q in requests] == ["1", "2", "3"]
    assert all(verify(bench.secret, q.headers[SIGNATURE_HEADER], q.body, now=time.time()) for q in requests)
    assert public_view(JobRecord.of(fields))["callback"] == {
        "url": url, "status": "delivered", "attempts": 3, "lastError": "HTTP 500",
    }  # fmt: skip
    assert metric("callback", "retried") - retried == 2
    assert metric("callback", "delivered") - delivered == 1


async def test_a_host_that_hangs_does_not_delay_another_hosts_callbacks(bench: Bench, elsewhere: Receiver):
    await bench.start(timeout_s=30.0)
    hung = [bench.receiver.url(HANG) for _ in range(LIMITS.callback_max_in_flight + 6)]  # more than all slots
    stuck = [await bench.ended(url) for url in hung]

    def calls() -> int:
        return sum(len(bench.receiver.got(url)) for url in hung)

    await eventually(lambda: calls() == LIMITS.callback_max_per_address, "the hanging host called its share")

    prompt = elsewhere.url()
    quick = await bench.ended(prompt)

    assert (await bench.settled(quick))["callback_status"] == "delivered"
    assert len(elsewhere.got(prompt)) == 1
    assert calls() == LIMITS.callback_max_per_address  # never more at once; the others wait their turn
    records = [await bench.record(job) for job in stuck]
    assert not any("callback_attempts" in fields for fields in records)  # waiting is no failed try


async def resolving_to_loopback(host: str, port: int) -> list[IPAddress]:
    """A resolver for the `.test` names here: every one is another name of 127.0.0.1."""
    if not host.endswith(".test"):
        raise OSError(f"{host} does not resolve")
    return [ip_address("127.0.0.1")]


async def test_names_of_one_address_share_its_bound(bench: Bench, elsewhere: Receiver):
    await bench.start(timeout_s=30.0, resolver=resolving_to_loopback)
    per_address = LIMITS.callback_max_per_address
    hung = [bench.receiver.url(HANG, host=f"hooks-{i % 10}.test") for i in range(3 * per_address)]
    for url in hung:
        await bench.ended(url)

    def calls() -> int:
        return sum(len(bench.receiver.got(url)) for url in hung)

    await eventually(lambda: calls() == per_address, "the hanging address called its share")
    quick = await bench.ended(elsewhere.url())  # another port: another address, as the bound counts

    assert (await bench.settled(quick))["callback_status"] == "delivered"
    assert calls() == per_address  # ten names of 127.0.0.1 got no more than 127.0.0.1 alone would


async def test_one_tenants_slow_receivers_never_hold_another_tenants_callbacks(bench: Bench):
    book = KeyBook.load(keys_file(bench.state_dir))
    book.tenant("flooder")
    book.save(keys_file(bench.state_dir))
    async with serving(bind="0.0.0.0") as slow:  # every loopback alias reaches it
        await bench.start(timeout_s=30.0)
        # More callbacks than the manager has slots, over 40 aliases: no address reaches its own bound.
        aliases = [f"127.0.0.{i}" for i in range(2, 42)]
        hung = [slow.url(HANG, host=alias) for alias in aliases for _ in range(2)]
        assert len(hung) > LIMITS.callback_max_in_flight
        for url in hung:
            await bench.ended(url, tenant="flooder")

        def calls() -> int:
            return sum(len(slow.got(url)) for url in hung)

        await eventually(lambda: calls() == LIMITS.callback_max_per_tenant, "the flooder holds its share")
        urls = [bench.receiver.url() for _ in range(10)]
        quick = [await bench.ended(url) for url in urls]

        for job in quick:
            assert (await bench.settled(job))["callback_status"] == "delivered"
        assert [len(bench.receiver.got(url)) for url in urls] == [1] * 10
        assert calls() == LIMITS.callback_max_per_tenant  # the flooder never got more


async def test_without_the_allowlist_an_internal_address_is_refused_and_never_reached(bench: Bench):
    await bench.start(policy=AddressPolicy())  # the default: public addresses only
    # The receiver by its address, by a name of it (the system's resolver), and IPv4-mapped.
    urls = [bench.receiver.url(host=host) for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]")]
    jobs = [await bench.ended(url) for url in urls]

    for job in jobs:
        fields = await bench.settled(job)
        assert public_view(JobRecord.of(fields))["callback"]["lastError"] == "connection refused by policy"
        assert (fields["callback_status"], fields["callback_attempts"]) == ("undeliverable", "1")
    assert all(bench.receiver.got(url) == [] for url in urls)


async def test_a_failed_try_says_what_failed_and_nothing_of_how(bench: Bench):
    await bench.start(timeout_s=0.5, retry_for_s=0.3)
    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    hung = bench.receiver.url(*[HANG] * 10)
    jobs = [await bench.ended(dead), await bench.ended(hung)]

    errors = [(await bench.settled(job))["callback_error"] for job in jobs]

    assert errors == ["connection failed", "timeout"]


async def test_a_receiver_that_always_fails_is_given_up_after_the_retry_time(bench: Bench):
    await bench.start(retry_for_s=2.0)  # room for a retry after a slow first try
    url = bench.receiver.url(*[503] * 100)
    job = await bench.ended(url)

    fields = await bench.settled(job)

    view = public_view(JobRecord.of(fields))["callback"]
    assert view["status"] == "undeliverable"
    assert view["lastError"] == "HTTP 503"
    assert view["attempts"] == len(bench.receiver.got(url)) >= 2
    assert not await bench.due(job.id)


async def test_a_short_ttl_does_not_cut_the_retries_short(bench: Bench, monkeypatch: pytest.MonkeyPatch):
    # No margins: a claim keeps the record only to the end of its lease (twice the timeout, 1 s).
    monkeypatch.setattr(callbacks, "LEASE_MARGIN_S", 0.0)
    monkeypatch.setattr(callback_ledger, "KEEP_MARGIN_MS", 0)
    undeliverable = metric("callback", "undeliverable")
    # Tries 0, 0.6 and 1.8 s after the job ended; the next would fall past 3 s: given up.
    await bench.start(timeout_s=0.5, first_retry_s=0.6, retry_for_s=3.0)
    url = bench.receiver.url(*[503] * 100)
    job = await bench.ended(url, ttl_s=1)  # its record would expire 1 s after the job ended, or 1.6 s

    fields = await bench.settled(job)

    assert public_view(JobRecord.of(fields))["callback"]["status"] == "undeliverable"
    assert fields["callback_attempts"] == "3"  # the third try, 1.8 s after the end, found the record
    assert len(bench.receiver.got(url)) == 3
    assert metric("callback", "undeliverable") - undeliverable == 1
    assert not await bench.due(job.id)


async def test_a_redirect_is_not_followed(bench: Bench):
    await bench.start()
    url = bench.receiver.url(302)
    job = await bench.ended(url)

    fields = await bench.settled(job)

    assert public_view(JobRecord.of(fields))["callback"] == {
        "url": url, "status": "delivered", "attempts": 2,
        "lastError": "HTTP 302 (redirects are not followed)",
    }  # fmt: skip
    assert len(bench.receiver.got(url)) == 2
    assert sum(len(got) for got in bench.receiver.requests.values()) == 2  # its Location was never visited


async def test_a_tenant_without_a_webhook_secret_is_never_sent_unsigned(bench: Bench):
    await bench.start()
    url = bench.receiver.url()
    job = await bench.ended(url, tenant="nobody")

    fields = await bench.settled(job)

    assert fields["callback_status"] == "undeliverable"
    assert fields["callback_error"] == "no webhook secret for tenant nobody"
    assert bench.receiver.got(url) == []


async def test_https_only_refuses_a_plain_http_url(bench: Bench):
    await bench.start(https_only=True)
    url = bench.receiver.url()
    job = await bench.ended(url)

    fields = await bench.settled(job)

    assert fields["callback_status"] == "undeliverable"
    assert "https" in fields["callback_error"]
    assert bench.receiver.got(url) == []


async def test_a_cancelled_job_calls_back_with_its_cancellation(bench: Bench):
    await bench.start()
    url = bench.receiver.url()
    job = bench.submit(url)
    assert (
        bench.store.cancel(JobRecord.of(await bench.record(job)), "the client cancelled it")
        is JobStatus.QUEUED
    )

    await bench.settled(job)

    [request] = bench.receiver.got(url)
    assert json.loads(request.body)["status"] == "CANCELLED"


async def test_a_job_whose_record_is_gone_is_dropped(bench: Bench):
    await bench.start()
    await bench.r.zadd(CALLBACKS_KEY, {"expired-job": now_ms()})

    async def dropped() -> bool:
        return not await bench.due("expired-job")

    await eventually(dropped, "the expired job left the callbacks")


async def test_two_managers_never_deliver_the_same_attempt(bench: Bench):
    await bench.start()
    await bench.start()
    urls = [bench.receiver.url() for _ in range(30)]
    jobs = [await bench.ended(url) for url in urls]

    for job in jobs:
        await bench.settled(job)

    assert [len(bench.receiver.got(url)) for url in urls] == [1] * 30


async def test_a_manager_stopped_mid_delivery_leaves_the_job_to_another_after_its_lease(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(callbacks, "LEASE_MARGIN_S", 0.0)  # the lease: twice the timeout, 1 s
    first = await bench.start(timeout_s=0.5)
    url = bench.receiver.url(HANG)
    job = await bench.ended(url)
    await eventually(lambda: len(bench.receiver.got(url)) == 1, "the first manager's delivery started")
    await first.aclose()  # stopped mid-delivery: nothing recorded

    await bench.start(timeout_s=0.5)
    fields = await bench.settled(job)

    assert fields["callback_status"] == "delivered"
    assert [q.headers[ATTEMPT_HEADER] for q in bench.receiver.got(url)] == ["1", "1"]


async def test_the_sender_outlives_a_store_outage(
    receiver: Receiver, tmp_path: Path, logs: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(callbacks, "STORE_BACKOFF_S", 0.05)
    port, data = free_port(), tmp_path / "redis"
    server = start(redis_argv(port, data), {}, logs / "callbacks-outage-redis.log")
    wait_until(lambda: port_open(port), 30, "redis")
    url = f"redis://127.0.0.1:{port}/0"
    r = aioredis.Redis.from_url(url, decode_responses=True)
    store = JobStore(redis.Redis.from_url(url, decode_responses=True), JOB_TTL_S, 1000)
    bench = Bench(r, store, "gpu-sim", receiver, tmp_path, "")
    book = KeyBook()
    book.tenant(DEFAULT_TENANT)
    book.save(keys_file(tmp_path))
    try:
        await bench.start()
        stop(server)
        await asyncio.sleep(0.5)  # the sender's claims fail all along
        server = start(redis_argv(port, data), {}, logs / "callbacks-outage-redis.log")
        wait_until(lambda: port_open(port), 30, "redis")

        after = bench.receiver.url()
        job = await bench.ended(after)

        assert (await bench.settled(job))["callback_status"] == "delivered"  # by the sender started before
    finally:
        for sender in bench.senders:
            await sender.aclose()
        await r.aclose()
        stop(server)


# -- outcome topics (SNS, on moto) ------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_aws(monkeypatch):
        yield


def subscribed_queue(sns: Any, sqs: Any, topic: str, only: dict[str, list[str]] | None = None) -> str:
    """An SQS queue that receives what the topic publishes (with `only`, a subscription filter policy on
    the message attributes): how a test reads a topic."""
    queue = sqs.create_queue(QueueName=uuid.uuid4().hex)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attributes = {"RawMessageDelivery": "true"}
    if only is not None:
        attributes["FilterPolicy"] = json.dumps(only)
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes=attributes)
    return str(queue)


def drained(sqs: Any, queue: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while reply := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages"):
        messages += [json.loads(m["Body"]) for m in reply]
        for m in reply:
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
    return messages


@pytest.mark.usefixtures("aws")
async def test_completed_jobs_go_to_the_success_topic_and_failed_ones_to_the_error_topic(bench: Bench):
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    success, error = (sns.create_topic(Name=name)["TopicArn"] for name in ("success", "error"))
    successes, errors = subscribed_queue(sns, sqs, success), subscribed_queue(sns, sqs, error)
    await bench.start(success_topic=success, error_topic=error, sns=sns)

    url = bench.receiver.url()
    with_callback = await bench.ended(url, notify_all=True)
    # Jobs without a callback are due too: the completion script enqueues every ending (notify_all).
    completed = [await bench.ended(notify_all=True) for _ in range(12)]  # more than one PublishBatch
    failed = await bench.ended(status=JobStatus.FAILED, notify_all=True)
    cancelled = bench.submit(url)
    bench.store.cancel(JobRecord.of(await bench.record(cancelled)), "cancelled")
    everyone = [with_callback, *completed, failed, cancelled]

    async def all_announced() -> bool:
        return not any([await bench.due(job.id) for job in everyone])

    await eventually(all_announced, "every job announced")

    published = drained(sqs, successes)
    assert sorted(m["jobId"] for m in published) == sorted(j.id for j in [with_callback, *completed])
    assert {m["status"] for m in published} == {"COMPLETED"}
    assert [m["jobId"] for m in drained(sqs, errors)] == [failed.id]
    assert (await bench.record(with_callback))["sns_status"] == "delivered"
    assert (await bench.record(with_callback))["callback_status"] == "delivered"
    assert "sns_status" not in await bench.record(cancelled)
    assert len(bench.receiver.got(url)) == 2  # the completed and the cancelled job's callbacks, once each


@pytest.mark.usefixtures("aws")
async def test_a_topic_that_cannot_be_published_to_is_given_up_on_its_own(bench: Bench):
    missing = "arn:aws:sns:us-east-1:123456789012:no-such-topic"
    # A window several first tries long: a first try slowed past a shorter one (a loaded machine) would
    # be the only one, and the test would show nothing of the retries.
    await bench.start(success_topic=missing, sns=boto3.client("sns"), retry_for_s=3.0)
    url = bench.receiver.url()
    job = await bench.ended(url)

    async def given_up() -> bool:
        return (await bench.record(job)).get("sns_status") == "undeliverable"

    await eventually(given_up, "the topic given up")
    fields = await bench.record(job)
    assert int(fields["sns_attempts"]) >= 2
    assert fields["callback_status"] == "delivered"
    assert len(bench.receiver.got(url)) == 1  # the callback was not sent again while the topic was retried


@pytest.mark.usefixtures("aws")
async def test_a_subscription_filtered_by_tenant_gets_that_tenants_outcomes_only(bench: Bench):
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    topic = sns.create_topic(Name="success")["TopicArn"]
    everyone, acme = (
        subscribed_queue(sns, sqs, topic),
        subscribed_queue(sns, sqs, topic, {"tenant": ["acme"]}),
    )
    await bench.start(success_topic=topic, sns=sns)

    ours = await bench.ended(notify_all=True)
    theirs = await bench.ended(tenant="acme", notify_all=True)

    async def announced() -> bool:
        return not await bench.due(ours.id) and not await bench.due(theirs.id)

    await eventually(announced, "both jobs announced")
    assert [m["jobId"] for m in drained(sqs, acme)] == [theirs.id]
    assert sorted(m["jobId"] for m in drained(sqs, everyone)) == sorted([ours.id, theirs.id])


class SlowSns:
    """Moto's SNS behind a gate: each PublishBatch waits until the test opens it (or WAIT_S)."""

    def __init__(self, sns: Any) -> None:
        self.sns = sns
        self.gate = threading.Event()
        self.calls = 0

    def publish_batch(self, **request: Any) -> Any:
        self.calls += 1
        self.gate.wait(WAIT_S)
        return self.sns.publish_batch(**request)


@pytest.mark.usefixtures("aws")
async def test_a_slow_topic_never_gets_a_webhook_sent_twice(bench: Bench, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(callbacks, "LEASE_MARGIN_S", 0.0)  # the lease: twice the timeout, 1 s
    sns = boto3.client("sns")
    slow = SlowSns(sns)
    topic = sns.create_topic(Name="success")["TopicArn"]
    for _ in range(2):
        await bench.start(timeout_s=0.5, success_topic=topic, sns=slow)
    url = bench.receiver.url()
    try:
        job = await bench.ended(url)
        # The first publish outlives its lease: a manager claims the job again and publishes again.
        await eventually(lambda: slow.calls >= 2, "the job claimed again past its lease")

        fields = await bench.record(job)
        assert fields["callback_status"] == "delivered"
        assert "sns_status" not in fields
        assert len(bench.receiver.got(url)) == 1
    finally:
        slow.gate.set()

    async def published() -> bool:
        return (await bench.record(job)).get("sns_status") == "delivered"

    await eventually(published, "the topic delivered once SNS answers")
    assert len(bench.receiver.got(url)) == 1
