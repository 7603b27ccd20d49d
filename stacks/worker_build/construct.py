"""The worker image, built inside the account by CodeBuild while the deploy runs, so that the deployer
needs neither Docker nor an uplink for the image's 11 GB: the deploy uploads the build's source (the
folders worker_image/Dockerfile copies, a few MB) as an S3 asset, a custom resource starts a build of it
and waits, and the workers pull the image from the repository the build pushed to.

Why CodeBuild behind the CDK's provider framework, rather than a `DockerImageAsset` (built on the
deployer's machine) or a pipeline: it is the CDK's own pattern for a long operation inside a deploy
(`isComplete` polled by a Step Functions waiter), it fails the deploy when the build fails, and the
tasks and instances that need the image depend on it, so none starts before the image exists. The tag is
the source's hash: an unchanged source builds nothing; a changed one builds once, before the instance
refresh that rolls the warm pool onto it.

CodeBuild facts relied on (https://docs.aws.amazon.com/codebuild/latest/userguide/build-env-ref-compute-types.html):
BUILD_GENERAL1_LARGE on LINUX_CONTAINER is 8 vCPUs, 15 GB of memory and 128 GB of disk, room for the
base image (about 16 GB extracted), the build's layers and their export; Docker in a build needs
privileged mode (ProjectEnvironment.privilegedMode,
https://docs.aws.amazon.com/codebuild/latest/APIReference/API_ProjectEnvironment.html); a build may run
5 to 2,160 minutes (timeoutInMinutes,
https://docs.aws.amazon.com/codebuild/latest/APIReference/API_CreateProject.html). The provider
framework waits at most an hour (custom_resources.Provider's totalTimeout), which bounds the build too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.config import REPO_ROOT
from stacks.custom_resources import handler_function, month_of_logs
from stacks.nag import nag_resource, suppress, suppress_basic_execution

DOCKERFILE = "worker_image/Dockerfile"
# What worker_image/Dockerfile copies from the repository root: the build's whole source.
SOURCES = ("pyproject.toml", "README.md", "contract", "worker_image", "triton_backends", "triton_models")
HANDLER = Path(__file__).resolve().parent / "handler.py"
BUILD_TIMEOUT = cdk.Duration.minutes(60)
# The build's commands: log in to the repository's registry, build for the GPU instances' platform, push.
BUILD_SPEC = {
    "version": "0.2",
    "phases": {
        "build": {
            "commands": [
                'REGISTRY="${REPOSITORY_URI%%/*}"',
                'aws ecr get-login-password | docker login --username AWS --password-stdin "$REGISTRY"',
                f'docker build --platform linux/amd64 -f {DOCKERFILE} -t "$REPOSITORY_URI:$IMAGE_TAG" .',
                'docker push "$REPOSITORY_URI:$IMAGE_TAG"',
            ]
        }
    },
}


def stage_source(scope: Construct) -> str:
    """The build's source under the cloud assembly: SOURCES alone, without Python's caches."""
    stage = cdk.Stage.of(scope)
    if stage is None:  # pragma: no cover - every stack lives in an App
        raise ValueError(f"{scope.node.path} is not inside a CDK App")
    folder = Path(stage.outdir).resolve() / "worker-build-source"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    for name in SOURCES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=ignore)
        else:
            shutil.copyfile(source, folder / name)
    return str(folder)


def _stage_handler(scope: Construct) -> str:
    stage = cdk.Stage.of(scope)
    if stage is None:  # pragma: no cover - every stack lives in an App
        raise ValueError(f"{scope.node.path} is not inside a CDK App")
    folder = Path(stage.outdir).resolve() / "lambda-contexts" / "worker-build"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copyfile(HANDLER, folder / "handler.py")
    return str(folder)


class WorkerImage(Construct):
    """The worker image's repository, its CodeBuild project, and the build the deploy waits for."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        # Kept when the stack goes, as the data stores are: `docs/deploy.md` says how to delete it. The image
        # running and the one before it stay (a rollback's); older ones go, so storage stays near one image.
        self.repository = ecr.Repository(
            self,
            "Repository",
            image_scan_on_push=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                ecr.LifecycleRule(max_image_count=2, description="the current and the previous")
            ],
        )
        source = s3_assets.Asset(self, "Source", path=stage_source(self))
        self.tag = source.asset_hash
        self.project = codebuild.Project(
            self,
            "Build",
            description="Synapse: builds the Triton worker image and pushes it to its repository",
            source=codebuild.Source.s3(bucket=source.bucket, path=source.s3_object_key),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0,
                compute_type=codebuild.ComputeType.LARGE,
                privileged=True,
            ),
            environment_variables={
                "REPOSITORY_URI": codebuild.BuildEnvironmentVariable(value=self.repository.repository_uri)
            },
            build_spec=codebuild.BuildSpec.from_object(BUILD_SPEC),
            timeout=BUILD_TIMEOUT,
            logging=codebuild.LoggingOptions(
                cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=month_of_logs(self, "BuildLogs"))
            ),
        )
        self.repository.grant_pull_push(self.project)
        self.build = self._build_during_deploy()
        self._suppress()

    @property
    def image_uri(self) -> str:
        return self.repository.repository_uri_for_tag(self.tag)

    def container_image(self) -> ecs.ContainerImage:
        return ecs.ContainerImage.from_ecr_repository(self.repository, self.tag)

    def _build_during_deploy(self) -> cdk.CustomResource:
        code = lambda_.Code.from_asset(_stage_handler(self))
        functions = {
            name: handler_function(
                self,
                f"{name}Function",
                logs_id=f"{name}Logs",
                description=f"Synapse: {what} the worker image's CodeBuild build",
                handler=f"handler.{handler}",
                code=code,
                memory_size=128,
            )
            for name, handler, what in (
                ("Start", "on_event", "starts"),
                ("Wait", "is_complete", "polls"),
            )
        }
        functions["Start"].add_to_role_policy(
            iam.PolicyStatement(actions=["codebuild:StartBuild"], resources=[self.project.project_arn])
        )
        functions["Wait"].add_to_role_policy(
            iam.PolicyStatement(actions=["codebuild:BatchGetBuilds"], resources=[self.project.project_arn])
        )
        self._provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=functions["Start"],
            is_complete_handler=functions["Wait"],
            query_interval=cdk.Duration.seconds(30),
            total_timeout=BUILD_TIMEOUT,
            log_group=month_of_logs(self, "ProviderLogs"),
        )
        self._functions = list(functions.values())
        return cdk.CustomResource(
            self,
            "Image",
            service_token=self._provider.service_token,
            resource_type="Custom::SynapseWorkerImageBuild",
            properties={"ProjectName": self.project.project_name, "ImageTag": self.tag},
        )

    def _suppress(self) -> None:
        stack = cdk.Stack.of(self)
        suppress(
            self.project,
            "CB3",
            "Privileged mode runs the Docker daemon the build needs to build and push the worker image; "
            "the build runs only this repository's Dockerfile, from the deploy's own source asset.",
        )
        suppress(
            self.project,
            "CB4",
            "The build keeps no artifacts (the image goes to ECR); its logs are CloudWatch Logs, encrypted "
            "at rest with the service key. A customer KMS key would add $1/month to the idle bill.",
        )
        suppress_basic_execution(self)
        functions = [*self._functions, *(self._provider.node.find_child(f"framework-{name}") for name in
                     ("onEvent", "isComplete", "onTimeout"))]  # fmt: skip
        ids = [stack.resolve(stack.get_logical_id(f.node.default_child)) for f in functions]  # type: ignore[arg-type]
        suppress(
            self._provider,
            "IAM5",
            "The custom resource framework and its waiter may invoke any version of their own functions "
            "(<arn>:*), those functions only.",
            applies_to=[f"Resource::<{function_id}.Arn>:*" for function_id in ids],
        )
        suppress(
            self._provider,
            "SF1",
            "The CDK provider framework's waiter: each call it makes logs in its functions' log groups, "
            "and the build's own log is CodeBuild's.",
        )
        suppress(
            self._provider,
            "SF2",
            "The CDK provider framework's waiter polls one build every 30 s: nothing for a trace to show.",
        )
        name = self.project.project_name
        logs_arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/codebuild/{name}:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        reports_arn = stack.format_arn(
            service="codebuild", resource="report-group", resource_name=f"{name}-*"
        )
        suppress(
            self.project,
            "IAM5",
            "CodeBuild's own grants to its project: its log streams, its report groups, and reading the "
            "source asset's objects; ecr:GetAuthorizationToken has no resource-level permissions.",
            applies_to=[
                "Action::s3:GetBucket*",
                "Action::s3:GetObject*",
                "Action::s3:List*",
                "Resource::*",
                nag_resource(stack, logs_arn),
                nag_resource(stack, reports_arn),
            ],
        )
