"""The README and docs/ hold together: every relative link reaches a file (and, with an #anchor, a
heading of it), every example that talks to the local stack is marked to run (the integration test
`test_doc_examples.py` runs the marked ones), and the callback receiver the docs give verifies what
the platform signs."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contract.webhooks import sign
from tests.markdown_docs import (
    SHELL_LANGS,
    TARGETS_LOCAL_STACK,
    Block,
    anchors,
    blocks,
    links,
    masked,
    pages,
    shape_problems,
    slug,
    steps,
)
from tests.processes import REPO

PAGES = pages()
IDS = [str(page.relative_to(REPO)) for page in PAGES]
README_BUDGET_BYTES = 15 * 1024  # the README is the front door; the reference lives in docs/


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_relative_link_resolves_to_a_file_and_heading_in_the_repository(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        if path_part.startswith("/"):
            broken.append(f"{target}: absolute; write it relative to {page.name}")
            continue
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(REPO):
            broken.append(f"{target}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_pages_link_to_each_other_at_all() -> None:
    """The README reaches every page of docs/ (and the link check above has links to check)."""
    readme_targets = {target.partition("#")[0] for target in links(REPO / "README.md")}
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme_targets, f"the README does not link docs/{page.name}"


def test_the_readme_stays_a_front_door() -> None:
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_BUDGET_BYTES, f"README.md is {size} bytes; move reference text to docs/"


def test_github_anchors() -> None:
    assert slug("Tenants, webhook secrets and outcome topics") == "tenants-webhook-secrets-and-outcome-topics"
    assert slug("`contract/`: what every deployable speaks") == "contract-what-every-deployable-speaks"
    assert slug("Idle cost (lean, us-east-1 list prices)") == "idle-cost-lean-us-east-1-list-prices"
    assert slug("`local_stack/`, `planner/`, `bench/`") == "local_stack-planner-bench"
    assert slug("Durability, **exactly**") == "durability-exactly"


def unmarked_examples_of_the_local_stack() -> list[str]:
    return [
        block.where
        for page in PAGES
        for block in blocks(page)
        if block.marker != "local" and TARGETS_LOCAL_STACK.search(block.text)
        and (block.lang in SHELL_LANGS or block.lang == "python")
    ]  # fmt: skip


def test_every_example_that_talks_to_the_local_stack_is_marked_to_run() -> None:
    assert not unmarked_examples_of_the_local_stack(), (
        "mark these blocks with <!-- example: local --> on the line before, so that "
        "tests/integration/test_doc_examples.py runs them"
    )


def test_marked_examples_are_runnable_blocks() -> None:
    local = [block for page in PAGES for block in blocks(page) if block.marker == "local"]
    assert len(local) >= 10, "the examples' markers were not found"
    for block in local:
        assert block.lang in (*SHELL_LANGS, "python"), f"{block.where}: a local example is sh or python"
        assert steps(block), f"{block.where}: no command"
    for page in PAGES:
        found = blocks(page)
        for block in found:
            assert block.marker in ("", "local", "output"), f"{block.where}: unknown marker {block.marker!r}"
            if block.marker == "output":
                assert any(other.output is block for other in found), f"{block.where}: no example before it"


def block_of(text: str, lang: str = "sh") -> Block:
    return Block(REPO / "README.md", 1, lang, text, "local")


def test_a_step_is_its_command_lines_and_the_output_shown_under_them() -> None:
    found = steps(
        block_of(
            "export API=x\n\n# Submit a job.\ncurl -s $API/a \\\n  -d '{}'\n"
            '# {"jobId":"...",\n#  "status":"QUEUED"}\n# Then its result:\n'
            "JOB=1\ncurl -s $API/b\n# event: end\n# ...\n# data: [DONE]\n"
        )
    )
    assert [(s.line, s.command.splitlines()[0], s.expected) for s in found] == [
        (2, "export API=x", []),
        (5, "curl -s $API/a \\", ['{"jobId":"...",', ' "status":"QUEUED"}']),
        (10, "JOB=1", ["event: end", "...", "data: [DONE]"]),
    ]


def test_the_shape_check_compares_keys_events_headers_and_statuses_not_values() -> None:
    shown = ['{"jobId":"0abf-...","status":"QUEUED"}']
    assert shape_problems(shown, '{"jobId":"77","status":"RUNNING"}') == []
    assert shape_problems(shown, '{"error":{"code":"not_found"}}') == ["the output has no key jobId, status"]
    events = ["id: 17-0", "event: delta", "...", "data: [DONE]"]
    assert shape_problems(events, "id: 9-1\nevent: delta\ndata: {}\n\ndata: [DONE]\n") == []
    assert shape_problems(events, "event: end\n") == [
        "no line 'event: delta' in the output",
        "no line 'data: [DONE]' in the output",
    ]
    replay = ["HTTP/1.1 202 Accepted", "Idempotent-Replayed: true"]
    assert shape_problems(replay, "HTTP/1.1 202 Accepted\r\nidempotent-replayed: true\r\n") == []
    assert shape_problems(replay, "HTTP/1.1 422 Unprocessable\r\n") == [
        "the status is not 202",
        "no line 'Idempotent-Replayed: true' in the output",
    ]
    assert masked("0.682  Reset your password.\n-0.012  12 percent\n") == [
        "N  Reset your password.",
        "N  N percent",
    ]


def receiver_verify() -> Callable[..., bool]:
    """The `verify` of the callback receiver in docs/callbacks.md, compiled alone (the receiver itself
    is a server)."""
    receiver = next(b for b in blocks(REPO / "docs" / "callbacks.md") if b.lang == "python")
    kept = [
        node
        for node in ast.parse(receiver.text).body
        if isinstance(node, ast.Import) or (isinstance(node, ast.FunctionDef) and node.name == "verify")
    ]
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=kept, type_ignores=[]), receiver.where, "exec"), namespace)
    verify: Callable[..., bool] = namespace["verify"]
    return verify


def test_the_documented_receiver_verifies_what_the_platform_signs() -> None:
    verify = receiver_verify()
    body = b'{"jobId":"j1","status":"COMPLETED"}'
    header = sign("whsec_test", 1_800_000_000, body)
    assert verify("whsec_test", header, body, 1_800_000_010)
    assert not verify("whsec_other", header, body, 1_800_000_010)
    assert not verify("whsec_test", header, body + b" ", 1_800_000_010)
    assert not verify("whsec_test", header, body, 1_800_000_000 + 301)
    rotating = f"{header},v1={'0' * 64}"
    assert verify("whsec_test", rotating, body, 1_800_000_000)
