"""An ended job's view published to the SNS outcome topic of its status (AWS only), batched.

A message is the job's view, or, past what SNS takes in one message, its view without the result, which
the consumer reads from GET /results/{jobId}. Messages go out SNS_BATCH at a time (and SNS_BYTES
together) per PublishBatch, with attributes for subscription filter policies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from contract.job_record import JobRecord
from contract.jobs import JobStatus
from manager.callback_policy import Attempt
from manager.callback_webhook import body_of

T = TypeVar("T")

SNS_BATCH = 10  # PublishBatch's limit
# SNS's limit on one message, and on the messages of one PublishBatch together; some room is left for the
# attributes and the request's own fields.
SNS_BYTES = 262_144 - 8_192


class Owed(Protocol):
    """A job owed a message: which, to which topic, and its record."""

    @property
    def job_id(self) -> str: ...
    @property
    def topic(self) -> str | None: ...
    @property
    def record(self) -> JobRecord: ...
    @property
    def tenant(self) -> str: ...


def sns_message(record: JobRecord) -> str:
    """The job's view, or, past what SNS takes in one message (an embedding job's vectors, say), its view
    without the result, which the consumer reads from GET /results/{jobId}."""
    body = body_of(record)
    return (body if len(body) <= SNS_BYTES else body_of(record, with_result=False)).decode()


def sns_chunks(messages: Sequence[tuple[T, str]]) -> list[list[tuple[T, str]]]:
    """Messages grouped for PublishBatch, in order: at most SNS_BATCH, and SNS_BYTES together."""
    chunks: list[list[tuple[T, str]]] = []
    size = 0
    for due, message in messages:
        length = len(message.encode())
        if not chunks or len(chunks[-1]) == SNS_BATCH or size + length > SNS_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append((due, message))
        size += length
    return chunks


class OutcomePublisher:
    """The outcome topics (one for COMPLETED, one for FAILED; either may be unset) and the client to them."""

    def __init__(self, success_topic: str | None, error_topic: str | None, sns: Any) -> None:
        if (success_topic or error_topic) and sns is None:
            raise ValueError("an outcome topic needs an SNS client")
        self._topics = {JobStatus.COMPLETED: success_topic, JobStatus.FAILED: error_topic}
        self._sns = sns  # a boto3 SNS client

    def topic_for(self, status: JobStatus) -> str | None:
        return self._topics.get(status)

    async def publish(self, dues: Sequence[Owed]) -> dict[str, Attempt]:
        """Each job's view to the topic of its status, up to SNS_BATCH (and SNS_BYTES) per request; by
        job id."""
        by_topic: dict[str | None, list[tuple[Owed, str]]] = {}
        for due in dues:
            by_topic.setdefault(due.topic, []).append((due, sns_message(due.record)))
        chunks = [chunk for group in by_topic.values() for chunk in sns_chunks(group)]
        replies = await asyncio.gather(*(asyncio.to_thread(self._publish_batch, chunk) for chunk in chunks))
        return {job_id: attempt for reply in replies for job_id, attempt in reply.items()}

    def _publish_batch(self, messages: Sequence[tuple[Owed, str]]) -> dict[str, Attempt]:
        chunk = [due for due, _ in messages]
        entries = [
            {
                "Id": str(i),
                "Message": message,
                "MessageAttributes": _attributes(
                    status=due.record.status.value,
                    model=due.record.model,
                    tenant=due.tenant,
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
