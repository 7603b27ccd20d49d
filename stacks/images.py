"""Docker build contexts for the monitoring images, staged at synth time.

Prometheus and Grafana get their configuration baked into the image: no EFS, no init container and
no config bucket to keep in step. The context is the tracked Dockerfile under `docker/monitoring/`
plus files generated from the same constants the stacks use (Cloud Map names, ports) and whatever
`dashboards/*.json` and `dashboards/rules.yml` exist when `cdk synth` runs (none is fine).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from constructs import Construct

from stacks.config import (
    PROMETHEUS_PORT,
    REPO_ROOT,
    SERVICE_NAMESPACE,
)

DOCKERFILES = REPO_ROOT / "docker" / "monitoring"
DASHBOARDS = REPO_ROOT / "dashboards"
PROMETHEUS_URL = f"http://prometheus.{SERVICE_NAMESPACE}:{PROMETHEUS_PORT}"
DATASOURCE_UID = "prometheus"


def grafana_provisioning() -> dict[str, dict[str, object]]:
    """Grafana's data source (fixed uid, so dashboards can name it) and the dashboard folder."""
    return {
        "datasources/prometheus.yml": {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": "Prometheus",
                    "uid": DATASOURCE_UID,
                    "type": "prometheus",
                    "access": "proxy",
                    "url": PROMETHEUS_URL,
                    "isDefault": True,
                    "editable": False,
                }
            ],
        },
        "dashboards/synapse.yml": {
            "apiVersion": 1,
            "providers": [
                {
                    "name": "synapse",
                    "folder": "Synapse",
                    "type": "file",
                    "disableDeletion": True,
                    "allowUiUpdates": False,
                    "options": {"path": "/var/lib/grafana/dashboards/synapse"},
                }
            ],
        },
    }


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def stage_context(
    scope: Construct,
    name: str,
    *,
    generated: Mapping[str, object] | None = None,
    copied: Mapping[str, Path] | None = None,
    folders: tuple[str, ...] = (),
) -> str:
    """A build context under the cloud assembly: `docker/monitoring/<name>/` plus generated files.

    `generated` maps a relative path to data written as JSON (which YAML readers accept), `copied`
    maps a relative path to a repository file, and `folders` always exist (COPY needs a source).
    """
    outdir = cdk.Stage.of(scope)
    if outdir is None:  # pragma: no cover - every stack lives in an App
        raise ValueError(f"{scope.node.path} is not inside a CDK App")
    context = Path(outdir.outdir).resolve() / "image-contexts" / name
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(DOCKERFILES / name, context)
    for folder in folders:
        # A marker file, because asset staging does not carry empty folders and COPY needs one.
        (context / folder).mkdir(parents=True, exist_ok=True)
        (context / folder / ".keep").touch()
    for relative, data in (generated or {}).items():
        target = context / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    for relative, source in (copied or {}).items():
        target = context / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return str(context)


def prometheus_context(scope: Construct) -> str:
    """The repository's own `dashboards/prometheus.yml` (Cloud Map targets) and the rules beside it:
    one scrape config and one rule file for AWS and the local stack alike."""
    return stage_context(
        scope,
        "prometheus",
        copied={"prometheus.yml": DASHBOARDS / "prometheus.yml", "rules.yml": DASHBOARDS / "rules.yml"},
    )


def grafana_context(scope: Construct) -> str:
    return stage_context(
        scope,
        "grafana",
        generated={f"provisioning/{path}": data for path, data in grafana_provisioning().items()},
        copied={f"dashboards/{path.name}": path for path in dashboard_files()},
        folders=("dashboards",),
    )


def pushgateway_context(scope: Construct) -> str:
    return stage_context(scope, "pushgateway")


def redis_exporter_context(scope: Construct) -> str:
    return stage_context(scope, "redis-exporter")
