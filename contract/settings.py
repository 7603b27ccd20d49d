"""Every runtime setting, read from `SYNAPSE_*` environment variables in this one place.

Defaults run the local stack; the CDK stacks set the AWS values. An explicit keyword argument wins
over the environment, which wins over the default.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contract import prices
from contract.catalog import CHAT_MODEL

ENV_PREFIX = "SYNAPSE_"
# Where the manager sends a generation (manager/prefix_routing.py).
GenerationRouting = Literal["prefix", "least_loaded"]


# SYNAPSE_WORKER_MODELS=none: a worker starts with no model and loads each on demand.
WORKER_MODELS_NONE = "none"


class Settings(BaseModel):
    """Validated settings; build with `Settings.from_env()`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redis_url: str = "redis://127.0.0.1:6390/0"
    redis_auth_token: str | None = None
    redis_cluster: bool = Field(False, description="redis_url is a Redis Cluster (ElastiCache Serverless)")
    redis_iam_user: str | None = Field(
        None, description="ElastiCache IAM authentication: the user id (= its name); unset: no IAM auth"
    )
    redis_iam_cache: str | None = Field(None, description="ElastiCache IAM authentication: the cache's name")
    redis_iam_region: str | None = Field(None, description="ElastiCache IAM auth's region; unset: AWS_REGION")

    api_host: str = "127.0.0.1"
    api_port: int = Field(8080, ge=1, le=65535)
    api_key: str | None = None
    gateway_long_waits: int = Field(
        4096,
        ge=1,
        description="requests waiting on a job the local gateway holds at once, on a pool of their own",
    )
    gateway_long_waits_per_tenant: int = Field(
        1024,
        ge=1,
        description="requests waiting on a job one tenant holds at once in a front-door process; past it 429",
    )
    gateway_cancels: int = Field(
        64, ge=1, description="cancels one front-door process runs at once, on a lane of its own; past it 503"
    )
    # Offered 560 jobs/s (twice what it serves) on 2 cores, the gateway with 1,100 threads and no bound
    # left 1,083 requests unanswered 30 s after the last send; with 320 threads and no queue it answered
    # every one, but then 500 submissions sent at once got 503s. 1,024 waiting for a thread take such a
    # burst; sustained overload then still leaves requests unanswered (BENCHMARKS.md, "Overload").
    gateway_concurrency: int = Field(
        320,
        ge=1,
        description="other handler invocations one front-door process runs at once, a thread each",
    )
    gateway_queue: int = Field(
        1024,
        ge=0,
        description="requests waiting for one of those threads; past them and it, 503 at once",
    )
    # A general request takes milliseconds on its thread: waiting a tenth of a second for one, steadily,
    # means the process is past what it can serve (frontdoor/queue_delay.py).
    gateway_queue_delay_ms: float = Field(
        100.0,
        gt=0,
        description="wait for a thread past which, held for a second, new requests get 503 at once",
    )

    # smollm2-135m-instruct: the default chat model; tiny-gpt2: the tests' tiny deterministic one.
    models: tuple[str, ...] = ("gpu-sim", CHAT_MODEL, "tiny-gpt2", "minilm")
    max_wait_ms: float = Field(20.0, ge=0)
    generation_routing: GenerationRouting = Field(
        "prefix",
        description="where a generation goes: the worker likeliest to hold its prompt's prefix within a "
        "load bound (manager/prefix_routing.py), or the least loaded",
    )
    max_inflight_batches: int = Field(2, ge=1)
    job_ttl_s: int = Field(86_400, ge=60)
    max_prompt_chars: int = Field(32_768, ge=1)
    max_wait_poll_s: float = Field(20.0, ge=0)
    # The /v1 routes answer synchronously; API Gateway cuts a request off at 29 s.
    sync_timeout_s: float = Field(25.0, gt=0, lt=29, description="longest a /v1 call waits for its job")
    # OpenAI SDKs honour a Retry-After of up to 60 s (the newest up to 120 s, and never retry past it).
    cold_start_retry_after_s: int = Field(
        30, ge=1, le=60, description="Retry-After of a /v1 call's 503 while the pool starts from zero"
    )
    triton_timeout_s: float = Field(30.0, gt=0)
    reclaim_idle_s: float = Field(45.0, gt=0, description="idle time before another manager takes a job over")
    max_attempts: int = Field(3, ge=1)
    max_queue_length: int = Field(100_000, ge=1, description="per model; past it submissions get 429")
    # A stream holds a Redis connection of the front door's process for its whole life (docs/api.md).
    max_streams: int = Field(
        256, ge=1, description="streams one front-door process serves at once; past it a new one gets 503"
    )
    max_streams_per_tenant: int = Field(
        128, ge=1, description="streams one tenant holds at once in one front-door process; past it 429"
    )
    # minilm on this machine's 2 CPU cores embedded 1,024 texts of 4,000 characters (4.1 M) in 48 s,
    # about 85,000 characters a second; a million take about 12 s, half of SYNAPSE_SYNC_TIMEOUT_S, which
    # leaves the other half for the queue and a busy worker.
    max_sync_embedding_chars: int = Field(
        1_000_000,
        ge=1,
        description="characters of input one synchronous /v1/embeddings call takes in all; past it 413",
    )

    worker_provider: Literal["none", "local", "ecs"] = Field(
        "none", description="who starts workers: none (started by hand), local processes, or ECS"
    )
    ecs_cluster: str | None = None
    ecs_worker_service: str | None = None
    ecs_worker_asgs: tuple[str, ...] = Field(
        (),
        description="the workers' Auto Scaling groups, comma-separated, in the order the worker service "
        "fills them (the warm group, then the burst group): the manager starts their instances itself when "
        "it asks for more workers than there are instances, rather than waiting for ECS managed scaling's "
        "alarm",
    )
    min_workers: int = Field(0, ge=0)
    max_workers: int = Field(4, ge=1)
    latency_budget_ms: float = Field(150.0, gt=0)
    scale_to_zero_after: float = Field(300.0, ge=0, description="seconds without jobs before scaling to min")
    scale_down_cooldown_s: float = Field(60.0, ge=0)
    warm_pool_size: int = Field(0, ge=0, description="local provider: standby workers kept initialised")
    worker_standby: bool = Field(False, description="start warm: register STANDBY, serve after SIGUSR2")
    worker_id: str | None = None
    worker_advertise_host: str = Field(
        "127.0.0.1",
        description="address managers reach this worker at; `ecs-metadata`: the ECS task's own IP",
    )
    triton_bind_host: str = "127.0.0.1"
    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto",
        description="where a worker runs its models: auto (a GPU if CUDA works, else the CPU), cpu, or "
        "gpu (no usable CUDA: the worker registers FAILED and exits instead of serving on the CPU)",
    )
    worker_models: tuple[str, ...] | None = None
    triton_http_port: int = 8000
    triton_grpc_port: int = 8001
    triton_metrics_port: int = 8002
    heartbeat_s: float = Field(2.0, gt=0)
    triton_unready_exit_s: float = Field(
        15.0, gt=0, description="Triton not ready this long (3 checks at least) once serving: its agent exits"
    )

    callback_timeout_s: float = Field(10.0, gt=0, le=60, description="one callback POST, connect to answer")
    callback_retry_for_s: float = Field(
        3600.0,
        gt=0,
        le=86_400,
        description="how long after a job ends its callback is retried, then given up",
    )
    callback_https_only: bool = Field(False, description="refuse callback URLs that are not https (AWS: on)")
    callback_allowed_networks: tuple[str, ...] = Field(
        (),
        description="CIDRs a callback may connect to besides public unicast addresses (deliberate internal "
        "receivers); the local stack: 127.0.0.0/8",
    )
    callback_max_in_flight: int = Field(64, ge=1, description="callbacks one manager delivers at once")
    callback_max_per_tenant: int = Field(
        16, ge=1, description="of those, one tenant's: its slow receivers hold no more of the manager's slots"
    )
    callback_max_per_address: int = Field(
        8, ge=1, description="of those, to one address and port (as resolved, whatever names point at it)"
    )
    webhook_secrets_arn: str | None = Field(
        None, description="Secrets Manager secret: a JSON map {tenant: webhook secret}; unset: the keys file"
    )
    success_topic_arn: str | None = Field(None, description="SNS topic every COMPLETED job's view goes to")
    error_topic_arn: str | None = Field(None, description="SNS topic every FAILED job's view goes to")

    metrics_port: int = Field(9100, ge=0, le=65535, description="0 turns the manager's /metrics off")
    pushgateway_url: str = "http://127.0.0.1:9091"
    gpu_price_per_hour: float = Field(1.006, ge=0)
    # What AWS bills besides the GPUs, for the cost ledger (manager/cost.py); list prices: contract/prices.py.
    api_gateway_price_per_million_requests: float = Field(prices.API_GATEWAY_PER_MILLION_REQUESTS, ge=0)
    lambda_price_per_gb_second: float = Field(prices.LAMBDA_PER_GB_SECOND, ge=0)
    lambda_price_per_million_requests: float = Field(prices.LAMBDA_PER_MILLION_REQUESTS, ge=0)
    front_door_memory_mb: int = Field(
        prices.FRONT_DOOR_MEMORY_MB, ge=128, description="the front door's Lambda memory"
    )
    manager_price_per_hour: float = Field(prices.MANAGER_PER_HOUR, ge=0, description="one manager task")
    cache_price_per_hour: float = Field(prices.CACHE_PER_HOUR, ge=0, description="the job store, idle")
    cache_price_per_million_ecpus: float = Field(prices.CACHE_PER_MILLION_ECPUS, ge=0)
    idle_other_price_per_month: float = Field(
        prices.OTHER_IDLE_PER_MONTH, ge=0, description="every other always-on resource (stacks/idle_cost.py)"
    )
    prometheus_port: int = Field(9090, ge=1, le=65535, description="the local stack's Prometheus")
    pushgateway_port: int = Field(9091, ge=1, le=65535, description="the local stack's Pushgateway")
    redis_exporter_port: int = Field(
        9121, ge=0, le=65535, description="the local stack's Redis exporter; 0 runs none"
    )

    state_dir: Path = Path(".synapse")
    file_bucket: str | None = Field(
        None, description="S3 bucket of the Files API's files; unset: the folder <state_dir>/files"
    )
    file_prefix: str = Field("files/", description="key prefix of the Files API's files in file_bucket")
    # 30 days: OpenAI's default for a file of purpose `batch` (its Files API reference, `expires_after`),
    # so a client that downloads its output within OpenAI's window finds it here too. The AWS deploy sets
    # it from `synapse:fileRetentionDays` and gives the bucket's lifecycle rule the same number of days.
    file_retention_days: int = Field(
        30, ge=1, description="days a file is kept (its `expires_at`); then its record and bytes go"
    )
    batch_max_file_bytes: int = Field(
        200 * 1_000_000,
        ge=1,
        description="size of a Batch API input file, through the Uploads API (OpenAI's)",
    )
    batch_max_lines: int = Field(50_000, ge=1, description="lines a Batch API input file may hold (OpenAI's)")
    # A batch's lines in flight at once: each is a job record and a stream entry in Redis. 512 keeps a
    # 50,000-line batch to about 1 % of its jobs in the store at once (a few MB, not hundreds), while the
    # runner refills every tick, so the queue holds many model batches' worth and the pool never idles.
    batch_lines_in_flight: int = Field(512, ge=1, description="a batch's lines queued or running at once")
    batch_window_s: int = Field(
        86_400, ge=1, description='what completion_window "24h" lasts; shorter in tests of expiry'
    )
    batch_tick_s: float = Field(0.5, gt=0, description="how often a manager's batch runner goes round")
    model_repository: Path = Path("triton_models")
    model_catalog: str | None = Field(
        None,
        description="the models' catalog, JSON (contract/catalog.py); unset: built from model_repository",
    )
    model_bucket: str | None = Field(None, description="S3 model store; unset: serve model_repository")
    model_prefix: str = "models/"
    baked_model_dir: Path | None = Field(
        None, description="models the worker image carries (worker_image/bake.py), served before the store's"
    )
    model_cache_dir: Path | None = Field(
        None, description="a worker's disk cache; unset: <state_dir>/model-cache"
    )
    checkpoint_dir: Path | None = Field(
        None,
        description="where a worker builds the checkpoints the project provides (tiny-gpt2's, SmolLM2's "
        "conversion), once for every worker that shares it; unset: <state_dir>/checkpoints",
    )
    model_cache_bytes: int = Field(20 * 2**30, ge=0, description="disk cache budget; LRU eviction past it")
    worker_model_budget: int = Field(4, ge=1, description="models a worker keeps loaded; LRU unload past it")
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _reclaim_after_the_worst_batch(self) -> Settings:
        # A live manager's batch must never look abandoned: reclaiming waits out the Triton timeout.
        if self.reclaim_idle_s <= self.triton_timeout_s:
            limits = f"reclaim_idle_s ({self.reclaim_idle_s}), triton_timeout_s ({self.triton_timeout_s})"
            raise ValueError(f"reclaim_idle_s must exceed triton_timeout_s: {limits}")
        return self

    @model_validator(mode="after")
    def _a_tenant_leaves_room_for_others(self) -> Settings:
        if self.callback_max_per_tenant > self.callback_max_in_flight:
            limits = f"({self.callback_max_per_tenant} > {self.callback_max_in_flight})"
            raise ValueError(f"callback_max_per_tenant must not exceed callback_max_in_flight {limits}")
        return self

    @model_validator(mode="after")
    def _a_tenant_share_within_the_capacity(self) -> Settings:
        # A share past the capacity could never be held: the setting would say what does not happen.
        if self.max_streams_per_tenant > self.max_streams:
            share, capacity = self.max_streams_per_tenant, self.max_streams
            raise ValueError(f"max_streams_per_tenant ({share}) must not exceed max_streams ({capacity})")
        if self.gateway_long_waits_per_tenant > self.gateway_long_waits:
            share, capacity = self.gateway_long_waits_per_tenant, self.gateway_long_waits
            raise ValueError(
                f"gateway_long_waits_per_tenant ({share}) must not exceed gateway_long_waits ({capacity})"
            )
        return self

    @field_validator("models", "worker_models", "callback_allowed_networks", "ecs_worker_asgs", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return value

    @field_validator("callback_allowed_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each a network in CIDR notation, without host bits (10.0.0.0/8, not 10.1.2.3/8: a typo)."""
        for cidr in value:
            ipaddress.ip_network(cidr)  # its ValueError names the value and what is wrong with it
        return value

    @model_validator(mode="before")
    @classmethod
    def _pushgateway_url_follows_port(cls, values: Any) -> Any:
        """Without an explicit URL, workers push to the local Pushgateway on its configured port."""
        if isinstance(values, dict) and not values.get("pushgateway_url") and values.get("pushgateway_port"):
            return {**values, "pushgateway_url": f"http://127.0.0.1:{values['pushgateway_port']}"}
        return values

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Reads `SYNAPSE_<FIELD>` for every field; unknown `SYNAPSE_*` names are ignored."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = raw
        values.update(overrides)
        return cls.model_validate(values)

    def to_env(self) -> dict[str, str]:
        """The environment that makes a child process see these same settings."""
        env: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            env[ENV_PREFIX + name.upper()] = text
        return env
