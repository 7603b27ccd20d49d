"""The front door's telemetry: EMF only where CloudWatch reads it, the job id as correlation id."""

import json
from typing import Any

import pytest

from frontdoor import telemetry
from frontdoor.handler import lambda_handler
from tests.unit.frontdoor.test_frontdoor_rejections import event


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({}, False),
        ({"AWS_LAMBDA_FUNCTION_NAME": "frontdoor"}, True),
        ({"AWS_LAMBDA_FUNCTION_NAME": "frontdoor", "POWERTOOLS_METRICS_DISABLED": "true"}, False),
        ({"AWS_LAMBDA_FUNCTION_NAME": "frontdoor", "POWERTOOLS_DEV": "true"}, False),
        ({"POWERTOOLS_METRICS_DISABLED": "false"}, True),
    ],
)
def test_emf_is_on_in_lambda_unless_powertools_is_told_otherwise(environ: dict[str, str], enabled: bool):
    assert telemetry.emf_enabled(environ) is enabled


def emf_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in map(json.loads, filter(None, text.splitlines())) if "_aws" in doc]


def test_the_local_gateway_prints_no_emf(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    lambda_handler(event("POST", "/async-infer", "not json"), None)
    assert emf_documents(capsys.readouterr().out) == []


def test_in_lambda_a_rejection_is_one_emf_count_by_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "frontdoor")
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    lambda_handler(event("POST", "/async-infer", '{"model": "no-such-model", "prompt": "x"}'), None)
    (doc,) = emf_documents(capsys.readouterr().out)
    (directive,) = doc["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Synapse"
    assert [m["Name"] for m in directive["Metrics"]] == ["JobsRejected"]
    assert doc["JobsRejected"] == [1.0]
    assert doc["reason"] == "unknown_model"
    assert doc["service"] == "synapse-frontdoor"


def test_in_lambda_a_submission_counts_by_model_with_its_job_id(capsys: pytest.CaptureFixture[str]):
    telemetry.emit("JobsSubmitted", {"model": "gpu-sim"}, job_id="6f1c7c1e-0000-4000-8000-000000000000")
    (doc,) = emf_documents(capsys.readouterr().out)
    assert doc["model"] == "gpu-sim"
    assert doc["job_id"] == "6f1c7c1e-0000-4000-8000-000000000000"
    assert [m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["JobsSubmitted"]


def test_the_job_id_is_the_correlation_id_of_a_result_read_and_of_a_submission():
    job_id = "6f1c7c1e-0000-4000-8000-000000000000"
    telemetry.begin_invocation({"httpMethod": "GET", "path": f"/results/{job_id}"})
    assert telemetry.logger.thread_safe_get_current_keys()["correlation_id"] == job_id

    telemetry.begin_invocation({"httpMethod": "POST", "path": "/async-infer"})
    assert "correlation_id" not in telemetry.logger.thread_safe_get_current_keys()
    accepted = {"statusCode": 202, "body": json.dumps({"jobId": "0abf", "status": "QUEUED"})}
    telemetry.end_invocation({"httpMethod": "POST", "path": "/async-infer"}, accepted)
    assert telemetry.logger.thread_safe_get_current_keys()["correlation_id"] == "0abf"
