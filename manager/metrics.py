"""Every Prometheus metric the manager exposes, defined in one place (base units, `_total`, `_seconds`)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Counter, Histogram

from manager.jobs import JobStatus, Outcome

# Dense around the 250 ms SLO, where the interesting part of the distribution is.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3, 0.35, 0.4,
                   0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)

JOBS_COMPLETED = Counter("synapse_jobs_completed_total", "Jobs that ended COMPLETED", ["model"])
JOBS_FAILED = Counter("synapse_jobs_failed_total", "Jobs that ended FAILED", ["model", "reason"])
JOB_LATENCY = Histogram(
    "synapse_job_latency_seconds", "Submit to result written", ["model"], buckets=LATENCY_BUCKETS
)
QUEUE_WAIT = Histogram(
    "synapse_queue_wait_seconds", "Submit to batch start", ["model"], buckets=LATENCY_BUCKETS
)
BATCH_SIZE = Histogram("synapse_batch_size", "Jobs per dispatched batch", ["model"], buckets=BATCH_BUCKETS)
BATCH_DURATION = Histogram(
    "synapse_batch_duration_seconds", "One batch on a worker, request to reply", ["model"],
    buckets=LATENCY_BUCKETS,
)  # fmt: skip


def record_outcomes(model: str, outcomes: Sequence[Outcome], created_ms: dict[str, int]) -> None:
    for outcome in outcomes:
        created = created_ms[outcome.job_id]
        JOB_LATENCY.labels(model).observe(max(0, outcome.completed_ms - created) / 1000)
        if outcome.status is JobStatus.COMPLETED:
            JOBS_COMPLETED.labels(model).inc()
            QUEUE_WAIT.labels(model).observe(max(0, outcome.started_ms - created) / 1000)
        else:
            JOBS_FAILED.labels(model, outcome.error_code).inc()


def record_batch(model: str, size: int, seconds: float) -> None:
    BATCH_SIZE.labels(model).observe(size)
    BATCH_DURATION.labels(model).observe(seconds)
