"""Prometheus, Pushgateway, Redis exporter and Grafana: discovery, scrape targets, dashboards, a private
Grafana."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from stacks import images
from stacks.config import METRICS_PORT, PUSHGATEWAY_PORT, REDIS_EXPORTER_PORT, SERVICE_NAMESPACE
from tests.infra import cfn

pytestmark = pytest.mark.infra


def staged(synth_outdir: Path, name: str) -> Path:
    return synth_outdir / "image-contexts" / name


def test_cloud_map_names_the_manager_prometheus_pushgateway_and_redis_exporter(
    raw: dict[str, dict[str, Any]],
) -> None:
    names = {
        service["Properties"]["Name"]
        for template in raw.values()
        for service in cfn.resources(template, "AWS::ServiceDiscovery::Service").values()
    }
    assert names == {"manager", "prometheus", "pushgateway", "redis-exporter"}


def test_prometheus_scrapes_the_manager_and_the_pushgateway(synth: Any) -> None:
    """The image carries the repository's dashboards/prometheus.yml, whose Cloud Map names and ports
    must be the ones the stacks register."""
    staged_dir = staged(synth.outdir, "prometheus")
    config = yaml.safe_load((staged_dir / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: [
            f"{name}:{sd['port']}" for sd in job.get("dns_sd_configs", []) for name in sd["names"]
        ]
        + [t for sc in job.get("static_configs", []) for t in sc["targets"]]
        for job in config["scrape_configs"]
    }
    assert targets["synapse-manager"] == [f"manager.{SERVICE_NAMESPACE}:{METRICS_PORT}"]
    assert targets["pushgateway"] == [f"pushgateway.{SERVICE_NAMESPACE}:{PUSHGATEWAY_PORT}"]
    assert targets["redis"] == [f"redis-exporter.{SERVICE_NAMESPACE}:{REDIS_EXPORTER_PORT}"]
    assert next(job for job in config["scrape_configs"] if job["job_name"] == "pushgateway")["honor_labels"]
    assert config["rule_files"] == ["rules.yml"] and (staged_dir / "rules.yml").is_file()


def test_prometheus_may_reach_the_manager_metrics_port(raw: dict[str, dict[str, Any]]) -> None:
    rules = [
        r for r in cfn.ingress_rules("monitoring", raw["monitoring"]) if "ManagerSecurityGroup" in r.target
    ]
    assert [(r.from_port, r.to_port) for r in rules] == [(9100, 9100)]
    assert "PrometheusSecurityGroup" in rules[0].source


def test_workers_may_push_to_the_pushgateway(raw: dict[str, dict[str, Any]]) -> None:
    sources = sorted(
        "workers" if "WorkersSecurityGroup" in r.source else "prometheus"
        for r in cfn.ingress_rules("monitoring", raw["monitoring"])
        if "PushgatewaySecurityGroup" in r.target
    )
    assert sources == ["prometheus", "workers"]


def test_the_redis_exporter_reads_elasticache_over_tls_with_the_auth_token_from_secrets_manager(
    raw: dict[str, dict[str, Any]],
) -> None:
    exporter = cfn.container(raw["monitoring"], "redisexporter")
    assert [s["Name"] for s in exporter["Secrets"]] == ["REDIS_PASSWORD"]
    assert "AuthToken" in json.dumps(exporter["Secrets"][0]["ValueFrom"])
    environment = cfn.environment(exporter)
    assert json.dumps(environment["REDIS_ADDR"]).startswith('{"Fn::Join": ["", ["rediss://')
    assert environment["REDIS_EXPORTER_CONFIG_COMMAND"] == "-", "ElastiCache refuses CONFIG"


def test_only_prometheus_may_scrape_the_redis_exporter(raw: dict[str, dict[str, Any]]) -> None:
    rules = [r for r in cfn.ingress_rules("monitoring", raw["monitoring"]) if "RedisExporter" in r.target]
    assert [(r.from_port, r.to_port) for r in rules] == [(REDIS_EXPORTER_PORT, REDIS_EXPORTER_PORT)]
    assert "PrometheusSecurityGroup" in rules[0].source


def test_grafana_ships_every_dashboard_and_the_prometheus_data_source(synth: Any) -> None:
    context = staged(synth.outdir, "grafana")
    shipped = sorted(p.name for p in (context / "dashboards").glob("*.json"))
    assert shipped == [p.name for p in images.dashboard_files()]
    datasources = json.loads((context / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus.synapse.internal:9090"
    assert source["uid"] == images.DATASOURCE_UID


def test_grafana_sits_behind_an_internal_load_balancer_open_to_the_vpc_only(
    platform: Any, templates: dict[str, Template], raw: dict[str, dict[str, Any]]
) -> None:
    templates["monitoring"].has_resource_properties(
        "AWS::ElasticLoadBalancingV2::LoadBalancer",
        {
            "Scheme": "internal",
            "LoadBalancerAttributes": Match.array_with([{"Key": "access_logs.s3.enabled", "Value": "true"}]),
        },
    )
    alb_rules = [r for r in cfn.ingress_rules("monitoring", raw["monitoring"]) if "LoadBalancer" in r.target]
    assert [(r.source, r.from_port) for r in alb_rules] == [(platform.config.vpc_cidr, 80)]


def test_grafana_admin_password_comes_from_secrets_manager(raw: dict[str, dict[str, Any]]) -> None:
    grafana = cfn.container(raw["monitoring"], "grafana")
    assert [s["Name"] for s in grafana["Secrets"]] == ["GF_SECURITY_ADMIN_PASSWORD"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in cfn.environment(grafana)
    assert cfn.environment(grafana)["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


def test_monitoring_images_are_pinned(synth: Any) -> None:
    for name in ("prometheus", "pushgateway", "grafana", "redis-exporter"):
        dockerfile = (staged(synth.outdir, name) / "Dockerfile").read_text()
        (base,) = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
        assert ":" in base and not base.endswith(":latest"), base
