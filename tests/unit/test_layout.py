"""The folders are the architecture: each deployable imports only the shared contract and itself,
and the import graph of the project's modules has no cycle."""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.imports import imports
from tests.processes import REPO

PACKAGES = ("contract", "frontdoor", "manager", "worker_image", "local_stack", "planner", "bench", "stacks")
# What each package may import of ours. The deployables (the Lambda, the manager image, the worker
# image) carry only the contract and themselves; the tools on a developer's machine may use them all.
ALLOWED = {
    "contract": set(),
    "frontdoor": {"contract"},
    "manager": {"contract"},
    "worker_image": {"contract"},
    "planner": {"contract", "manager"},
    "stacks": {"contract"},
}
# The one crossing allowed: the Batch API's runner builds and answers each line with the /v1 routes' own
# code (frontdoor/batch_lines.py), so that a line is refused and answered exactly as its request would be;
# the manager image carries the front door's package for it (docker/manager.Dockerfile).
CROSSINGS = {"manager.batch_runner": {"frontdoor"}}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(path, known)) - {name} for name, path in known.items()}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_deployable_imports_only_the_contract_and_itself(package: str):
    crossing = {
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.split(".")[0] == package
        for target in targets
        if target.split(".")[0] not in ALLOWED[package] | {package} | CROSSINGS.get(module, set())
    }
    assert not crossing


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle, or [] when there is none."""
    try:
        TopologicalSorter(edges).prepare()
    except CycleError as error:
        return list(error.args[1])
    return []


def test_the_import_graph_has_no_cycle():
    assert cycle(graph()) == []


def test_a_cycle_would_be_found():
    assert set(cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == {"a", "b", "c"}
