"""The GPU quota preflight asks for covers a deploy's instance refresh and the warm pool's refill."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from stacks.config import SynapseConfig
from stacks.gpu_peak import GpuPeak
from tests.processes import REPO


def peak(**context: str) -> GpuPeak:
    base = {"region": "eu-west-1", "account": "123456789012", "availabilityZones": "eu-west-1a,eu-west-1b"}
    return GpuPeak.of(
        SynapseConfig.from_context(
            cdk.App(context={f"synapse:{k}": v for k, v in {**base, **context}.items()})
        )
    )


@pytest.mark.parametrize(
    ("profile", "instances"),
    [
        # 1 warm x 200 % + 1 refilling + 1 burst x 200 %
        ("lean", 5),
        # 2 warm x 200 % + 2 refilling + 6 burst x 200 %
        ("production", 18),
    ],
)
def test_on_demand_peak_by_profile(profile: str, instances: int) -> None:
    assert peak(profile=profile).on_demand == instances


def test_spot_moves_the_burst_group_to_the_spot_quota() -> None:
    spot = peak(spot="true", maxWorkers="4")  # 1 warm, 3 burst
    assert (spot.on_demand, spot.burst) == (3, 6)


def test_a_larger_type_counts_its_vcpus() -> None:
    assert peak(instanceTypes="g6e.2xlarge,g6.xlarge").vcpus == 8


def test_the_deploy_page_asks_for_what_preflight_asks() -> None:
    """docs/deploy.md's quota amounts are the peaks computed here, profile by profile."""
    page = " ".join((REPO / "docs" / "deploy.md").read_text().split())
    lean, production = peak(profile="lean"), peak(profile="production")
    lean_spot, production_spot = peak(spot="true"), peak(profile="production", spot="true")
    assert f"**{lean.on_demand * lean.vcpus} vCPUs for `lean`**" in page
    assert f"**{production.on_demand * production.vcpus} vCPUs for `production`**" in page
    spot = (lean_spot.burst * lean_spot.vcpus, production_spot.burst * production_spot.vcpus)
    assert "(lean {}, production {} vCPUs)".format(*spot) in page
    assert f"--desired-value {lean.on_demand * lean.vcpus}`" in page
