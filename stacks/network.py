"""The network every other stack lives in: a two-AZ VPC, its endpoints, flow logs and service discovery."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

from stacks.config import SERVICE_NAMESPACE, SynapseConfig

# Interface endpoints for the traffic that matters most: image pulls, logs and secrets stay off the
# NAT gateway (cheaper for multi-GB worker images, and no internet path for secrets).
_INTERFACE_ENDPOINTS = {
    "Ecr": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
}


class Network(Construct):
    """A VPC whose public subnets hold only NAT gateways; every workload runs in the private subnets."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cidr: str,
        availability_zones: Sequence[str],
        nat_gateways: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.cidr = cidr
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones),
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=24,
                    map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                ),
            ],
            restrict_default_security_group=True,
        )
        self.private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        cdk.Validations.of(self.vpc).acknowledge(
            cdk.Acknowledgment(
                id="CloudFormation-Validate::W3010",
                reason="Zones are named on purpose (synapse:availabilityZones): synth needs no AWS lookup.",
            )
        )

        flow_logs = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

        self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.private_subnets]
        )
        # One security group for all interface endpoints: HTTPS from inside the VPC, nothing else.
        # The CIDR is the literal from config so that checks can read it (a token would hide it).
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="Interface VPC endpoints: HTTPS from inside the VPC",
            allow_all_outbound=False,
        )
        self.endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from the VPC"
        )
        for name, service in _INTERFACE_ENDPOINTS.items():
            self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=self.private_subnets,
                security_groups=[self.endpoint_security_group],
                open=False,
                private_dns_enabled=True,
            )

        self.namespace = servicediscovery.PrivateDnsNamespace(
            self,
            "Namespace",
            name=SERVICE_NAMESPACE,
            vpc=self.vpc,
            description="Synapse service discovery (Prometheus targets, Pushgateway)",
        )


class NetworkStack(cdk.Stack):
    """Holds the network so that the stacks on top of it can be replaced without touching the VPC."""

    @property
    def availability_zones(self) -> list[str]:
        """The configured zones, so that synth never asks AWS which zones exist (no credentials needed)."""
        return self._zones

    def __init__(
        self, scope: Construct, construct_id: str, *, env: cdk.Environment, config: SynapseConfig
    ) -> None:
        # Set before super().__init__: jsii may read the property while the stack is being created.
        self._zones = list(config.availability_zones)
        super().__init__(
            scope, construct_id, env=env, description="Synapse: VPC, endpoints, flow logs, discovery"
        )
        self.network = Network(
            self,
            "Network",
            cidr=config.vpc_cidr,
            availability_zones=config.availability_zones,
            nat_gateways=config.nat_gateways,
        )
