"""The custom resource that builds the worker image during the deploy: it starts one build per new source
and fails the deploy when the build fails, with the build's status and logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from stacks.worker_build.handler import ImageBuildError, is_complete, on_event


class FakeCodeBuild:
    def __init__(self, status: str = "IN_PROGRESS") -> None:
        self.started: list[dict[str, Any]] = []
        self.status = status

    def start_build(self, **kwargs: Any) -> Mapping[str, Any]:
        self.started.append(kwargs)
        return {"build": {"id": "synapse-worker:1"}}

    def batch_get_builds(self, **kwargs: Any) -> Mapping[str, Any]:
        assert kwargs == {"ids": ["synapse-worker:1"]}
        return {"builds": [{"buildStatus": self.status, "logs": {"deepLink": "https://console/logs"}}]}


def event(request: str) -> dict[str, Any]:
    return {
        "RequestType": request,
        "PhysicalResourceId": "old-tag",
        "ResourceProperties": {"ProjectName": "WorkerBuild", "ImageTag": "abc123"},
        "Data": {"BuildId": "synapse-worker:1"},
    }


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_a_new_source_starts_one_build_tagged_with_its_hash(request_type: str) -> None:
    codebuild = FakeCodeBuild()
    answer = on_event(event(request_type), client=codebuild)
    assert codebuild.started == [
        {
            "projectName": "WorkerBuild",
            "environmentVariablesOverride": [{"name": "IMAGE_TAG", "value": "abc123", "type": "PLAINTEXT"}],
        }
    ]
    assert answer == {"PhysicalResourceId": "abc123", "Data": {"BuildId": "synapse-worker:1"}}


def test_delete_builds_nothing_and_is_done_at_once() -> None:
    codebuild = FakeCodeBuild()
    assert on_event(event("Delete"), client=codebuild) == {"PhysicalResourceId": "old-tag"}
    assert is_complete(event("Delete"), client=codebuild) == {"IsComplete": True}
    assert codebuild.started == []


def test_the_deploy_waits_while_the_build_runs_and_goes_on_when_it_succeeds() -> None:
    assert is_complete(event("Create"), client=FakeCodeBuild("IN_PROGRESS")) == {"IsComplete": False}
    assert is_complete(event("Create"), client=FakeCodeBuild("SUCCEEDED")) == {"IsComplete": True}


@pytest.mark.parametrize("status", ["FAILED", "FAULT", "STOPPED", "TIMED_OUT"])
def test_a_failed_build_fails_the_deploy_with_its_status_and_logs(status: str) -> None:
    with pytest.raises(ImageBuildError, match=rf"synapse-worker:1 ended {status}: https://console/logs"):
        is_complete(event("Update"), client=FakeCodeBuild(status))
