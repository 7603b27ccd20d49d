"""What the AWS deploy hands to Prometheus tooling: AMP's alert manager definition (checked by amtool)
and the collector's agent config (checked by promtool in agent mode)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stacks.collector import agent_config
from stacks.monitoring import alertmanager_definition

TOPIC = "arn:aws:sns:eu-west-1:123456789012:synapse-alerts"
REMOTE_WRITE = "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1234/api/v1/remote_write"


def tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: apt-get install {package}")
    return found


def inner_config() -> dict[str, object]:
    definition = yaml.safe_load(alertmanager_definition(topic_arn=TOPIC, region="eu-west-1"))
    assert set(definition) == {"alertmanager_config"}, "AMP reads this one key (plus optional templates)"
    config: dict[str, object] = yaml.safe_load(definition["alertmanager_config"])
    return config


def test_amtool_accepts_the_alert_manager_config(tmp_path: Path) -> None:
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(inner_config()))
    result = subprocess.run(
        [tool("amtool", "prometheus-alertmanager"), "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_goes_to_the_topic_signed_for_its_region_and_resolutions_too() -> None:
    config = inner_config()
    route = config["route"]
    assert isinstance(route, dict) and "routes" not in route, "one route: nothing is dropped"
    assert route["receiver"] == "sns"
    assert route["group_by"] == ["alertname", "severity"]
    receivers = config["receivers"]
    assert isinstance(receivers, list)
    (receiver,) = receivers
    (sns,) = receiver["sns_configs"]
    assert sns["topic_arn"] == TOPIC
    assert sns["sigv4"] == {"region": "eu-west-1"}
    assert sns["send_resolved"] is True
    assert "summary" in sns["message"] and "description" in sns["message"]


def test_promtool_accepts_the_collector_config_in_agent_mode(tmp_path: Path) -> None:
    path = tmp_path / "agent.yml"
    config = agent_config(manager_metrics_port=9100, remote_write_url=REMOTE_WRITE, region="eu-west-1")
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [tool("promtool", "prometheus"), "check", "config", "--agent", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_collector_scrapes_the_jobs_the_dashboards_and_rules_query() -> None:
    config = agent_config(manager_metrics_port=9100, remote_write_url=REMOTE_WRITE, region="eu-west-1")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {name: job["static_configs"] for name, job in jobs.items()} == {
        "synapse-manager": [{"targets": ["127.0.0.1:9100"]}],
        "pushgateway": [{"targets": ["127.0.0.1:9091"]}],
    }
    assert jobs["pushgateway"]["honor_labels"] is True, "workers' job and worker labels survive"
    assert config["remote_write"] == [{"url": REMOTE_WRITE, "sigv4": {"region": "eu-west-1"}}]
    assert "rule_files" not in config, "AMP evaluates the rules"
    assert config["global"]["external_labels"] == {"platform": "synapse"}
