"""Announces ended jobs: a signed POST to the job's callback URL, and the outcome topics in AWS.

A job's end makes it due in the callbacks zset (its id scored by when, ms: manager/queue.py and the front
door's cancel script add it). Every manager runs a `CallbackSender`: it claims due jobs under a lease
(manager/callback_ledger.py) and delivers each in a task of its own, under a bound on those in flight, a
smaller one per tenant and one per receiving address (as resolved, so that many names or aliases of one
host count together): a slow or dead receiver holds a few slots, never the loop, and one tenant's
receivers never hold the slots another tenant's callbacks need. A job whose tenant or address is at its
bound is put back, due a second later, with no attempt counted.

This module claims, bounds and records; one try of each channel is another's: the signed POST
manager/callback_webhook.py's (to an address the policy permits), the SNS message manager/callback_sns.py's.

A job owes up to two channels, each tracked in its record on its own: the callback (`callback_status`,
`callback_attempts`, `callback_error`: `public_view` shows them) and the SNS outcome topic of its status
(`sns_status`, `sns_attempts`, `sns_error`). Each channel's try is recorded as soon as it ends, so a slow
topic never holds back the record of a webhook already sent (past the lease, another manager would send it
again). A failed try is retried after 1 s, 2 s, 4 s ... (capped), until `callback_retry_for_s` past the
job's end; then the channel is `undeliverable`. A refusal no retry can mend (a URL that is not https where
only https is allowed, a tenant without a webhook secret, a message SNS rejects) is undeliverable at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
from botocore.config import Config

from contract.job_record import JobRecord
from contract.jobs import now_ms
from contract.redis_client import STORE_ERRORS, AsyncRedis
from contract.settings import Settings
from contract.time_limit import stop
from manager import metrics
from manager.callback_address import (
    AddressPolicy,
    Resolver,
)
from manager.callback_ledger import LEASE_LOST, RECORD_GONE, CallbackLedger
from manager.callback_policy import FIRST_RETRY_S, MAX_RETRY_S, Attempt, settle
from manager.callback_sns import OutcomePublisher
from manager.callback_webhook import CONNECT_TIMEOUT_S, WebhookPoster, release
from manager.webhook_secrets import WebhookSecrets, secrets_for

log = logging.getLogger(__name__)

BUSY_S = 1.0  # a job whose tenant or address is at its bound is due again this much later
CLAIM_BATCH = 100
POLL_S = 0.25  # a zset has no blocking pop by score: an idle sender looks this often
LEASE_MARGIN_S = 30.0
STORE_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class Due:
    """A claimed job: its record, the lease it was claimed under, and what it owes now."""

    record: JobRecord
    lease: int
    callback: bool
    topic: str | None

    @property
    def job_id(self) -> str:
        return self.record.id

    @property
    def tenant(self) -> str:
        return self.record.tenant

    def attempts(self, channel: str) -> int:
        if channel == "sns":
            return self.record.sns_attempts
        return 0 if self.record.callback is None else self.record.callback.attempts


def callback_url(due: Due) -> str:
    return "" if due.record.callback is None else due.record.callback.url


@dataclass(slots=True)
class Claim:
    """One claim of one job, while its channels are out: the last to finish sets when the job is due again.
    The lock orders the channels' writes: each checks the lease score that the last one changes."""

    due: Due
    out: int
    retry_at: list[int] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class CallbackSender:
    """`start()` runs the sender; `aclose()` stops it, leaving deliveries in flight to their leases."""

    def __init__(
        self, redis: AsyncRedis, secrets: WebhookSecrets, *, timeout_s: float, retry_for_s: float,
        https_only: bool, max_in_flight: int, max_per_tenant: int, max_per_address: int,
        policy: AddressPolicy, resolver: Resolver | None = None,
        success_topic: str | None = None, error_topic: str | None = None, sns: Any = None,
        first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S, poll_s: float = POLL_S,
    ) -> None:  # fmt: skip
        self._retry_for_ms = int(retry_for_s * 1000)
        self._max_in_flight = max_in_flight
        self._max_per_tenant = max_per_tenant
        self._webhooks = WebhookPoster(
            secrets, timeout_s=timeout_s, https_only=https_only, max_in_flight=max_in_flight,
            max_per_address=max_per_address, policy=policy, resolver=resolver,
        )  # fmt: skip
        self._outcomes = OutcomePublisher(success_topic, error_topic, sns)
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self._poll_s = poll_s
        # The secret lookup and the POST each take up to the timeout; past the lease another manager retries.
        self._ledger = CallbackLedger(redis, int((2 * timeout_s + LEASE_MARGIN_S) * 1000))
        self._task: asyncio.Task[None] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        self._tenants: Counter[str] = Counter()  # callbacks in flight by tenant

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
            max_in_flight=settings.callback_max_in_flight, max_per_tenant=settings.callback_max_per_tenant,
            max_per_address=settings.callback_max_per_address,
            policy=AddressPolicy.of(settings.callback_allowed_networks),
            success_topic=settings.success_topic_arn, error_topic=settings.error_topic_arn,
            sns=boto3.client("sns", config=timeouts) if topics else None,
        )  # fmt: skip

    async def start(self) -> None:
        await self._webhooks.start()
        self._task = asyncio.create_task(self._loop(), name="callbacks")

    async def aclose(self) -> None:
        for task in [self._task, *self._deliveries]:
            await stop(task)
        await self._webhooks.aclose()

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
        busy: list[str] = []  # only a callback owed, its tenant at its bound: due again, no attempt counted
        claims: list[Claim] = []
        busy_until = now + int(BUSY_S * 1000)
        for job_id, record in claimed:
            due = self._due(job_id, record, lease)
            if due is None:
                idle.append(job_id)
                continue
            # Its tenant has its share of this manager's deliveries, or its host's address is at its bound:
            # the callback waits, with no attempt counted; the topic need not wait.
            waits = due.callback and (
                self._tenants[due.tenant] >= self._max_per_tenant
                or self._webhooks.at_bound(callback_url(due))
            )
            if waits:
                due = replace(due, callback=False)
            if due.callback:
                self._tenants[due.tenant] += 1  # counted now, so that the rest of this claim sees it
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
        published = asyncio.create_task(self._outcomes.publish(topical)) if topical else None
        for claim in claims:
            task = asyncio.create_task(self._deliver(claim, published), name=f"callback:{claim.due.job_id}")
            self._deliveries.add(task)
            task.add_done_callback(self._forget)
        return len(claimed)

    def _due(self, job_id: str, record: JobRecord | None, lease: int) -> Due | None:
        if record is None:
            log.warning("job %s: its record expired before its callbacks were done", job_id)
            return None
        if not record.status.is_final:  # a job that never ended
            return None
        callback = record.callback is not None and record.callback.status == "pending"
        topic = None if record.sns_status else self._outcomes.topic_for(record.status)
        if not callback and topic is None:
            return None
        return Due(record, lease, callback, topic)

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
        try:
            attempt = await self._webhooks.post(claim.due.record, attempts)
        finally:
            release(self._tenants, claim.due.tenant)
        await self._record(claim, "callback", attempts, attempt)

    async def _announce(self, claim: Claim, published: asyncio.Task[dict[str, Attempt]]) -> None:
        attempt = (await published).get(claim.due.job_id) or Attempt(False, "not published")
        await self._record(claim, "sns", claim.due.attempts("sns") + 1, attempt)

    async def _record(self, claim: Claim, channel: str, attempts: int, attempt: Attempt | None) -> None:
        """Records one channel's try under the job's lease; the claim's last channel sets its next due.
        No attempt (None): not tried, its address at its bound; due again after BUSY_S, nothing counted."""
        due = claim.due
        deadline = (due.record.completed_ms or now_ms()) + self._retry_for_ms
        async with claim.lock:
            now = now_ms()
            if attempt is None:
                fields: dict[str, str] = {}
                retry_at: int | None = now + int(BUSY_S * 1000)
            else:
                settled = settle(
                    channel, attempts, attempt, now, deadline,
                    first_retry_s=self._first_retry_s, max_retry_s=self._max_retry_s,
                )  # fmt: skip
                fields, retry_at = settled.fields, settled.retry_at_ms
            claim.out -= 1
            claim.retry_at += [] if retry_at is None else [retry_at]
            next_due = min(claim.retry_at, default=0) if claim.out == 0 else None
            try:
                written = await self._ledger.record(due.job_id, due.lease, now, next_due, fields)
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
        if written == LEASE_LOST or attempt is None:  # another manager's try counts; or none was made
            return
        outcome = "undeliverable" if written == RECORD_GONE else settled.outcome
        metrics.CALLBACKS.labels(channel, outcome).inc()
        if outcome == "undeliverable":
            reason = "its record is gone" if written == RECORD_GONE else attempt.error
            log.warning("job %s: %s undeliverable: %s", due.job_id, channel, reason)
