"""The folders are the architecture: each deployable's artefact holds every module its entry points load,
no package of ours reaches into another deployable, and the import graph of our modules has no cycle.

The artefacts are read from where they are built (the Lambda asset's package list, the Dockerfiles'
COPY lines), and imports are followed transitively from each entry point: a module that imports a
second deployable's module only through a third is found, and there is no list of exemptions."""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.imports import imports, product_packages
from tests.processes import REPO

PACKAGES = product_packages()
# What each package may import of ours directly. The deployables (the Lambda, the manager image, the
# worker image) share only the contract and the transport-free OpenAI layer; the tools on a developer's
# machine may use them all.
ALLOWED = {
    "contract": set(),
    "openai_api": {"contract"},
    "frontdoor": {"contract", "openai_api"},
    "manager": {"contract", "openai_api"},
    "worker_image": {"contract"},
    "planner": {"contract", "openai_api", "manager"},
    "stacks": {"contract"},
}
# The Lambda's streaming function runs `python3 -m frontdoor.http_server` (frontdoor/run.sh).
STREAM_MODULE = "frontdoor.http_server"


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


def loaded(entry_points: list[str], edges: dict[str, set[str]]) -> set[str]:
    """Every module of ours that importing the entry points loads (a package's __init__ included)."""
    seen: set[str] = set()
    todo = list(entry_points)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts))]
        todo.extend(edge for edge in (*edges.get(module, ()), *parents) if edge in edges)
    return seen


def copied_packages(dockerfile: str) -> set[str]:
    """The top-level folders of ours a Dockerfile copies into its image (`COPY name/ ...`)."""
    text = (REPO / dockerfile).read_text(encoding="utf-8")
    return set(re.findall(r"^COPY (\w+)/ ", text, flags=re.MULTILINE)) & set(PACKAGES)


def constant(path: str, name: str) -> object:
    """A module-level constant of a stack's file, read from its syntax tree: importing the stacks starts
    the CDK's Node runtime, seconds this test has no need of."""
    for node in ast.parse((REPO / path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{path} sets no {name}")


def handler_module(path: str, name: str) -> str:
    return str(constant(path, name)).rpartition(".")[0]


ARTEFACTS = {
    "the front door's Lambda asset": (
        [
            handler_module("stacks/front_door.py", "HANDLER"),
            handler_module("stacks/api.py", "AUTHORIZER_HANDLER"),
            STREAM_MODULE,
        ],
        set(constant("stacks/bundling.py", "LAMBDA_PACKAGES")),  # type: ignore[call-overload]
    ),
    "the manager image": (["manager.__main__"], copied_packages("docker/manager.Dockerfile")),
    "the worker image": (["worker_image.__main__"], copied_packages("worker_image/Dockerfile")),
}


@pytest.mark.parametrize("artefact", sorted(ARTEFACTS))
def test_an_artefact_holds_every_module_its_entry_points_load(artefact: str):
    entry_points, packages = ARTEFACTS[artefact]
    edges = graph()
    assert set(entry_points) <= edges.keys()
    missing = sorted(m for m in loaded(entry_points, edges) if m.split(".")[0] not in packages)
    assert not missing, f"{artefact} holds {sorted(packages)} but its entry points load {missing}"


@pytest.mark.parametrize("artefact", sorted(ARTEFACTS))
def test_an_artefact_holds_no_package_its_entry_points_never_load(artefact: str):
    entry_points, packages = ARTEFACTS[artefact]
    used = {module.split(".")[0] for module in loaded(entry_points, graph())}
    assert packages <= used, f"{artefact} carries {sorted(packages - used)} for nothing"


def test_the_manager_and_the_planner_load_no_front_door_module():
    edges = graph()
    for entry in ("manager.__main__", "planner.plan"):
        assert not {m for m in loaded([entry], edges) if m.startswith("frontdoor")}, entry


def test_the_import_walk_follows_a_chain_to_its_end():
    edges = {"a.x": {"b.y"}, "b.y": {"c.z"}, "c.z": set(), "a": set(), "b": set(), "c": set(), "d": set()}
    assert loaded(["a.x"], edges) == {"a", "a.x", "b", "b.y", "c", "c.z"}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_its_deployable_carries(package: str):
    crossing = {
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.split(".")[0] == package
        for target in targets
        if target.split(".")[0] not in ALLOWED[package] | {package}
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
