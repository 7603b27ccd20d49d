"""Zones by zone ID: which preflight picks, and a deploy that cannot fall back to guessed zone letters."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk.assertions import Annotations, Match

from stacks.config import STUB_ACCOUNT, SynapseConfig, ZoneSource
from stacks.network import NetworkStack
from stacks.zones import OfferedZone, pick

BOTH = frozenset({"g5.xlarge", "g6.xlarge"})
TYPES = ("g5.xlarge", "g6.xlarge")


def test_picks_zones_offering_the_warm_type_the_most_types_first_then_by_id() -> None:
    zones = [
        OfferedZone("use1-az1", "us-east-1c", frozenset({"g6.xlarge"})),  # no g5: never picked
        OfferedZone("use1-az2", "us-east-1a", frozenset({"g5.xlarge"})),
        OfferedZone("use1-az4", "us-east-1f", BOTH),
        OfferedZone("use1-az6", "us-east-1b", BOTH),
    ]
    assert [zone.zone_id for zone in pick(zones, TYPES)] == ["use1-az4", "use1-az6"]
    assert [zone.zone_id for zone in pick(zones, ("g6.xlarge",))] == ["use1-az1", "use1-az4"]


def synth_network(account: str, **context: str) -> cdk.Stack:
    app = cdk.App(context={"synapse:region": "ap-northeast-1", "synapse:account": account, **context})
    config = SynapseConfig.from_context(app)
    env = cdk.Environment(account=account, region="ap-northeast-1")
    return NetworkStack(app, "SynapseNetwork", env=env, config=config)


def test_a_real_account_without_preflights_zones_fails_synth() -> None:
    errors = Annotations.from_stack(synth_network("111122223333")).find_error(
        "*", Match.string_like_regexp("run `synapse preflight`")
    )
    assert errors, "a deploy would have used the offline placeholders (ap-northeast-1a, ap-northeast-1b)"


def test_offline_synth_keeps_its_labelled_placeholders() -> None:
    app = cdk.App(context={"synapse:region": "ap-northeast-1", "synapse:account": STUB_ACCOUNT})
    config = SynapseConfig.from_context(app)
    assert config.zone_source is ZoneSource.OFFLINE
    assert config.availability_zones == ("ap-northeast-1a", "ap-northeast-1b")
    assert not Annotations.from_stack(synth_network(STUB_ACCOUNT)).find_error("*", Match.any_value())


def test_named_zones_need_no_preflight_answer() -> None:
    stack = synth_network("111122223333", **{"synapse:availabilityZones": "ap-northeast-1a,ap-northeast-1c"})
    assert not Annotations.from_stack(stack).find_error("*", Match.any_value())
