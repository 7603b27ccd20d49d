"""Docker build contexts for the metrics collector's images, staged at synth time.

The images are the pinned upstream ones rebuilt into the account's CDK asset repository, so that
tasks pull from ECR rather than from Docker Hub (no rate limits, no public registry on the path).
The context is the tracked folder under `docker/monitoring/`, copied into the cloud assembly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import aws_cdk as cdk
from constructs import Construct

from stacks.config import REPO_ROOT

DOCKERFILES = REPO_ROOT / "docker" / "monitoring"
DASHBOARDS = REPO_ROOT / "dashboards"


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def stage_context(scope: Construct, name: str) -> str:
    """`docker/monitoring/<name>/` under the cloud assembly, the folder an image asset builds from."""
    stage = cdk.Stage.of(scope)
    if stage is None:  # pragma: no cover - every stack lives in an App
        raise ValueError(f"{scope.node.path} is not inside a CDK App")
    context = Path(stage.outdir).resolve() / "image-contexts" / name
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(DOCKERFILES / name, context)
    return str(context)


def prometheus_context(scope: Construct) -> str:
    """The Prometheus agent: its config comes from the task's environment (stacks/collector.py)."""
    return stage_context(scope, "prometheus")


def pushgateway_context(scope: Construct) -> str:
    return stage_context(scope, "pushgateway")
