"""The front-door Lambda's asset holds the shared contract and the front door, and nothing else of ours.

With bundling skipped (as in these tests) the asset is its source folder, which the bundler copies
next to the wheels, so what is checked here is exactly the project code a deployed Lambda carries.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.infra.synthesis import Synth

OUR_PACKAGES = {
    "contract",
    "frontdoor",
    "manager",
    "worker_image",
    "local_stack",
    "planner",
    "bench",
    "stacks",
}


def lambda_assets(synth: Synth, raw: dict[str, dict[str, Any]]) -> dict[str, Path]:
    """Each front-door Lambda function of the API stack (a `frontdoor.` handler), by logical id, with its
    staged asset folder; CDK's custom resource framework ships its own code."""
    manifest = json.loads((synth.outdir / f"{synth.platform.api.artifact_id}.assets.json").read_text())
    sources = {asset_hash: asset["source"]["path"] for asset_hash, asset in manifest["files"].items()}
    return {
        logical_id: synth.outdir / sources[resource["Properties"]["Code"]["S3Key"].removesuffix(".zip")]
        for logical_id, resource in raw["api"]["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
        and "S3Key" in resource["Properties"]["Code"]
        and resource["Properties"]["Handler"].startswith("frontdoor.")
    }


def test_the_front_door_and_the_authorizer_ship_only_the_contract_and_the_front_door(
    synth: Synth, raw: dict[str, dict[str, Any]]
) -> None:
    assets = lambda_assets(synth, raw)
    assert assets, "the API stack has Lambda functions with a local asset"
    for logical_id, folder in assets.items():
        shipped = {entry.name for entry in folder.iterdir()}
        assert shipped & OUR_PACKAGES == {"contract", "frontdoor"}, logical_id
        assert not list(folder.rglob("__pycache__")), "no bytecode of the synth machine's Python"


def test_the_handler_imports_from_the_asset_without_the_manager_or_the_worker(
    synth: Synth, raw: dict[str, dict[str, Any]]
) -> None:
    folder = next(iter(lambda_assets(synth, raw).values()))
    check = (
        "import sys, frontdoor.handler, frontdoor.authorizer\n"
        f"assert frontdoor.handler.__file__.startswith({str(folder)!r}), frontdoor.handler.__file__\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "assert not loaded & {'manager', 'worker_image', 'local_stack', 'planner'}, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
