"""Every SYNAPSE_* variable the stacks set is one the runtime reads (a typo would be silently ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from contract.settings import ENV_PREFIX, Settings
from tests.infra import cfn

pytestmark = pytest.mark.infra


def known_names() -> set[str]:
    return {ENV_PREFIX + name.upper() for name in Settings.model_fields}


def names_set_by_stacks(raw: dict[str, dict[str, Any]]) -> set[str]:
    names: set[str] = set()
    for template in raw.values():
        for function in cfn.resources(template, "AWS::Lambda::Function").values():
            names |= set(function["Properties"].get("Environment", {}).get("Variables", {}))
        for task in cfn.resources(template, "AWS::ECS::TaskDefinition").values():
            for definition in task["Properties"]["ContainerDefinitions"]:
                names |= set(cfn.environment(definition))
                names |= {secret["Name"] for secret in definition.get("Secrets", [])}
    return {name for name in names if name.startswith(ENV_PREFIX)}


def test_every_synapse_variable_set_by_the_stacks_is_known_to_the_runtime(
    raw: dict[str, dict[str, Any]],
) -> None:
    assert names_set_by_stacks(raw) - known_names() == set()
