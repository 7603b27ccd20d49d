"""Managed monitoring: Amazon Managed Service for Prometheus evaluates `dashboards/rules.yml` and routes
alerts to an SNS topic; Amazon Managed Grafana shows `dashboards/*.json`, provisioned by the deploy.

Nothing here runs on Fargate and nothing keeps state on a task's disk: samples arrive by remote
write from the collector beside the manager (stacks/collector.py), AMP keeps them for 150 days, and
Grafana's data source and dashboards are written by a custom resource on every deploy.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import aws_cdk as cdk
import yaml
from aws_cdk import aws_aps as aps
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from contract.scrape_config import template_scrape_interval
from stacks import images
from stacks.config import REPO_ROOT, SynapseConfig
from stacks.custom_resources import handler_function, provider_for
from stacks.nag import suppress, suppress_basic_execution

RULES_FILE = REPO_ROOT / "dashboards" / "rules.yml"
PROVISIONING_HANDLER = Path(__file__).resolve().parent / "grafana_provisioning" / "handler.py"
# Grafana's folder for the repository's dashboards, and the uid the dashboards' `datasource`
# variable selects by default (they name it "prometheus").
DASHBOARD_FOLDER = "Synapse"
DATASOURCE_UID = "prometheus"
# Managed Grafana versions that have service accounts (9.4 and later); 10.4 is the newest GA one that
# every AMG region offers.
GRAFANA_VERSION = "10.4"
# Principals that publish to the alerts topic, each scoped to this account.
TOPIC_PUBLISHERS = ("aps.amazonaws.com", "cloudwatch.amazonaws.com", "events.amazonaws.com")


def alertmanager_definition(*, topic_arn: str, region: str) -> str:
    """AMP's alert manager definition: every alert of `rules.yml` to one SNS topic, grouped per alert.

    The subject stays under SNS's 100 characters (email subjects longer than that are rejected); the
    message lists each alert's summary and description, which the rules write for a person.
    """
    config = {
        "route": {
            "receiver": "sns",
            "group_by": ["alertname", "severity"],
            "group_wait": "30s",
            "group_interval": "5m",
            # A page that nobody acts on is repeated twice a shift, not every few minutes.
            "repeat_interval": "4h",
        },
        "receivers": [
            {
                "name": "sns",
                "sns_configs": [
                    {
                        "topic_arn": topic_arn,
                        "sigv4": {"region": region},
                        "send_resolved": True,
                        "subject": (
                            "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} "
                            "({{ .CommonLabels.severity }})"
                        ),
                        "message": (
                            "{{ range .Alerts }}{{ .Status | toUpper }}: {{ .Annotations.summary }}\n"
                            "{{ .Annotations.description }}\n"
                            "Labels: {{ range .Labels.SortedPairs }}{{ .Name }}={{ .Value }} {{ end }}\n"
                            "Since: {{ .StartsAt }}\n\n{{ end }}"
                        ),
                    }
                ],
            }
        ],
    }
    return yaml.safe_dump({"alertmanager_config": yaml.safe_dump(config, sort_keys=False, width=1000)})


def dashboards_digest() -> str:
    """Changes whenever a dashboard file does, so that a deploy re-provisions Grafana exactly then."""
    digest = hashlib.sha256()
    for path in images.dashboard_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(PROVISIONING_HANDLER.read_bytes())
    return digest.hexdigest()


class AlertsTopic(Construct):
    """The SNS topic every Synapse alert reaches a person through, encrypted with its own KMS key.

    A customer-managed key ($1 a month), not SNS's AWS-managed one: the AWS-managed key's policy
    cannot be changed, so AMP, CloudWatch alarms and EventBridge could not encrypt messages with it
    and every notification would be dropped. The job-outcome topics, when there are any, share the
    key (stacks/notifications.py).
    """

    def __init__(self, scope: Construct, construct_id: str, *, email: str | None) -> None:
        super().__init__(scope, construct_id)
        account = cdk.Stack.of(self).account
        self.key = kms.Key(
            self,
            "Key",
            description="Synapse SNS topics: alerts (AMP, CloudWatch, EventBridge) and job outcomes",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        for principal in TOPIC_PUBLISHERS:
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                    principals=[iam.ServicePrincipal(principal)],
                    resources=["*"],  # in a key policy, "*" is this key
                    conditions={"StringEquals": {"aws:SourceAccount": account}},
                )
            )
        # Auto Scaling sends the GPU group's launch errors as its service-linked role, which a fresh
        # account only gets when its first group is made (after this key): so the statement names
        # the role by condition, and KMS does not reject a principal that does not exist yet.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                principals=[iam.AnyPrincipal()],
                resources=["*"],
                conditions={
                    "StringEquals": {"kms:CallerAccount": account},
                    "StringLike": {"kms:ViaService": "sns.*.amazonaws.com"},
                    "ArnEquals": {
                        "aws:PrincipalArn": f"arn:{cdk.Aws.PARTITION}:iam::{account}:role/aws-service-role/"
                        "autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
                    },
                },
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Synapse alerts",
            master_key=self.key,
            enforce_ssl=True,
        )
        for principal in ("cloudwatch.amazonaws.com", "events.amazonaws.com"):
            self.topic.add_to_resource_policy(
                iam.PolicyStatement(
                    actions=["sns:Publish"],
                    principals=[iam.ServicePrincipal(principal)],
                    resources=[self.topic.topic_arn],
                    conditions={"StringEquals": {"aws:SourceAccount": account}},
                )
            )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

    def allow_prometheus(self, workspace_arn: str) -> None:
        """AMP's alert manager publishes as the service, on behalf of this one workspace only."""
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                principals=[iam.ServicePrincipal("aps.amazonaws.com")],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                    "ArnEquals": {"aws:SourceArn": workspace_arn},
                },
            )
        )


class PrometheusWorkspace(Construct):
    """An AMP workspace with the repository's rules and an alert manager that publishes to `topic`."""

    def __init__(self, scope: Construct, construct_id: str, *, topic: AlertsTopic) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        # Rule and alert manager errors (a template that fails, SNS refusing a message) land here.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            alias="synapse",
            alert_manager_definition=alertmanager_definition(
                topic_arn=topic.topic.topic_arn, region=stack.region
            ),
            logging_configuration=aps.CfnWorkspace.LoggingConfigurationProperty(
                log_group_arn=f"{self.log_group.log_group_arn}"
            ),
        )
        topic.allow_prometheus(self.workspace.attr_arn)
        aps.CfnRuleGroupsNamespace(
            self,
            "Rules",
            workspace=self.workspace.attr_arn,
            name="synapse",
            data=RULES_FILE.read_text(),
        )
        self.arn = self.workspace.attr_arn
        self.endpoint = self.workspace.attr_prometheus_endpoint  # ends with "/"
        self.remote_write_url = f"{self.endpoint}api/v1/remote_write"


class ManagedGrafana(Construct):
    """An Amazon Managed Grafana workspace (sign-in through IAM Identity Center) reading `prometheus`.

    Its data source and every `dashboards/*.json` are written by a custom resource, so a deploy
    leaves Grafana ready to use and a changed dashboard is re-published by the next deploy.
    """

    def __init__(self, scope: Construct, construct_id: str, *, prometheus: PrometheusWorkspace) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        role = iam.Role(
            self,
            "WorkspaceRole",
            description="Synapse Grafana: queries the Synapse AMP workspace",
            assumed_by=iam.ServicePrincipal(
                "grafana.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ),
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata"],
                resources=[prometheus.arn],
            )
        )
        self.workspace = grafana.CfnWorkspace(
            self,
            "Workspace",
            name="synapse",
            description="Synapse dashboards (dashboards/*.json), provisioned by the deploy",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=["AWS_SSO"],
            permission_type="SERVICE_MANAGED",
            data_sources=["PROMETHEUS"],
            grafana_version=GRAFANA_VERSION,
            role_arn=role.role_arn,
        )
        self.url = f"https://{self.workspace.attr_endpoint}"
        self._provision(prometheus)

    def _provision(self, prometheus: PrometheusWorkspace) -> None:
        stack = cdk.Stack.of(self)
        function = handler_function(
            self,
            "ProvisioningFunction",
            logs_id="ProvisioningLogs",
            description="Synapse: writes the Prometheus data source and dashboards into Managed Grafana",
            handler="handler.on_event",
            code=lambda_.Code.from_asset(_stage_provisioning_code(self)),
            memory_size=256,
        )
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=[
                    "grafana:ListWorkspaceServiceAccounts",
                    "grafana:CreateWorkspaceServiceAccount",
                    "grafana:CreateWorkspaceServiceAccountToken",
                    "grafana:DeleteWorkspaceServiceAccountToken",
                ],
                resources=[
                    stack.format_arn(
                        service="grafana",
                        resource="/workspaces",
                        resource_name=self.workspace.attr_id,
                    )
                ],
            )
        )
        provider = provider_for(self, function)
        cdk.CustomResource(
            self,
            "Provisioning",
            service_token=provider.service_token,
            resource_type="Custom::SynapseGrafanaProvisioning",
            properties={
                "WorkspaceId": self.workspace.attr_id,
                "GrafanaUrl": self.url,
                "PrometheusUrl": prometheus.endpoint,
                "Region": stack.region,
                "DatasourceUid": DATASOURCE_UID,
                "Folder": DASHBOARD_FOLDER,
                "ScrapeInterval": template_scrape_interval(),
                "DashboardsDigest": dashboards_digest(),
            },
        )
        suppress_basic_execution(self)
        function_id = stack.resolve(stack.get_logical_id(function.node.default_child))  # type: ignore[arg-type]
        suppress(
            provider,
            "IAM5",
            "The custom resource framework may invoke any version of the provisioning function (<arn>:*), "
            "that one function only.",
            applies_to=[f"Resource::<{function_id}.Arn>:*"],
        )


def _stage_provisioning_code(scope: Construct) -> str:
    """The Lambda's asset: the handler and the dashboards it publishes, nothing else of the repo."""
    stage = cdk.Stage.of(scope)
    if stage is None:  # pragma: no cover - every stack lives in an App
        raise ValueError(f"{scope.node.path} is not inside a CDK App")
    folder = Path(stage.outdir).resolve() / "lambda-contexts" / "grafana-provisioning"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "dashboards").mkdir(parents=True)
    shutil.copyfile(PROVISIONING_HANDLER, folder / "handler.py")
    for path in images.dashboard_files():
        shutil.copyfile(path, folder / "dashboards" / path.name)
    return str(folder)


class MonitoringStack(cdk.Stack):
    """Alerts to a person (AMP rules, alert manager, SNS) and dashboards (Managed Grafana)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, env: cdk.Environment, config: SynapseConfig
    ) -> None:
        super().__init__(
            scope, construct_id, env=env, description="Synapse: managed Prometheus, Grafana, alerts"
        )
        self._alerts = AlertsTopic(self, "Alerts", email=config.alert_email)
        self.alerts_topic: sns.ITopic = self._alerts.topic
        self.topic_key: kms.IKey = self._alerts.key
        self.prometheus = PrometheusWorkspace(self, "Prometheus", topic=self._alerts)
        self.remote_write_url: str = self.prometheus.remote_write_url
        self.grafana = (
            ManagedGrafana(self, "Grafana", prometheus=self.prometheus) if config.managed_grafana else None
        )

        cdk.CfnOutput(
            self,
            "AlertsTopicArn",
            value=self.alerts_topic.topic_arn,
            description="aws sns subscribe --protocol email --notification-endpoint <you> --topic-arn <this>",
        )
        cdk.CfnOutput(self, "PrometheusWorkspaceId", value=self.prometheus.workspace.attr_workspace_id)
        cdk.CfnOutput(
            self,
            "PrometheusQueryUrl",
            value=f"{self.prometheus.endpoint}api/v1/query",
            description="SigV4-signed PromQL queries (e.g. awscurl --service aps)",
        )
        if self.grafana is not None:
            cdk.CfnOutput(
                self,
                "GrafanaUrl",
                value=self.grafana.url,
                description="Sign in with IAM Identity Center; dashboards are in the Synapse folder",
            )

    def grant_remote_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets `grantee` (the collector's task role) write samples into this workspace, nothing else."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["aps:RemoteWrite"], resource_arns=[self.prometheus.arn]
        )
