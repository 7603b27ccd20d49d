"""The worker image is built in the account by CodeBuild during the deploy, before anything pulls it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from stacks.worker_build.construct import DOCKERFILE
from tests.infra.synthesis import Synth

pytestmark = pytest.mark.infra


def resources(raw: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in raw["Resources"].items() if r["Type"] == kind}


def test_the_worker_image_is_built_by_a_privileged_codebuild_project(synth: Synth) -> None:
    template = synth.template(synth.platform.workers)
    template.resource_count_is("AWS::CodeBuild::Project", 1)
    template.has_resource_properties(
        "AWS::CodeBuild::Project",
        {
            "Environment": Match.object_like(
                {
                    "ComputeType": "BUILD_GENERAL1_LARGE",
                    "Image": "aws/codebuild/standard:7.0",
                    "PrivilegedMode": True,
                    "Type": "LINUX_CONTAINER",
                    "EnvironmentVariables": [
                        {"Name": "REPOSITORY_URI", "Type": "PLAINTEXT", "Value": Match.any_value()}
                    ],
                }
            ),
            "Source": Match.object_like({"Type": "S3"}),
            "TimeoutInMinutes": 60,
        },
    )


def test_the_build_pushes_the_dockerfile_s_image_to_the_repository_it_is_given(synth: Synth) -> None:
    raw = synth.raw(synth.platform.workers)
    [project] = resources(raw, "AWS::CodeBuild::Project").values()
    commands = json.loads(project["Properties"]["Source"]["BuildSpec"])["phases"]["build"]["commands"]
    built = f'docker build --platform linux/amd64 -f {DOCKERFILE} -t "$REPOSITORY_URI:$IMAGE_TAG" .'
    assert commands[-2:] == [built, 'docker push "$REPOSITORY_URI:$IMAGE_TAG"']
    [repository] = resources(raw, "AWS::ECR::Repository")
    [variable] = project["Properties"]["Environment"]["EnvironmentVariables"]
    assert repository in str(variable["Value"])


def test_the_deploy_waits_for_the_build_before_instances_or_tasks_pull_it(synth: Synth) -> None:
    raw = synth.raw(synth.platform.workers)
    [(build_id, build)] = resources(raw, "Custom::SynapseWorkerImageBuild").items()
    tag = build["Properties"]["ImageTag"]
    assert len(tag) == 64  # the source asset's hash: a new source, a new build
    waiting = {
        **resources(raw, "AWS::AutoScaling::AutoScalingGroup"),
        **resources(raw, "AWS::ECS::TaskDefinition"),
    }
    assert waiting
    assert all(build_id in r.get("DependsOn", []) for r in waiting.values()), "each waits for the build"
    [task] = resources(raw, "AWS::ECS::TaskDefinition").values()
    [container] = task["Properties"]["ContainerDefinitions"]
    assert tag in str(container["Image"]), "the task runs the image of that build"
