"""AWS list prices (us-east-1, on demand) that Synapse's cost ledger charges jobs with, in one place.

These are the defaults of the price settings (`contract/settings.py`, `SYNAPSE_*_PRICE_*`): a
deployment in another region, or with other sizes, sets its own. Each price names the page it comes
from. Besides prices, the two ECPU figures below model how much ElastiCache work a job costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOURS_PER_MONTH = 730.0  # AWS's own monthly figure for hourly prices

# API Gateway, REST APIs: $3.50 per million requests for the first 333 million a month.
# https://aws.amazon.com/api-gateway/pricing/
API_GATEWAY_PER_MILLION_REQUESTS = 3.50

# Lambda, x86: $0.0000166667 per GB-second, $0.20 per million requests. https://aws.amazon.com/lambda/pricing/
LAMBDA_PER_GB_SECOND = 0.0000166667
LAMBDA_PER_MILLION_REQUESTS = 0.20
FRONT_DOOR_MEMORY_MB = 512  # both front-door functions (stacks/front_door.py)
# The API key authorizer (stacks/api.py: 128 MB, no result cache) runs on every keyed request. It has
# no network, so it cannot count itself: it is charged one invocation per keyed request, billed for
# AUTHORIZER_BILLED_MS (a warm Python handler that reads one header; Lambda bills whole milliseconds).
AUTHORIZER_MEMORY_MB = 128
AUTHORIZER_BILLED_MS = 2

# Fargate, Linux/ARM: $0.03238 per vCPU-hour, $0.00356 per GB-hour. https://aws.amazon.com/fargate/pricing/
FARGATE_ARM_PER_VCPU_HOUR = 0.03238
FARGATE_ARM_PER_GB_HOUR = 0.00356
# The lean profile's manager task has 0.25 vCPU and 1 GB (the deploy passes its profile's own price).
MANAGER_PER_HOUR = 0.25 * FARGATE_ARM_PER_VCPU_HOUR + 1.0 * FARGATE_ARM_PER_GB_HOUR

# ElastiCache Serverless for Valkey: $0.0837 per GB-hour of data stored, 100 MB at least, and $0.00227
# per million ECPUs. https://aws.amazon.com/elasticache/pricing/
# Idle, the cache bills its 100 MB minimum; the job store of a quiet platform stays under it.
VALKEY_PER_GB_HOUR = 0.0837
VALKEY_MINIMUM_GB = 0.1
CACHE_PER_HOUR = VALKEY_MINIMUM_GB * VALKEY_PER_GB_HOUR
CACHE_PER_MILLION_ECPUS = 0.00227
# An ECPU is a simple command moving up to 1 KB; Synapse's commands are small, so the model counts one
# ECPU per Redis command, those inside Lua scripts included. A job costs its submit script (about 13
# commands) and the manager's work on it (its share of XREADGROUP, marking it running, writing its
# outcome: about 14); every front-door request costs a read of the job (HGETALL, BLMOVE, HGETALL: 3).
CACHE_ECPUS_PER_JOB = 27
CACHE_ECPUS_PER_REQUEST = 3

# Every other always-on resource of the lean profile (besides the manager and the cache), per month,
# rounded up: the deploy passes the exact figure of its profile (stacks/idle_cost.other_idle_per_month).
OTHER_IDLE_PER_MONTH = 19.0


def billed_ms(seconds: float) -> int:
    """Lambda bills duration in whole milliseconds, rounded up."""
    return max(0, math.ceil(seconds * 1000 - 1e-9))


MB_PER_GB = 1024  # Lambda's GB-seconds count 1,024 MB to the GB
MILLION = 1_000_000
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Prices:
    """What each billed unit costs besides the GPUs; `manager.cost.prices_of` reads a deployment's own."""

    api_gateway_per_million_requests: float = API_GATEWAY_PER_MILLION_REQUESTS
    lambda_per_gb_second: float = LAMBDA_PER_GB_SECOND
    lambda_per_million_requests: float = LAMBDA_PER_MILLION_REQUESTS
    front_door_memory_mb: int = FRONT_DOOR_MEMORY_MB
    manager_per_hour: float = MANAGER_PER_HOUR
    cache_per_hour: float = CACHE_PER_HOUR
    cache_per_million_ecpus: float = CACHE_PER_MILLION_ECPUS
    other_idle_per_month: float = OTHER_IDLE_PER_MONTH

    def api_gateway(self, requests: float) -> float:
        return requests * self.api_gateway_per_million_requests / MILLION

    def lambdas(self, requests: float, billed_ms: float) -> float:
        """The front door's invocations and their billed milliseconds, each with its authorizer call."""
        front_door_gb_s = billed_ms / 1000 * self.front_door_memory_mb / MB_PER_GB
        authorizer_gb_s = requests * AUTHORIZER_BILLED_MS / 1000 * AUTHORIZER_MEMORY_MB / MB_PER_GB
        invocations = 2 * requests
        return (
            invocations * self.lambda_per_million_requests / MILLION
            + (front_door_gb_s + authorizer_gb_s) * self.lambda_per_gb_second
        )

    def cache_ecpus(self, jobs: float, requests: float) -> float:
        ecpus = jobs * CACHE_ECPUS_PER_JOB + requests * CACHE_ECPUS_PER_REQUEST
        return ecpus * self.cache_per_million_ecpus / MILLION

    def manager(self, seconds: float) -> float:
        return seconds * self.manager_per_hour / SECONDS_PER_HOUR

    def cache_idle(self, seconds: float) -> float:
        return seconds * self.cache_per_hour / SECONDS_PER_HOUR

    def other_idle(self, seconds: float) -> float:
        return seconds * self.other_idle_per_month / HOURS_PER_MONTH / SECONDS_PER_HOUR
