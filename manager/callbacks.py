"""Announces ended jobs: a signed POST to the job's callback URL, and the outcome topics in AWS.

A job's end makes it due in the callbacks zset (its id scored by when, ms: manager/queue.py and the front
door's cancel script add it). Every manager runs a `CallbackSender`: it claims due jobs under a lease
(manager/callback_ledger.py) and delivers each in a task of its own, under a bound on those in flight and a
smaller one per receiving host: a slow or dead receiver holds a few slots, never the loop nor other hosts'
jobs. A job whose host is at its bound is put back, due a second later, with no attempt counted.

A job owes up to two channels, each tracked in its record on its own: the callback (`callback_status`,
`callback_attempts`, `callback_error`: `public_view` shows them) and the SNS outcome topic of its status
(`sns_status`, `sns_attempts`, `sns_error`). Each channel's try is recorded as soon as it ends, so a slow
topic never holds back the record of a webhook already sent (past the lease, another manager would send it
again). A failed try is retried after 1 s, 2 s, 4 s ... (capped), until `callback_retry_for_s` past the
job's end; then the channel is `undeliverable`. A refusal no retry can mend (a URL that is not https where
only https is allowed, a tenant without a webhook secret, a message SNS rejects) is undeliverable at once.
Nothing is ever sent unsigned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from contract.job_record import JobRecord, public_view, status_of
from contract.jobs import DEFAULT_TENANT, JobStatus, now_ms
from contract.redis_client import STORE_ERRORS, AsyncRedis
from contract.settings import Settings
from contract.webhooks import ATTEMPT_HEADER, JOB_ID_HEADER, SIGNATURE_HEADER, sign
from manager import metrics
from manager.callback_ledger import LEASE_LOST, RECORD_GONE, CallbackLedger
from manager.callback_policy import FIRST_RETRY_S, MAX_RETRY_S, Attempt, settle
from manager.webhook_secrets import SecretsUnavailableError, WebhookSecrets, secrets_for

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64  # deliveries at once per manager: each holds a connection for up to the timeout
MAX_PER_HOST = 8  # of those, to one host (and port): a dead receiver holds no more slots than this
HOST_BUSY_S = 1.0  # a job whose host is at MAX_PER_HOST is due again this much later
CONNECT_TIMEOUT_S = 3.0  # of the callback's timeout, what a connection may take: a dead host fails fast
CLAIM_BATCH = 100
POLL_S = 0.25  # a zset has no blocking pop by score: an idle sender looks this often
LEASE_MARGIN_S = 30.0
STORE_BACKOFF_S = 1.0
SNS_BATCH = 10  # PublishBatch's limit
# SNS's limit on one message, and on the messages of one PublishBatch together; some room is left for the
# attributes and the request's own fields.
SNS_BYTES = 262_144 - 8_192
USER_AGENT = "Synapse-Webhooks/1"


@dataclass(frozen=True, slots=True)
class Due:
    """A claimed job: its record, the lease it was claimed under, and what it owes now."""

    job_id: str
    fields: Mapping[str, str]
    lease: int
    callback: bool
    topic: str | None

    def attempts(self, channel: str) -> int:
        return int(self.fields.get(f"{channel}_attempts") or 0)

    @property
    def host(self) -> str:
        return host_of(self.fields.get("callback", ""))


@dataclass(slots=True)
class Claim:
    """One claim of one job, while its channels are out: the last to finish sets when the job is due again.
    The lock orders the channels' writes: each checks the lease score that the last one changes."""

    due: Due
    out: int
    retry_at: list[int] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def host_of(url: str) -> str:
    """Where a callback goes, as the per-host bound counts it: host and port."""
    try:
        return urlsplit(url).netloc.rpartition("@")[2].lower()
    except ValueError:  # a malformed URL: its POST fails on its own
        return ""


def body_of(fields: Mapping[str, str], *, with_result: bool = True) -> bytes:
    view = public_view(JobRecord.of(fields), with_result=with_result)
    return json.dumps(view, separators=(",", ":"), ensure_ascii=False).encode()


def sns_message(fields: Mapping[str, str]) -> str:
    """The job's view, or, past what SNS takes in one message (an embedding job's vectors, say), its view
    without the result, which the consumer reads from GET /results/{jobId}."""
    body = body_of(fields)
    return (body if len(body) <= SNS_BYTES else body_of(fields, with_result=False)).decode()


def sns_chunks(messages: Sequence[tuple[Due, str]]) -> list[list[tuple[Due, str]]]:
    """Messages grouped for PublishBatch, in order: at most SNS_BATCH, and SNS_BYTES together."""
    chunks: list[list[tuple[Due, str]]] = []
    size = 0
    for due, message in messages:
        length = len(message.encode())
        if not chunks or len(chunks[-1]) == SNS_BATCH or size + length > SNS_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append((due, message))
        size += length
    return chunks


class CallbackSender:
    """`start()` runs the sender; `aclose()` stops it, leaving deliveries in flight to their leases."""

    def __init__(
        self, redis: AsyncRedis, secrets: WebhookSecrets, *, timeout_s: float, retry_for_s: float,
        https_only: bool, success_topic: str | None = None, error_topic: str | None = None,
        sns: Any = None, max_in_flight: int = MAX_IN_FLIGHT, max_per_host: int = MAX_PER_HOST,
        first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S, poll_s: float = POLL_S,
    ) -> None:  # fmt: skip
        if (success_topic or error_topic) and sns is None:
            raise ValueError("an outcome topic needs an SNS client")
        self._secrets = secrets
        self._timeout_s = timeout_s
        self._retry_for_ms = int(retry_for_s * 1000)
        self._https_only = https_only
        self._topics = {JobStatus.COMPLETED: success_topic, JobStatus.FAILED: error_topic}
        self._sns = sns  # a boto3 SNS client
        self._max_in_flight = max_in_flight
        self._max_per_host = max_per_host
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self._poll_s = poll_s
        # The secret lookup and the POST each take up to the timeout; past the lease another manager retries.
        self._ledger = CallbackLedger(redis, int((2 * timeout_s + LEASE_MARGIN_S) * 1000))
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        self._hosts: Counter[str] = Counter()  # callbacks in flight by host

    @classmethod
    def for_settings(cls, redis: AsyncRedis, settings: Settings) -> CallbackSender:
        topics = settings.success_topic_arn or settings.error_topic_arn
        timeouts = Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=settings.callback_timeout_s,
            retries={"max_attempts": 2},
        )
        return cls(
            redis, secrets_for(settings), timeout_s=settings.callback_timeout_s,
            retry_for_s=settings.callback_retry_for_s, https_only=settings.callback_https_only,
            success_topic=settings.success_topic_arn, error_topic=settings.error_topic_arn,
            sns=boto3.client("sns", config=timeouts) if topics else None,
        )  # fmt: skip

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(
            total=self._timeout_s, sock_connect=min(CONNECT_TIMEOUT_S, self._timeout_s)
        )
        self._session = aiohttp.ClientSession(
            timeout=timeout,
            connector=aiohttp.TCPConnector(limit=self._max_in_flight),
            headers={"User-Agent": USER_AGENT},
        )
        self._task = asyncio.create_task(self._loop(), name="callbacks")

    async def aclose(self) -> None:
        for task in [self._task, *self._deliveries]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._session is not None:
            await self._session.close()

    async def _loop(self) -> None:
        failing = False
        while True:
            free = self._max_in_flight - len(self._deliveries)
            if free <= 0:
                await asyncio.wait(self._deliveries, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                claimed = await self._claim_due(min(free, CLAIM_BATCH))
            except STORE_ERRORS as exc:
                if not failing:  # once per outage, not once a second
                    log.warning("claiming due callbacks failed: %s; trying every %g s", exc, STORE_BACKOFF_S)
                failing = True
                await asyncio.sleep(STORE_BACKOFF_S)
                continue
            if failing:
                log.info("claiming due callbacks works again")
            failing = False
            if claimed < min(free, CLAIM_BATCH):  # nothing more is due now
                await asyncio.sleep(self._poll_s)

    async def _claim_due(self, count: int) -> int:
        """Claims up to count due jobs and starts their deliveries; returns how many it claimed."""
        now = now_ms()
        lease, claimed = await self._ledger.claim(now, count)
        idle: list[str] = []  # nothing owed: no record, or no callback pending and no topic for its status
        busy: list[str] = []  # only a callback owed, to a host at its bound: due again, no attempt counted
        claims: list[Claim] = []
        busy_until = now + int(HOST_BUSY_S * 1000)
        for job_id, fields in claimed:
            due = self._due(job_id, fields, lease)
            if due is None:
                idle.append(job_id)
                continue
            waits = due.callback and self._hosts[due.host] >= self._max_per_host
            if waits:  # its host has its share of this manager's deliveries: the topic need not wait
                due = replace(due, callback=False)
            if due.callback:
                self._hosts[due.host] += 1  # counted now, so that the rest of this claim sees it
            if due.callback or due.topic is not None:
                out = int(due.callback) + int(due.topic is not None)
                claims.append(Claim(due, out, retry_at=[busy_until] if waits else []))
            else:
                busy.append(job_id)
        if idle:
            await self._ledger.drop(idle)
        if busy:
            await self._ledger.put_back(busy, busy_until)
        topical = [claim.due for claim in claims if claim.due.topic is not None]
        published = asyncio.create_task(self._publish(topical)) if topical else None
        for claim in claims:
            task = asyncio.create_task(self._deliver(claim, published), name=f"callback:{claim.due.job_id}")
            self._deliveries.add(task)
            task.add_done_callback(self._forget)
        return len(claimed)

    def _due(self, job_id: str, fields: dict[str, str], lease: int) -> Due | None:
        if not fields:
            log.warning("job %s: its record expired before its callbacks were done", job_id)
            return None
        status = status_of(fields)
        if status is None or not status.is_final:  # a job that never ended
            return None
        callback = bool(fields.get("callback")) and fields.get("callback_status", "pending") == "pending"
        topic = None if fields.get("sns_status") else self._topics.get(status)
        if not callback and topic is None:
            return None
        return Due(job_id, fields, lease, callback, topic)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._deliveries.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a callback delivery failed", exc_info=task.exception())

    async def _deliver(self, claim: Claim, published: asyncio.Task[dict[str, Attempt]] | None) -> None:
        """Tries each channel the job owes at once; each records what it came to as soon as it ends."""
        channels = []
        if claim.due.callback:
            channels.append(self._call_back(claim))
        if claim.due.topic is not None and published is not None:
            channels.append(self._announce(claim, published))
        await asyncio.gather(*channels)

    async def _call_back(self, claim: Claim) -> None:
        attempts = claim.due.attempts("callback") + 1
        host = claim.due.host
        try:
            attempt = await self._post(claim.due, attempts)
        finally:
            self._hosts[host] -= 1
            if not self._hosts[host]:
                del self._hosts[host]
        await self._record(claim, "callback", attempts, attempt)

    async def _announce(self, claim: Claim, published: asyncio.Task[dict[str, Attempt]]) -> None:
        attempt = (await published).get(claim.due.job_id) or Attempt(False, "not published")
        await self._record(claim, "sns", claim.due.attempts("sns") + 1, attempt)

    async def _record(self, claim: Claim, channel: str, attempts: int, attempt: Attempt) -> None:
        """Records one channel's try under the job's lease; the claim's last channel sets its next due."""
        due = claim.due
        deadline = int(due.fields.get("completed_ms") or now_ms()) + self._retry_for_ms
        async with claim.lock:
            now = now_ms()
            settled = settle(
                channel, attempts, attempt, now, deadline,
                first_retry_s=self._first_retry_s, max_retry_s=self._max_retry_s,
            )  # fmt: skip
            claim.out -= 1
            claim.retry_at += [] if settled.retry_at_ms is None else [settled.retry_at_ms]
            next_due = min(claim.retry_at, default=0) if claim.out == 0 else None
            try:
                written = await self._ledger.record(due.job_id, due.lease, now, next_due, settled.fields)
            except STORE_ERRORS as exc:
                # Unrecorded, the try is made again once the lease ends, whatever the other channel records.
                claim.retry_at.append(due.lease)
                log.warning(
                    "job %s: recording its %s failed (%s); tried again after its lease",
                    due.job_id,
                    channel,
                    exc,
                )
                return
        if written == LEASE_LOST:  # another manager has the job now: its try is the one that counts
            return
        outcome = "undeliverable" if written == RECORD_GONE else settled.outcome
        metrics.CALLBACKS.labels(channel, outcome).inc()
        if outcome == "undeliverable":
            reason = "its record is gone" if written == RECORD_GONE else attempt.error
            log.warning("job %s: %s undeliverable: %s", due.job_id, channel, reason)

    async def _post(self, due: Due, attempts: int) -> Attempt:
        url = due.fields["callback"]
        if self._https_only and not url.lower().startswith("https://"):
            return Attempt(False, "refused: callback URLs must be https (callback_https_only)", final=True)
        tenant = due.fields.get("tenant") or DEFAULT_TENANT
        try:
            secret = await self._secrets.secret(tenant)
        except SecretsUnavailableError as exc:
            return Attempt(False, str(exc))
        if secret is None:
            return Attempt(False, f"no webhook secret for tenant {tenant}", final=True)
        body = body_of({**due.fields, "callback_attempts": str(attempts)})
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(secret, int(time.time()), body),
            JOB_ID_HEADER: due.job_id,
            ATTEMPT_HEADER: str(attempts),
        }
        return await self._send(url, body, headers)

    async def _send(self, url: str, body: bytes, headers: Mapping[str, str]) -> Attempt:
        assert self._session is not None, "start() the sender first"
        try:
            async with self._session.post(url, data=body, headers=headers, allow_redirects=False) as reply:
                if 200 <= reply.status < 300:
                    return Attempt(True)
                redirect = " (redirects are not followed)" if 300 <= reply.status < 400 else ""
                return Attempt(False, f"HTTP {reply.status}{redirect}")
        except aiohttp.ConnectionTimeoutError:
            return Attempt(False, f"no connection within {min(CONNECT_TIMEOUT_S, self._timeout_s):g} s")
        except TimeoutError:
            return Attempt(False, f"no answer within {self._timeout_s:g} s")
        except (aiohttp.ClientError, ValueError) as exc:
            return Attempt(False, f"{type(exc).__name__}: {exc}")

    async def _publish(self, dues: Sequence[Due]) -> dict[str, Attempt]:
        """Each job's view to the topic of its status, up to SNS_BATCH (and SNS_BYTES) per request; by
        job id."""
        by_topic: dict[str | None, list[tuple[Due, str]]] = {}
        for due in dues:
            by_topic.setdefault(due.topic, []).append((due, sns_message(due.fields)))
        chunks = [chunk for group in by_topic.values() for chunk in sns_chunks(group)]
        replies = await asyncio.gather(*(asyncio.to_thread(self._publish_batch, chunk) for chunk in chunks))
        return {job_id: attempt for reply in replies for job_id, attempt in reply.items()}

    def _publish_batch(self, messages: Sequence[tuple[Due, str]]) -> dict[str, Attempt]:
        chunk = [due for due, _ in messages]
        entries = [
            {
                "Id": str(i),
                "Message": message,
                "MessageAttributes": _attributes(
                    status=due.fields["status"],
                    model=due.fields["model"],
                    tenant=due.fields.get("tenant") or DEFAULT_TENANT,
                ),
            }
            for i, (due, message) in enumerate(messages)
        ]
        try:
            reply = self._sns.publish_batch(TopicArn=chunk[0].topic, PublishBatchRequestEntries=entries)
        except (BotoCoreError, ClientError) as exc:
            return {due.job_id: Attempt(False, f"SNS: {exc}") for due in chunk}
        results = {chunk[int(ok["Id"])].job_id: Attempt(True) for ok in reply.get("Successful", ())}
        for failed in reply.get("Failed", ()):
            error = f"SNS {failed.get('Code')}: {failed.get('Message', '')}"
            # A sender fault (a message too large, say) fails the same way every time.
            results[chunk[int(failed["Id"])].job_id] = Attempt(
                False, error, final=bool(failed.get("SenderFault"))
            )
        return results


def _attributes(**values: str) -> dict[str, dict[str, str]]:
    """SNS message attributes, for subscription filter policies (one tenant's outcomes, one model's)."""
    return {name: {"DataType": "String", "StringValue": value} for name, value in values.items()}
