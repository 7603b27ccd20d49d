"""`make deploy` runs preflight first, with the deploy's -c values, and stops on a blocker (exit 1)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.processes import REPO

CONTEXT = "-c synapse:alertEmail=oncall@example.com"


def make_deploy(bin_dir: Path, preflight_status: int) -> subprocess.CompletedProcess[str]:
    """`make deploy` with stand-ins for synapse and npx that log their arguments; deps is taken as made."""
    log = bin_dir / "calls"
    for name, status in (("synapse", preflight_status), ("npx", 0)):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexit {status}\n')
        script.chmod(0o755)
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "deps", "deploy", f"BIN={bin_dir}", f"CONTEXT={CONTEXT}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_blocker_stops_the_deploy_before_cdk(tmp_path: Path) -> None:
    done = make_deploy(tmp_path, preflight_status=1)
    assert done.returncode != 0
    assert (tmp_path / "calls").read_text().splitlines() == [f"synapse preflight --fix {CONTEXT}"]


def test_a_clear_preflight_goes_on_to_cdk_deploy_with_the_same_context(tmp_path: Path) -> None:
    done = make_deploy(tmp_path, preflight_status=0)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"synapse preflight --fix {CONTEXT}",
        f"npx --no-install cdk deploy --all {CONTEXT}",
    ]
