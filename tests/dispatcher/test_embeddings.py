"""Embedding jobs, in process against a real Redis: a job's texts are rows of the fleet's batches.

Single-text jobs share a batch up to the model's max_batch_size in rows; a job of more texts than that
goes alone, as several requests of at most max_batch_size; every job gets its own vectors back, in the
order of its texts; a job that asked for no truncation fails when one of its texts was cut.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from contract.job_record import JobRecord
from tests.dispatcher.harness import Site, eventually
from tests.dispatcher.workers import WINDOW, text_vector


def vectors(fields: dict[str, str]) -> np.ndarray:
    """The job's stored vectors, a row per text."""
    result = json.loads(fields["result"])
    return np.frombuffer(base64.b64decode(result["embeddings"]), dtype="<f4").reshape(
        -1, result["dimensions"]
    )


async def test_single_text_jobs_share_batches_counted_in_rows(site: Site) -> None:
    worker = await site.add_worker(max_batch=8, embedding=True)
    jobs = [site.submit_texts([f"sentence number {i}"]) for i in range(20)]
    await site.start_manager()

    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 20
    for job, fields in zip(jobs, hashes, strict=True):
        assert np.array_equal(vectors(fields), text_vector(job.inputs[0])[None, :])
    assert sum(worker.sizes) == 20
    assert max(worker.sizes) == 8  # jobs were batched, never past max_batch_size rows
    assert len(worker.sizes) < 20


async def test_jobs_of_several_texts_share_a_batch_while_their_texts_fit(site: Site) -> None:
    worker = await site.add_worker(max_batch=8, embedding=True)
    jobs = [site.submit_texts([f"job {i} text {t}" for t in range(3)]) for i in range(6)]
    await site.start_manager()

    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 6
    assert worker.sizes == [6, 6, 6]  # two jobs of 3 texts a batch: a third would pass 8
    for job, fields in zip(jobs, hashes, strict=True):
        assert np.array_equal(vectors(fields), np.stack([text_vector(t) for t in job.inputs]))


async def test_a_job_larger_than_a_batch_goes_alone_and_keeps_its_order(site: Site) -> None:
    worker = await site.add_worker(max_batch=8, embedding=True)
    texts = [f"text {i} " + "word " * (i % 5) for i in range(21)]
    job = site.submit_texts(texts)
    await site.start_manager()

    (fields,) = await site.wait_final([job])

    assert fields["status"] == "COMPLETED"
    assert worker.sizes == [21]  # alone, though past max_batch_size: the client splits it
    assert worker.split_limits == [8]  # by the model's max_batch_size
    assert np.array_equal(vectors(fields), np.stack([text_vector(t) for t in texts]))
    result = json.loads(fields["result"])
    assert result["usage"]["prompt_tokens"] == sum(len(t.split()) for t in texts)
    assert fields["batch_size"] == "21"


async def test_a_long_text_is_flagged_truncated_or_fails_its_job_when_truncation_is_refused(
    site: Site,
) -> None:
    await site.add_worker(max_batch=8, embedding=True)
    long_text = " ".join(["word"] * (WINDOW + 3))
    cut = site.submit_texts(["short one", long_text])
    refused = site.submit_texts(["short two", long_text], truncate=False)
    fine = site.submit_texts(["short three"], truncate=False)
    await site.start_manager()

    cut_fields, refused_fields, fine_fields = await site.wait_final([cut, refused, fine])

    assert json.loads(cut_fields["result"])["truncated"] == [False, True]
    assert refused_fields["status"] == "FAILED"
    assert refused_fields["error_code"] == "input_too_long"
    assert f"input 1 is longer than the model's {WINDOW}-token window" in refused_fields["error_message"]
    assert fine_fields["status"] == "COMPLETED"


async def test_a_cancelled_embedding_job_never_reaches_the_worker(site: Site) -> None:
    worker = await site.add_worker(max_batch=8, embedding=True)
    worker.hold()
    await site.start_manager()
    first = site.submit_texts(["occupies the worker"])
    await worker.wait_for_batches(1)
    queued = site.submit_texts(["never embedded"])
    assert site.store.cancel(JobRecord.of(await site.job(queued)), "cancelled by its client") is not None
    worker.release()

    first_fields, queued_fields = await site.wait_final([first, queued])

    assert first_fields["status"] == "COMPLETED"
    assert queued_fields["status"] == "CANCELLED"
    await eventually(lambda: not worker.held, "the worker released")
    assert "never embedded" not in worker.prompts
