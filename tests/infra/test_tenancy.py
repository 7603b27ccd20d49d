"""Tenants, callbacks and outcome topics in AWS: API keys carry their tenant, the authorizer may read
the keys, only the manager reads the webhook secrets and publishes outcomes, and callbacks are
https only. The outcome topics exist only with `synapse:outcomeTopics`, synthesized here once more."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest

from frontdoor.authorizer import TENANT_TAG
from stacks.config import SynapseConfig
from stacks.front_door import HANDLER, STREAM_HANDLER
from tests.infra import cfn
from tests.infra.synthesis import Synth, synthesize

pytestmark = pytest.mark.infra

TOPIC_VARIABLES = ("SYNAPSE_SUCCESS_TOPIC_ARN", "SYNAPSE_ERROR_TOPIC_ARN")
MANAGER_TASK_ROLE = "ManagerTaskDefinitionTaskRole"


@pytest.fixture(scope="module")
def with_topics(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out.topics"), {"synapse:outcomeTopics": "true"})


@pytest.fixture(scope="module")
def topics_raw(with_topics: Synth) -> dict[str, dict[str, Any]]:
    names = ("monitoring", "manager", "api", "alarms")
    return {name: with_topics.raw(getattr(with_topics.platform, name)) for name in names}


def manager_environment(raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return cfn.environment(cfn.container(raw["manager"], "manager"))


def statements_with(raw: dict[str, dict[str, Any]], prefix: str) -> list[cfn.Statement]:
    """Every IAM policy statement, in any stack, with an action that starts with `prefix`."""
    return [
        statement
        for stack, template in raw.items()
        for statement in cfn.policy_statements(stack, template)
        if any(action.startswith(prefix) for action in statement.actions)
    ]


def ref(template: dict[str, Any], resource_type: str) -> list[dict[str, str]]:
    return [{"Ref": logical_id} for logical_id in cfn.resources(template, resource_type)]


def test_the_default_api_key_belongs_to_the_default_tenant(raw: dict[str, dict[str, Any]]) -> None:
    key = cfn.only(raw["api"], "AWS::ApiGateway::ApiKey")
    assert {"Key": TENANT_TAG, "Value": "default"} in key["Tags"]  # the tag the authorizer reads


def test_the_authorizer_may_list_api_keys_and_nothing_else(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    """GetApiKeys returns each key with its tags: the one call the authorizer needs."""
    authorizer = [s for s in cfn.policy_statements("api", raw["api"]) if s.policy.startswith("KeyAuthorizer")]
    expected = (("apigateway:GET",), (f"arn:aws:apigateway:{platform.config.region}::/apikeys",))
    assert [(s.actions, s.resources) for s in authorizer] == [expected]
    # Besides the authorizer, only the custom resource that sets the account's logging role (test_api.py).
    setter = [
        s
        for s in statements_with(raw, "apigateway:")
        if s.stack == "api" and s.policy.startswith("PublicApiAccountLogging")
    ]
    assert [s.actions for s in setter] == [("apigateway:GET", "apigateway:PATCH")]
    assert set(statements_with(raw, "apigateway:")) == {*authorizer, *setter}


def test_the_webhook_secrets_start_with_a_generated_secret_for_the_default_tenant(
    raw: dict[str, dict[str, Any]],
) -> None:
    secret = cfn.only(raw["manager"], "AWS::SecretsManager::Secret")
    generated = secret["GenerateSecretString"]
    assert (generated["SecretStringTemplate"], generated["GenerateStringKey"]) == ("{}", "default")
    assert "SecretString" not in secret  # no value is written into the template
    assert "WebhookSecretsName" in raw["manager"]["Outputs"]
    assert manager_environment(raw)["SYNAPSE_WEBHOOK_SECRETS_ARN"] in ref(
        raw["manager"], "AWS::SecretsManager::Secret"
    )


def test_only_the_manager_task_role_reads_the_webhook_secrets(raw: dict[str, dict[str, Any]]) -> None:
    (reader,) = statements_with(raw, "secretsmanager:")
    assert (reader.stack, reader.policy.startswith(MANAGER_TASK_ROLE)) == ("manager", True)
    assert sorted(reader.actions) == ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]
    assert reader.resources == tuple(
        cfn.referenced_ids(r) for r in ref(raw["manager"], "AWS::SecretsManager::Secret")
    )
    assert all(cfn.resources(t, "AWS::SecretsManager::ResourcePolicy") == {} for t in raw.values())
    assert "Secrets" not in cfn.container(raw["manager"], "manager")


def test_callbacks_must_be_https_on_the_manager_and_every_front_door_function(
    raw: dict[str, dict[str, Any]],
) -> None:
    assert manager_environment(raw)["SYNAPSE_CALLBACK_HTTPS_ONLY"] == "true"
    front_door = [
        function["Properties"]
        for function in cfn.resources(raw["api"], "AWS::Lambda::Function").values()
        if function["Properties"]["Handler"] in (HANDLER, STREAM_HANDLER)
    ]
    assert len(front_door) == 2
    for function in front_door:
        assert function["Environment"]["Variables"]["SYNAPSE_CALLBACK_HTTPS_ONLY"] == "true"


def test_outcome_topics_are_off_unless_asked_for(platform: Any, raw: dict[str, dict[str, Any]]) -> None:
    assert platform.config.outcome_topics is False
    assert cfn.resources(raw["manager"], "AWS::SNS::Topic") == {}
    assert not set(TOPIC_VARIABLES) & manager_environment(raw).keys()
    assert statements_with(raw, "sns:") == []
    assert SynapseConfig.from_context(cdk.App(context={"synapse:outcomeTopics": "true"})).outcome_topics


def test_with_the_flag_there_is_a_topic_per_outcome_encrypted_with_the_alerts_key(
    topics_raw: dict[str, dict[str, Any]],
) -> None:
    topics = cfn.resources(topics_raw["manager"], "AWS::SNS::Topic")
    assert len(topics) == 2
    (key,) = cfn.resources(topics_raw["monitoring"], "AWS::KMS::Key")
    for topic in topics.values():
        assert key in cfn.referenced_ids(topic["Properties"]["KmsMasterKeyId"])
    outputs = topics_raw["manager"]["Outputs"]
    assert {outputs[name]["Value"]["Ref"] for name in ("SuccessTopicArn", "ErrorTopicArn")} == topics.keys()


def test_only_the_manager_may_publish_outcomes(topics_raw: dict[str, dict[str, Any]]) -> None:
    environment = manager_environment(topics_raw)
    topics = ref(topics_raw["manager"], "AWS::SNS::Topic")
    assert sorted((environment[name] for name in TOPIC_VARIABLES), key=str) == sorted(topics, key=str)
    (publisher,) = statements_with(topics_raw, "sns:")
    assert (publisher.stack, publisher.policy.startswith(MANAGER_TASK_ROLE)) == ("manager", True)
    assert publisher.actions == ("sns:Publish",)
    assert sorted(publisher.resources) == sorted(cfn.referenced_ids(t) for t in topics)
    # An encrypted topic takes a data key from its KMS key for each publish, as the publisher.
    (encrypter,) = statements_with(topics_raw, "kms:")
    assert (encrypter.stack, encrypter.policy.startswith(MANAGER_TASK_ROLE)) == ("manager", True)
    assert sorted(encrypter.actions) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert "AlertsKey" in encrypter.resources[0]
    # The topics' own policies only refuse publishing without TLS.
    for policy in cfn.resources(topics_raw["manager"], "AWS::SNS::TopicPolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert [(s["Effect"], s["Condition"]) for s in statements] == [
            ("Deny", {"Bool": {"aws:SecureTransport": "false"}})
        ]


def test_the_outcome_topics_add_no_key_and_no_nag_finding(
    with_topics: Synth, topics_raw: dict[str, dict[str, Any]], raw: dict[str, dict[str, Any]]
) -> None:
    keys = sum(len(cfn.resources(t, "AWS::KMS::Key")) for t in topics_raw.values())
    assert keys == sum(len(cfn.resources(t, "AWS::KMS::Key")) for t in raw.values())
    assert with_topics.nag_errors() == []
