"""`synapse bench <scenario> --quick` runs end to end and writes its report: a smoke test of the
benchmark itself, not of Synapse's figures (those are never asserted on this machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_manager_scenario_writes_a_report_with_its_table_and_profile(tmp_path: Path):
    out = tmp_path / "report"
    published = REPO / "BENCHMARKS.md"
    before = published.read_bytes() if published.exists() else None
    argv = [sys.executable, "-m", "local_stack.cli", "bench", "manager", "--quick", "--no-progress"]
    argv += ["--out", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = (out / "report.md").read_text()
    assert "## Manager throughput (scenario 4)" in report
    assert "| 5,000 | 5,000 |" in report, "every pre-loaded job completes"
    assert "manager >= 5,000 jobs/s" in report, "the target is judged in the report"
    after = published.read_bytes() if published.exists() else None
    assert after == before, "one scenario writes its own report; only `bench all` publishes BENCHMARKS.md"
