"""State: the job queue and results (ElastiCache), the model store and the Files API's bucket (S3)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.config import FILE_PREFIX, REDIS_PORT, SynapseConfig
from stacks.nag import suppress

# One Synapse per account and region: ElastiCache user ids and serverless cache names are unique there.
CACHE_NAME = "synapse"
CACHE_USER = "synapse"
# What `synapse models publish` needs to fill the store (worker_image/publish.py).
PUBLISH_COMMAND = "synapse models publish --bucket <this bucket> triton_models/<model> ..."


class Cache(Construct):
    """ElastiCache Serverless (Valkey 8): TLS always, IAM authentication only, reachable only from
    granted clients.

    Clients get in twice, both done where the units are composed: the network path with
    `client.connections.allow_to_default_port(cache.connections)` (the security group starts with no
    ingress at all) and the login with `cache.grant_connect(client)`; `environment` is what a client
    needs to find and sign in to it (contract/settings.py).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        max_storage_gb: int,
        max_ecpu_per_second: int,
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
        # IAM users need user id = user name, lowercase. Engine "redis" for users and group: a group
        # of engine "valkey" admits only users with a password or IAM, and every group must hold a user
        # named `default`, which here is disabled and so needs neither (a Valkey cache takes both).
        self.user = elasticache.CfnUser(
            self,
            "User",
            engine="redis",
            user_id=CACHE_USER,
            user_name=CACHE_USER,
            authentication_mode={"Type": "iam"},
            access_string="on ~* &* +@all",
        )
        disabled_default = elasticache.CfnUser(
            self,
            "DisabledDefaultUser",
            engine="redis",
            user_id=f"{CACHE_USER}-default",
            user_name="default",
            no_password_required=True,
            access_string="off -@all",
        )
        user_group = elasticache.CfnUserGroup(
            self,
            "UserGroup",
            engine="redis",
            user_group_id=f"{CACHE_USER}-users",
            user_ids=[self.user.user_id, disabled_default.user_id],
        )
        # The ids above are plain strings, not references: the order has to be stated.
        user_group.node.add_dependency(self.user, disabled_default)

        self.name = CACHE_NAME
        # At its storage maximum a serverless cache evicts keys that carry a TTL (every job hash has
        # one), least recently used first: the maximum caps the bill, not the idle cost (storage is
        # billed as used), so it is sized well above a full queue (docs/deploy.md).
        self.serverless_cache = elasticache.CfnServerlessCache(
            self,
            "ServerlessCache",
            serverless_cache_name=CACHE_NAME,
            description="Synapse job streams, job hashes and results",
            engine="valkey",
            major_engine_version="8",
            cache_usage_limits=elasticache.CfnServerlessCache.CacheUsageLimitsProperty(
                data_storage=elasticache.CfnServerlessCache.DataStorageProperty(
                    maximum=max_storage_gb, unit="GB"
                ),
                ecpu_per_second=elasticache.CfnServerlessCache.ECPUPerSecondProperty(
                    maximum=max_ecpu_per_second
                ),
            ),
            subnet_ids=vpc.select_subnets(
                subnet_type=subnets.subnet_type, subnet_group_name=subnets.subnet_group_name
            ).subnet_ids,
            security_group_ids=[self.security_group.security_group_id],
            user_group_id=user_group.user_group_id,
            snapshot_retention_limit=1,
        )
        self.serverless_cache.node.add_dependency(user_group)
        region = cdk.Stack.of(self).region
        # `rediss://`: TLS, which a serverless cache always requires. No secret anywhere: each client
        # signs a short-lived IAM token for the user (contract/redis_client.py).
        self.environment: dict[str, str] = {
            "SYNAPSE_REDIS_URL": f"rediss://{self.serverless_cache.attr_endpoint_address}:{REDIS_PORT}/0",
            "SYNAPSE_REDIS_CLUSTER": "true",
            "SYNAPSE_REDIS_IAM_USER": CACHE_USER,
            "SYNAPSE_REDIS_IAM_CACHE": CACHE_NAME,
            "SYNAPSE_REDIS_IAM_REGION": region,
        }

    def grant_connect(self, grantee: iam.IGrantable) -> iam.Grant:
        """`elasticache:Connect` as the Synapse user to this cache: both ARNs are required."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["elasticache:Connect"],
            resource_arns=[self.serverless_cache.attr_arn, self.user.attr_arn],
        )


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


class FilesBucket(Construct):
    """The Files API's bucket (openai_api/file_store.py): batch input files, upload parts, the batches'
    copies of their inputs and their output and error files, under `<prefix><tenant>/`.

    A bucket of its own, so that its grants, expiry and encryption answer to this data alone. SSE-KMS with
    the AWS-managed `aws/s3` key: it costs no monthly fee (a customer-managed key would add $1 a month to
    the idle bill: https://docs.aws.amazon.com/kms/latest/developerguide/concepts.html#aws-managed-key),
    and its key policy lets any principal of the account use it through S3, so the grants below need no
    KMS statement. The bucket key has S3 ask KMS once per bucket-level key instead of once per object,
    which keeps a 50,000-line batch's reads and writes off KMS's request charges and quota
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucket-key.html). Not versioned: a file the
    API deletes is gone, and an expired one too.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, access_logs: s3.IBucket, retention_days: int
    ) -> None:
        super().__init__(scope, construct_id)
        self.prefix = FILE_PREFIX
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.KMS_MANAGED,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="files/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-files",
                    prefix=self.prefix,
                    expiration=cdk.Duration.days(retention_days),
                ),
                # Completing an upload of over 8 MiB is an S3 multipart upload, aborted on failure; one
                # whose abort failed too (or a manager killed mid-write) would bill its parts unseen
                # until aborted (https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpu-abort-incomplete-mpu-lifecycle-config.html).
                s3.LifecycleRule(
                    id="abort-incomplete-multipart-uploads",
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                ),
            ],
            # Tenants' data, as the model store's checkpoints are kept: `cdk destroy` leaves it.
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        # The prefix is `Settings.file_prefix`'s default; the retention is the lifecycle rule's, so a file's
        # record (its `expires_at`) and its bytes go on the same day.
        self.environment: dict[str, str] = {
            "SYNAPSE_FILE_BUCKET": self.bucket.bucket_name,
            "SYNAPSE_FILE_RETENTION_DAYS": str(retention_days),
        }
        stack = cdk.Stack.of(self)
        logical_id = stack.resolve(stack.get_logical_id(self.bucket.node.default_child))  # type: ignore[arg-type]
        # How cdk-nag names the objects under the prefix in findings, for a suppression scoped to them.
        self.objects_nag_resource = f"Resource::<{logical_id}.Arn>/{self.prefix}*"

    def grant_files(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read, write and delete objects under the prefix: what the front door (uploads, downloads,
        deletes, upload parts) and the manager (a batch's input copy, its output files; the copy is
        deleted when the batch ends) do. Nothing lists; ListBucket is granted only for the prefix, so that
        reading a key that is not there answers 404 NoSuchKey (the store's "no such file") instead of 403
        AccessDenied (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html, Permissions)."""
        objects = iam.Grant.add_to_principal(
            grantee=grantee,
            # AbortMultipartUpload: completing an upload of over 8 MiB writes an S3 multipart upload,
            # which a failed check (UTF-8, md5) aborts (openai_api/file_store.py).
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            resource_arns=[self.bucket.arn_for_objects(f"{self.prefix}*")],
        )
        listing = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:ListBucket"],
            resource_arns=[self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": f"{self.prefix}*"}},
        )
        return objects.combine(listing)


class DataStack(cdk.Stack):
    """ElastiCache, the model store, the files bucket and the access-log bucket: the parts that hold state."""

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
            scope,
            construct_id,
            env=env,
            description="Synapse: ElastiCache Serverless (Valkey), model store, files bucket",
        )
        self.access_logs = AccessLogs(self, "AccessLogs")
        self.cache = Cache(
            self,
            "Cache",
            vpc=vpc,
            subnets=subnets,
            max_storage_gb=config.cache_max_storage_gb,
            max_ecpu_per_second=config.cache_max_ecpu_per_second,
        )
        self.model_store = ModelStore(self, "ModelStore", access_logs=self.access_logs.bucket)
        self.files = FilesBucket(
            self, "Files", access_logs=self.access_logs.bucket, retention_days=config.file_retention_days
        )
        # The worker image carries the project's checkpoints; models published here (and named in
        # synapse:modelFolders) add to them.
        cdk.CfnOutput(
            self,
            "ModelBucketName",
            value=self.model_store.bucket.bucket_name,
            description=f"The model store: {PUBLISH_COMMAND}",
        )
