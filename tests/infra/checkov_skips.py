"""Every checkov finding Synapse accepts, with the reason, in one place (tests/infra/test_checkov.py).

A skip names a check and, where the reason holds for some resources only, a pattern of the
resources it covers (`<CloudFormation type>.<logical id>`, matched from the start): a new resource
that fails the same check still fails the test. A skip that matches no finding fails the test too,
so the list cannot outlive the reasons in it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Skip:
    reason: str
    # Regular expressions matched against checkov's `resource`; empty: every resource.
    resources: tuple[str, ...] = ()


SKIPS: dict[str, Skip] = {
    "CKV_AWS_33": Skip(
        "The alerts key's one `*` principal is narrowed by conditions to Auto Scaling's service-linked "
        "role of this account, through SNS: the role is named by condition because a fresh account "
        "only gets it with its first group, after the key, and KMS rejects a missing principal.",
        resources=(r"AWS::KMS::Key\.AlertsKey",),
    ),
    "CKV_AWS_158": Skip(
        "CloudWatch Logs encrypts every log group at rest with its service key; a customer KMS key "
        "per group would add $1/month each to the lean profile's idle bill for no reader it keeps out."
    ),
    "CKV_AWS_116": Skip(
        "A dead-letter queue only catches asynchronous invocations; every Synapse function is invoked "
        "synchronously (API Gateway, authorizer, CloudFormation custom resources), where the caller "
        "sees the error."
    ),
    "CKV_AWS_117": Skip(
        "These functions call only public AWS or Grafana endpoints (authorizer, custom resources): a "
        "VPC would add NAT or endpoints to reach them and protect nothing.",
        resources=(
            r"AWS::Lambda::Function\.KeyAuthorizerFunction",
            r"AWS::Lambda::Function\.GrafanaProvision",
            r"AWS::Lambda::Function\.GrafanaProviderframeworkonEvent",
            r"AWS::Lambda::Function\.PublicApiAccountLoggingRole",
            r"AWS::Lambda::Function\.AWS679f53fac002430cb0da5b7982bd2287",  # CDK's AwsCustomResource
            r"AWS::Lambda::Function\.CustomVpcRestrictDefaultSG",
            r"AWS::Lambda::Function\.WorkerImage",  # the worker image build's start, wait and framework
        ),
    ),
    "CKV_AWS_115": Skip(
        "Reserved concurrency is for the streaming front door, sized from its throttle (config.py), and "
        "only where synapse:reserveStreamConcurrency asks: a new account's reduced concurrency quota "
        "cannot hold a reservation, so by default every function shares the unreserved pool. The "
        "buffered front door, the authorizer and deploy-time custom resources never reserve: reserving "
        "for them would cut what the account can reserve at all.",
        resources=(
            r"AWS::Lambda::Function\.FrontDoorFunction",
            r"AWS::Lambda::Function\.FrontDoorStreamFunction",
            r"AWS::Lambda::Function\.KeyAuthorizerFunction",
            r"AWS::Lambda::Function\.GrafanaProvision",
            r"AWS::Lambda::Function\.GrafanaProviderframeworkonEvent",
            r"AWS::Lambda::Function\.PublicApiAccountLoggingRole",
            r"AWS::Lambda::Function\.AWS679f53fac002430cb0da5b7982bd2287",
            r"AWS::Lambda::Function\.CustomVpcRestrictDefaultSG",
            r"AWS::Lambda::Function\.WorkerImage",  # the worker image build's start, wait and framework
        ),
    ),
    "CKV_AWS_149": Skip(
        "The webhook secrets use Secrets Manager's AWS-managed key: who reads them is decided by IAM "
        "(the manager's task role alone), and a customer key would add $1/month to the idle bill.",
        resources=(r"AWS::SecretsManager::Secret\.WebhookSecrets",),
    ),
    "CKV_AWS_173": Skip(
        "Function environments hold settings and resource names, no secrets (ElastiCache uses IAM "
        "auth); Lambda encrypts them at rest with its service key."
    ),
    "CKV_AWS_18": Skip(
        "The access-log bucket is where the other buckets log to; logging its own access would log "
        "into itself.",
        resources=(r"AWS::S3::Bucket\.AccessLogsBucket",),
    ),
    "CKV_AWS_21": Skip(
        "Access logs are written once and expired by lifecycle; versions would only keep deleted logs. "
        "The files bucket's objects are written once too (a file's bytes never change), and a file a "
        "tenant deletes or that expires must be gone, not kept as a noncurrent version.",
        resources=(r"AWS::S3::Bucket\.AccessLogsBucket", r"AWS::S3::Bucket\.FilesBucket"),
    ),
    "CKV_AWS_65": Skip(
        "Container Insights costs per metric and is off in the lean profile (the default synth); the "
        "production profile turns it on. Synapse's own metrics go to AMP.",
        resources=(r"AWS::ECS::Cluster\.Cluster",),
    ),
    "CKV_AWS_88": Skip(
        "The lean profile runs GPU instances in public subnets (no NAT gateway to pay for); their "
        "security group admits only the manager, and the production profile makes them private.",
        resources=(
            r"AWS::EC2::LaunchTemplate\.GpuCapacityLaunchTemplate",
            r"AWS::EC2::LaunchTemplate\.GpuCapacityBurstLaunchTemplate",
        ),
    ),
    "CKV_AWS_111": Skip(
        "The GPU instance role's logs:CreateLogStream/PutLogEvents on `*`: the ECS agent's own "
        "statement (as in AWS's AmazonEC2ContainerServiceforEC2Role); no other write is unscoped.",
        resources=(r"AWS::IAM::Policy\.GpuCapacityInstanceRoleDefaultPolicy",),
    ),
    "CKV_AWS_73": Skip(
        "X-Ray tracing is billed per trace; the front door's latency is measured by its own metrics "
        "(synapse_* in AMP) and API Gateway's CloudWatch metrics.",
        resources=(r"AWS::ApiGateway::Stage\.PublicApiDeploymentStage",),
    ),
    "CKV_AWS_120": Skip(
        "API responses are job states that change from one poll to the next; a cache would answer "
        "with stale states.",
        resources=(r"AWS::ApiGateway::Stage\.PublicApiDeploymentStage",),
    ),
    "CKV_AWS_136": Skip(
        "ECR encrypts every image at rest with AES-256 by default; a customer KMS key would add $1/month "
        "to the idle bill for an image built from this public repository's own source.",
        resources=(r"AWS::ECR::Repository\.WorkerImageRepository",),
    ),
    "CKV_AWS_51": Skip(
        "The worker image's tag is its source's hash, so a tag never names two sources; a deploy retried "
        "after a rollback builds and pushes the same tag again, which an immutable repository refuses.",
        resources=(r"AWS::ECR::Repository\.WorkerImageRepository",),
    ),
    "CKV_AWS_59": Skip(
        "GET /healthz answers without a key by design (docs/api.md), for load balancers and probes.",
        resources=(r"AWS::ApiGateway::Method\.PublicApihealthzGET",),
    ),
}
