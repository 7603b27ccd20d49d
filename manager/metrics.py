"""Every Prometheus metric Synapse exposes, defined in one place (base units, `_total`, `_seconds`).

Definitions only: the state behind them (the busy clock, the cost ledger, the desired pool size)
lives in objects the manager creates and hands to whoever needs them. The manager serves the
default registry on `/metrics`. What needs no sampling (job counts, latency, batches) is recorded
as it happens by the dispatcher; what does (Redis stream depths, the front door's counters in
Redis, the worker pool, busy time and cost) comes from `manager/sampler.py`, which publishes a
snapshot once a second. Workers push their own families to the Pushgateway, grouped by worker id
(`worker_image/worker_metrics.py`).

Fleet-wide series (workers, queue depth in the streams, submissions, rejections, cancellations, the
counts by tenant, the front door's requests, worker time, every cost part but `manager`, and the Batch
API's batches by status and at risk) are reported alike by every manager: aggregate them with `max`.
Series of work a manager did itself (jobs, latency, batches, busy time, the `manager` cost part, naive
costs, the Batch API's lines, final statuses and completion times) add up across managers: use `sum`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from contract.batches import BatchRecord, BatchStatus
from contract.jobs import JobStatus, Outcome
from contract.metric_families import FamilySpec, families
from contract.workers import WorkerState
from manager.busy import BusyClock
from manager.cost import NAIVE_PARTS, PARTS, CostLedger

# No `_created` series beside each counter and histogram: Prometheus reads none of them, and Managed
# Prometheus bills every series at every scrape (stacks/idle_cost.py).
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client 0.26 leaves it unannotated

# Dense from 50 to 500 ms around the 250 ms SLO, where the interesting part of the distribution is.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225, 0.25, 0.275, 0.3, 0.35,
                   0.4, 0.45, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # fmt: skip
# The parts of a job's latency (its queue wait, its batch on a worker): what share of the 250 ms each takes,
# and whether one has run away, with half the series of the SLO's dense layout.
PART_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
# The tenant label's bound: at most this many tenants have series of their own in synapse_tenant_*, the
# rest add up under tenant=OTHER_TENANT (which tenants: manager/sampler.py's TenantCounts).
TENANT_SERIES = 20
OTHER_TENANT = "other"

JOBS_COMPLETED = Counter("synapse_jobs_completed_total", "Jobs that ended COMPLETED", ["model"])
JOBS_FAILED = Counter("synapse_jobs_failed_total", "Jobs that ended FAILED", ["model", "reason"])
CALLBACKS = Counter(
    "synapse_callbacks_total",
    "Callback and outcome-topic deliveries: outcome=delivered, retried (an attempt failed, another is "
    "due), undeliverable (given up)",
    ["channel", "outcome"],
)
CALLBACK_CHANNELS = ("callback", "sns")
CALLBACK_OUTCOMES = ("delivered", "retried", "undeliverable")
for _channel in CALLBACK_CHANNELS:
    for _outcome in CALLBACK_OUTCOMES:
        CALLBACKS.labels(_channel, _outcome)  # series from the start: "none given up" is a 0, not a gap
# Generative models: from the job's submission to its first text in Redis, and between tokens after it.
TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 10.0, 30.0)  # fmt: skip
TIME_TO_FIRST_TOKEN = Histogram(
    "synapse_time_to_first_token_seconds", "Submission to the first text in the job's token stream",
    ["model"], buckets=TOKEN_BUCKETS,
)  # fmt: skip
INTER_TOKEN_LATENCY = Histogram(
    "synapse_inter_token_latency_seconds", "Time between output tokens of one job", ["model"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
)  # fmt: skip
EMBEDDINGS = Counter("synapse_embeddings_total", "Vectors embedding models returned, one per text", ["model"])
OUTPUT_TOKENS = Counter("synapse_output_tokens_total", "Tokens generative models produced", ["model"])
SEQUENCES = Gauge(
    "synapse_sequences", "Generative jobs running in an engine or waiting for room", ["model", "state"]
)
WORKER_SEQUENCES = Gauge("synapse_worker_sequences", "Sequences this manager runs on the worker", ["worker"])
JOB_LATENCY = Histogram(
    "synapse_job_latency_seconds", "Submit to result written", ["model"], buckets=LATENCY_BUCKETS
)
QUEUE_WAIT = Histogram("synapse_queue_wait_seconds", "Submit to batch start", ["model"], buckets=PART_BUCKETS)
BATCH_SIZE = Histogram(
    "synapse_batch_size", "Rows per dispatched batch: jobs, or an embedding model's texts", ["model"],
    buckets=BATCH_BUCKETS,
)  # fmt: skip
BATCH_FAILURES = Counter(
    "synapse_batch_failures_total",
    "Batches that failed as a whole: cause=worker_fault (retried elsewhere), model_error (each job "
    "retried alone), timeout (no reply within the batch's bound)",
    ["model", "cause"],
)
BATCH_DURATION = Histogram(
    "synapse_batch_duration_seconds", "One batch on a worker, request to reply", ["model"],
    buckets=PART_BUCKETS,
)  # fmt: skip
QUEUE_DEPTH = Gauge(
    "synapse_queue_depth",
    "Jobs waiting for a batch: stage=stream not yet read by any manager, in both priorities' streams "
    "(fleet-wide), stage=buffer read by this manager and not yet in a batch",
    ["model", "stage"],
)
# Apart from synapse_queue_depth: a priority label there would make `max by (model)` of its stream stage
# the larger stream rather than their sum, and a manager's buffer mixes both priorities.
STREAM_DEPTH = Gauge(
    "synapse_stream_depth",
    "Jobs in the model's stream of this priority not yet read by any manager (fleet-wide); "
    'synapse_queue_depth{stage="stream"} is their sum',
    ["model", "priority"],
)
# The Batch API (manager/batch_runner.py). Lines and final statuses are counted by the manager whose
# script recorded them, exactly once across managers (the scripts are conditional): sum them. The
# batches in each status are read from Redis by every manager alike: take max.
BATCH_API_OPEN_STATUSES = tuple(s.value for s in BatchStatus if not s.is_final)
BATCH_API_FINAL_STATUSES = tuple(s.value for s in BatchStatus if s.is_final)
# A batch at risk: in progress, its window ends within this long, and more than half its lines have no result.
BATCH_API_AT_RISK_S = 3600
# From a minute to the 24 h completion window (and a little past it: finalising takes a moment).
BATCH_API_DURATION_BUCKETS = (10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800, 14400, 21600,
                              28800, 43200, 64800, 86400, 90000)  # fmt: skip
BATCH_API_BATCHES = Gauge(
    "synapse_batch_api_batches",
    "Batch API batches not yet final, by status, read from Redis (fleet-wide)",
    ["status"],
)
BATCH_API_AT_RISK = Gauge(
    "synapse_batch_api_batches_at_risk",
    f"Batches in progress whose window ends within {BATCH_API_AT_RISK_S} s with more than half their "
    "lines left, read from Redis (fleet-wide)",
)
BATCH_API_FINISHED = Counter(
    "synapse_batch_api_batches_finished_total", "Batch API batches that reached a final status", ["status"]
)
BATCH_API_LINES = Counter(
    "synapse_batch_api_lines_total",
    "Batch API lines with a result: outcome=completed (in the output file) or failed (in the error file)",
    ["outcome"],
)
BATCH_API_DURATION = Histogram(
    "synapse_batch_api_completion_seconds",
    "A Batch API batch's creation to its status completed",
    buckets=BATCH_API_DURATION_BUCKETS,
)
for _status in BATCH_API_FINAL_STATUSES:
    BATCH_API_FINISHED.labels(_status)  # from the start: a first expiry is an increase from 0
for _line_outcome in ("completed", "failed"):
    BATCH_API_LINES.labels(_line_outcome)
WORKERS = Gauge("synapse_workers", "Registered workers by state", ["state"])
WORKERS_RUNNING = Gauge("synapse_workers_running", "Registered workers, in any state: what the GPUs cost")
WORKERS_DESIRED = Gauge(
    "synapse_workers_desired", "Workers the autoscaler wants; equals running until an autoscaler sets it"
)


def record_outcomes(
    model: str, outcomes: Sequence[Outcome], created_ms: dict[str, int], *, end_to_end: bool = True
) -> None:
    """Counts and times the outcomes (an embedding job's vectors too, one per text).

    end_to_end False (a generative model): its latency objective is the time to the first token, and
    a whole generation's length would spend the 250 ms budget of one-shot jobs.
    """
    for outcome in outcomes:
        created = created_ms[outcome.job_id]
        if end_to_end:
            JOB_LATENCY.labels(model).observe(max(0, outcome.completed_ms - created) / 1000)
        if outcome.status is JobStatus.COMPLETED:
            JOBS_COMPLETED.labels(model).inc()
            if outcome.dimensions:
                EMBEDDINGS.labels(model).inc(outcome.inferences)
            QUEUE_WAIT.labels(model).observe(max(0, outcome.started_ms - created) / 1000)
        elif outcome.status is JobStatus.FAILED:
            JOBS_FAILED.labels(model, outcome.error_code).inc()
        # CANCELLED: counted fleet-wide from Redis (synapse_jobs_cancelled_total), with the jobs the front
        # door cancelled before any manager read them.


def record_batch(model: str, size: int, seconds: float) -> None:
    BATCH_SIZE.labels(model).observe(size)
    BATCH_DURATION.labels(model).observe(seconds)


def set_fleet(states: Sequence[WorkerState], desired: int | None) -> None:
    """The pool as the registry shows it (one state per registered worker), and the size the
    autoscaler wants; without an autoscaler (None), desired follows running."""
    for state in WorkerState:
        WORKERS.labels(state.value).set(sum(1 for s in states if s is state))
    WORKERS_RUNNING.set(len(states))
    WORKERS_DESIRED.set(len(states) if desired is None else desired)


def set_queue_depth(model: str, *, streams: Mapping[str, int], buffer: int) -> None:
    """`streams`: the jobs not yet read from each priority's stream."""
    for priority, unread in streams.items():
        STREAM_DEPTH.labels(model, priority).set(unread)
    QUEUE_DEPTH.labels(model, "stream").set(sum(streams.values()))
    QUEUE_DEPTH.labels(model, "buffer").set(buffer)


def set_batch_api(batches: Sequence[BatchRecord], now: float) -> None:
    """The batches not yet final, by status, and how many of those in progress are at risk of expiring
    (BATCH_API_AT_RISK_S)."""
    counts = dict.fromkeys(BATCH_API_OPEN_STATUSES, 0)
    at_risk = 0
    for batch in batches:
        if batch.status not in counts:
            continue  # final, not yet out of the runners' set
        counts[batch.status] += 1
        ends_in = batch.expires_at - now
        if (
            batch.status is BatchStatus.IN_PROGRESS
            and ends_in <= BATCH_API_AT_RISK_S
            and 2 * batch.lines_left > batch.total
        ):
            at_risk += 1
    for status, count in counts.items():
        BATCH_API_BATCHES.labels(status).set(count)
    BATCH_API_AT_RISK.set(at_risk)


def record_batch_api_final(status: BatchStatus, created_at: int, now: int) -> None:
    """A batch reached a final status; a completed one's time since its creation is observed."""
    BATCH_API_FINISHED.labels(status.value).inc()
    if status is BatchStatus.COMPLETED:
        BATCH_API_DURATION.observe(max(0, now - created_at))


@dataclass(frozen=True, slots=True)
class ManagerSnapshot:
    """What the sampler saw last; the scrape thread reads it whole, the event loop replaces it whole."""

    submitted: Mapping[str, int] = field(default_factory=dict)
    rejected: Mapping[str, int] = field(default_factory=dict)
    busy_seconds: Mapping[str, float] = field(default_factory=dict)
    busy_ratio: Mapping[str, float] = field(default_factory=dict)
    worker_seconds: float = 0.0
    gpu_cost_dollars: float = 0.0
    naive_cost_dollars: Mapping[str, float] = field(default_factory=dict)
    batch_of_one_seconds: Mapping[str, float] = field(default_factory=dict)
    cost_per_thousand: Mapping[str, float] = field(default_factory=dict)
    frontdoor_requests: Mapping[str, int] = field(default_factory=dict)
    frontdoor_seconds: Mapping[str, float] = field(default_factory=dict)
    cost_dollars: Mapping[str, float] = field(default_factory=dict)
    naive_dollars: Mapping[str, float] = field(default_factory=dict)
    cancelled: Mapping[str, int] = field(default_factory=dict)
    tenant_jobs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    tenant_rejections: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """The counts hash as exported: cancellations by model, jobs by (tenant, event) and rejections by
    (tenant, reason), the tenant label already bounded (manager/sampler.py)."""

    cancelled: Mapping[str, int] = field(default_factory=dict)
    tenant_jobs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    tenant_rejections: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FrontDoorUsage:
    """The front door's requests and billed Lambda seconds by route, as its Redis hash holds them."""

    requests: Mapping[str, int] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)


def snapshot(
    submitted: Mapping[str, int],
    rejected: Mapping[str, int],
    busy: BusyClock,
    costs: CostLedger,
    now: float,
    *,
    usage: FrontDoorUsage = FrontDoorUsage(),
    counts: FleetCounts = FleetCounts(),
) -> ManagerSnapshot:
    """Reads the busy clock and the cost ledger (event-loop state) into an immutable snapshot."""
    batched, naive = costs.per_thousand()
    t1 = {model: est.estimate() for model, est in costs.batch_of_one.items()}
    return ManagerSnapshot(
        submitted=dict(submitted),
        rejected=dict(rejected),
        busy_seconds={w: busy.busy_seconds(w, now) for w in busy.workers()},
        busy_ratio={w: busy.ratio(w, now) for w in busy.workers()},
        worker_seconds=costs.worker_seconds,
        gpu_cost_dollars=costs.gpu_cost_dollars,
        naive_cost_dollars=dict(costs.naive_cost_dollars),
        batch_of_one_seconds={m: s for m, s in t1.items() if s is not None},
        cost_per_thousand={
            basis: value for basis, value in (("batched", batched), ("naive", naive)) if value is not None
        },
        frontdoor_requests=dict(usage.requests),
        frontdoor_seconds=dict(usage.seconds),
        cost_dollars={part: costs.cost_dollars[part] for part in PARTS},
        naive_dollars={part: costs.naive_dollars[part] for part in NAIVE_PARTS},
        cancelled=dict(counts.cancelled),
        tenant_jobs=dict(counts.tenant_jobs),
        tenant_rejections=dict(counts.tenant_rejections),
    )


MANAGER_FAMILIES: tuple[FamilySpec, ...] = (
    ("counter", "synapse_jobs_submitted", "Jobs the front door accepted (the streams' entries-added)",
     "model", "submitted"),
    ("counter", "synapse_jobs_rejected", "Submissions the front door turned away", "reason", "rejected"),
    ("counter", "synapse_jobs_cancelled", "Jobs their client cancelled, queued or running (never counted "
     "as failures), read from Redis", "model", "cancelled"),
    ("counter", "synapse_tenant_jobs", "Jobs by tenant and event (submitted, completed, failed, cancelled), "
     f"read from Redis; at most {TENANT_SERIES} tenants have their own series, the rest add up under "
     f"tenant={OTHER_TENANT}", ("tenant", "event"), "tenant_jobs"),
    ("counter", "synapse_tenant_rejections", "Submissions turned away, by tenant (bounded as "
     "synapse_tenant_jobs) and reason", ("tenant", "reason"), "tenant_rejections"),
    ("counter", "synapse_worker_busy_seconds", "Time with one of this manager's batches in flight on the "
     "worker", "worker", "busy_seconds"),
    ("gauge", "synapse_worker_busy_ratio", "Busy time over wall time, last minute", "worker", "busy_ratio"),
    ("counter", "synapse_worker_seconds", "Wall time of registered workers, summed", None, "worker_seconds"),
    ("counter", "synapse_gpu_cost_dollars", "Worker time at the GPU price", None, "gpu_cost_dollars"),
    ("counter", "synapse_naive_gpu_cost_dollars", "Completed jobs priced as one GPU invocation each",
     "model", "naive_cost_dollars"),
    ("gauge", "synapse_batch_of_one_duration_seconds", "Measured duration of a batch of one (T1)",
     "model", "batch_of_one_seconds"),
    ("gauge", "synapse_cost_per_thousand_inferences_dollars", "Cost per 1,000 completed inferences since "
     "the manager started, every part of the bill: Synapse (batched) or one invocation per request (naive)",
     "basis", "cost_per_thousand"),
    ("counter", "synapse_frontdoor_requests", "Requests the front door served (each a billed API Gateway "
     "request and Lambda invocation), read from Redis", "route", "frontdoor_requests"),
    ("counter", "synapse_frontdoor_duration_seconds", "The front door's billed Lambda duration (whole ms), "
     "read from Redis", "route", "frontdoor_seconds"),
    ("counter", "synapse_cost_dollars", "What AWS bills, by part (manager/cost.py); part=gpu is "
     "synapse_gpu_cost_dollars_total", "part", "cost_dollars"),
    ("counter", "synapse_naive_cost_dollars", "Completed jobs priced as one invocation per request, by part",
     "part", "naive_dollars"),
)  # fmt: skip


class _ManagerCollector(Collector):
    def __init__(self) -> None:
        self.snapshot = ManagerSnapshot()

    def collect(self) -> Iterator[Metric]:
        return families(MANAGER_FAMILIES, self.snapshot)


_COLLECTOR = _ManagerCollector()
REGISTRY.register(_COLLECTOR)


def publish(current: ManagerSnapshot) -> None:
    _COLLECTOR.snapshot = current


AUTOSCALER_ERRORS = Counter("synapse_autoscaler_errors_total", "Failed autoscaler iterations", ["kind"])
AUTOSCALER_LAST_TICK = Gauge("synapse_autoscaler_last_tick_timestamp_seconds", "Autoscaler loop's last round")
