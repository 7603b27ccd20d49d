import base64
import struct

from contract.job_record import JobRecord, public_view
from contract.jobs import EmbeddingOptions, Job, JobStatus, Outcome, Sampling
from frontdoor.job_control import retry_of
from frontdoor.tenancy import Caller


def stored(job: Job, outcome: Outcome | None = None) -> dict[str, str]:
    """The job hash as Redis would hold it after submission (and completion)."""
    fields = job.hash_fields()
    if outcome is not None:
        fields.update(outcome.hash_fields())
    return fields


def make_job() -> Job:
    return Job.new(model="gpu-sim", prompt="The three", max_tokens=16, timeout_ms=60_000)


def test_a_stream_entry_round_trips_to_the_same_job():
    job = make_job()
    assert Job.from_stream("gpu-sim", job.stream_fields()) == job


def test_a_queued_job_shows_status_and_no_result():
    job = make_job()
    view = public_view(JobRecord.of(stored(job)))
    assert view["jobId"] == job.id
    assert view["status"] == "QUEUED"
    assert "result" not in view and "timings" not in view


def test_a_completed_job_shows_its_result_usage_and_timings():
    job = make_job()
    outcome = Outcome(
        job_id=job.id,
        status=JobStatus.COMPLETED,
        started_ms=job.created_ms + 30,
        completed_ms=job.created_ms + 80,
        batch_size=12,
        text="eerht ehT",
        prompt_tokens=2,
        completion_tokens=2,
    )
    view = public_view(JobRecord.of(stored(job, outcome)))
    assert view["result"] == {
        "text": "eerht ehT",
        "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
    }
    assert view["timings"] == {"queueMs": 30, "inferMs": 50, "totalMs": 80, "batchSize": 12}
    assert view["completedAt"].endswith("Z")


def test_a_failed_job_shows_the_reason():
    job = make_job()
    outcome = Outcome(
        job_id=job.id,
        status=JobStatus.FAILED,
        started_ms=job.created_ms,
        completed_ms=job.created_ms + 5,
        batch_size=0,
        error_code="deadline_exceeded",
        error_message="too late",
    )
    view = public_view(JobRecord.of(stored(job, outcome)))
    assert view["status"] == "FAILED"
    assert view["error"] == {"code": "deadline_exceeded", "message": "too late"}
    assert "result" not in view


def embedding_job(encoding: str = "float") -> Job:
    return Job.new(
        model="minilm", prompt="", max_tokens=0, parameters=EmbeddingOptions(encoding),
        timeout_ms=60_000, inputs=("first text", "second, longer text"),
    )  # fmt: skip


def embedded(job: Job, rows: list[list[float]]) -> Outcome:
    vectors = struct.pack(f"<{len(rows) * 3}f", *(v for row in rows for v in row))
    return Outcome(
        job_id=job.id, status=JobStatus.COMPLETED, started_ms=job.created_ms, completed_ms=job.created_ms + 9,
        batch_size=2, prompt_tokens=11, embeddings=vectors, dimensions=3, truncated=(False, True),
    )  # fmt: skip


def test_an_embedding_job_keeps_its_texts_through_the_stream_and_its_record():
    job = embedding_job()
    assert job.rows == 2 and job.texts == ("first text", "second, longer text")
    assert Job.from_stream("minilm", job.stream_fields()) == job
    assert Job.from_hash(job.hash_fields()).inputs == job.inputs
    retried = retry_of(Job.from_hash(job.hash_fields()), Caller(tenant=job.tenant))
    assert (retried.inputs, retried.parameters, retried.retry_of) == (job.inputs, job.parameters, job.id)


def test_an_embedding_job_shows_a_vector_per_text_in_the_encoding_it_asked_for():
    rows = [[0.5, -0.25, 0.125], [1 / 3, 0.0, -1.0]]
    as_float = public_view(JobRecord.of(stored(job := embedding_job(), embedded(job, rows))))["result"]
    assert [item["index"] for item in as_float["data"]] == [0, 1]
    assert [item["truncated"] for item in as_float["data"]] == [False, True]
    assert as_float["data"][0]["embedding"] == [0.5, -0.25, 0.125]
    third = struct.unpack("<f", struct.pack("<f", 1 / 3))[0]  # as float32 holds it
    assert as_float["data"][1]["embedding"] == [round(third, 8), 0.0, -1.0]
    assert as_float["usage"] == {"prompt_tokens": 11, "total_tokens": 11}
    as_base64 = public_view(JobRecord.of(stored(job := embedding_job("base64"), embedded(job, rows))))[
        "result"
    ]
    decoded = struct.unpack("<3f", base64.b64decode(as_base64["data"][0]["embedding"]))
    assert list(decoded) == rows[0]
    assert embedded(job, rows).inferences == 2


def test_a_jobs_parameters_are_typed_by_its_kind_and_survive_its_stream_entry():
    sampling = Sampling(temperature=0.0, seed=7, stop=("\n",))
    generated = Job.new(model="tiny-gpt2", prompt="p", max_tokens=8, timeout_ms=1000, parameters=sampling)
    read = Job.from_stream("tiny-gpt2", generated.stream_fields())
    assert read.parameters == sampling
    assert sampling.engine_options(8) == {"temperature": 0.0, "seed": 7, "stop": ["\n"], "max_tokens": 8}
    options = EmbeddingOptions("base64", truncate=False)
    embedded = Job.new(
        model="minilm", prompt="", max_tokens=0, timeout_ms=1000, inputs=("a",), parameters=options
    )
    assert Job.from_stream("minilm", embedded.stream_fields()).parameters == options


def test_an_entry_written_with_max_tokens_among_its_parameters_still_reads():
    entry = {**make_job().stream_fields(), "parameters": '{"max_tokens":16,"temperature":0.5,"stop":"x"}'}
    assert Job.from_stream("gpu-sim", entry).parameters == Sampling(temperature=0.5, stop=("x",))
