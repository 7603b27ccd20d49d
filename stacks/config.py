"""The deployment's knobs, read once from CDK context, and the names every stack shares.

Context wins over the environment, which wins over the defaults (the same order as the runtime's
settings). `synapse:profile` picks the defaults (`PROFILES`); any other context value overrides its
profile's default. cdk.json holds only what is the same in every profile.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from constructs import Construct

from contract.catalog import CHAT_MODEL, Catalog, CatalogError
from contract.catalog_build import served_model
from contract.settings import Settings
from contract.worker_image_size import IMAGE_EXTRACTED_GB
from stacks import zones
from stacks.region import deploy_region

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "triton_models"
# What the model catalog may take of the front door's environment: Lambda holds 4 KB for all of a
# function's variables, and the others take under 1 KB (tests/infra/test_settings_contract.py).
CATALOG_BYTES = 3_000

PREFIX = "synapse:"

# Private DNS namespace for Cloud Map: workers push their metrics to `manager.<namespace>`.
SERVICE_NAMESPACE = "synapse.internal"

# ElastiCache Serverless listens on 6379 (and 6380 for reads from replicas); neither can be changed.
REDIS_PORT = 6379
METRICS_PORT = 9100
PUSHGATEWAY_PORT = 9091
PROMETHEUS_PORT = 9090
TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002

# The runtime's defaults (`Settings`), so each is written in one place.
GPU_PRICE_PER_HOUR: float = Settings.model_fields["gpu_price_per_hour"].default
SYNC_TIMEOUT_S: float = Settings.model_fields["sync_timeout_s"].default
# Where the Files API keeps its objects in the files bucket: the bucket's grants and expiry name it.
FILE_PREFIX: str = Settings.model_fields["file_prefix"].default
# How long a file is kept (`synapse:fileRetentionDays`): the runtime's default and its reason are there.
FILE_RETENTION_DAYS: int = Settings.model_fields["file_retention_days"].default
# The least: a batch's copy of its input must outlive its completion window and the finalising after it.
# S3 adds the days to an object's creation time and rounds up to the next midnight UTC, so an object lives
# at least that many days (https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html).
MIN_FILE_RETENTION_DAYS = math.ceil(Settings.model_fields["batch_window_s"].default / 86_400) + 1

# The Lambda Web Adapter's x86_64 layer version (v0.9.1, the release current in late 2025), which the
# streaming front door runs (stacks/front_door.py). `synapse:webAdapterLayerVersion` picks another.
WEB_ADAPTER_LAYER_VERSION = 25

# The worker image runs as this uid (worker_image/Dockerfile); the host's model cache is chowned to it.
WORKER_UID = 10001

# Lambda keeps this many of an account's concurrent executions unreserved, whatever functions reserve.
LAMBDA_UNRESERVED_MINIMUM = 100
# Left unreserved on top of that minimum for the buffered front door and the authorizer: submissions
# take tens of milliseconds, `?wait=` polls up to 20 s (docs/api.md).
BUFFERED_HEADROOM = 100
# A new account's default "Lambda: Concurrent executions" quota.
DEFAULT_ACCOUNT_CONCURRENCY = 1000

# GPU instance families whose one GPU runs the worker: CUDA 13 and Triton 25.10 need compute capability 7.5+,
# and the engine computes in bfloat16, which Ampere (sm_80+) and newer run natively (worker_image/README.md).
# g4dn's T4 (sm_75) has no bfloat16 tensor cores and 16 GB: left out. Sizes with several GPUs would leave all
# but one idle (a worker task takes one GPU).
GPU_FAMILIES = {"g5": "NVIDIA A10G, 24 GB", "g6": "NVIDIA L4, 24 GB", "g6e": "NVIDIA L40S, 48 GB"}
MULTI_GPU_SIZES = {"12xlarge", "24xlarge", "48xlarge"}
# Two families of the same 24 GB class, so a shortage of one (InsufficientInstanceCapacity) or a Spot pool
# drying up falls back to the other: g5.xlarge first (A10G, about twice L4's memory bandwidth, which bounds
# token generation), then g6.xlarge (cheaper, more widely offered). Both 4 vCPUs, 16 GiB.
DEFAULT_INSTANCE_TYPES = ("g5.xlarge", "g6.xlarge")

# What a GPU instance's root volume holds besides the model cache: the ECS GPU AMI (30 GB) and the
# worker image, extracted (contract/worker_image_size.py).
AMI_DISK_GB = 30
WORKER_DISK_RESERVED_GB = AMI_DISK_GB + math.ceil(IMAGE_EXTRACTED_GB)

# The account synth names when it has no credentials (offline synth: tests, tools, `make synth` offline).
STUB_ACCOUNT = "123456789012"

T = TypeVar("T")


class ConfigError(ValueError):
    """A context value that cannot be used."""


class ZoneSource(StrEnum):
    """Where the VPC's zones came from: `-c synapse:availabilityZones`, preflight's answer in
    cdk.context.json (stacks/zones.py), or the offline placeholders, which only a stub account may use."""

    NAMED = "named"
    PREFLIGHT = "preflight"
    OFFLINE = "offline"


class Profile(StrEnum):
    """`lean`: the least idle bill that still serves from zero. `production`: private and redundant."""

    LEAN = "lean"
    PRODUCTION = "production"


@dataclass(frozen=True, kw_only=True)
class ProfileDefaults:
    """What a profile decides; the first group can be overridden by context, the second cannot."""

    max_workers: int
    warm_pool_size: int
    worker_disk_gb: int
    cache_max_storage_gb: int
    cache_max_ecpu_per_second: int
    # Structural: lean runs the manager and GPU instances in public subnets (public IPv4, no ingress)
    # instead of paying for NAT gateways and interface endpoints.
    private_workloads: bool
    manager_cpu: int
    manager_memory_mib: int
    container_insights: bool


PROFILES: dict[Profile, ProfileDefaults] = {
    Profile.LEAN: ProfileDefaults(
        max_workers=2,
        warm_pool_size=1,
        worker_disk_gb=60,
        cache_max_storage_gb=5,
        cache_max_ecpu_per_second=10000,
        private_workloads=False,
        manager_cpu=256,
        manager_memory_mib=1024,
        container_insights=False,
    ),
    Profile.PRODUCTION: ProfileDefaults(
        max_workers=8,
        warm_pool_size=2,
        worker_disk_gb=150,
        cache_max_storage_gb=50,
        cache_max_ecpu_per_second=100000,
        private_workloads=True,
        manager_cpu=1024,
        manager_memory_mib=2048,
        container_insights=True,
    ),
}


def stream_reserved_concurrency(v1_rate_limit: int, sync_timeout_s: float = SYNC_TIMEOUT_S) -> int:
    """Little's law: `/v1` calls arriving at the throttle's rate, each holding an environment up to the
    sync wait, need rate * wait concurrent executions of the streaming function."""
    return math.ceil(v1_rate_limit * sync_timeout_s)


def largest_fitting_v1_rate(account_concurrency: int, sync_timeout_s: float = SYNC_TIMEOUT_S) -> int:
    """The highest `/v1` rate whose reservation leaves the account's unreserved minimum and headroom."""
    reservable = account_concurrency - LAMBDA_UNRESERVED_MINIMUM - BUFFERED_HEADROOM
    return max(0, math.floor(reservable / sync_timeout_s))


@dataclass(frozen=True, kw_only=True)
class SynapseConfig:
    """Every value a platform engineer may change with `-c synapse:<name>=<value>` (docs/deploy.md)."""

    profile: Profile
    account: str
    region: str
    availability_zones: tuple[str, ...]
    zone_source: ZoneSource
    vpc_cidr: str
    instance_types: tuple[str, ...]
    spot: bool
    max_workers: int
    warm_pool_size: int
    worker_disk_gb: int
    scale_to_zero_after_s: int
    api_rate_limit: int
    api_burst_limit: int
    v1_rate_limit: int
    account_concurrency: int
    reserve_stream_concurrency: bool
    cache_max_storage_gb: int
    cache_max_ecpu_per_second: int
    models: str
    model_folders: tuple[Path, ...]
    gpu_price_per_hour: float
    web_adapter_layer_version: int
    skip_bundling: bool
    alert_email: str | None
    managed_grafana: bool
    outcome_topics: bool
    file_retention_days: int

    @cached_property
    def model_catalog(self) -> str:
        """The served models' catalog (contract/catalog.py) as the front door and the manager read it
        (SYNAPSE_MODEL_CATALOG): a model's entry from its folder in synapse:modelFolders (a model served
        from the model bucket), else in `triton_models/` (the folders the worker image bakes)."""
        served = tuple(model.strip() for model in self.models.split(",") if model.strip())
        folders = {folder.name: folder for folder in self.model_folders}
        try:
            # The Lambda carries no checkpoint, so no tokenizer: the engine counts a prompt's tokens there.
            entries = (
                replace(served_model(folders.get(m, MODEL_REPOSITORY / m)), tokenizer=None) for m in served
            )
            catalog = Catalog.of(entries).to_json()
        except CatalogError as exc:
            raise ConfigError(
                f"synapse:models: {exc}; a model served from the model bucket needs its folder in "
                "synapse:modelFolders"
            ) from exc
        if len(catalog.encode()) > CATALOG_BYTES:
            raise ConfigError(
                f"the model catalog is {len(catalog.encode())} bytes (chat templates, mostly): over the "
                f"{CATALOG_BYTES} bytes it may take of the front door's environment, which Lambda limits "
                "to 4 KB in all (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)"
            )
        return catalog

    def __post_init__(self) -> None:
        self.model_catalog  # noqa: B018  # built now: a model without a folder fails synth at once, by name
        if len(self.availability_zones) < 2:
            raise ConfigError("synapse:availabilityZones needs two zones: ElastiCache runs Multi-AZ")
        self._check_instance_types()
        if self.max_workers < 1:
            raise ConfigError(f"synapse:maxWorkers must be at least 1, got {self.max_workers}")
        if not 0 <= self.warm_pool_size <= self.max_workers:
            raise ConfigError(
                f"synapse:warmPoolSize must be between 0 and maxWorkers ({self.max_workers}), "
                f"got {self.warm_pool_size}"
            )
        if self.worker_disk_gb <= WORKER_DISK_RESERVED_GB:
            raise ConfigError(
                f"synapse:workerDiskGb must exceed {WORKER_DISK_RESERVED_GB} (the AMI and the worker "
                f"image) to leave room for a model cache, got {self.worker_disk_gb}"
            )
        if self.scale_to_zero_after_s < 0:
            raise ConfigError("synapse:scaleToZeroAfterSeconds must not be negative")
        if self.api_rate_limit < 1 or self.api_burst_limit < 1:
            raise ConfigError("synapse:apiRateLimit and synapse:apiBurstLimit must be positive")
        if self.cache_max_storage_gb < 1 or self.cache_max_ecpu_per_second < 1000:
            raise ConfigError(
                "synapse:cacheMaxStorageGb must be at least 1 and synapse:cacheMaxEcpuPerSecond at least "
                "1000 (ElastiCache Serverless' smallest limits)"
            )
        if self.file_retention_days < MIN_FILE_RETENTION_DAYS:
            raise ConfigError(
                f"synapse:fileRetentionDays must be at least {MIN_FILE_RETENTION_DAYS}: a batch's copy of "
                "its input must outlive its 24 h window and the finalising after it"
            )
        if self.web_adapter_layer_version < 1:
            raise ConfigError("synapse:webAdapterLayerVersion must be a published layer version (1 or more)")
        self._check_concurrency()

    def _check_instance_types(self) -> None:
        if not self.instance_types:
            raise ConfigError("synapse:instanceTypes needs at least one GPU instance type")
        for instance_type in self.instance_types:
            family, _, size = instance_type.partition(".")
            if family not in GPU_FAMILIES or not size or size in MULTI_GPU_SIZES:
                raise ConfigError(
                    f"synapse:instanceTypes: {instance_type} is not a one-GPU instance of a family the "
                    f"worker runs on ({', '.join(f'{f}: {gpu}' for f, gpu in GPU_FAMILIES.items())})"
                )

    @property
    def instance_type(self) -> str:
        """The first choice: the warm pool's type (a warm pool takes one type, on demand)."""
        return self.instance_types[0]

    @property
    def burst_workers(self) -> int:
        """Workers beyond the warm pool's, from the mixed-instances group (every type, Spot if asked)."""
        return self.max_workers - self.warm_pool_size

    def _check_concurrency(self) -> None:
        if self.v1_rate_limit < 1:
            raise ConfigError(f"synapse:v1RateLimit must be at least 1, got {self.v1_rate_limit}")
        if not self.reserve_stream_concurrency:
            return
        needed = stream_reserved_concurrency(self.v1_rate_limit)
        reservable = self.account_concurrency - LAMBDA_UNRESERVED_MINIMUM - BUFFERED_HEADROOM
        if needed > reservable:
            raise ConfigError(
                f"synapse:v1RateLimit={self.v1_rate_limit} /s * {SYNC_TIMEOUT_S:g} s sync wait needs "
                f"{needed} reserved concurrent executions for the streaming front door, but "
                f"synapse:accountConcurrency={self.account_concurrency} leaves {reservable} (after the "
                f"{LAMBDA_UNRESERVED_MINIMUM} Lambda keeps unreserved and {BUFFERED_HEADROOM} for the "
                "buffered front door). Raise the Service Quotas limit 'AWS Lambda: Concurrent "
                "executions' and set synapse:accountConcurrency to it, lower synapse:v1RateLimit, or "
                "leave synapse:reserveStreamConcurrency off (the default: nothing reserved)."
            )

    @property
    def defaults(self) -> ProfileDefaults:
        return PROFILES[self.profile]

    @property
    def private_workloads(self) -> bool:
        """Manager and GPU instances in private subnets behind NAT (production) or public ones (lean)."""
        return self.defaults.private_workloads

    @property
    def nat_gateways(self) -> int:
        """One NAT gateway per zone where workloads are private (no zone depends on another's); else none."""
        return len(self.availability_zones) if self.private_workloads else 0

    @property
    def stream_reserved_concurrency(self) -> int | None:
        """The streaming function's reservation: none unless synapse:reserveStreamConcurrency asks for one.

        A new account's concurrency quota can be far below the default 1,000 (Lambda lowers it for new
        accounts: https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html), and a reservation
        larger than the quota less Lambda's unreserved 100 fails the deploy; unreserved, /v1 calls share the
        account's pool with everything else."""
        if not self.reserve_stream_concurrency:
            return None
        return stream_reserved_concurrency(self.v1_rate_limit)

    @property
    def worker_model_cache_bytes(self) -> int:
        """The worker's disk cache budget: the root volume less the AMI and the image."""
        return (self.worker_disk_gb - WORKER_DISK_RESERVED_GB) * 1024**3

    @classmethod
    def from_context(cls, scope: Construct) -> SynapseConfig:
        """Reads `synapse:*` context; the account falls back to the CLI's credentials, then a stub, and the
        region to the environment and the profile, as the AWS CLI finds it (stacks/region.py).

        The stub account lets `cdk synth` run offline with no credentials; `cdk deploy` always has them.
        """

        def get(name: str, default: T, parse: Callable[[object], T]) -> T:
            raw = scope.node.try_get_context(PREFIX + name)
            if raw is None:
                return default
            try:
                return parse(raw)
            except (TypeError, ValueError) as error:
                raise ConfigError(f"context {PREFIX}{name}={raw!r}: {error}") from error

        profile = get("profile", Profile.LEAN, _profile)
        defaults = PROFILES[profile]
        region = deploy_region(get("region", None, _optional_string))
        account = get("account", os.environ.get("CDK_DEFAULT_ACCOUNT", STUB_ACCOUNT), str)
        account_concurrency = get("accountConcurrency", DEFAULT_ACCOUNT_CONCURRENCY, _integer)
        zone_source, availability_zones = _zones(
            get("availabilityZones", (), _string_list),
            scope.node.try_get_context(zones.context_key(account, region)),
            region,
        )
        return cls(
            profile=profile,
            account=account,
            region=region,
            # From context, never a lookup at synth: synth needs no credentials.
            availability_zones=availability_zones,
            zone_source=zone_source,
            vpc_cidr=get("vpcCidr", "10.40.0.0/16", str),
            instance_types=get("instanceTypes", DEFAULT_INSTANCE_TYPES, _string_list),
            # Spot for the mixed-instances group (the warm pool cannot hold Spot instances): up to 70 % off,
            # interrupted with two minutes' notice (the ECS agent drains the instance).
            spot=get("spot", False, _boolean),
            max_workers=get("maxWorkers", defaults.max_workers, _integer),
            warm_pool_size=get("warmPoolSize", defaults.warm_pool_size, _integer),
            worker_disk_gb=get("workerDiskGb", defaults.worker_disk_gb, _integer),
            scale_to_zero_after_s=get("scaleToZeroAfterSeconds", 300, _integer),
            api_rate_limit=get("apiRateLimit", 500, _integer),
            api_burst_limit=get("apiBurstLimit", 1000, _integer),
            v1_rate_limit=get("v1RateLimit", max(1, largest_fitting_v1_rate(account_concurrency)), _integer),
            account_concurrency=account_concurrency,
            # Off: nothing reserved, so an account with a reduced concurrency quota deploys. On: the
            # streaming front door reserves what the /v1 throttle can hold open, checked against the quota.
            reserve_stream_concurrency=get("reserveStreamConcurrency", False, _boolean),
            cache_max_storage_gb=get("cacheMaxStorageGb", defaults.cache_max_storage_gb, _integer),
            cache_max_ecpu_per_second=get(
                "cacheMaxEcpuPerSecond", defaults.cache_max_ecpu_per_second, _integer
            ),
            # gpu-sim is a simulator for benchmarks and tests: not served on AWS unless asked for.
            models=get("models", f"{CHAT_MODEL},minilm", str),
            # Folders of models served from the model bucket (as published): the catalog reads them at synth.
            model_folders=get("modelFolders", (), _folders),
            gpu_price_per_hour=get("gpuPricePerHour", GPU_PRICE_PER_HOUR, _number),
            web_adapter_layer_version=get("webAdapterLayerVersion", WEB_ADAPTER_LAYER_VERSION, _integer),
            skip_bundling=get("skipBundling", False, _boolean),
            # With none, the alerts topic has no subscriber until one is added (docs/deploy.md: alerts).
            alert_email=get("alertEmail", None, _optional_string),
            # Managed Grafana signs in through IAM Identity Center, which a fresh account lacks, and bills an
            # Editor licence a month even unused: off unless asked. The dashboards (dashboards/*.json) import
            # into any Grafana reading the Prometheus workspace (docs/deploy.md: dashboards).
            managed_grafana=get("managedGrafana", False, _boolean),
            # SNS topics per job outcome (success, error), for consumers that want no webhook; off, none.
            outcome_topics=get("outcomeTopics", False, _boolean),
            file_retention_days=get("fileRetentionDays", FILE_RETENTION_DAYS, _integer),
        )


def _zones(named: tuple[str, ...], picked: object, region: str) -> tuple[ZoneSource, tuple[str, ...]]:
    if named:
        return ZoneSource.NAMED, named
    if picked is not None:
        try:
            return ZoneSource.PREFLIGHT, zones.recorded_names(picked)
        except ValueError as error:
            raise ConfigError(f"cdk.context.json's zones for {region}: {error}") from error
    return ZoneSource.OFFLINE, zones.offline_zones(region)


def _profile(raw: object) -> Profile:
    try:
        return Profile(str(raw))
    except ValueError:
        raise ValueError(f"expected one of {', '.join(Profile)}") from None


def _folders(raw: object) -> tuple[Path, ...]:
    if not isinstance(raw, str | list):
        raise TypeError("expected folders, comma-separated")
    names = raw.split(",") if isinstance(raw, str) else [str(item) for item in raw]
    return tuple(REPO_ROOT / name.strip() for name in names if name.strip())


def _integer(raw: object) -> int:
    # `-c key=5` arrives as the string "5"; cdk.json gives a JSON number.
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise TypeError("expected an integer")
    return int(raw)


def _number(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise TypeError("expected a number")
    return float(raw)


def _optional_string(raw: object) -> str | None:
    return str(raw).strip() or None


def _boolean(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in {"true", "false"}:
        return raw.lower() == "true"
    raise ValueError("expected true or false")


def _string_list(raw: object) -> tuple[str, ...]:
    # A list from cdk.json, or "us-east-1a,us-east-1b" from the command line.
    if isinstance(raw, str):
        items: list[object] = list(raw.split(","))
    elif isinstance(raw, list | tuple):
        items = list(raw)
    else:
        raise TypeError("expected a list of strings")
    return tuple(str(item).strip() for item in items if str(item).strip())
