"""checkov on every synthesized template, offline: no finding but those tests/infra/checkov_skips.py
accepts with a reason, and no reason kept for a finding that is gone."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.checkov_skips import SKIPS
from tests.infra.synthesis import REPO, Synth

pytestmark = pytest.mark.infra

# checkov pins old boto3 and jsonschema, so it lives in an environment of its own (Makefile: CHECKOV_VENV).
CHECKOV_VENV = REPO / ".venv-checkov" / "bin" / "checkov"


@dataclass(frozen=True)
class Finding:
    check_id: str
    resource: str  # "<type>.<logical id>"
    template: str

    def __str__(self) -> str:
        return f"{self.check_id} {self.template}: {self.resource}"


@dataclass(frozen=True)
class Scan:
    passed: int
    failed: tuple[Finding, ...]


def checkov_binary() -> str:
    found = os.environ.get("CHECKOV") or shutil.which("checkov")
    if found is None and CHECKOV_VENV.exists():
        found = str(CHECKOV_VENV)
    if found is None:
        pytest.fail(
            "checkov is not installed: "
            "python3.11 -m venv .venv-checkov && .venv-checkov/bin/pip install checkov"
        )
    return found


@pytest.fixture(scope="session")
def scan(synth: Synth, opted_in: Synth) -> Scan:
    """One checkov run over all the templates of both synths, a fresh account's defaults and every opt-in
    on (it takes seconds; once per session): a skip holds for either."""
    templates = [t for each in (synth, opted_in) for t in sorted(each.outdir.glob("*.template.json"))]
    assert len(templates) == len(synth.stacks) + len(opted_in.stacks)
    files = [arg for template in templates for arg in ("-f", str(template))]
    result = subprocess.run(
        [
            checkov_binary(),
            *files,
            "--framework",
            "cloudformation",
            "--skip-download",
            "--compact",
            "--quiet",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    # Exit status 1 means "findings"; anything else without JSON is checkov itself failing.
    assert result.returncode in (0, 1), result.stderr[-2000:]
    reports: Any = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    passed, failed = 0, []
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, report["results"].get("parsing_errors")
        passed += report["summary"]["passed"]
        failed += [
            Finding(check["check_id"], check["resource"], Path(check["file_path"]).name)
            for check in report["results"]["failed_checks"]
        ]
    return Scan(passed=passed, failed=tuple(failed))


def accepted(finding: Finding) -> bool:
    skip = SKIPS.get(finding.check_id)
    if skip is None:
        return False
    return not skip.resources or any(re.match(pattern, finding.resource) for pattern in skip.resources)


def test_checkov_finds_nothing_that_is_not_accepted_with_a_reason(scan: Scan) -> None:
    assert scan.passed > 100, "checkov scanned too little: did it read the templates?"
    unaccepted = sorted(str(f) for f in scan.failed if not accepted(f))
    assert unaccepted == []


def test_every_skip_still_matches_a_finding(scan: Scan) -> None:
    stale = [check_id for check_id in SKIPS if not any(f.check_id == check_id for f in scan.failed)]
    stale += [
        f"{check_id} {pattern}"
        for check_id, skip in SKIPS.items()
        for pattern in skip.resources
        if not any(f.check_id == check_id and re.match(pattern, f.resource) for f in scan.failed)
    ]
    assert stale == []


def test_every_skip_has_a_reason() -> None:
    assert all(len(skip.reason) > 40 for skip in SKIPS.values())


def test_a_finding_outside_a_skips_resources_is_not_accepted() -> None:
    scoped = next(check_id for check_id, skip in SKIPS.items() if skip.resources)
    assert not accepted(Finding(scoped, "AWS::Some::Thing.NewResource", "x.template.json"))
    assert not accepted(Finding("CKV_AWS_0", "AWS::Some::Thing.NewResource", "x.template.json"))
