"""Announces ended jobs: a signed POST to the job's callback URL, and the outcome topics in AWS.

A job's end makes it due in the callbacks zset (its id scored by when, ms: manager/queue.py and the front
door's cancel script add it). Every manager runs a `CallbackSender`: it claims due ids atomically, moving
each to a lease score, so managers never deliver the same attempt at once and a manager killed mid-delivery
leaves the job to be claimed again when its lease ends. Each job is delivered by a task of its own under
a bound on those in flight: a slow or dead receiver holds one slot, never the loop nor other jobs.

A job owes up to two channels, each tracked in its record on its own: the callback (`callback_status`,
`callback_attempts`, `callback_error`: `public_view` shows them) and the SNS outcome topic of its status
(`sns_status`, `sns_attempts`, `sns_error`). A failed try is retried after 1 s, 2 s, 4 s ... (capped), until
`callback_retry_for_s` past the job's end; then the channel is `undeliverable`. A refusal no retry can mend
(a URL that is not https where only https is allowed, a tenant without a webhook secret, a message SNS
rejects) is undeliverable at once. Nothing is ever sent unsigned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from contract.jobs import DEFAULT_TENANT, JobStatus, now_ms, public_view
from contract.keys import CALLBACKS_KEY, job_key
from contract.redis_client import STORE_ERRORS, AsyncRedis
from contract.settings import Settings
from contract.webhooks import ATTEMPT_HEADER, JOB_ID_HEADER, SIGNATURE_HEADER, sign
from manager import metrics
from manager.webhook_secrets import SecretsUnavailableError, WebhookSecrets, secrets_for

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64  # deliveries at once per manager: each holds a connection for up to the timeout
CLAIM_BATCH = 100
POLL_S = 0.25  # a zset has no blocking pop by score: an idle sender looks this often
LEASE_MARGIN_S = 30.0
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 300.0
STORE_BACKOFF_S = 1.0
SNS_BATCH = 10  # PublishBatch's limit
ERROR_CHARS = 300
USER_AGENT = "Synapse-Webhooks/1"
ENDED = frozenset(status.value for status in JobStatus if status.is_final)

# Claims up to ARGV[3] ids due by ARGV[1] (ms), each moved to the lease score ARGV[2]: no other manager
# sees it due until the lease ends. KEYS: callbacks.
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
end
return due
"""

# Records a delivery round, if this manager still holds the job's lease (the score it claimed it with): a
# manager whose lease ran out never overwrites its successor's record. A record gone meanwhile is not
# written (HSET would leave a stub that never expires). KEYS: callbacks, job. ARGV: id, lease, next due
# (ms; 0: nothing left to do), then field/value pairs. Returns 1 if written.
_SETTLE = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) ~= tonumber(ARGV[2]) then
  return 0
end
local exists = redis.call('EXISTS', KEYS[2]) == 1
if exists and #ARGV > 3 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 4))
end
if ARGV[3] == '0' or not exists then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one try on one channel came to. `final`: no later try can do better."""

    ok: bool
    error: str = ""
    final: bool = False


@dataclass(frozen=True, slots=True)
class Settled:
    """What to record after a try: the channel's fields, and when to try again (None: never)."""

    fields: dict[str, str]
    retry_at_ms: int | None
    outcome: str  # the metric's: delivered, retried, undeliverable


def backoff_s(attempts: int, first_s: float = FIRST_RETRY_S, cap_s: float = MAX_RETRY_S) -> float:
    """The wait after the attempts-th failed try: first_s, doubled each time, capped."""
    return float(min(cap_s, first_s * 2 ** max(0, attempts - 1)))


def settle(
    channel: str, attempts: int, attempt: Attempt, now: int, deadline: int, *,
    first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S,
) -> Settled:  # fmt: skip
    """The channel's record after its attempts-th try at `now` (ms): given up once the next try would
    fall past `deadline` (ms), or at once when the try was refused for good."""
    fields = {f"{channel}_attempts": str(attempts)}
    if attempt.ok:
        fields[f"{channel}_status"] = "delivered"
        return Settled(fields, None, "delivered")
    fields[f"{channel}_error"] = attempt.error[:ERROR_CHARS]
    retry_at = now + int(backoff_s(attempts, first_retry_s, max_retry_s) * 1000)
    if attempt.final or retry_at > deadline:
        fields[f"{channel}_status"] = "undeliverable"
        return Settled(fields, None, "undeliverable")
    return Settled(fields, retry_at, "retried")


@dataclass(frozen=True, slots=True)
class Due:
    """A claimed job: its record, the lease it was claimed under, and what it still owes."""

    job_id: str
    fields: Mapping[str, str]
    lease: int
    callback: bool
    topic: str | None

    def attempts(self, channel: str) -> int:
        return int(self.fields.get(f"{channel}_attempts") or 0)


def body_of(fields: Mapping[str, str]) -> bytes:
    return json.dumps(public_view(fields), separators=(",", ":"), ensure_ascii=False).encode()


class CallbackSender:
    """`start()` runs the sender; `aclose()` stops it, leaving deliveries in flight to their leases."""

    def __init__(
        self, redis: AsyncRedis, secrets: WebhookSecrets, *, timeout_s: float, retry_for_s: float,
        https_only: bool, success_topic: str | None = None, error_topic: str | None = None,
        sns: Any = None, max_in_flight: int = MAX_IN_FLIGHT, first_retry_s: float = FIRST_RETRY_S,
        max_retry_s: float = MAX_RETRY_S, poll_s: float = POLL_S,
    ) -> None:  # fmt: skip
        if (success_topic or error_topic) and sns is None:
            raise ValueError("an outcome topic needs an SNS client")
        self._redis = redis
        self._secrets = secrets
        self._timeout_s = timeout_s
        self._retry_for_ms = int(retry_for_s * 1000)
        self._https_only = https_only
        self._topics = {JobStatus.COMPLETED: success_topic, JobStatus.FAILED: error_topic}
        self._sns = sns  # a boto3 SNS client
        self._max_in_flight = max_in_flight
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self._poll_s = poll_s
        # The secret lookup and the POST each take up to the timeout; past the lease another manager retries.
        self._lease_ms = int((2 * timeout_s + LEASE_MARGIN_S) * 1000)
        # redis-py types register_script for Redis alone; a RedisCluster routes EVALSHA by the keys.
        self._claim = redis.register_script(_CLAIM)  # type: ignore[misc]
        self._settle = redis.register_script(_SETTLE)  # type: ignore[misc]
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()

    @classmethod
    def for_settings(cls, redis: AsyncRedis, settings: Settings) -> CallbackSender:
        topics = settings.success_topic_arn or settings.error_topic_arn
        timeouts = Config(
            connect_timeout=5, read_timeout=settings.callback_timeout_s, retries={"max_attempts": 2}
        )
        return cls(
            redis, secrets_for(settings), timeout_s=settings.callback_timeout_s,
            retry_for_s=settings.callback_retry_for_s, https_only=settings.callback_https_only,
            success_topic=settings.success_topic_arn, error_topic=settings.error_topic_arn,
            sns=boto3.client("sns", config=timeouts) if topics else None,
        )  # fmt: skip

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._timeout_s),
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
        lease = now + self._lease_ms
        ids: list[str] = list(await self._claim(keys=[CALLBACKS_KEY], args=[now, lease, count]) or ())
        if not ids:
            return 0
        pipe = self._redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(job_key(job_id))
        records: list[dict[str, str]] = await pipe.execute()
        dues = [self._due(job_id, fields, lease) for job_id, fields in zip(ids, records, strict=True)]
        owing = [due for due in dues if due is not None]
        idle = [job_id for job_id, due in zip(ids, dues, strict=True) if due is None]
        if idle:  # nothing owed: no record, or no callback pending and no topic for its status
            await self._redis.zrem(CALLBACKS_KEY, *idle)
        topical = [due for due in owing if due.topic is not None]
        published = asyncio.create_task(self._publish(topical)) if topical else None
        for due in owing:
            task = asyncio.create_task(self._deliver(due, published), name=f"callback:{due.job_id}")
            self._deliveries.add(task)
            task.add_done_callback(self._forget)
        return len(ids)

    def _due(self, job_id: str, fields: dict[str, str], lease: int) -> Due | None:
        status = fields.get("status")
        if status not in ENDED:  # a record gone (expired), or one that never ended
            return None
        callback = bool(fields.get("callback")) and fields.get("callback_status", "pending") == "pending"
        topic = None if fields.get("sns_status") else self._topics.get(JobStatus(status))
        if not callback and topic is None:
            return None
        return Due(job_id, fields, lease, callback, topic)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._deliveries.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a callback delivery failed", exc_info=task.exception())

    async def _deliver(self, due: Due, published: asyncio.Task[dict[str, Attempt]] | None) -> None:
        """Tries each channel the job owes, then records what each came to, in one script."""
        deadline = int(due.fields.get("completed_ms") or now_ms()) + self._retry_for_ms
        tries: list[tuple[str, int, Attempt]] = []
        if due.callback:
            attempts = due.attempts("callback") + 1
            tries.append(("callback", attempts, await self._post(due, attempts)))
        if due.topic is not None and published is not None:
            attempt = (await published).get(due.job_id) or Attempt(False, "not published")
            tries.append(("sns", due.attempts("sns") + 1, attempt))
        now = now_ms()
        fields: dict[str, str] = {}
        retry_at: list[int] = []
        for channel, attempts, attempt in tries:
            settled = settle(
                channel, attempts, attempt, now, deadline,
                first_retry_s=self._first_retry_s, max_retry_s=self._max_retry_s,
            )  # fmt: skip
            metrics.CALLBACKS.labels(channel, settled.outcome).inc()
            if settled.outcome == "undeliverable":
                log.warning("job %s: %s undeliverable: %s", due.job_id, channel, attempt.error)
            fields.update(settled.fields)
            retry_at += [] if settled.retry_at_ms is None else [settled.retry_at_ms]
        args: list[str | int] = [due.job_id, due.lease, min(retry_at, default=0)]
        for pair in fields.items():
            args += pair
        try:
            await self._settle(keys=[CALLBACKS_KEY, job_key(due.job_id)], args=args)
        except STORE_ERRORS as exc:
            log.warning(
                "job %s: recording its delivery failed (%s); retried when its lease ends", due.job_id, exc
            )

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
        except TimeoutError:
            return Attempt(False, f"no answer within {self._timeout_s:g} s")
        except (aiohttp.ClientError, ValueError) as exc:
            return Attempt(False, f"{type(exc).__name__}: {exc}")

    async def _publish(self, dues: Sequence[Due]) -> dict[str, Attempt]:
        """Each job's view to the topic of its status, up to SNS_BATCH per request; by job id."""
        by_topic: dict[str | None, list[Due]] = {}
        for due in dues:
            by_topic.setdefault(due.topic, []).append(due)
        chunks = [
            group[i : i + SNS_BATCH] for group in by_topic.values() for i in range(0, len(group), SNS_BATCH)
        ]
        replies = await asyncio.gather(*(asyncio.to_thread(self._publish_batch, chunk) for chunk in chunks))
        return {job_id: attempt for reply in replies for job_id, attempt in reply.items()}

    def _publish_batch(self, chunk: Sequence[Due]) -> dict[str, Attempt]:
        entries = [
            {
                "Id": str(i),
                "Message": body_of(due.fields).decode(),
                "MessageAttributes": _attributes(status=due.fields["status"], model=due.fields["model"]),
            }
            for i, due in enumerate(chunk)
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
    """SNS message attributes, for subscription filter policies (say, one model's outcomes only)."""
    return {name: {"DataType": "String", "StringValue": value} for name, value in values.items()}
