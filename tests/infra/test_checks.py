"""The gates every synth must pass: cdk-nag (AwsSolutions), cfn-lint, and the pinned CDK CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stacks.node import NODE
from tests.infra.synthesis import REPO, Synth

pytestmark = pytest.mark.infra


def test_synth_needs_no_lookups(synth: Synth) -> None:
    # A missing context value is a lookup the CLI would make with AWS credentials: none allowed.
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    assert manifest.get("missing", []) == []


@pytest.fixture(params=["defaults", "opted-in"])
def gated(request: pytest.FixtureRequest) -> Synth:
    """Both synths: a fresh account's defaults, and every opt-in on (tests/infra/conftest.py: OPTED_IN)."""
    fixture = "synth" if request.param == "defaults" else "opted_in"
    synthesized: Synth = request.getfixturevalue(fixture)
    return synthesized


def test_cdk_nag_reports_no_unsuppressed_errors(gated: Synth) -> None:
    assert gated.nag_errors() == []


def test_cdk_nag_ran(gated: Synth) -> None:
    reports = sorted(p.name for p in gated.outdir.glob("AwsSolutions-*-NagReport.csv"))
    assert len(reports) == len(gated.stacks)


def cfn_lint() -> str:
    beside_python = Path(sys.executable).with_name("cfn-lint")
    found = str(beside_python) if beside_python.exists() else shutil.which("cfn-lint")
    assert found, "cfn-lint is part of the `cdk` extra: pip install -e '.[cdk]'"
    return found


def test_cfn_lint_finds_no_errors(gated: Synth) -> None:
    templates = sorted(str(p) for p in gated.outdir.glob("*.template.json"))
    assert len(templates) == len(gated.stacks)
    result = subprocess.run(
        [cfn_lint(), "--regions", gated.platform.config.region, "--format", "parseable", "--", *templates],
        capture_output=True,
        text=True,
        check=False,
    )
    # Exit status is a bit mask: 2 errors, 4 warnings, 8 informational. Warnings are reviewed (see
    # the report), errors fail.
    errors = [line for line in result.stdout.splitlines() if ":E" in line or line.startswith("E")]
    assert result.returncode & 2 == 0 and not errors, result.stdout + result.stderr
    assert result.returncode & 1 == 0, result.stderr


def test_pinned_cdk_cli_synthesizes_the_app(tmp_path: Path) -> None:
    cli = REPO / "node_modules" / ".bin" / "cdk"
    if not cli.exists():
        pytest.skip("the pinned CDK CLI is not installed: run `npm install` (make test does)")
    env = dict(os.environ)
    # cdk.json runs `python3 app.py`: the interpreter running these tests is the one with the CDK libraries.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    result = subprocess.run(
        [
            str(NODE),  # the wheel's Node 24 (stacks/node.py), which `make synth` runs the CLI on
            str(cli),
            "synth",
            "--quiet",
            "-c",
            "synapse:skipBundling=true",
            "--output",
            str(tmp_path / "cdk.out"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert sorted(p.name for p in (tmp_path / "cdk.out").glob("*.template.json")) == [
        f"{name}.template.json"
        for name in sorted(
            [
                "SynapseAlarms",
                "SynapseApi",
                "SynapseData",
                "SynapseManager",
                "SynapseMonitoring",
                "SynapseNetwork",
                "SynapseWorkers",
            ]
        )
    ]
