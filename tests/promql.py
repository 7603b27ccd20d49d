"""Reading the monitoring config for tests: every query in the dashboards and rules, and the metric
names a PromQL expression reads."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.processes import REPO

DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
RULE_FILES = [REPO / "dashboards" / "rules.yml"]
# What Grafana puts in for its variables when the test runs a panel's query itself.
GRAFANA_VALUES = {"__rate_interval": "1m", "__interval": "15s", "model": ".*", "worker": ".+", "tenant": ".*"}
# Names no Synapse process exposes: Prometheus makes `up`, the Pushgateway stamps every group.
BUILT_IN = frozenset({"up", "push_time_seconds"})
# Names a third-party exporter defines (the Redis exporter): only its live exposition can vouch for
# them, which tests/integration/test_observability.py reads.
EXPORTER_PREFIXES = ("redis_",)
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"})
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*(\w+)\s*\)$")


@dataclass(frozen=True)
class Query:
    where: str  # dashboard and panel (or variable), or rule file and rule
    expr: str


def substitute(expr: str, values: dict[str, str] = GRAFANA_VALUES) -> str:
    """Grafana's `$name` and `${name}` replaced by values, as Grafana does before asking Prometheus."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], expr)


def dashboard_queries(path: Path) -> list[Query]:
    """Every panel target's expr, and every query variable as the PromQL Grafana would run for it."""
    board = json.loads(path.read_text())
    queries: list[Query] = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            queries.append(Query(f"{board['title']} / {panel['title']} / {target['refId']}", target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(variable["query"]["query"])
            assert match, f"{path.name}: variable {variable['name']} is not label_values(metric, label)"
            metric, label = match.groups()
            queries.append(Query(f"{board['title']} / ${variable['name']}", f"count by ({label}) ({metric})"))
    return queries


def rule_documents(paths: Iterable[Path] = RULE_FILES) -> list[tuple[Path, dict[str, object]]]:
    return [(path, rule) for path in paths for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]  # fmt: skip


def rule_queries(paths: Iterable[Path] = RULE_FILES) -> list[Query]:
    return [
        Query(f"{path.name} / {rule.get('record') or rule.get('alert')}", str(rule["expr"]))
        for path, rule in rule_documents(paths)
    ]


def recorded_names(paths: Iterable[Path] = RULE_FILES) -> set[str]:
    return {str(rule["record"]) for _, rule in rule_documents(paths) if "record" in rule}


def metric_names(expr: str) -> set[str]:
    """The metric (and recorded series) names an expression selects; functions, keywords, labels,
    strings and durations are not names."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][\w:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def exposed_names_from_text(text: str) -> set[str]:
    """Names in a text exposition, including the sample names of families that have no samples yet."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def exposed_names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def has_finite_value(result: list[dict[str, object]]) -> bool:
    """True when an instant-query result holds at least one sample that is a number a panel can draw."""
    for series in result:
        _, value = series["value"]  # type: ignore[misc]
        if math.isfinite(float(str(value))):
            return True
    return False
