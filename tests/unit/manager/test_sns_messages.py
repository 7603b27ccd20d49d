"""Outcome-topic messages fit SNS: a view too large for one message (an embedding job's vectors) goes
without its result, and a PublishBatch never carries more than SNS takes in one request."""

from __future__ import annotations

import json
import struct

from contract.job_record import JobRecord
from contract.jobs import EmbeddingOptions, Job, JobStatus, Outcome
from manager.callback_sns import SNS_BATCH, SNS_BYTES, sns_chunks, sns_message
from manager.callbacks import Due


def ended_embedding_job(texts: int) -> JobRecord:
    job = Job.new(
        model="minilm", prompt="", max_tokens=0, parameters=EmbeddingOptions(),
        timeout_ms=60_000, inputs=tuple(f"text {i}" for i in range(texts)),
    )  # fmt: skip
    vectors = struct.pack(f"<{texts * 384}f", *([0.0123456789] * (texts * 384)))
    outcome = Outcome(
        job_id=job.id, status=JobStatus.COMPLETED, started_ms=job.created_ms, completed_ms=job.created_ms + 5,
        batch_size=texts, prompt_tokens=3 * texts, embeddings=vectors, dimensions=384,
        truncated=(False,) * texts,
    )  # fmt: skip
    return JobRecord.of({**job.hash_fields(), **outcome.hash_fields()})


def due(record: JobRecord) -> Due:
    return Due(record=record, lease=1, callback=False, topic="arn:aws:sns:topic")


def test_a_view_too_large_for_sns_goes_without_its_result_and_a_small_one_whole():
    small, large = ended_embedding_job(2), ended_embedding_job(200)
    assert len(json.loads(sns_message(small))["result"]["data"]) == 2
    trimmed = json.loads(sns_message(large))
    assert "result" not in trimmed
    assert (trimmed["jobId"], trimmed["status"]) == (large.id, "COMPLETED")
    assert len(sns_message(large).encode()) <= SNS_BYTES


def test_a_publish_batch_holds_at_most_ten_messages_and_what_sns_takes_in_one_request():
    large = [ended_embedding_job(15) for _ in range(12)]  # views of about 75 KB: split by size
    small = [ended_embedding_job(1) for _ in range(12)]  # views of about 3 KB: split by count
    sizes = []
    for jobs in (large, small):
        messages = [(due(record), sns_message(record)) for record in jobs]
        chunks = sns_chunks(messages)
        assert [m for chunk in chunks for m in chunk] == messages  # every message once, in order
        assert all(sum(len(m.encode()) for _, m in chunk) <= SNS_BYTES for chunk in chunks)
        assert all(len(chunk) <= SNS_BATCH for chunk in chunks)
        sizes.append([len(chunk) for chunk in chunks])
    large_sizes, small_sizes = sizes
    assert len(large_sizes) > 2
    assert small_sizes == [SNS_BATCH, 2]
