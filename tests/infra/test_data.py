"""ElastiCache and the model store: encrypted, authenticated, Multi-AZ, private."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from tests.infra import cfn

pytestmark = pytest.mark.infra


def test_elasticache_encrypts_in_transit_and_at_rest_and_fails_over_across_azs(
    templates: dict[str, Template],
) -> None:
    templates["data"].has_resource_properties(
        "AWS::ElastiCache::ReplicationGroup",
        {
            "TransitEncryptionEnabled": True,
            "AtRestEncryptionEnabled": True,
            "MultiAZEnabled": True,
            "AutomaticFailoverEnabled": True,
            "NumCacheClusters": 2,
        },
    )


def test_elasticache_never_evicts_a_queued_job(raw: dict[str, dict[str, Any]]) -> None:
    # Every job hash has a TTL: under ElastiCache's default volatile-lru a queued job could be evicted.
    (logical_id,) = cfn.resources(raw["data"], "AWS::ElastiCache::ParameterGroup")
    parameters = cfn.only(raw["data"], "AWS::ElastiCache::ParameterGroup")
    assert parameters["Properties"] == {"maxmemory-policy": "noeviction"}
    assert parameters["CacheParameterGroupFamily"] == "valkey8"
    group = cfn.only(raw["data"], "AWS::ElastiCache::ReplicationGroup")
    assert group["CacheParameterGroupName"] == {"Ref": logical_id}


def test_elasticache_auth_token_comes_from_secrets_manager(raw: dict[str, dict[str, Any]]) -> None:
    group = cfn.only(raw["data"], "AWS::ElastiCache::ReplicationGroup")
    token = cfn.referenced_ids(group["AuthToken"])
    assert "{{resolve:secretsmanager:" in token
    secrets = [key for key in cfn.resources(raw["data"], "AWS::SecretsManager::Secret") if "AuthToken" in key]
    assert len(secrets) == 1
    assert secrets[0] in token


def test_clients_connect_with_tls(platform: Any) -> None:
    assert platform.data.cache.url.startswith("rediss://")


def test_elasticache_is_reachable_only_from_front_door_manager_workers_and_redis_exporter(
    raw: dict[str, dict[str, Any]],
) -> None:
    redis_rules = [
        rule
        for stack, template in raw.items()
        for rule in cfn.ingress_rules(stack, template)
        if "CacheSecurityGroup" in rule.target
    ]
    sources = sorted((rule.stack, rule.from_port, rule.to_port) for rule in redis_rules)
    assert sources == [
        ("api", 6380, 6380),
        ("manager", 6380, 6380),
        ("monitoring", 6380, 6380),
        ("workers", 6380, 6380),
    ]
    expected_source = {
        "api": "FrontDoorSecurityGroup",
        "manager": "ManagerSecurityGroup",
        "monitoring": "RedisExporterSecurityGroup",
        "workers": "WorkersSecurityGroup",
    }
    for rule in redis_rules:
        assert expected_source[rule.stack] in rule.source


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
    s3_statements = [
        statement
        for statement in cfn.policy_statements("workers", raw["workers"])
        if any(action.startswith("s3:") for action in statement.actions)
    ]
    assert sorted(action for s in s3_statements for action in s.actions) == ["s3:GetObject", "s3:ListBucket"]
    assert all("ModelStoreBucket" in resource for s in s3_statements for resource in s.resources)
