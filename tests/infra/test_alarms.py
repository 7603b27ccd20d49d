"""The AWS-side alarms: each one reaches the alerts topic when it fires and when it clears, watches
what it claims to, and tells a person what to do."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stacks.alarms import CACHE_STORAGE_WARNING
from tests.infra import cfn

pytestmark = pytest.mark.infra

TOPIC_OUTPUT = "AlertsTopic"


def alarms(raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        logical_id: dict(resource["Properties"])
        for logical_id, resource in cfn.resources(raw["alarms"], "AWS::CloudWatch::Alarm").items()
    }


def by_metric(raw: dict[str, dict[str, Any]], namespace: str, metric: str) -> list[dict[str, Any]]:
    return [a for a in alarms(raw).values() if (a["Namespace"], a["MetricName"]) == (namespace, metric)]


def test_every_alarm_notifies_the_topic_on_alarm_and_on_ok_with_an_actionable_description(
    raw: dict[str, dict[str, Any]],
) -> None:
    found = alarms(raw)
    assert len(found) >= 8
    for logical_id, alarm in found.items():
        assert TOPIC_OUTPUT in json.dumps(alarm["AlarmActions"]), logical_id
        assert alarm["OKActions"] == alarm["AlarmActions"], logical_id
        assert len(json.dumps(alarm["AlarmDescription"])) > 120, logical_id
        assert alarm["TreatMissingData"] == "notBreaching", logical_id


def test_workers_waiting_for_capacity_for_15_minutes_alarm_on_each_gpu_group(
    raw: dict[str, dict[str, Any]],
) -> None:
    alarms = by_metric(raw, "AWS/ECS/ManagedScaling", "CapacityProviderReservation")
    assert len(alarms) == 2  # the warm group's capacity provider and the burst group's
    providers = set()
    for alarm in alarms:
        assert alarm["Threshold"] == 100 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["Period"] * alarm["EvaluationPeriods"] == 15 * 60
        assert alarm["DatapointsToAlarm"] == alarm["EvaluationPeriods"]
        dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        assert set(dimensions) == {"ClusterName", "CapacityProviderName"}
        providers.add(json.dumps(dimensions["CapacityProviderName"]))
    assert len(providers) == 2


def test_gpu_launch_failures_reach_the_topic_with_what_failed(raw: dict[str, dict[str, Any]]) -> None:
    (rule,) = cfn.resources(raw["alarms"], "AWS::Events::Rule").values()
    properties = rule["Properties"]
    pattern = properties["EventPattern"]
    assert pattern["source"] == ["aws.autoscaling"]
    assert pattern["detail-type"] == ["EC2 Instance Launch Unsuccessful"]
    names = json.dumps(pattern["detail"]["AutoScalingGroupName"])
    assert "GpuCapacityWarmGroup" in names and "GpuCapacityBurstGroup" in names
    (target,) = properties["Targets"]
    assert TOPIC_OUTPUT in json.dumps(target["Arn"])
    transformer = target["InputTransformer"]
    assert set(transformer["InputPathsMap"].values()) >= {"$.detail.StatusMessage", "$.detail.Cause"}


def test_the_serverless_cache_alarms_on_throttling_and_on_storage_near_its_limit(
    raw: dict[str, dict[str, Any]], platform: Any
) -> None:
    (throttled,) = by_metric(raw, "AWS/ElastiCache", "ThrottledCmds")
    (storage,) = by_metric(raw, "AWS/ElastiCache", "BytesUsedForCache")
    (evictions,) = by_metric(raw, "AWS/ElastiCache", "Evictions")
    for alarm in (throttled, storage, evictions):
        assert alarm["Dimensions"] == [{"Name": "clusterId", "Value": platform.data.cache.name}]
    assert throttled["Threshold"] == 0 == evictions["Threshold"]
    limit = platform.config.cache_max_storage_gb * 1024**3
    assert storage["Threshold"] == pytest.approx(CACHE_STORAGE_WARNING * limit)


def test_each_front_door_function_alarms_on_errors_and_throttles(raw: dict[str, dict[str, Any]]) -> None:
    errors = by_metric(raw, "AWS/Lambda", "Errors")
    throttles = by_metric(raw, "AWS/Lambda", "Throttles")
    functions = {json.dumps(a["Dimensions"]) for a in errors}
    assert len(functions) == 2 == len(errors) == len(throttles)
    assert functions == {json.dumps(a["Dimensions"]) for a in throttles}


def test_api_5xx_alarm_outlasts_a_start_from_zero(raw: dict[str, dict[str, Any]]) -> None:
    (alarm,) = by_metric(raw, "AWS/ApiGateway", "5XXError")
    assert alarm["Statistic"] == "Average" and 0 < alarm["Threshold"] < 0.1
    # 503 + Retry-After while workers start takes a few minutes; the alarm needs 15.
    assert alarm["Period"] * alarm["EvaluationPeriods"] >= 15 * 60
