"""The Files API's bucket: SSE-KMS, private, TLS only, expiring its files; reachable by the front door
and the manager alone, on the files prefix alone, and from the isolated subnets through the gateway
endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from contract.settings import Settings
from stacks.config import FILE_RETENTION_DAYS, MIN_FILE_RETENTION_DAYS, ConfigError, SynapseConfig
from stacks.data import FilesBucket
from tests.infra import cfn

pytestmark = pytest.mark.infra

PREFIX = Settings.model_fields["file_prefix"].default


def files_bucket(template: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The files bucket's logical id and resource (properties, policies)."""
    (found,) = [
        (i, r) for i, r in cfn.resources(template, "AWS::S3::Bucket").items() if i.startswith("Files")
    ]
    return found


def s3_statements(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every IAM policy statement of the template that names an S3 action."""
    return [
        statement
        for policy in cfn.resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if any(action.startswith("s3:") for action in _as_list(statement["Action"]))
    ]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_files_are_encrypted_with_the_aws_managed_s3_key_and_a_bucket_key(
    raw: dict[str, dict[str, Any]],
) -> None:
    _, bucket = files_bucket(raw["data"])
    (rule,) = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    # aws:kms with no key named is S3's AWS-managed key, aws/s3: no key of ours to pay for monthly.
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms"}
    assert rule["BucketKeyEnabled"] is True
    assert cfn.resources(raw["data"], "AWS::KMS::Key") == {}


def test_files_bucket_is_private_logged_and_kept_on_destroy(raw: dict[str, dict[str, Any]]) -> None:
    _, bucket = files_bucket(raw["data"])
    properties = bucket["Properties"]
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert properties["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert "AccessLogsBucket" in cfn.referenced_ids(
        properties["LoggingConfiguration"]["DestinationBucketName"]
    )
    assert "VersioningConfiguration" not in properties, (
        "a deleted file must be gone, not a noncurrent version"
    )
    assert bucket["DeletionPolicy"] == "Retain"


def test_files_bucket_refuses_every_request_not_over_tls(raw: dict[str, dict[str, Any]]) -> None:
    logical_id, _ = files_bucket(raw["data"])
    (policy,) = [
        p["Properties"]
        for p in cfn.resources(raw["data"], "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": logical_id}
    ]
    denials = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert {"Bool": {"aws:SecureTransport": "false"}} in [s["Condition"] for s in denials]
    assert all(s["Principal"] == {"AWS": "*"} and s["Action"] == "s3:*" for s in denials)


def test_files_expire_after_the_retention_setting_and_abandoned_uploads_after_a_day(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    _, bucket = files_bucket(raw["data"])
    rules = {rule["Id"]: rule for rule in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-files"] == {
        "Id": "expire-files",
        "Prefix": PREFIX,
        "ExpirationInDays": platform.config.file_retention_days,
        "Status": "Enabled",
    }
    assert platform.config.file_retention_days == FILE_RETENTION_DAYS == 30
    aborts = rules["abort-incomplete-multipart-uploads"]
    assert aborts["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert "Prefix" not in aborts, "every multipart upload of the bucket, whoever started it"


def test_the_retention_is_a_context_value_with_a_floor_above_the_batch_window() -> None:
    app = cdk.App(context={"synapse:fileRetentionDays": "7"})
    config = SynapseConfig.from_context(app)
    stack = cdk.Stack(app, "Files")
    FilesBucket(
        stack, "Files", access_logs=s3.Bucket(stack, "Logs"), retention_days=config.file_retention_days
    )
    _, bucket = files_bucket(Template.from_stack(stack).to_json())
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert [r["ExpirationInDays"] for r in rules if r["Id"] == "expire-files"] == [7]
    assert Settings.model_fields["batch_window_s"].default / 86_400 < MIN_FILE_RETENTION_DAYS
    with pytest.raises(ConfigError, match="synapse:fileRetentionDays"):
        SynapseConfig.from_context(
            cdk.App(context={"synapse:fileRetentionDays": MIN_FILE_RETENTION_DAYS - 1})
        )


@pytest.mark.parametrize("stack", ["api", "manager"])
def test_front_door_and_manager_may_read_write_and_delete_files_under_the_prefix_only(
    raw: dict[str, dict[str, Any]], stack: str
) -> None:
    logical_id, _ = files_bucket(raw["data"])
    statements = [s for s in s3_statements(raw[stack]) if logical_id in cfn.referenced_ids(s["Resource"])]
    by_action = {tuple(sorted(_as_list(s["Action"]))): s for s in statements}
    writes = ("s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject")
    assert sorted(by_action) == [writes, ("s3:ListBucket",)]
    objects = by_action[writes]
    (resource,) = _as_list(objects["Resource"])
    assert cfn.referenced_ids(resource).endswith(f'"/{PREFIX}*"]]}}'), resource
    # ListBucket only so that a missing key reads as 404, and only for keys under the prefix.
    listing = by_action[("s3:ListBucket",)]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": f"{PREFIX}*"}}
    assert "/" not in cfn.referenced_ids(listing["Resource"])
    assert all("Condition" not in s or s is listing for s in statements)


def test_no_one_else_may_touch_the_files_bucket(raw: dict[str, dict[str, Any]]) -> None:
    logical_id, _ = files_bucket(raw["data"])
    granted = {
        stack
        for stack, template in raw.items()
        for statement in s3_statements(template)
        if logical_id in cfn.referenced_ids(statement["Resource"])
    }
    assert granted == {"api", "manager"}


def test_front_door_and_manager_are_told_the_bucket(raw: dict[str, dict[str, Any]]) -> None:
    logical_id, _ = files_bucket(raw["data"])
    functions = [
        f["Properties"]["Environment"]["Variables"]
        for f in cfn.resources(raw["api"], "AWS::Lambda::Function").values()
        if "VpcConfig" in f["Properties"]
    ]
    manager = cfn.environment(cfn.container(raw["manager"], "manager"))
    assert len(functions) == 2, "the buffered and the streaming front door"
    for variables in [*functions, manager]:
        assert logical_id in cfn.referenced_ids(variables["SYNAPSE_FILE_BUCKET"])
        # The prefix is the runtime's default, which the grants and the expiry above are written for.
        assert "SYNAPSE_FILE_PREFIX" not in variables
        # A file's record (`expires_at`) goes with its bytes: the lifecycle rule's days, told to both.
        assert variables["SYNAPSE_FILE_RETENTION_DAYS"] == str(FILE_RETENTION_DAYS)


def test_the_front_door_reaches_s3_through_the_prefix_list_on_443_only(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    groups = cfn.resources(raw["api"], "AWS::EC2::SecurityGroup")
    (group_id,) = [i for i in groups if i.startswith("FrontDoor")]
    assert "SecurityGroupEgress" not in groups[group_id]["Properties"], "no inline (open) egress"
    egress = [
        rule["Properties"]
        for rule in cfn.resources(raw["api"], "AWS::EC2::SecurityGroupEgress").values()
        if group_id in cfn.referenced_ids(rule["Properties"]["GroupId"])
    ]

    def destination(rule: Mapping[str, Any]) -> str:
        return "S3 prefix list" if "DestinationPrefixListId" in rule else "a security group"

    # The cache on its port and S3's prefix list on HTTPS, nothing else.
    assert sorted((r["IpProtocol"], r["FromPort"], r["ToPort"], destination(r)) for r in egress) == [
        ("tcp", 443, 443, "S3 prefix list"),
        ("tcp", 6379, 6379, "a security group"),
    ]
    (to_s3,) = [r for r in egress if "DestinationPrefixListId" in r]
    assert "S3PrefixList" in cfn.referenced_ids(to_s3["DestinationPrefixListId"])
    lookup = cfn.only(raw["network"], "Custom::AWS")
    assert "describeManagedPrefixLists" in cfn.referenced_ids(lookup["Create"])
    assert f"com.amazonaws.{platform.config.region}.s3" in cfn.referenced_ids(lookup["Create"])
