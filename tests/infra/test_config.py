"""Context values: parsed from cdk.json or the command line, checked before anything is built."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest

from stacks.config import ConfigError, SynapseConfig
from tests.infra.synthesis import REPO

pytestmark = pytest.mark.infra


def config(**context: object) -> SynapseConfig:
    return SynapseConfig.from_context(cdk.App(context={f"synapse:{k}": v for k, v in context.items()}))


def test_cdk_json_defaults_parse_and_match_the_documented_ones() -> None:
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    defaults = {k: v for k, v in context.items() if k.startswith("synapse:")}
    config(**{k.removeprefix("synapse:"): v for k, v in defaults.items()})
    # The README's context table: | `synapse:<name>` | `<default>` | meaning |
    documented = dict(re.findall(r"^\| `(synapse:\w+)` \| `([^`]*)`", (REPO / "README.md").read_text(), re.M))
    for key, value in defaults.items():
        assert key in documented, f"{key} is not in the README's context table"
        assert documented[key] == str(value), f"{key}: cdk.json has {value!r}, the README {documented[key]!r}"


def test_command_line_strings_are_parsed() -> None:
    parsed = config(
        maxWorkers="8", warmPoolSize="3", skipBundling="true", availabilityZones="eu-west-1a,eu-west-1c"
    )
    assert (parsed.max_workers, parsed.warm_pool_size, parsed.skip_bundling) == (8, 3, True)
    assert parsed.availability_zones == ("eu-west-1a", "eu-west-1c")


def test_availability_zones_follow_the_region() -> None:
    assert config(region="eu-central-1").availability_zones == ("eu-central-1a", "eu-central-1b")


@pytest.mark.parametrize(
    ("context", "complaint"),
    [
        ({"maxWorkers": 0}, "maxWorkers"),
        ({"maxWorkers": 2, "warmPoolSize": 3}, "warmPoolSize"),
        ({"availabilityZones": ["us-east-1a"]}, "two zones"),
        ({"maxWorkers": "many"}, "synapse:maxWorkers"),
        ({"skipBundling": "yes"}, "synapse:skipBundling"),
    ],
)
def test_bad_values_are_refused_with_the_key_named(context: dict[str, object], complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        config(**context)
