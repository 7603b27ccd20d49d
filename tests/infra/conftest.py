"""Synthesizes the Synapse CDK app once per session; every infra test reads that one cloud assembly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk.assertions import Template

from tests.infra.synthesis import Synth, synthesize

# app.Platform's attributes, one per stack.
STACK_NAMES = ("network", "data", "monitoring", "workers", "manager", "api", "alarms")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    yield synthesize(tmp_path_factory.mktemp("cdk.out"))


# Everything a fresh account leaves off by default, turned on: what the deploy builds when asked for it.
OPTED_IN = {
    "synapse:reserveStreamConcurrency": "true",
    "synapse:managedGrafana": "true",
    "synapse:spot": "true",
    "synapse:availabilityZones": "us-east-1a,us-east-1b,us-east-1c",
}


@pytest.fixture(scope="session")
def opted_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """The app with every opt-in context value on (OPTED_IN), synthesized once for the session."""
    yield synthesize(tmp_path_factory.mktemp("cdk.out.opted-in"), OPTED_IN)


@pytest.fixture(scope="session")
def opted_in_raw(opted_in: Synth) -> dict[str, dict[str, Any]]:
    return {name: opted_in.raw(getattr(opted_in.platform, name)) for name in STACK_NAMES}


@pytest.fixture(scope="session")
def platform(synth: Synth) -> Any:
    """The `app.Platform` built for the session: stacks and constructs, as attributes."""
    return synth.platform


@pytest.fixture(scope="session")
def templates(synth: Synth) -> dict[str, Template]:
    """Each stack's template by short name: network, data, monitoring, workers, manager, api, alarms."""
    names = STACK_NAMES
    return {name: synth.template(getattr(synth.platform, name)) for name in names}


@pytest.fixture(scope="session")
def raw(synth: Synth) -> dict[str, dict[str, Any]]:
    """The same templates as plain dicts, for checks that walk every resource."""
    return {name: synth.raw(getattr(synth.platform, name)) for name in STACK_NAMES}
