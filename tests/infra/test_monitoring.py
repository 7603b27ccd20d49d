"""Managed monitoring: AMP evaluates the repository's rules and routes alerts to an encrypted SNS topic,
the collector beside the manager feeds AMP, and Managed Grafana is provisioned by the deploy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

from contract.scrape_config import template_scrape_interval
from stacks import images
from stacks.config import PUSHGATEWAY_PORT, SynapseConfig
from stacks.monitoring import RULES_FILE, MonitoringStack, dashboards_digest
from tests.infra import cfn

pytestmark = pytest.mark.infra


def monitoring_alone(**context: str) -> dict[str, Any]:
    """The monitoring stack by itself (it depends on no other), for context values the session lacks."""
    app = cdk.App(context={f"synapse:{key}": value for key, value in context.items()})
    config = SynapseConfig.from_context(app)
    env = cdk.Environment(account=config.account, region=config.region)
    stack = MonitoringStack(app, "Monitoring", env=env, config=config)
    return dict(Template.from_stack(stack).to_json())


def text(value: Any) -> str:
    """A template value (a string or an Fn::Join of strings and references) as searchable text."""
    return json.dumps(value)


def test_amp_evaluates_the_repository_rules_file_as_it_is(raw: dict[str, dict[str, Any]]) -> None:
    namespace = cfn.only(raw["monitoring"], "AWS::APS::RuleGroupsNamespace")
    assert namespace["Data"] == RULES_FILE.read_text()
    assert "PrometheusWorkspace" in text(namespace["Workspace"])


def test_amp_routes_every_alert_to_the_alerts_topic(raw: dict[str, dict[str, Any]]) -> None:
    workspace = cfn.only(raw["monitoring"], "AWS::APS::Workspace")
    definition = text(workspace["AlertManagerDefinition"])
    (topic_id,) = cfn.resources(raw["monitoring"], "AWS::SNS::Topic")
    assert "sns_configs" in definition and f'{{"Ref": "{topic_id}"}}' in definition
    assert "send_resolved: true" in definition
    assert "LoggingConfiguration" in workspace, "rule and alert manager errors are kept"


def test_the_topic_is_encrypted_with_a_rotated_key_that_the_publishers_may_use(
    raw: dict[str, dict[str, Any]],
) -> None:
    topic = cfn.only(raw["monitoring"], "AWS::SNS::Topic")
    (key_id, key) = next(iter(cfn.resources(raw["monitoring"], "AWS::KMS::Key").items()))
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    key_users: set[str] = set()
    for statement in key["Properties"]["KeyPolicy"]["Statement"]:
        if "kms:Decrypt" in statement["Action"] and "Service" in statement.get("Principal", {}):
            services = statement["Principal"]["Service"]
            key_users |= {services} if isinstance(services, str) else set(services)
    assert key_users == {"aps.amazonaws.com", "cloudwatch.amazonaws.com", "events.amazonaws.com"}
    # The GPU group's launch errors come from Auto Scaling's service-linked role, named by condition.
    by_role = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"]
        if "AWSServiceRoleForAutoScaling" in cfn.referenced_ids(s.get("Condition", {}))
    ]  # fmt: skip
    assert len(by_role) == 1 and "kms:GenerateDataKey*" in by_role[0]["Action"]


def test_only_this_accounts_workspace_may_publish_as_amp(raw: dict[str, dict[str, Any]]) -> None:
    policy = cfn.only(raw["monitoring"], "AWS::SNS::TopicPolicy")
    (aps,) = [
        s
        for s in policy["PolicyDocument"]["Statement"]
        if s.get("Principal") == {"Service": "aps.amazonaws.com"}
    ]
    assert aps["Condition"]["ArnEquals"]["aws:SourceArn"] == {
        "Fn::GetAtt": ["PrometheusWorkspaceF3098DB6", "Arn"]
    }
    assert aps["Condition"]["StringEquals"]["aws:SourceAccount"] == "123456789012"


def test_an_alert_email_subscribes_to_the_topic_and_none_leaves_it_unsubscribed() -> None:
    with_email = monitoring_alone(alertEmail="oncall@example.com")
    (subscription,) = cfn.resources(with_email, "AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "oncall@example.com"
    assert cfn.resources(monitoring_alone(), "AWS::SNS::Subscription") == {}


def test_nothing_is_self_hosted(raw: dict[str, dict[str, Any]]) -> None:
    kinds = {resource["Type"] for resource in raw["monitoring"]["Resources"].values()}
    assert not kinds & {
        "AWS::ECS::Service",
        "AWS::ElasticLoadBalancingV2::LoadBalancer",
        "AWS::SecretsManager::Secret",
        "AWS::ServiceDiscovery::Service",
    }


def test_managed_grafana_signs_in_through_identity_center_and_reads_prometheus(
    opted_in_raw: dict[str, dict[str, Any]],
) -> None:
    raw = opted_in_raw
    workspace = cfn.only(raw["monitoring"], "AWS::Grafana::Workspace")
    assert workspace["AuthenticationProviders"] == ["AWS_SSO"]
    assert workspace["PermissionType"] == "SERVICE_MANAGED"
    assert workspace["AccountAccessType"] == "CURRENT_ACCOUNT"
    assert workspace["DataSources"] == ["PROMETHEUS"]
    outputs = raw["monitoring"]["Outputs"]
    assert {"GrafanaUrl", "PrometheusWorkspaceId", "PrometheusQueryUrl", "AlertsTopicArn"} <= set(outputs)


def test_the_deploy_provisions_the_data_source_and_every_dashboard(
    opted_in_raw: dict[str, dict[str, Any]], opted_in: Any
) -> None:
    raw, synth = opted_in_raw, opted_in
    (resource,) = cfn.resources(raw["monitoring"], "Custom::SynapseGrafanaProvisioning").values()
    properties = resource["Properties"]
    assert properties["DatasourceUid"] == "prometheus"
    assert properties["Folder"] == "Synapse"
    assert properties["ScrapeInterval"] == template_scrape_interval()  # the agent's, for $__rate_interval
    # A changed dashboard changes the digest, which makes CloudFormation update (re-provision).
    assert properties["DashboardsDigest"] == dashboards_digest()
    staged = Path(synth.outdir) / "lambda-contexts" / "grafana-provisioning"
    assert sorted(p.name for p in (staged / "dashboards").glob("*.json")) == [
        p.name for p in images.dashboard_files()
    ]
    assert (staged / "handler.py").is_file()


def test_managed_grafana_is_left_out_unless_asked(raw: dict[str, dict[str, Any]]) -> None:
    """A fresh account has no IAM Identity Center, which Managed Grafana's sign-in needs."""
    for template in (raw["monitoring"], monitoring_alone(managedGrafana="false")):
        assert cfn.resources(template, "AWS::Grafana::Workspace") == {}
        assert cfn.resources(template, "Custom::SynapseGrafanaProvisioning") == {}
        assert len(cfn.resources(template, "AWS::APS::Workspace")) == 1
    assert "GrafanaUrl" not in raw["monitoring"]["Outputs"]


def test_nothing_but_the_monitoring_stack_depends_on_grafana(opted_in_raw: dict[str, dict[str, Any]]) -> None:
    """Workers, manager, API and alarms read AMP and the alerts topic only: Grafana can come and go."""
    for name, template in opted_in_raw.items():
        if name != "monitoring":
            assert "grafana" not in json.dumps(template).lower(), f"{name} refers to Grafana"


def test_every_dashboard_is_plain_grafana_json_that_any_grafana_imports() -> None:
    for dashboard in images.dashboard_files():
        model = json.loads(dashboard.read_text())
        assert model["panels"] and model["title"], dashboard.name
        assert "uid" in model and "schemaVersion" in model, dashboard.name


def test_the_collector_runs_beside_the_manager_and_writes_to_amp(raw: dict[str, dict[str, Any]]) -> None:
    agent = cfn.container(raw["manager"], "prometheus-agent")
    pushgateway = cfn.container(raw["manager"], "pushgateway")
    assert agent["Essential"] is False and pushgateway["Essential"] is False
    assert agent["RestartPolicy"] == {"Enabled": True} == pushgateway["RestartPolicy"]
    assert [m["ContainerPort"] for m in pushgateway["PortMappings"]] == [PUSHGATEWAY_PORT]
    assert "/-/ready" in " ".join(agent["HealthCheck"]["Command"])
    assert "/-/ready" in " ".join(pushgateway["HealthCheck"]["Command"])
    config = text(cfn.environment(agent)["PROMETHEUS_AGENT_CONFIG"])
    assert "PrometheusEndpoint" in config and "api/v1/remote_write" in config
    writes = [
        s for s in cfn.policy_statements("manager", raw["manager"]) if "aps:RemoteWrite" in text(s.actions)
    ]
    assert len(writes) == 1 and "PrometheusWorkspace" in text(writes[0].resources)


def test_the_collector_fits_in_the_managers_task(raw: dict[str, dict[str, Any]]) -> None:
    (task,) = cfn.resources(raw["manager"], "AWS::ECS::TaskDefinition").values()
    properties = task["Properties"]
    assert properties["RuntimePlatform"]["CpuArchitecture"] == "ARM64"
    sidecars = [c for c in properties["ContainerDefinitions"] if c["Name"] != "manager"]
    assert sum(c["Cpu"] for c in sidecars) <= int(properties["Cpu"]) // 4
    assert sum(c["Memory"] for c in sidecars) <= int(properties["Memory"]) // 4


def test_the_collector_images_are_built_for_arm64_from_pinned_bases(synth: Any) -> None:
    assets = json.loads((Path(synth.outdir) / "SynapseManager.assets.json").read_text())
    platforms = [image["source"].get("platform") for image in assets["dockerImages"].values()]
    assert platforms == ["linux/arm64"] * 3, "the manager and its two sidecars, all for the ARM task"
    for name in ("prometheus", "pushgateway"):
        dockerfile = (Path(synth.outdir) / "image-contexts" / name / "Dockerfile").read_text()
        (base,) = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
        assert ":" in base and not base.endswith(":latest"), base


def test_workers_may_push_to_the_pushgateway(raw: dict[str, dict[str, Any]]) -> None:
    rules = [
        r
        for r in cfn.ingress_rules("manager", raw["manager"])
        if "ManagerSecurityGroup" in r.target and r.from_port == PUSHGATEWAY_PORT
    ]
    assert [("WorkersSecurityGroup" in r.source, r.to_port) for r in rules] == [(True, PUSHGATEWAY_PORT)]


def test_the_agent_config_keeps_the_repository_job_names(raw: dict[str, dict[str, Any]]) -> None:
    value = cfn.environment(cfn.container(raw["manager"], "prometheus-agent"))["PROMETHEUS_AGENT_CONFIG"]
    # The URL is a reference; everything around it is the literal config.
    literal = "".join(part if isinstance(part, str) else "URL" for part in value["Fn::Join"][1])
    config = yaml.safe_load(literal)
    assert [job["job_name"] for job in config["scrape_configs"]] == ["synapse-manager", "pushgateway"]
