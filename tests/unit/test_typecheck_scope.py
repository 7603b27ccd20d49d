"""mypy reads aws-cdk-lib's modules as Any, except those the code imports (pyproject.toml): a module
imported but left off that list would go unchecked, and a stale entry would cost time for nothing."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any

from tests.imports import imports
from tests.processes import REPO

CDK = "aws_cdk"


def mypy_config() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    return config


def checked_files() -> list[Path]:
    """mypy's `files`, less its `exclude` patterns."""
    config = mypy_config()
    excluded = [re.compile(pattern) for pattern in config["exclude"]]
    found: list[Path] = []
    for entry in config["files"]:
        path = REPO / entry
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [path for path in found if not any(p.search(path.relative_to(REPO).as_posix()) for p in excluded)]


def cdk_modules() -> dict[str, Path]:
    """aws_cdk and its submodules, by name, as installed (found, not imported: aws_cdk takes seconds)."""
    spec = importlib.util.find_spec(CDK)
    assert spec is not None and spec.submodule_search_locations
    root = Path(spec.submodule_search_locations[0])
    found = {CDK: root / "__init__.py"}
    found |= {f"{CDK}.{init.parent.name}": init for init in root.glob("*/__init__.py")}
    return found


def imported_cdk_modules() -> set[str]:
    """The aws_cdk modules the checked code imports (`from aws_cdk import aws_ec2` imports a module,
    `from aws_cdk import Stack` only aws_cdk)."""
    known = cdk_modules()
    return {module for path in checked_files() for module in imports(path, known)}


def followed_cdk_modules() -> set[str]:
    """The aws_cdk modules mypy analyses: those of the override that undoes the wildcard's skip."""
    skipped = followed = None
    for override in mypy_config()["overrides"]:
        names = override["module"]
        if override.get("follow_imports") == "skip" and f"{CDK}.*" in names:
            skipped = names
        if override.get("follow_imports") == "normal" and all(name.split(".")[0] == CDK for name in names):
            followed = names
    assert skipped is not None, "aws-cdk-lib is analysed whole: two minutes of every `make test`"
    assert followed is not None
    return set(followed)


def test_mypy_checks_every_cdk_module_the_code_imports_and_only_those() -> None:
    imported = imported_cdk_modules()
    assert {CDK, f"{CDK}.aws_ec2"} <= imported  # the walk finds the stacks' imports
    assert followed_cdk_modules() == imported
