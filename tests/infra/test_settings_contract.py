"""Every SYNAPSE_* variable the stacks set is one the runtime reads (a typo would be silently ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from contract.catalog_build import catalog_of
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


# Lambda holds a function's environment variables in 4 KB in all (the Lambda quotas page:
# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
LAMBDA_ENVIRONMENT_BYTES = 4096


def test_the_front_door_and_the_manager_are_handed_one_model_catalog_that_fits_lambda(
    raw: dict[str, dict[str, Any]], platform: Any
) -> None:
    catalogs: set[str] = set()
    for template in raw.values():
        for function in cfn.resources(template, "AWS::Lambda::Function").values():
            variables = function["Properties"].get("Environment", {}).get("Variables", {})
            if "SYNAPSE_MODEL_CATALOG" in variables:
                catalogs.add(variables["SYNAPSE_MODEL_CATALOG"])
                size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in variables.items())
                assert size < LAMBDA_ENVIRONMENT_BYTES, f"{size} bytes of environment"
        for task in cfn.resources(template, "AWS::ECS::TaskDefinition").values():
            for definition in task["Properties"]["ContainerDefinitions"]:
                if "SYNAPSE_MODEL_CATALOG" in (environment := cfn.environment(definition)):
                    catalogs.add(environment["SYNAPSE_MODEL_CATALOG"])
    assert len(catalogs) == 1, "the front door and the manager must read the same catalog"
    deployed = tuple(model.strip() for model in platform.config.models.split(","))
    served = Settings(models=deployed, model_catalog=catalogs.pop())
    assert catalog_of(served).names() == deployed
