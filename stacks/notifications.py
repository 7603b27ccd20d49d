"""How a finished job is announced in AWS: webhooks signed with the tenant's secret, and, when asked
for, one SNS topic per outcome (success, error) as SageMaker asynchronous inference has.

Both belong to the manager, which signs and posts callbacks and publishes outcomes: each unit here
exposes the settings it hands the manager (`environment`) and its grant, made in app.py.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from constructs import Construct

from contract.jobs import DEFAULT_TENANT
from stacks.nag import suppress


class WebhookSecrets(Construct):
    """One Secrets Manager secret holding every tenant's webhook secret: a JSON map {tenant: secret}.

    One secret for all tenants ($0.40 a month however many there are): adding a tenant is one
    `put-secret-value` (docs/deploy.md). The default tenant's value is generated at creation. The
    generator is never changed afterwards: CloudFormation would generate a new map and drop the
    tenants added by hand.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description="Synapse webhook secrets: JSON map of tenant to the secret that signs its callbacks",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template="{}",
                generate_string_key=DEFAULT_TENANT,
                # Letters and digits only: pasted into receivers' configs and shells unquoted.
                exclude_punctuation=True,
                password_length=48,
            ),
        )
        suppress(
            self.secret,
            "SMG4",
            "Webhook secrets are shared with each tenant's receiver, which must change its copy at the "
            "same moment; rotating is an operator's step with the tenant (docs/deploy.md), not a schedule.",
        )
        self.environment = {"SYNAPSE_WEBHOOK_SECRETS_ARN": self.secret.secret_arn}

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.secret.grant_read(grantee)


class OutcomeTopics(Construct):
    """Two SNS topics, one per job outcome, that the manager publishes each finished job to.

    They are encrypted with `key`, the alerts topic's key: a key of their own would add $1 a month
    and keep out no one that the topics' own permissions do not.
    """

    def __init__(self, scope: Construct, construct_id: str, *, key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self.success = self._topic("Success", "Synapse: job succeeded", key)
        self.error = self._topic("Error", "Synapse: job failed", key)
        self.environment = {
            "SYNAPSE_SUCCESS_TOPIC_ARN": self.success.topic_arn,
            "SYNAPSE_ERROR_TOPIC_ARN": self.error.topic_arn,
        }

    def _topic(self, construct_id: str, display_name: str, key: kms.IKey) -> sns.Topic:
        return sns.Topic(self, construct_id, display_name=display_name, master_key=key, enforce_ssl=True)

    def grant_publish(self, role: iam.IRole) -> None:
        """Publish on both topics, with the key's data-key calls that an encrypted topic needs."""
        for topic in (self.success, self.error):
            topic.grant_publish(role)
        suppress(
            role,
            "IAM5",
            "kms:GenerateDataKey* names the key's GenerateDataKey calls (with or without plaintext) that "
            "SNS makes for a publisher to an encrypted topic; on the one topics key only.",
            applies_to=["Action::kms:GenerateDataKey*"],
        )
