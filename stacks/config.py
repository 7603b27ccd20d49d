"""The deployment's knobs, read once from CDK context, and the names every stack shares.

Context wins over the environment, which wins over the defaults (the same order as the runtime's
settings). Defaults live in `cdk.json`; the ones here only keep a bare `cdk.App()` (tests) working,
but for the GPU price, whose one default is the runtime's (`Settings.gpu_price_per_hour`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from constructs import Construct

from contract.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent

PREFIX = "synapse:"

# Private DNS namespace for Cloud Map: Prometheus finds the manager and the Pushgateway here, and
# workers push to `pushgateway.<namespace>`.
SERVICE_NAMESPACE = "synapse.internal"

# Non-default port: a scanner that knows 6379 finds nothing (cdk-nag AEC5 asks for the same).
REDIS_PORT = 6380
METRICS_PORT = 9100
PUSHGATEWAY_PORT = 9091
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
REDIS_EXPORTER_PORT = 9121
TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002

# The runtime's default (`Settings`), so the price is written in one place.
GPU_PRICE_PER_HOUR: float = Settings.model_fields["gpu_price_per_hour"].default

# The Lambda Web Adapter's x86_64 layer version (v0.9.1, the release current in late 2025), which the
# streaming front door runs (stacks/front_door.py). `synapse:webAdapterLayerVersion` picks another.
WEB_ADAPTER_LAYER_VERSION = 25

# The worker image runs as this uid (worker_image/Dockerfile); the host's model cache is chowned to it.
WORKER_UID = 10001

T = TypeVar("T")


class ConfigError(ValueError):
    """A context value that cannot be used."""


@dataclass(frozen=True, kw_only=True)
class SynapseConfig:
    """Every value a platform engineer may change with `-c synapse:<name>=<value>` (README: Deploy)."""

    account: str
    region: str
    availability_zones: tuple[str, ...]
    vpc_cidr: str
    nat_gateways: int
    instance_type: str
    max_workers: int
    warm_pool_size: int
    scale_to_zero_after_s: int
    api_rate_limit: int
    api_burst_limit: int
    cache_node_type: str
    models: str
    gpu_price_per_hour: float
    web_adapter_layer_version: int
    stream_reserved_concurrency: int
    skip_bundling: bool

    def __post_init__(self) -> None:
        if len(self.availability_zones) < 2:
            raise ConfigError("synapse:availabilityZones needs two zones: ElastiCache runs Multi-AZ")
        if self.max_workers < 1:
            raise ConfigError(f"synapse:maxWorkers must be at least 1, got {self.max_workers}")
        if not 0 <= self.warm_pool_size <= self.max_workers:
            raise ConfigError(
                f"synapse:warmPoolSize must be between 0 and maxWorkers ({self.max_workers}), "
                f"got {self.warm_pool_size}"
            )
        if self.scale_to_zero_after_s < 0:
            raise ConfigError("synapse:scaleToZeroAfterSeconds must not be negative")
        if self.api_rate_limit < 1 or self.api_burst_limit < 1:
            raise ConfigError("synapse:apiRateLimit and synapse:apiBurstLimit must be positive")
        if self.web_adapter_layer_version < 1:
            raise ConfigError("synapse:webAdapterLayerVersion must be a published layer version (1 or more)")
        if self.stream_reserved_concurrency < 0:
            raise ConfigError("synapse:streamReservedConcurrency must not be negative (0 reserves none)")

    @classmethod
    def from_context(cls, scope: Construct) -> SynapseConfig:
        """Reads `synapse:*` context; account and region fall back to the CLI's credentials, then a stub.

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

        region = get("region", os.environ.get("CDK_DEFAULT_REGION", "us-east-1"), str)
        return cls(
            account=get("account", os.environ.get("CDK_DEFAULT_ACCOUNT", "123456789012"), str),
            region=region,
            # Named explicitly so that synth needs no AZ lookup (and so no credentials).
            availability_zones=get("availabilityZones", (f"{region}a", f"{region}b"), _string_list),
            vpc_cidr=get("vpcCidr", "10.40.0.0/16", str),
            nat_gateways=get("natGateways", 1, _integer),
            instance_type=get("instanceType", "g5.xlarge", str),
            max_workers=get("maxWorkers", 4, _integer),
            warm_pool_size=get("warmPoolSize", 2, _integer),
            scale_to_zero_after_s=get("scaleToZeroAfterSeconds", 300, _integer),
            api_rate_limit=get("apiRateLimit", 500, _integer),
            api_burst_limit=get("apiBurstLimit", 1000, _integer),
            cache_node_type=get("cacheNodeType", "cache.t4g.medium", str),
            # gpu-sim is a simulator for benchmarks and tests: not served on AWS unless asked for.
            models=get("models", "tiny-gpt2", str),
            gpu_price_per_hour=get("gpuPricePerHour", GPU_PRICE_PER_HOUR, _number),
            web_adapter_layer_version=get("webAdapterLayerVersion", WEB_ADAPTER_LAYER_VERSION, _integer),
            # 0: the streaming function draws on the account's unreserved pool (docs/streaming.md).
            stream_reserved_concurrency=get("streamReservedConcurrency", 0, _integer),
            skip_bundling=get("skipBundling", False, _boolean),
        )


def _integer(raw: object) -> int:
    # `-c key=5` arrives as the string "5"; cdk.json gives a JSON number.
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise TypeError("expected an integer")
    return int(raw)


def _number(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise TypeError("expected a number")
    return float(raw)


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
