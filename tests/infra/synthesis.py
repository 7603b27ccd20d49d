"""How the infra tests synthesize the app: cdk.json's context, no bundling, one cloud assembly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import cx_api
from aws_cdk.assertions import Template

from stacks.offline_synth import offline_context

REPO = Path(__file__).resolve().parents[2]


def synth_context() -> dict[str, object]:
    """cdk.json's context as the CLI would pass it, minus the network (stacks/offline_synth.py)."""
    context = offline_context()
    # With this flag on, an error annotation (an unsuppressed cdk-nag finding) fails synth() as a
    # whole; off, synth completes and test_nag lists every finding by name, which is the useful
    # failure. The CLI synth test keeps cdk.json's value, so the real behaviour is covered too.
    context["@aws-cdk/core:annotationsInValidationReport"] = False
    return context


@dataclass(frozen=True)
class Synth:
    platform: Any  # app.Platform (app.py is loaded by path, so its types are not importable)
    assembly: cx_api.CloudAssembly
    outdir: Path

    @property
    def stacks(self) -> tuple[cdk.Stack, ...]:
        stacks: tuple[cdk.Stack, ...] = self.platform.stacks
        return stacks

    def template(self, stack: cdk.Stack) -> Template:
        return Template.from_json(self.assembly.get_stack_artifact(stack.artifact_id).template)
