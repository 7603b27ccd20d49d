"""The public door: API Gateway (REST, API keys, usage plan) in front of the front-door Lambdas."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from contract.jobs import DEFAULT_TENANT
from stacks.api_account_role.construct import AccountLoggingRole
from stacks.bundling import LAMBDA_PACKAGES, python_lambda_code
from stacks.config import REPO_ROOT, SynapseConfig
from stacks.front_door import RUNTIME, STREAM_TIMEOUT, FrontDoor
from stacks.nag import suppress, suppress_basic_execution

AUTHORIZER_HANDLER = "frontdoor.authorizer.handler"
# An API key's tenant is this tag on the key (frontdoor/authorizer.py reads it; docs/api.md: Tenants).
TENANT_TAG = "synapse:tenant"

# A coarse gate in front of the handler's own pydantic validation (frontdoor/schemas.py):
# it turns away what can never be a job before a Lambda runs, and accepts every body the handler
# accepts (tests/infra checks that). The handler still gives the precise message for the rest.
SUBMIT_SCHEMA = apigw.JsonSchema(
    schema=apigw.JsonSchemaVersion.DRAFT4,
    title="SubmitRequest",
    type=apigw.JsonSchemaType.OBJECT,
    required=["model", "prompt"],
    properties={
        "model": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, min_length=1, max_length=128),
        "prompt": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, min_length=1),
        "parameters": apigw.JsonSchema(type=apigw.JsonSchemaType.OBJECT),
        "timeoutMs": apigw.JsonSchema(type=[apigw.JsonSchemaType.INTEGER, apigw.JsonSchemaType.NULL]),
    },
)

# The stage's method setting for every verb of `/v1/{proxy+}` (the resource path, then the verb).
V1_THROTTLE_PATH = "/v1/{proxy+}/*"

# Gateway-made errors in the runtime's error shape: {"error": {"code", "message"}}.
_ERROR_TEMPLATE = json.dumps(
    {"error": {"code": "invalid_request", "message": "$context.error.validationErrorString"}}
)


class KeyAuthorizer(Construct):
    """Lets clients send their API key as `Authorization: Bearer` (what OpenAI clients do), and names
    the key's tenant.

    It moves the presented key to where the usage plan reads it, and reads the tenant and its quota
    from the key's tags (frontdoor/authorizer.py); API Gateway still validates the key. It reaches only
    API Gateway's public API, so it runs outside the VPC.
    """

    def __init__(self, scope: Construct, construct_id: str, *, code: lambda_.Code) -> None:
        super().__init__(scope, construct_id)
        function = lambda_.Function(
            self,
            "Function",
            description="Synapse API key authorizer: x-api-key or Authorization: Bearer",
            runtime=RUNTIME,
            architecture=lambda_.Architecture.X86_64,
            handler=AUTHORIZER_HANDLER,
            code=code,
            memory_size=128,
            timeout=cdk.Duration.seconds(5),
            log_group=logs.LogGroup(
                self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY
            ),
        )
        # GetApiKeys (GET /apikeys) returns each key with its value and tags: that one call is all the
        # authorizer makes, so no single key (/apikeys/<id>) or tag (/tags/<arn>) resource is granted.
        stack = cdk.Stack.of(self)
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["apigateway:GET"],
                resources=[f"arn:{stack.partition}:apigateway:{stack.region}::/apikeys"],
            )
        )
        # No identity sources and no cache: every request is checked, with either header.
        self.authorizer = apigw.RequestAuthorizer(
            self,
            "Authorizer",
            handler=function,
            identity_sources=[],
            results_cache_ttl=cdk.Duration.seconds(0),
        )
        suppress_basic_execution(function)


class PublicApi(Construct):
    """REST API: every method but `GET /healthz` needs an API key; the usage plan throttles per key, and
    `/v1/*` has a throttle of its own that the streaming function's reservation is sized from.

    `/async-infer`, `GET /results/{jobId}`, `/jobs/*`, `/healthz`, `/openapi.json` and `/docs` go to
    `handler`, buffered; `/v1/*` and `GET /results/{jobId}/stream` go to `stream_handler` with the response
    streamed (docs/streaming.md). Access is logged; execution errors too, which needs the account's
    API Gateway CloudWatch role: the stage waits for `AccountLoggingRole`, which sets one where the
    account has none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        stream_handler: lambda_.IFunction,
        authorizer: apigw.IAuthorizer,
        rate_limit: int,
        burst_limit: int,
        v1_rate_limit: int,
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.account_logging_role = AccountLoggingRole(self, "AccountLoggingRole")
        self.api = apigw.RestApi(
            self,
            "Api",
            description="Synapse asynchronous inference API",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # The authorizer hands over the key from x-api-key or a bearer token; the plan checks it.
            api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
            # The authorizer is named per method (`keyed`): an API-wide default could not be taken
            # off again for /healthz.
            default_method_options=apigw.MethodOptions(api_key_required=True),
            # AWS::ApiGateway::Account would overwrite the account's own role: AccountLoggingRole sets
            # one only where there is none.
            cloud_watch_role=False,
            deploy_options=apigw.StageOptions(
                stage_name="prod",
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                metrics_enabled=True,
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
                # Each /v1 call may hold a streaming environment for the whole sync wait: this rate is
                # what the function's reserved concurrency is sized from (config.py).
                method_options={
                    V1_THROTTLE_PATH: apigw.MethodDeploymentOptions(
                        throttling_rate_limit=v1_rate_limit, throttling_burst_limit=v1_rate_limit
                    )
                },
            ),
        )
        # The stage logs, which API Gateway refuses until the account has its CloudWatch role.
        self.api.deployment_stage.node.add_dependency(self.account_logging_role.resource)
        for response_type in (apigw.ResponseType.BAD_REQUEST_BODY, apigw.ResponseType.BAD_REQUEST_PARAMETERS):
            self.api.add_gateway_response(
                f"Gateway{response_type.response_type}",
                type=response_type,
                status_code="400",
                templates={"application/json": _ERROR_TEMPLATE},
            )

        integration = apigw.LambdaIntegration(handler, allow_test_invoke=False)
        # STREAM: the integration URI becomes Lambda's response-streaming-invocations path, and the
        # gateway relays bytes as the function writes them, past the buffered 29 s and 10 MB limits.
        streaming = apigw.LambdaIntegration(
            stream_handler,
            allow_test_invoke=False,
            response_transfer_mode=apigw.ResponseTransferMode.STREAM,
            timeout=STREAM_TIMEOUT,
        )
        validate_body = self.api.add_request_validator(
            "ValidateBody", validate_request_body=True, validate_request_parameters=True
        )
        validate_parameters = self.api.add_request_validator(
            "ValidateParameters", validate_request_parameters=True
        )
        submit_model = self.api.add_model(
            "SubmitRequest", content_type="application/json", schema=SUBMIT_SCHEMA
        )

        keyed: dict[str, Any] = {
            "authorizer": authorizer,
            "authorization_type": apigw.AuthorizationType.CUSTOM,
        }

        # Liveness for load balancers and uptime checks: no key, no authorizer (docs/api.md).
        self.api.root.add_resource("healthz").add_method(
            "GET", integration, api_key_required=False, authorization_type=apigw.AuthorizationType.NONE
        )
        # The spec and Swagger UI, served by the front door; they need a key like the rest.
        for documentation in ("openapi.json", "docs"):
            self.api.root.add_resource(documentation).add_method("GET", integration, **keyed)
        self.api.root.add_resource("async-infer").add_method(
            "POST",
            integration,
            **keyed,
            request_validator=validate_body,
            request_models={"application/json": submit_model},
        )
        job = self.api.root.add_resource("results").add_resource("{jobId}")
        job.add_method(
            "GET",
            integration,
            **keyed,
            request_validator=validate_parameters,
            request_parameters={
                "method.request.path.jobId": True,
                "method.request.querystring.wait": False,
            },
        )
        # A job's tokens as Server-Sent Events; `Last-Event-ID` resumes after the last one received.
        job.add_resource("stream").add_method(
            "GET",
            streaming,
            **keyed,
            request_validator=validate_parameters,
            request_parameters={
                "method.request.path.jobId": True,
                "method.request.header.Last-Event-ID": False,
            },
        )
        # A tenant's jobs, a page at a time, and the controls of one job (docs/api.md: Managing jobs).
        jobs = self.api.root.add_resource("jobs")
        jobs.add_method(
            "GET",
            integration,
            **keyed,
            request_validator=validate_parameters,
            request_parameters={
                f"method.request.querystring.{name}": False for name in ("status", "model", "limit", "cursor")
            },
        )
        controlled = jobs.add_resource("{jobId}")
        for control in ("cancel", "retry"):
            controlled.add_resource(control).add_method(
                "POST",
                integration,
                **keyed,
                request_validator=validate_parameters,
                request_parameters={"method.request.path.jobId": True},
            )
        # `/v1/*` is routed by the front door's HTTP server, which streams when a body asks for it
        # (`"stream": true`) and answers in one piece otherwise; the gateway checks the key.
        self.api.root.add_resource("v1").add_resource("{proxy+}").add_method(
            "ANY",
            streaming,
            **keyed,
            request_validator=validate_parameters,
            request_parameters={"method.request.path.proxy": True},
        )

        self.api_key = self.api.add_api_key("ApiKey", description="Synapse default client key")
        cdk.Tags.of(self.api_key).add(TENANT_TAG, DEFAULT_TENANT)
        self.usage_plan = self.api.add_usage_plan(
            "UsagePlan",
            description="Per-key throttling for Synapse clients",
            throttle=apigw.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            api_stages=[apigw.UsagePlanPerApiStage(api=self.api, stage=self.api.deployment_stage)],
        )
        self.usage_plan.add_api_key(self.api_key)

        suppress(
            self.api,
            "APIG4",
            "Clients are machine-to-machine and authenticate with API keys that every method but "
            "GET /healthz requires (asserted in tests/infra); the usage plan ties each key to its own "
            "throttle. /healthz answers only whether Redis is up, and must work without a key.",
        )
        suppress(
            self.api,
            "COG4",
            "No end-user identities: callers are services holding an API key, so a Cognito user "
            "pool authorizer has no users to authorize.",
        )
        suppress(
            self.api,
            "APIG3",
            "Abuse is bounded by the per-key usage plan and the stage throttle; a WAF web ACL is a "
            "per-deployment choice (cost, rule sets) that can be attached to the stage later.",
        )


class ApiStack(cdk.Stack):
    """API Gateway and the front-door Lambdas (buffered and streaming)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        config: SynapseConfig,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        redis_environment: dict[str, str],
        file_environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id, env=env, description="Synapse: REST API and front-door Lambdas")
        code = python_lambda_code(root=REPO_ROOT, packages=LAMBDA_PACKAGES, runtime=RUNTIME)
        self.front_door = FrontDoor(
            self,
            "FrontDoor",
            code=code,
            vpc=vpc,
            subnets=subnets,
            redis_environment=redis_environment,
            file_environment=file_environment,
            models=config.models,
            model_catalog=config.model_catalog,
            web_adapter_layer_version=config.web_adapter_layer_version,
            stream_reserved_concurrency=config.stream_reserved_concurrency,
        )
        self.public_api = PublicApi(
            self,
            "PublicApi",
            handler=self.front_door.function,
            stream_handler=self.front_door.stream_function,
            authorizer=KeyAuthorizer(self, "KeyAuthorizer", code=code).authorizer,
            rate_limit=config.api_rate_limit,
            burst_limit=config.api_burst_limit,
            v1_rate_limit=config.v1_rate_limit,
        )
        cdk.CfnOutput(self, "ApiUrl", value=self.public_api.api.url, description="Base URL of the API")
        cdk.CfnOutput(
            self,
            "ApiKeyId",
            value=self.public_api.api_key.key_id,
            description="aws apigateway get-api-key --include-value --api-key <this id> --query value",
        )
        cdk.CfnOutput(
            self,
            "UsagePlanId",
            value=self.public_api.usage_plan.usage_plan_id,
            description="A new tenant's key joins this plan (create-usage-plan-key) or a plan of its own",
        )
