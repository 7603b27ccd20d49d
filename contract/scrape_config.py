"""The repository's scrape config, `dashboards/prometheus.yml`, retargeted: one file of job names and
labels for every Prometheus Synapse runs (the local stack's, and the agent beside the manager on AWS),
so the dashboards and rules find the same jobs everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PROMETHEUS_TEMPLATE = Path(__file__).resolve().parent.parent / "dashboards" / "prometheus.yml"
LOCAL_SCRAPE_INTERVAL = "5s"
TARGET_KEYS = ("static_configs", "dns_sd_configs", "ec2_sd_configs", "ecs_sd_configs", "file_sd_configs")


def template_scrape_interval() -> str:
    """The template's own interval ("30s"): the one the agent on AWS scrapes at, which the rules' windows,
    Grafana's data source and the idle bill assume."""
    interval: str = yaml.safe_load(PROMETHEUS_TEMPLATE.read_text())["global"]["scrape_interval"]
    return interval


def local_prometheus_config(
    targets: dict[str, str],
    *,
    scrape_interval: str = LOCAL_SCRAPE_INTERVAL,
    template: Path = PROMETHEUS_TEMPLATE,
) -> dict[str, Any]:
    """The template with each job's targets replaced by `targets[job_name]`.

    Jobs without a local target (the Redis exporter when none runs) are left out; rule files are
    made absolute so the copy can live anywhere.
    """
    config: dict[str, Any] = yaml.safe_load(template.read_text())
    config["global"] = {
        **config.get("global", {}),
        "scrape_interval": scrape_interval,
        "evaluation_interval": scrape_interval,
    }
    config["rule_files"] = [str((template.parent / rule).resolve()) for rule in config.get("rule_files", [])]
    jobs = []
    for job in config.get("scrape_configs", []):
        target = targets.get(job["job_name"])
        if target is None:
            continue
        local = {k: v for k, v in job.items() if k not in TARGET_KEYS}
        local["static_configs"] = [{"targets": [target]}]
        jobs.append(local)
    config["scrape_configs"] = jobs
    return config
