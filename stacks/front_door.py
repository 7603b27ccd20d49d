"""The front door's two Lambda functions: buffered (Powertools resolver) and streaming (Lambda Web Adapter).

Both run the same asset (`contract/` + `openai_api/` + `frontdoor/` + wheels, stacks/bundling.py) in the
VPC's isolated subnets with the same settings: they talk to ElastiCache, signing their IAM tokens
locally, and to the files bucket through the S3 gateway endpoint (the Files and Uploads APIs, which
`/v1/*` routes to the streaming one; the buffered one has the same settings, so that no route can fall
back to a local folder). The streaming one exists because the Python managed runtime cannot stream a
body: the adapter layer runs as its exec wrapper, starts `frontdoor/run.sh` (the front door's aiohttp
server) and relays each request to it, streaming the answer back through InvokeWithResponseStream
(docs/streaming.md).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.nag import BASIC_EXECUTION_POLICY, suppress

HANDLER = "frontdoor.handler.lambda_handler"
# cdk-nag L1 wants the newest Python runtime this CDK knows; the bundler follows whatever this is.
RUNTIME = lambda_.Runtime.PYTHON_3_14

STREAM_HANDLER = "frontdoor/run.sh"  # what the adapter's /opt/bootstrap execs, from the asset's root
STREAM_SERVER_PORT = 8080
WEB_ADAPTER_ACCOUNT = "753240598075"  # where AWS publishes the adapter's layer
# How long one streaming request may hold its function and its connection. A `/v1` stream's job has
# a 240 s deadline (frontdoor/openai_routes.py, STREAM_DEADLINE_MS) and its reader follows it 10 s
# past that, so it ends inside; an asynchronous job may run up to an hour, so a client following it
# with `GET /results/{jobId}/stream` reconnects with `Last-Event-ID` when this cuts it off. Five
# minutes is also the gateway's idle timeout for a regional stream.
STREAM_TIMEOUT = cdk.Duration.minutes(5)


def web_adapter_layer_arn(region: str, version: int) -> str:
    """The public Lambda Web Adapter layer (x86_64) that AWS publishes in `region`."""
    return f"arn:aws:lambda:{region}:{WEB_ADAPTER_ACCOUNT}:layer:LambdaAdapterLayerX86:{version}"


class FrontDoor(Construct):
    """The front door in the VPC: a buffered function and a streaming one, from one asset.

    Both share one security group (no egress but to ElastiCache, granted later to the group) and one
    role, so each grant made to `function` holds for both. Where the deploy asks (config.py), the streaming
    function reserves `stream_reserved_concurrency` environments: enough for the `/v1` throttle, and a cap
    that keeps a flood of open streams from starving submissions and polls on the buffered one. None (the
    default) reserves nothing, which any account's concurrency quota can hold.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        redis_environment: dict[str, str],
        file_environment: dict[str, str],
        models: str,
        model_catalog: str,
        code: lambda_.Code,
        web_adapter_layer_version: int,
        stream_reserved_concurrency: int | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Synapse front-door Lambda: egress to ElastiCache and S3 only",
            allow_all_outbound=False,
        )
        self._vpc, self._subnets, self._code = vpc, subnets, code
        self._environment = {
            **redis_environment,
            **file_environment,
            "SYNAPSE_MODELS": models,
            # Each model's kind, limits and chat template; Lambda's environment holds 4 KB in all
            # (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html), which
            # tests/infra checks of the synthesized functions.
            "SYNAPSE_MODEL_CATALOG": model_catalog,
            "SYNAPSE_LOG_LEVEL": "INFO",
            # AWS: callbacks cross the internet, so a submission naming an http:// callback is a 400.
            "SYNAPSE_CALLBACK_HTTPS_ONLY": "true",
            "POWERTOOLS_SERVICE_NAME": "synapse-frontdoor",
            "POWERTOOLS_METRICS_NAMESPACE": "Synapse",
        }
        self.function = self._function(
            "Function",
            logs_id="Logs",
            description="Synapse front door: validates, enqueues and reads jobs",
            handler=HANDLER,
            # API Gateway gives up at 29 s; a long-poll (`?wait=` at most 20 s) fits well inside.
            timeout=cdk.Duration.seconds(29),
        )
        suppress(
            self.function,
            "IAM4",
            "AWS-managed basic-execution and VPC-access policies: the minimum Lambda needs to write "
            "its own logs and attach ENIs in the VPC, maintained by AWS as the service changes.",
            applies_to=[
                BASIC_EXECUTION_POLICY,
                "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
            ],
        )
        region = cdk.Stack.of(self).region
        self.stream_function = self._function(
            "StreamFunction",
            logs_id="StreamLogs",
            description="Synapse front door, streaming: /v1 and job token streams over SSE",
            handler=STREAM_HANDLER,
            timeout=STREAM_TIMEOUT,
            role=self.function.role,
            layers=[
                lambda_.LayerVersion.from_layer_version_arn(
                    self, "WebAdapter", web_adapter_layer_arn(region, web_adapter_layer_version)
                )
            ],
            environment={
                "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
                "AWS_LWA_INVOKE_MODE": "response_stream",
                "AWS_LWA_PORT": str(STREAM_SERVER_PORT),
                "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
            },
            reserved_concurrency=stream_reserved_concurrency,
        )

    def _function(
        self,
        construct_id: str,
        *,
        logs_id: str,
        description: str,
        handler: str,
        timeout: cdk.Duration,
        role: iam.IRole | None = None,
        layers: list[lambda_.ILayerVersion] | None = None,
        environment: dict[str, str] | None = None,
        reserved_concurrency: int | None = None,
    ) -> lambda_.Function:
        """One front-door function: the shared asset, network, settings and group; its own logs."""
        log_group = logs.LogGroup(
            self,
            logs_id,
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        return lambda_.Function(
            self,
            construct_id,
            description=description,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.X86_64,
            handler=handler,
            code=self._code,
            memory_size=512,
            timeout=timeout,
            vpc=self._vpc,
            vpc_subnets=self._subnets,
            security_groups=[self.security_group],
            role=role,
            layers=layers,
            log_group=log_group,
            environment={**self._environment, **(environment or {})},
            reserved_concurrent_executions=reserved_concurrency,
        )
