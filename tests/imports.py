"""What a Python file imports, read from its syntax tree without running it."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path


def imports(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of `known` a file imports (`from pkg import mod` counts as importing pkg.mod)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            module = target
            while module and module not in known:
                module = module.rpartition(".")[0]
            if module:
                yield module


def product_packages() -> tuple[str, ...]:
    """Our top-level packages, as pyproject.toml's package list names them: the one list a new package
    joins, read by every test that walks the product's code."""
    root = Path(__file__).resolve().parents[1]
    found = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return tuple(name.rstrip("*") for name in found["tool"]["setuptools"]["packages"]["find"]["include"])
