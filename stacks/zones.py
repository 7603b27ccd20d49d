"""The VPC's zones: picked by preflight by zone ID where the GPU types are offered, read by synth.

A zone's name is the account's own alias of a physical zone: `us-east-1a` is a different zone in another
account, and `ap-northeast-1b` exists in few. The zone ID (`use1-az4`) names the same zone in every
account (https://docs.aws.amazon.com/ram/latest/userguide/working-with-az-ids.html), and EC2 reports
instance type offerings by it.
So preflight asks EC2 which zone IDs offer the configured types, picks `ZONE_COUNT` of them, and writes
each one's ID and this account's name for it to `cdk.context.json`, the file where the CDK CLI keeps
what it looked up in an account (its own zone lookups included), under a key naming the account and
region. Synth reads the names from there: CloudFormation's subnets and ElastiCache take names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The CDK CLI's file of what it looked up in accounts, beside cdk.json; synth gets it as context.
CONTEXT_FILE = Path(__file__).resolve().parent.parent / "cdk.context.json"
# Two: ElastiCache Serverless needs two, and in production each zone adds a NAT gateway to the idle bill.
ZONE_COUNT = 2


@dataclass(frozen=True)
class OfferedZone:
    """One zone of the region as this account names it, and the configured types it offers."""

    zone_id: str
    name: str
    types: frozenset[str]


def context_key(account: str, region: str) -> str:
    """Where preflight's answer for one account and region lives in cdk.context.json."""
    return f"synapse:zones:account={account}:region={region}"


def offline_zones(region: str) -> tuple[str, ...]:
    """OFFLINE SYNTH ONLY (no account: tests, a synth without credentials): the region's first two zone
    names, so that templates are deterministic. Never deployed: the network refuses them for a real
    account (stacks/network.py)."""
    return (f"{region}a", f"{region}b")


def offerings(ec2: Any, instance_types: Sequence[str]) -> list[OfferedZone]:
    """The region's zones (not Local or Wavelength Zones), each with the types it offers, by zone ID."""
    zones = ec2.describe_availability_zones(
        Filters=[
            {"Name": "zone-type", "Values": ["availability-zone"]},
            {"Name": "state", "Values": ["available"]},
        ]
    )["AvailabilityZones"]
    offered: dict[str, set[str]] = {zone["ZoneId"]: set() for zone in zones}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone-id",
        Filters=[{"Name": "instance-type", "Values": list(instance_types)}],
    )
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            offered.setdefault(offering["Location"], set()).add(offering["InstanceType"])
    return sorted(
        (OfferedZone(zone["ZoneId"], zone["ZoneName"], frozenset(offered[zone["ZoneId"]])) for zone in zones),
        key=lambda zone: zone.zone_id,
    )


def pick(zones: Sequence[OfferedZone], instance_types: Sequence[str]) -> tuple[OfferedZone, ...]:
    """Up to `ZONE_COUNT` zones that offer the warm group's type (the first), those offering more of the
    others first, then by zone ID, so that the same offerings always give the same answer."""
    warm, wanted = instance_types[0], set(instance_types)
    candidates = [zone for zone in zones if warm in zone.types]
    candidates.sort(key=lambda zone: (-len(zone.types & wanted), zone.zone_id))
    return tuple(candidates[:ZONE_COUNT])


def record(path: Path, account: str, region: str, zones: Sequence[OfferedZone]) -> None:
    """Writes the picked zones into cdk.context.json, keeping what else the file holds."""
    context = json.loads(path.read_text()) if path.exists() else {}
    context[context_key(account, region)] = [{"zoneId": z.zone_id, "zoneName": z.name} for z in zones]
    path.write_text(json.dumps(context, indent=2, sort_keys=True) + "\n")


def recorded_names(value: object) -> tuple[str, ...]:
    """The zone names of preflight's answer, as cdk.context.json holds it."""
    if not isinstance(value, list) or not all(isinstance(z, dict) and "zoneName" in z for z in value):
        raise ValueError("expected preflight's list of {zoneId, zoneName}: run synapse preflight again")
    return tuple(str(zone["zoneName"]) for zone in value)
