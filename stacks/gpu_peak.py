"""The most GPU instances the configuration runs at once: what the GPU vCPU quotas must allow.

Not `maxWorkers`: a deploy that changes a launch template refreshes each group new-before-old, up to
`REFRESH_MAX_HEALTHY_PERCENT` of its capacity (stacks/workers.py), and the warm pool refills by booting
fresh instances that run while they pull the image, before they stop. With the quota at `maxWorkers`,
the refresh or the refill stalls on a launch the quota refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stacks.config import SynapseConfig

# An instance refresh keeps every instance in service (min) and launches a replacement beside each (max).
REFRESH_MIN_HEALTHY_PERCENT = 100
REFRESH_MAX_HEALTHY_PERCENT = 200
# vCPUs of each one-GPU size the worker accepts (stacks/config.py: GPU_FAMILIES), the same in g5, g6, g6e.
VCPUS_BY_SIZE = {"xlarge": 4, "2xlarge": 8, "4xlarge": 16, "8xlarge": 32, "16xlarge": 64}


def gpu_vcpus(config: SynapseConfig) -> int:
    """The most vCPUs one GPU instance of the configured types takes."""
    return max(VCPUS_BY_SIZE[t.partition(".")[2]] for t in config.instance_types)


def during_refresh(instances: int) -> int:
    """A group's instances while a refresh runs: the old ones and their replacements."""
    return math.ceil(instances * REFRESH_MAX_HEALTHY_PERCENT / 100)


@dataclass(frozen=True)
class GpuPeak:
    """Running instances at the peak, by the quota they count against."""

    warm_in_service: int  # the warm group during a refresh (on demand)
    warm_refill: int  # the warm pool's new instances, running while they pull (on demand)
    burst: int  # the burst group during a refresh (Spot with synapse:spot, else on demand)
    spot: bool
    vcpus: int  # per instance

    @classmethod
    def of(cls, config: SynapseConfig) -> GpuPeak:
        return cls(
            warm_in_service=during_refresh(config.warm_pool_size),
            warm_refill=config.warm_pool_size,
            burst=during_refresh(config.burst_workers),
            spot=config.spot,
            vcpus=gpu_vcpus(config),
        )

    @property
    def on_demand(self) -> int:
        return self.warm_in_service + self.warm_refill + (0 if self.spot else self.burst)

    def explain(self, *, spot_quota: bool) -> str:
        """How the count of one quota (the Spot one, or the on-demand one) adds up, for its finding."""
        refreshed = f"({REFRESH_MAX_HEALTHY_PERCENT} % during a refresh)"
        if spot_quota:
            parts = [f"{self.burst} Spot burst instances {refreshed}"]
        else:
            parts = [
                f"{self.warm_in_service} warm-group instances {refreshed}",
                f"{self.warm_refill} refilling its warm pool",
            ]
            if not self.spot and self.burst:
                parts.append(f"{self.burst} burst instances {refreshed}")
        return f"{' + '.join(parts)}, {self.vcpus} vCPUs each"
