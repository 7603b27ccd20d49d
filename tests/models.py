"""Model repositories for tests: copies of `triton_models/` with gpu-sim's fault injection switched on.

The fault markers (`!fail`, `!crash`: triton_models/gpu-sim/1/model.py) are test fixtures; the served
config leaves them off. Tests serve a copy generated from the real repository, so the two never drift.
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import tempfile
from pathlib import Path

from tests.processes import REPO

MODELS = REPO / "triton_models"
FAULT_INJECTION = re.compile(r'(key: "fault_injection" value: \{ string_value: )"[^"]*"')


def enable_fault_injection(config: Path) -> None:
    """Sets gpu-sim's `fault_injection` parameter to "true" in this config.pbtxt."""
    text, found = FAULT_INJECTION.subn(r'\1"true"', config.read_text())
    if found != 1:
        raise ValueError(f"{config}: expected one fault_injection parameter, found {found}")
    config.write_text(text)


def fault_injection_repository(dest: Path, models: tuple[str, ...] | None = None) -> Path:
    """A copy of `triton_models/` (or of the named models only) in dest, gpu-sim's faults on."""
    dest.mkdir(parents=True, exist_ok=True)
    names = models or tuple(sorted(p.name for p in MODELS.iterdir() if (p / "config.pbtxt").is_file()))
    for name in names:
        shutil.copytree(MODELS / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    if "gpu-sim" in names:
        enable_fault_injection(dest / "gpu-sim" / "config.pbtxt")
    return dest


@functools.cache
def served_by_tests() -> Path:
    """The repository the integration tests' workers serve: built once per test process, removed at exit.

    A plain function (not a fixture) so that helpers building a worker's environment can call it.
    """
    root = Path(tempfile.mkdtemp(prefix="synapse-test-models-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return fault_injection_repository(root / "models")
