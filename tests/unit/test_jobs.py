from contract.jobs import Job, JobStatus, Outcome, public_view


def stored(job: Job, outcome: Outcome | None = None) -> dict[str, str]:
    """The job hash as Redis would hold it after submission (and completion)."""
    fields = job.hash_fields()
    if outcome is not None:
        fields.update(outcome.hash_fields())
    return fields


def make_job() -> Job:
    return Job.new(
        model="gpu-sim", prompt="The three", max_tokens=16, parameters={"max_tokens": 16}, timeout_ms=60_000
    )


def test_a_stream_entry_round_trips_to_the_same_job():
    job = make_job()
    assert Job.from_stream("gpu-sim", job.stream_fields()) == job


def test_a_queued_job_shows_status_and_no_result():
    job = make_job()
    view = public_view(stored(job))
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
    view = public_view(stored(job, outcome))
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
    view = public_view(stored(job, outcome))
    assert view["status"] == "FAILED"
    assert view["error"] == {"code": "deadline_exceeded", "message": "too late"}
    assert "result" not in view
