"""Every `Settings` field is read somewhere: a setting nothing reads is a knob that turns nothing."""

from __future__ import annotations

import ast

from contract.settings import Settings
from tests.imports import product_packages
from tests.processes import REPO

ROOT = REPO
PACKAGES = tuple(name for name in product_packages() if name != "stacks")  # the stacks read no setting
DEFINITION = ROOT / "contract" / "settings.py"


def attributes_read() -> set[str]:
    """Names read as `something.name` anywhere in the runtime packages, the definition aside.

    A field passed to a child process through `to_env()` is still read as an attribute in the
    child's code, so this covers it too.
    """
    names: set[str] = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == DEFINITION:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
    return names


def test_every_setting_is_read_by_the_runtime() -> None:
    assert set(Settings.model_fields) - attributes_read() == set()
