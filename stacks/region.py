"""The deploy's region, found as the AWS CLI and the CDK CLI find it, for synth and preflight alike.

One order for both, so that preflight checks the region the deploy will create resources in:
`synapse:region`, then `AWS_REGION`, `AWS_DEFAULT_REGION`, then the CDK CLI's own answer
(`CDK_DEFAULT_REGION`, which it sets for the app from the same order, including `cdk --profile`),
then the profile's `region` (`AWS_PROFILE`, ~/.aws/config), and only then `DEFAULT_REGION`
(https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-envvars.html). botocore itself reads
`AWS_DEFAULT_REGION` and the profile but not `AWS_REGION`, hence the explicit order here.
"""

from __future__ import annotations

import os

import botocore.session

# What the AWS CLI and the CDK fall back to when nothing names a region.
DEFAULT_REGION = "us-east-1"
ENVIRONMENT = ("AWS_REGION", "AWS_DEFAULT_REGION", "CDK_DEFAULT_REGION")


def deploy_region(explicit: str | None = None) -> str:
    """`explicit` (synapse:region), else the first region the environment or the profile names."""
    if explicit:
        return explicit
    for name in ENVIRONMENT:
        if value := os.environ.get(name, "").strip():
            return value
    profile_region = botocore.session.Session().get_config_variable("region")
    return str(profile_region) if profile_region else DEFAULT_REGION
