"""Custom resource handler: builds the worker image in CodeBuild during the deploy, and waits for it.

The CDK provider framework calls `on_event` once and then `is_complete` until it answers True (or its
total timeout passes). Create, and an update that names a new image tag (the source changed), start a
build of the project the resource names and return the build's id; the tag is the physical id, so a new
tag replaces the resource and the old one's Delete changes nothing. `is_complete` fails the deploy with
the build's status and its logs' link unless the build succeeded. Delete leaves the images to the
repository's own removal policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

RUNNING = "IN_PROGRESS"
SUCCEEDED = "SUCCEEDED"


class CodeBuild(Protocol):
    """The calls this handler makes on boto3's `codebuild` client (the test seam)."""

    def start_build(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def batch_get_builds(self, **kwargs: Any) -> Mapping[str, Any]: ...


class ImageBuildError(RuntimeError):
    """The worker image's build ended without an image; the deploy fails with this message."""


def _client() -> CodeBuild:
    import boto3

    return cast(CodeBuild, boto3.client("codebuild"))


def on_event(
    event: Mapping[str, Any], _context: object = None, client: CodeBuild | None = None
) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    properties = event["ResourceProperties"]
    tag = str(properties["ImageTag"])
    build = (client or _client()).start_build(
        projectName=properties["ProjectName"],
        environmentVariablesOverride=[{"name": "IMAGE_TAG", "value": tag, "type": "PLAINTEXT"}],
    )["build"]
    return {"PhysicalResourceId": tag, "Data": {"BuildId": build["id"]}}


def is_complete(
    event: Mapping[str, Any], _context: object = None, client: CodeBuild | None = None
) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    build_id = event["Data"]["BuildId"]
    build = (client or _client()).batch_get_builds(ids=[build_id])["builds"][0]
    status = build["buildStatus"]
    if status == RUNNING:
        return {"IsComplete": False}
    if status != SUCCEEDED:
        logs = build.get("logs", {}).get("deepLink", "no logs")
        raise ImageBuildError(f"the worker image's build {build_id} ended {status}: {logs}")
    return {"IsComplete": True}
