"""ElastiCache Serverless with IAM authentication, and the model store: encrypted, private."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from stacks.config import REDIS_PORT
from stacks.data import CACHE_NAME, CACHE_USER
from tests.infra import cfn
from tests.infra.synthesis import REPO

pytestmark = pytest.mark.infra


def test_elasticache_is_serverless_valkey_8_with_the_configured_limits(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    cache = cfn.only(raw["data"], "AWS::ElastiCache::ServerlessCache")
    assert (cache["Engine"], cache["MajorEngineVersion"]) == ("valkey", "8")
    limits = cache["CacheUsageLimits"]
    assert limits["DataStorage"] == {"Maximum": platform.config.cache_max_storage_gb, "Unit": "GB"}
    assert limits["ECPUPerSecond"] == {"Maximum": platform.config.cache_max_ecpu_per_second}
    assert cache["SnapshotRetentionLimit"] >= 1


def test_elasticache_admits_only_the_iam_user_and_a_disabled_default(raw: dict[str, dict[str, Any]]) -> None:
    users = {
        u["Properties"]["UserId"]: u["Properties"]
        for u in cfn.resources(raw["data"], "AWS::ElastiCache::User").values()
    }
    synapse = users[CACHE_USER]
    assert synapse["UserName"] == CACHE_USER  # IAM authentication needs id = name, lowercase
    assert synapse["AuthenticationMode"] == {"Type": "iam"}
    assert synapse["AccessString"].startswith("on ")
    (default,) = (u for u in users.values() if u["UserName"] == "default")
    assert default["AccessString"].startswith("off "), "the default user can never sign in"
    group = cfn.only(raw["data"], "AWS::ElastiCache::UserGroup")
    assert sorted(group["UserIds"]) == sorted(users)
    cache = cfn.only(raw["data"], "AWS::ElastiCache::ServerlessCache")
    assert cache["UserGroupId"] == group["UserGroupId"]


def test_the_cache_has_no_secret_anywhere(raw: dict[str, dict[str, Any]]) -> None:
    # Clients sign short-lived IAM tokens: no AUTH token to store, inject or rotate. The one secret
    # of the app is the manager's webhook secrets (tests/infra/test_tenancy.py).
    secrets = {
        (stack, logical_id)
        for stack, template in raw.items()
        for logical_id in cfn.resources(template, "AWS::SecretsManager::Secret")
    }
    assert [(stack, logical_id.startswith("WebhookSecrets")) for stack, logical_id in secrets] == [
        ("manager", True)
    ]


def test_clients_get_exactly_the_url_and_iam_settings(platform: Any) -> None:
    environment = platform.data.cache.environment
    assert sorted(environment) == [
        "SYNAPSE_REDIS_CLUSTER",
        "SYNAPSE_REDIS_IAM_CACHE",
        "SYNAPSE_REDIS_IAM_REGION",
        "SYNAPSE_REDIS_IAM_USER",
        "SYNAPSE_REDIS_URL",
    ]
    stack = platform.data
    url = stack.resolve(environment["SYNAPSE_REDIS_URL"])
    assert cfn.referenced_ids(url).startswith('{"Fn::Join": ["", ["rediss://')
    assert f":{REDIS_PORT}/0" in cfn.referenced_ids(url)
    assert environment["SYNAPSE_REDIS_CLUSTER"] == "true"
    assert environment["SYNAPSE_REDIS_IAM_USER"] == CACHE_USER
    assert environment["SYNAPSE_REDIS_IAM_CACHE"] == CACHE_NAME
    assert environment["SYNAPSE_REDIS_IAM_REGION"] == platform.config.region


def test_serverless_cache_listens_on_6379() -> None:
    assert REDIS_PORT == 6379  # ElastiCache Serverless' fixed port (6380 serves reads from replicas)


@pytest.mark.parametrize("stack", ["api", "manager", "workers"])
def test_each_client_may_connect_to_this_cache_as_the_synapse_user(
    raw: dict[str, dict[str, Any]], stack: str
) -> None:
    connects = [s for s in cfn.policy_statements(stack, raw[stack]) if "elasticache:Connect" in s.actions]
    assert len(connects) == 1, connects
    (statement,) = connects
    assert statement.actions == ("elasticache:Connect",)
    targets = " ".join(statement.resources)
    assert "CacheServerlessCache" in targets and "CacheUser" in targets
    assert "*" not in targets


def test_elasticache_is_reachable_only_from_front_door_manager_and_workers(
    raw: dict[str, dict[str, Any]],
) -> None:
    redis_rules = [
        rule
        for stack, template in raw.items()
        for rule in cfn.ingress_rules(stack, template)
        if "CacheSecurityGroup" in rule.target
    ]
    sources = sorted((rule.stack, rule.from_port, rule.to_port) for rule in redis_rules)
    assert sources == [("api", 6379, 6379), ("manager", 6379, 6379), ("workers", 6379, 6379)]
    expected_source = {
        "api": "FrontDoorSecurityGroup",
        "manager": "ManagerSecurityGroup",
        "workers": "WorkersSecurityGroup",
    }
    for rule in redis_rules:
        assert expected_source[rule.stack] in rule.source


def test_the_model_bucket_is_an_output_that_says_how_to_publish(raw: dict[str, dict[str, Any]]) -> None:
    output = raw["data"]["Outputs"]["ModelBucketName"]
    assert "ModelStoreBucket" in cfn.referenced_ids(output["Value"])
    assert "synapse models publish --bucket" in output["Description"]
    # The command the description names is the one the CLI has.
    assert "synapse models publish --bucket" in (REPO / "worker_image" / "publish.py").read_text()


def test_model_store_is_encrypted_versioned_private_and_tls_only(templates: dict[str, Template]) -> None:
    data = templates["data"]
    data.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "VersioningConfiguration": {"Status": "Enabled"},
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "LoggingConfiguration": Match.object_like({"LogFilePrefix": "model-store/"}),
        },
    )
    data.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": Match.object_like(
                {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                            )
                        ]
                    )
                }
            )
        },
    )


def test_model_store_survives_cdk_destroy(templates: dict[str, Template]) -> None:
    templates["data"].has_resource(
        "AWS::S3::Bucket",
        {
            "Properties": Match.object_like({"VersioningConfiguration": {"Status": "Enabled"}}),
            "DeletionPolicy": "Retain",
        },
    )


def test_workers_may_only_read_the_model_store(raw: dict[str, dict[str, Any]]) -> None:
    """The instances and tasks; the worker image's build reads its source asset, nothing else of S3."""
    s3_statements = [
        statement
        for statement in cfn.policy_statements("workers", raw["workers"])
        if any(action.startswith("s3:") for action in statement.actions)
        and not statement.policy.startswith("WorkerImageBuildRole")
    ]
    assert sorted(action for s in s3_statements for action in s.actions) == ["s3:GetObject", "s3:ListBucket"]
    assert all("ModelStoreBucket" in resource for s in s3_statements for resource in s.resources)
