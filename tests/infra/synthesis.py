"""How the infra tests synthesize the app: cdk.json's context, no bundling, one cloud assembly."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import cx_api
from aws_cdk.assertions import Template

from stacks.offline_synth import load_app_module, offline_context

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

    def nag_errors(self) -> list[str]:
        """Unsuppressed cdk-nag findings, as synth recorded them (Annotations.from_stack would synth
        the app again for every call)."""
        return [
            f"{message.id}: {message.entry.data}"
            for stack in self.stacks
            for message in self.assembly.get_stack_artifact(stack.artifact_id).messages
            if message.level == cx_api.SynthesisMessageLevel.ERROR
            and re.match(r"AwsSolutions-", str(message.entry.data))
        ]

    def raw(self, stack: cdk.Stack) -> dict[str, Any]:
        """A stack's template as a plain dict."""
        return dict(self.assembly.get_stack_artifact(stack.artifact_id).template)


def synthesize(outdir: Path, overrides: Mapping[str, object] | None = None) -> Synth:
    """The whole app synthesized into `outdir`, with context `overrides` on top of cdk.json's."""
    app = cdk.App(context={**synth_context(), **(overrides or {})}, outdir=str(outdir))
    platform = load_app_module().build(app)
    return Synth(platform=platform, assembly=app.synth(), outdir=outdir)
