"""The monitoring config in dashboards/: promtool accepts it, the alerts fire when they must, and every
name a dashboard or rule reads is one that Synapse exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import manager.metrics  # noqa: F401  (defining the families registers them)
from contract.scrape_config import PROMETHEUS_TEMPLATE, local_prometheus_config
from local_stack.monitoring import local_targets
from tests.processes import REPO
from tests.promql import (
    BUILT_IN,
    DASHBOARDS,
    EXPORTER_PREFIXES,
    RULE_FILES,
    dashboard_queries,
    exposed_names,
    metric_names,
    recorded_names,
    rule_queries,
    substitute,
)
from worker_image import worker_metrics

ALERT_TESTS = REPO / "tests" / "unit" / "promtool" / "synapse_alerts_test.yml"


def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is not installed: run `make test`, which installs the prometheus package")
    return subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_the_prometheus_config_and_its_rules():
    result = promtool("check", "config", str(PROMETHEUS_TEMPLATE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_accepts_the_local_config_that_synapse_up_writes(tmp_path: Path):
    config = local_prometheus_config(
        local_targets(manager_port=9100, pushgateway_port=9091, redis_exporter_port=9121)
    )
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["synapse-manager"]["static_configs"] == [{"targets": ["127.0.0.1:9100"]}]
    assert jobs["pushgateway"]["honor_labels"] is True
    assert jobs["redis"]["static_configs"] == [{"targets": ["127.0.0.1:9121"]}]
    assert sorted(config["rule_files"]) == sorted(str(rules.resolve()) for rules in RULE_FILES)


def test_without_a_local_redis_exporter_its_job_is_left_out():
    config = local_prometheus_config(local_targets(manager_port=9100, pushgateway_port=9091))
    assert [job["job_name"] for job in config["scrape_configs"]] == ["synapse-manager", "pushgateway"]


def test_promtool_accepts_the_rule_files():
    result = promtool("check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_fire_on_the_burns_they_guard_against_and_only_then():
    result = promtool("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_a_dashboard_takes_its_data_source_from_a_variable(path: Path):
    board = json.loads(path.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    sources = [
        obj["datasource"]
        for obj in _walk(board)
        if isinstance(obj, dict) and isinstance(obj.get("datasource"), dict)
    ]
    assert sources, "panels should name their data source"
    assert {json.dumps(s, sort_keys=True) for s in sources} == {
        json.dumps({"type": "prometheus", "uid": "${datasource}"}, sort_keys=True)
    }
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert all(p.get("targets") for p in panels), "every panel needs a query"


def test_the_slo_dashboard_shows_each_promise():
    board = json.loads((REPO / "dashboards" / "synapse-slos.json").read_text())
    titles = {p["title"] for p in board["panels"]}
    for expected in ("End-to-end latency", "Error and rejection rate", "Throughput", "Queue depth",
                     "Batch size distribution", "Worker busy", "Workers: desired vs running",
                     "Cost per 1,000 inferences"):  # fmt: skip
        assert expected in titles
    latency = next(p for p in board["panels"] if p["title"] == "End-to-end latency")
    assert [s["value"] for s in latency["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.25]
    busy = next(p for p in board["panels"] if p["title"] == "Worker busy")
    assert [s["value"] for s in busy["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.7]
    ttft = next(p for p in board["panels"] if p["title"] == "TTFT P99")
    assert [s["value"] for s in ttft["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 1]


def test_the_slo_dashboard_shows_tenants_and_callbacks_below_the_rest():
    board = json.loads((REPO / "dashboards" / "synapse-slos.json").read_text())
    titles = [p["title"] for p in board["panels"]]
    row = titles.index("Tenants and callbacks")
    assert titles[row + 1 :] == ["Jobs by tenant and outcome", "Rejections by tenant and reason", "Callbacks"]
    panels = {p["title"]: p for p in board["panels"]}
    for title in ("Jobs by tenant and outcome", "Rejections by tenant and reason"):
        assert 'tenant=~"$tenant"' in panels[title]["targets"][0]["expr"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["tenant"]["query"]["query"] == "label_values(synapse_tenant_jobs_total, tenant)"
    bottom = max(p["gridPos"]["y"] for p in board["panels"][:row])
    assert panels["Tenants and callbacks"]["gridPos"]["y"] > bottom


def test_the_slo_dashboard_shows_the_batch_api_above_tenants():
    board = json.loads((REPO / "dashboards" / "synapse-slos.json").read_text())
    titles = [p["title"] for p in board["panels"]]
    row = titles.index("Batch API")
    assert titles[row + 1 : row + 5] == [
        "Batches by status",
        "Batch lines per second",
        "Batch create to completed",
        "Tenants and callbacks",
    ]
    panels = {p["title"]: p for p in board["panels"]}
    exprs = [t["expr"] for t in panels["Batch create to completed"]["targets"]]
    assert [e.split(",")[0] for e in exprs] == ["histogram_quantile(0.5", "histogram_quantile(0.99"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"][: row + 4])
    assert panels["Tenants and callbacks"]["gridPos"]["y"] >= bottom


# Series every manager reports alike (manager/metrics.py): summed across managers they would count the
# fleet once per manager.
FLEET_WIDE = ("synapse_jobs_submitted_total", "synapse_jobs_rejected_total", "synapse_jobs_cancelled_total",
              "synapse_tenant_jobs_total", "synapse_tenant_rejections_total", "synapse_stream_depth",
              "synapse_workers", "synapse_workers_running", "synapse_workers_desired",
              "synapse_worker_seconds_total", "synapse_gpu_cost_dollars_total",
              "synapse_frontdoor_requests_total", "synapse_frontdoor_duration_seconds_total",
              "synapse_batch_api_batches", "synapse_batch_api_batches_at_risk")  # fmt: skip
SUMMED = re.compile(
    r"\b(?:sum|avg)\s*(?:by\s*\([^)]*\)\s*)?\(\s*(?:(?:rate|irate|increase)\s*\()?\s*("
    + "|".join(FLEET_WIDE)
    + r")\b"
)


def test_fleet_wide_series_are_aggregated_across_managers_with_max():
    queries = [q for path in DASHBOARDS for q in dashboard_queries(path)] + rule_queries()
    assert {q.where: SUMMED.findall(q.expr) for q in queries if SUMMED.search(q.expr)} == {}
    assert SUMMED.findall("sum by (model) (rate(synapse_jobs_cancelled_total[5m]))") == [
        "synapse_jobs_cancelled_total"
    ]
    assert not SUMMED.search("sum(max by (model) (rate(synapse_jobs_cancelled_total[5m])))")


def test_every_name_the_dashboards_and_rules_read_is_exposed_or_recorded():
    worker_registry, _ = worker_metrics.worker_registry()
    exposed = exposed_names(REGISTRY) | exposed_names(worker_registry) | BUILT_IN
    recorded = recorded_names()
    queries = [q for path in DASHBOARDS for q in dashboard_queries(path)] + rule_queries()
    unknown = {
        (q.where, name)
        for q in queries
        for name in metric_names(substitute(q.expr))
        if name not in (recorded if ":" in name else exposed) and not name.startswith(EXPORTER_PREFIXES)
    }
    assert not unknown
    assert len(queries) > 60


def test_metric_names_are_read_from_promql():
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(synapse_job_latency_seconds_bucket{model=~"$model"}'
        "[$__rate_interval]))) > on() group_left max(platform:x:rate5m offset 5m) or vector(0)"
    )
    assert metric_names(substitute(expr)) == {"synapse_job_latency_seconds_bucket", "platform:x:rate5m"}


def test_a_name_nothing_exposes_is_caught():
    worker_registry, _ = worker_metrics.worker_registry()
    exposed = exposed_names(REGISTRY) | exposed_names(worker_registry)
    assert "synapse_jobs_completed_total" in exposed
    assert "synapse_job_latency_seconds_bucket" in exposed
    assert "synapse_worker_cold_start_seconds" in exposed
    assert metric_names("sum(rate(synapse_jobs_completd_total[5m]))") - exposed == {
        "synapse_jobs_completd_total"
    }


def _walk(node: object) -> list[object]:
    found = [node]
    if isinstance(node, dict):
        for value in node.values():
            found += _walk(value)
    elif isinstance(node, list):
        for value in node:
            found += _walk(value)
    return found
