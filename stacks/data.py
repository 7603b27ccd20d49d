"""State: the job queue and results (ElastiCache) and the model store (S3)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from stacks.config import REDIS_PORT, SynapseConfig
from stacks.nag import suppress


class Cache(Construct):
    """A Multi-AZ Valkey replication group with TLS and an AUTH token, reachable only from granted clients.

    Clients get in with `client.connections.allow_to_default_port(cache.connections)`, done where
    the units are composed; the security group starts with no ingress at all.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        node_type: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Synapse ElastiCache: ingress only from the front door, manager and workers",
            allow_all_outbound=False,
        )
        self.connections = ec2.Connections(
            security_groups=[self.security_group], default_port=ec2.Port.tcp(REDIS_PORT)
        )
        # Plain string (no JSON): ECS injects it as SYNAPSE_REDIS_AUTH_TOKEN and the front door reads
        # it by ARN. No punctuation keeps it inside ElastiCache's AUTH character rules and URL-safe.
        self.auth_secret = secretsmanager.Secret(
            self,
            "AuthToken",
            description="AUTH token of Synapse's ElastiCache replication group",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False
            ),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        suppress(
            self.auth_secret,
            "SMG4",
            "Rotating an ElastiCache AUTH token is a two-step ModifyReplicationGroup (ROTATE then SET) "
            "coordinated with a rolling restart of every client; it is a runbook step, not a "
            "blind scheduled rotation that would cut the manager and workers off mid-batch.",
        )

        subnet_group = elasticache.CfnSubnetGroup(
            self,
            "SubnetGroup",
            description="Synapse ElastiCache: private subnets",
            subnet_ids=vpc.select_subnets(
                subnet_type=subnets.subnet_type, subnet_group_name=subnets.subnet_group_name
            ).subnet_ids,
        )
        slow_log = logs.LogGroup(
            self,
            "SlowLog",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        # ElastiCache's default, volatile-lru, evicts keys that carry a TTL under memory pressure, and
        # every job hash has one: a queued job could vanish. noeviction refuses writes instead, which
        # the front door answers with 503 `store_full` while every accepted job is kept.
        parameters = elasticache.CfnParameterGroup(
            self,
            "Parameters",
            cache_parameter_group_family="valkey8",
            description="Synapse: never evict (a queued job must not vanish under memory pressure)",
            properties={"maxmemory-policy": "noeviction"},
        )
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_description="Synapse job streams, job hashes and results",
            engine="valkey",
            engine_version="8.0",
            cache_node_type=node_type,
            # Cluster mode off: one primary and one replica in the other AZ; failover is automatic.
            num_cache_clusters=2,
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            transit_encryption_enabled=True,
            at_rest_encryption_enabled=True,
            auth_token=self.auth_secret.secret_value.unsafe_unwrap(),
            port=REDIS_PORT,
            cache_subnet_group_name=subnet_group.ref,
            cache_parameter_group_name=parameters.ref,
            security_group_ids=[self.security_group.security_group_id],
            snapshot_retention_limit=1,
            auto_minor_version_upgrade=True,
            log_delivery_configurations=[
                elasticache.CfnReplicationGroup.LogDeliveryConfigurationRequestProperty(
                    destination_type="cloudwatch-logs",
                    destination_details=elasticache.CfnReplicationGroup.DestinationDetailsProperty(
                        cloud_watch_logs_details=elasticache.CfnReplicationGroup.CloudWatchLogsDestinationDetailsProperty(
                            log_group=slow_log.log_group_name
                        )
                    ),
                    log_format="json",
                    log_type="slow-log",
                )
            ],
        )
        host = self.replication_group.attr_primary_end_point_address
        # `rediss://`: TLS. The token is not in the URL; clients get it from Secrets Manager.
        self.url = f"rediss://{host}:{REDIS_PORT}/0"


class AccessLogs(Construct):
    """The bucket that S3 server access logs and load-balancer access logs are delivered to."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        # SSE-S3 because neither S3 log delivery nor ELB log delivery can write with a KMS key.
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        suppress(
            self.bucket,
            "S1",
            "This is the access-log bucket itself; logging it into itself would loop, and into a "
            "further bucket would only move the same question one bucket down.",
        )


class ModelStore(Construct):
    """The S3 model store workers sync checkpoints from: private, versioned, encrypted, TLS only."""

    def __init__(self, scope: Construct, construct_id: str, *, access_logs: s3.IBucket) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="model-store/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=cdk.Duration.days(30),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(7),
                )
            ],
            # Checkpoints are expensive to rebuild; `cdk destroy` leaves them.
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        stack = cdk.Stack.of(self)
        logical_id = stack.resolve(stack.get_logical_id(self.bucket.node.default_child))  # type: ignore[arg-type]
        # How cdk-nag names this bucket's objects in findings, for a suppression scoped to exactly them.
        self.objects_nag_resource = f"Resource::<{logical_id}.Arn>/*"

    def grant_read_models(self, grantee: iam.IGrantable) -> iam.Grant:
        """List the store and read its objects: what a worker's model sync needs, no versions, no writes."""
        list_grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:ListBucket"], resource_arns=[self.bucket.bucket_arn]
        )
        read_grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:GetObject"], resource_arns=[self.bucket.arn_for_objects("*")]
        )
        return list_grant.combine(read_grant)


class DataStack(cdk.Stack):
    """ElastiCache, the model store and the access-log bucket: the parts that hold state."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        config: SynapseConfig,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
    ) -> None:
        super().__init__(
            scope, construct_id, env=env, description="Synapse: ElastiCache (Valkey), model store"
        )
        self.access_logs = AccessLogs(self, "AccessLogs")
        self.cache = Cache(self, "Cache", vpc=vpc, subnets=subnets, node_type=config.cache_node_type)
        self.model_store = ModelStore(self, "ModelStore", access_logs=self.access_logs.bucket)
