"""Every Redis key Synapse uses: the one place that knows the layout.

Layout (every key carries the `{synapse}:` prefix):
  job:{id}          hash   the job and its outcome; expires after the job TTL
  done:{id}         list   receives the job id once the job is final; long-polling readers block on it
  stream:{model}    stream one entry per submitted interactive job, read by the managers' consumer group
  batch-stream:{model} stream the same for batch-priority jobs, read after the interactive stream
  dead:{model}      stream jobs that used up their attempts (the dead-letter stream)
  worker:{id}       hash   a worker's registration, refreshed by its heartbeat; expires when it stops
  worker:{id}:load  list   model names a worker is asked to load (its agent pops them); expires unread
  workers           set    ids of registered workers
  idem:{route}#{h}  string an Idempotency-Key's record (Powertools' format), h hashes the caller and key
  rejections        hash   submissions the front door turned away, by reason (the Lambda has no /metrics)
  requests          hash   the front door's requests and billed Lambda ms by route (`<route>:count`, `:ms`)
  autoscaler:leader string the manager whose autoscaler acts; a lease renewed every tick
  tokens:{id}       stream a generative job's text as it is produced (contract/tokens.py); the job's TTL
  cancel            pubsub job ids whose client asked to stop them (a disconnected stream); managers listen
  wake:{model}      string a /v1 call found no READY worker: when (ms); the autoscaler counts it as demand
  tenant:{t}:jobs   zset   the tenant's jobs for GET /jobs: members `<created_ms, 13 digits>|<id>`, all scored
                           0 so that they sort by time then id; trimmed to the job TTL and MAX_LISTED_JOBS
  tenant:{t}:inflight zset the tenant's jobs not yet final, scored by their deadline: its in-flight quota
  callbacks         zset   ids of ended jobs whose callback is due, scored by when (ms); manager/callbacks.py
  file:{id}         hash   a Files API file's record (contract/batches.py); its bytes are in the file store
  tenant:{t}:files  zset   the tenant's file ids, scored by creation (s), for GET /v1/files
  batch:{id}        hash   a Batch API batch: its OpenAI fields and the runner's cursor (next_line)
  batch:{id}:inflight hash line numbers of the batch now jobs (or about to be), for the runner to collect
  batch:{id}:results hash  line number -> its output or error line, written once (manager/batch_runner.py)
  batch:{id}:lease  string the one manager working on the batch, for BATCH_LEASE_MS (manager/batch_runner.py)
  upload:{id}       hash   an Uploads API upload (frontdoor/uploads_routes.py); expires after the job TTL
  upload:{id}:parts hash   its parts: part id -> bytes; the parts' bytes are in the file store
  tenant:{t}:batches zset  the tenant's batch ids, scored by creation (s), for GET /v1/batches
  batches           set    batches not yet final, which the managers' batch runners work on
  counts            hash   fleet-wide counts the Lambda cannot export: `<tenant>|<event>` (submitted,
                           completed, failed, cancelled, rejected:<reason>) and `model|<model>|cancelled`

Why the braces: in a Redis Cluster (ElastiCache Serverless runs as one) a key's hash slot is computed from
its `{...}` tag alone, so every key here lands in one slot. That is what lets the Lua scripts, the
MULTI/EXEC pipelines and the blocking reads that touch several keys (a job, its stream, its done-list)
run unchanged on a cluster, which refuses a multi-key command across slots. The cost: one shard holds
every key, so the store scales up, not out. ElastiCache Serverless grows a hot slot's shard vertically,
far past the 1,000 jobs/s we aim for, so spreading keys would only buy cross-slot failures.
"""

from __future__ import annotations

PREFIX = "{synapse}:"
CONSUMER_GROUP = "managers"
WORKERS_KEY = PREFIX + "workers"
REJECTIONS_KEY = PREFIX + "rejections"
REQUESTS_KEY = PREFIX + "requests"
LEADER_KEY = PREFIX + "autoscaler:leader"
CANCEL_CHANNEL = PREFIX + "cancel"
CALLBACKS_KEY = PREFIX + "callbacks"
COUNTS_KEY = PREFIX + "counts"
ACTIVE_BATCHES_KEY = PREFIX + "batches"
# GET /jobs lists at most this many of a tenant's newest jobs: the index costs memory per job.
MAX_LISTED_JOBS = 100_000


def job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def done_key(job_id: str) -> str:
    return f"{PREFIX}done:{job_id}"


def stream_key(model: str, priority: str = "interactive") -> str:
    """The stream a job of this priority waits in (contract.jobs.Priority's values)."""
    if priority == "batch":
        return f"{PREFIX}batch-stream:{model}"
    return f"{PREFIX}stream:{model}"


def tenant_jobs_key(tenant: str) -> str:
    return f"{PREFIX}tenant:{tenant}:jobs"


def inflight_key(tenant: str) -> str:
    return f"{PREFIX}tenant:{tenant}:inflight"


def dead_letter_key(model: str) -> str:
    return f"{PREFIX}dead:{model}"


def worker_key(worker_id: str) -> str:
    return f"{PREFIX}worker:{worker_id}"


def worker_load_key(worker_id: str) -> str:
    return f"{PREFIX}worker:{worker_id}:load"


def idempotency_prefix(route: str) -> str:
    """Powertools appends `#<hash>` to this prefix; one prefix per route keeps their keys apart."""
    return f"{PREFIX}idem:{route}"


def tokens_key(job_id: str) -> str:
    return f"{PREFIX}tokens:{job_id}"


def wake_key(model: str) -> str:
    """Set by the front door while a model has no READY worker; expires on its own (frontdoor/capacity.py)."""
    return f"{PREFIX}wake:{model}"


def file_key(file_id: str) -> str:
    return f"{PREFIX}file:{file_id}"


def tenant_files_key(tenant: str) -> str:
    return f"{PREFIX}tenant:{tenant}:files"


def batch_key(batch_id: str) -> str:
    return f"{PREFIX}batch:{batch_id}"


def batch_inflight_key(batch_id: str) -> str:
    return f"{PREFIX}batch:{batch_id}:inflight"


def batch_results_key(batch_id: str) -> str:
    return f"{PREFIX}batch:{batch_id}:results"


def batch_lease_key(batch_id: str) -> str:
    """Held by the one manager that works on the batch for a while (manager/batch_runner.py)."""
    return f"{PREFIX}batch:{batch_id}:lease"


def tenant_batches_key(tenant: str) -> str:
    return f"{PREFIX}tenant:{tenant}:batches"


def upload_key(upload_id: str) -> str:
    return f"{PREFIX}upload:{upload_id}"


def upload_parts_key(upload_id: str) -> str:
    return f"{PREFIX}upload:{upload_id}:parts"
