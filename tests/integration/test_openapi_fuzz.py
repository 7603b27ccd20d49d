"""Property-based fuzzing of the live stack against its own OpenAPI spec (schemathesis 4, all phases).

Every check schemathesis has runs: no 5xx, every status, content type, header and body as the spec
documents them (Server-Sent Events chunk by chunk), invalid data refused, valid data accepted (with
the exceptions in schemathesis.toml), missing or wrong API keys refused, other methods answered 405.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    PLAIN_REDIS_ONLY,
]  # the front door's HTTP behaviour, not the store's

CONFIG = Path(__file__).with_name("schemathesis.toml")
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
MAX_EXAMPLES = 40  # per operation and phase; about 1,150 requests in all
SEED = 7  # a fixed seed keeps a failure reproducible: `st run ... --seed 7`
MIN_REQUESTS = 1_000
OPERATIONS = {
    ("GET", "/healthz"),
    ("POST", "/async-infer"),
    ("GET", "/results/{job_id}"),
    ("GET", "/jobs"),
    ("POST", "/jobs/{job_id}/cancel"),
    ("POST", "/jobs/{job_id}/retry"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model_id}"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/embeddings"),
}


def template_pattern(template: str) -> re.Pattern[str]:
    parts = ["[^/]+" if part.startswith("{") else re.escape(part) for part in template.split("/")]
    return re.compile("^" + "/".join(parts) + "$")


def operation_of(method: str, url: str) -> tuple[str, str]:
    """The spec's operation a request went to, or its method and path when it is outside the spec."""
    path = "/" + url.split("/", 3)[3].split("?", maxsplit=1)[0]
    for op_method, template in OPERATIONS:
        if op_method == method and template_pattern(template).match(path):
            return op_method, template
    return method, path


def fuzz(stack: Stack, har: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    st = Path(sys.executable).with_name("st")
    argv = [
        str(st), "--config-file", str(CONFIG), "--no-color",
        "run", f"{stack.api}/openapi.json",
        "--header", f"x-api-key: {stack.api_key}",
        "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        "--suppress-health-check", "all",
        "--request-timeout", "40",
        "--report", "har", "--report-har-path", str(har),
    ]  # fmt: skip
    # The hooks read the stack's model catalog (which models embed) from its model repository.
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": str(HOOKS),
        "SYNAPSE_MODEL_REPOSITORY": stack.env["SYNAPSE_MODEL_REPOSITORY"],
    }
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_fuzzing_every_route_finds_no_5xx_and_no_response_off_the_spec(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    har = tmp_path / "fuzz.har"
    run = fuzz(stack, har, tmp_path)
    entries: list[dict[str, Any]] = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    statuses = Counter(int(e["response"]["status"]) for e in entries)
    per_operation = Counter(operation_of(e["request"]["method"], e["request"]["url"]) for e in entries)
    in_spec = sum(n for operation, n in per_operation.items() if operation in OPERATIONS)
    summary = "\n".join(
        [
            f"schemathesis fuzz run: {len(entries)} requests, seed {SEED}, exit code {run.returncode}",
            "  by status: " + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())),
            *(f"  {m} {p}: {n}" for (m, p), n in per_operation.most_common() if (m, p) in OPERATIONS),
            f"  other methods on those paths (405 probes): {sum(per_operation.values()) - in_spec}",
        ]
    )
    with capsys.disabled():
        print("\n" + summary)

    assert run.returncode == 0, f"{summary}\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    assert len(entries) >= MIN_REQUESTS, summary
    assert not [s for s in statuses if s >= 500], summary
    assert per_operation.keys() >= OPERATIONS, summary
