"""Every example of the README and docs/ marked `<!-- example: local -->` runs against a local stack
and answers as the page shows, so an example that drifts from the platform fails here.

Each page's examples run in order in one bash (a variable one sets, say `JOB`, serves the next), with
`API` and `KEY` set to the test stack's address and a key of a tenant of their own, and the `synapse`
command on the PATH; `synapse keys` acts on the stack's keys file. Every step must exit 0, and its
output must have the shape the comment lines under it show (tests/markdown_docs.py): the JSON keys,
SSE events, headers and HTTP status, not the values. A Python example's printed lines must match its
output block with the numbers masked. The stack is the plain-Redis one: the pages describe `make up`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.tenants import new_tenant_key
from tests.markdown_docs import Block, Step, blocks, masked, pages, shape_problems, steps
from tests.processes import REPO

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 300
PAGES_WITH_EXAMPLES = [page for page in pages() if any(b.marker == "local" for b in blocks(page))]
HEREDOC_END = "SYNAPSE_DOC_EXAMPLE"


@pytest.fixture(scope="module")
def examples_key(stack: Stack) -> str:
    """The examples' tenant: the jobs they make, list, cancel and retry are theirs alone."""
    return new_tenant_key(stack, "doc-examples")


def script(page_steps: list[tuple[Block, Step]], out: Path) -> str:
    """One bash script for a page: each step's stdout and stderr go to files of their own, and the
    number of the step running to `at`, so a failure names its step."""
    lines = ["set -euo pipefail"]
    for number, (block, step) in enumerate(page_steps):
        lines += [f"echo {number} > '{out}/at'", f"exec > '{out}/{number}.out' 2> '{out}/{number}.err'"]
        if block.lang == "python":
            lines += [f"python - <<'{HEREDOC_END}'", step.command, HEREDOC_END]
        else:
            lines.append(step.command)
    return "\n".join(lines) + "\n"


def describe(page: Path, step: Step, out: Path, number: int) -> str:
    shown = "\n".join(f"  {line}" for line in step.command.splitlines())
    stdout = (out / f"{number}.out").read_text()[-2000:] if (out / f"{number}.out").exists() else ""
    stderr = (out / f"{number}.err").read_text()[-2000:] if (out / f"{number}.err").exists() else ""
    where = f"{page.relative_to(REPO)}:{step.line}"
    return f"{where}:\n{shown}\n--- its output:\n{stdout}\n--- its errors:\n{stderr}"


@PLAIN_REDIS_ONLY
@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=[p.name for p in PAGES_WITH_EXAMPLES])
def test_the_page_s_examples_run_against_the_local_stack_as_shown(
    page: Path, stack: Stack, examples_key: str, tmp_path: Path
) -> None:
    for tool in ("bash", "curl", "jq"):
        assert shutil.which(tool), f"{tool} is not installed: run `make test`, which installs it"
    examples = [block for block in blocks(page) if block.marker == "local"]
    page_steps = [(block, step) for block in examples for step in steps(block)]
    out = tmp_path / "steps"
    out.mkdir()
    env = {
        **os.environ,
        "API": stack.api,
        "KEY": examples_key,
        "SYNAPSE_STATE_DIR": str(stack.state_dir),
        # The stack's model repository, as a user in the repository's folder has `triton_models/`.
        "SYNAPSE_MODEL_REPOSITORY": stack.env["SYNAPSE_MODEL_REPOSITORY"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    ran = subprocess.run(
        ["bash", "-c", script(page_steps, out)], env=env, cwd=tmp_path, timeout=RUN_TIMEOUT_S, check=False
    )
    if ran.returncode != 0:
        number = int((out / "at").read_text())
        pytest.fail(f"exit {ran.returncode} at " + describe(page, page_steps[number][1], out, number))

    problems = []
    for number, (block, step) in enumerate(page_steps):
        printed = (out / f"{number}.out").read_text()
        found = shape_problems(step.expected, printed)
        if block.output is not None and masked(printed) != masked(block.output.text):
            shown = block.output
            found.append(f"it printed {masked(printed)} where {shown.where} shows {masked(shown.text)}")
        problems += [f"{problem} at " + describe(page, step, out, number) for problem in found]
    assert not problems, "\n\n".join(problems)
