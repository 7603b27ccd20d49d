"""Synthesizes the Synapse CDK app once per session; every infra test reads that one cloud assembly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from stacks.offline_synth import load_app_module
from tests.infra.synthesis import Synth, synth_context

# app.Platform's attributes, one per stack.
STACK_NAMES = ("network", "data", "monitoring", "workers", "manager", "api", "alarms")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(context=synth_context(), outdir=str(outdir))
    platform = load_app_module().build(app)
    yield Synth(platform=platform, assembly=app.synth(), outdir=outdir)


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
    names = STACK_NAMES
    return {
        name: dict(synth.assembly.get_stack_artifact(getattr(synth.platform, name).artifact_id).template)
        for name in names
    }
