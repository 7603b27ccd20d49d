"""The network every other stack lives in: a VPC over the configured AZs (two or more), flow logs,
service discovery and, by profile, the path out.

Lean: the manager and the GPU instances sit in public subnets with a public IPv4 address each (their
security groups admit only granted peers, so nothing on the internet can open a connection), which
saves the NAT gateways and interface endpoints that are most of an idle bill. Production: they sit in
private subnets behind one NAT gateway per zone, with interface endpoints for image pulls and logs.
Either way the front-door Lambdas and ElastiCache live in isolated subnets with no route out but the S3
gateway endpoint (the Files API's bucket, stacks/data.py): they talk to each other and to S3 alone.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_servicediscovery as servicediscovery
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.config import SERVICE_NAMESPACE, STUB_ACCOUNT, SynapseConfig, ZoneSource
from stacks.nag import suppress, suppress_custom_resource

# Production only: multi-GB worker image pulls and log streams stay off the NAT gateways' per-GB charge.
_INTERFACE_ENDPOINTS = {
    "Ecr": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
}
ISOLATED = "isolated"


class Network(Construct):
    """A VPC with a public tier, an isolated tier for the cache and the Lambdas, and (production) a
    private tier with NAT for the manager and GPU instances.

    `workload_subnets` is where the manager and the GPU instances run, and `assign_public_ip` says
    whether they need an address of their own to reach ECR, ECS and CloudWatch. `s3` is S3's managed
    prefix list as a peer, for the egress rule a group with no open egress needs to use the gateway
    endpoint.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: SynapseConfig) -> None:
        super().__init__(scope, construct_id)
        self.cidr = config.vpc_cidr
        private = config.private_workloads
        tiers = [
            ec2.SubnetConfiguration(
                name="public",
                subnet_type=ec2.SubnetType.PUBLIC,
                cidr_mask=24,
                # Addresses are asked for per workload (Fargate task, launch template), never by default.
                map_public_ip_on_launch=False,
            ),
            ec2.SubnetConfiguration(name=ISOLATED, subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=22),
        ]
        if private:
            tiers.append(
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                )
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(config.vpc_cidr),
            availability_zones=list(config.availability_zones),
            nat_gateways=config.nat_gateways,
            subnet_configuration=tiers,
            restrict_default_security_group=True,
        )
        self.assign_public_ip = not private
        self.workload_subnets = ec2.SubnetSelection(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS if private else ec2.SubnetType.PUBLIC
        )
        self.isolated_subnets = ec2.SubnetSelection(subnet_group_name=ISOLATED)
        cdk.Validations.of(self.vpc).acknowledge(
            cdk.Acknowledgment(
                id="CloudFormation-Validate::W3010",
                reason="Zones come from preflight's answer (by zone ID, in cdk.context.json) or "
                "synapse:availabilityZones: synth needs no AWS lookup.",
            )
        )
        if config.zone_source is ZoneSource.OFFLINE and config.account != STUB_ACCOUNT:
            cdk.Annotations.of(self).add_error(
                f"no zones chosen for account {config.account} in {config.region}: run `synapse preflight`, "
                "which picks them by zone ID where the GPU types are offered and writes them to "
                "cdk.context.json, or name them: -c synapse:availabilityZones=<zone>,<zone>"
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

        # Free (https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html): the workers'
        # model downloads never leave AWS's network, and the isolated subnets' Lambdas reach the files
        # bucket with no other route out. No endpoint policy: the workers' image layers come from ECR's
        # own buckets through it too, and the roles' policies already name each bucket.
        self.vpc.add_gateway_endpoint(
            "S3",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[self.workload_subnets, self.isolated_subnets],
        )
        self.s3 = ec2.Peer.prefix_list(self._s3_prefix_list_id())
        if private:
            self._add_interface_endpoints()

        self.namespace = servicediscovery.PrivateDnsNamespace(
            self,
            "Namespace",
            name=SERVICE_NAMESPACE,
            vpc=self.vpc,
            description="Synapse service discovery (workers push metrics to the manager's Pushgateway)",
        )

    def _s3_prefix_list_id(self) -> str:
        """The id (`pl-...`) of S3's AWS-managed prefix list in this region, read at deploy time.

        A security group reaches S3 through a gateway endpoint only with an egress rule to this list
        (https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html); CloudFormation has no
        attribute that gives it, and a synth-time lookup would need credentials."""
        stack = cdk.Stack.of(self)
        call = cr.AwsSdkCall(
            service="EC2",
            action="describeManagedPrefixLists",
            parameters={
                "Filters": [{"Name": "prefix-list-name", "Values": [f"com.amazonaws.{stack.region}.s3"]}]
            },
            physical_resource_id=cr.PhysicalResourceId.from_response("PrefixLists.0.PrefixListId"),
            output_paths=["PrefixLists.0.PrefixListId"],
        )
        lookup = cr.AwsCustomResource(
            self,
            "S3PrefixList",
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_sdk_calls(
                resources=cr.AwsCustomResourcePolicy.ANY_RESOURCE
            ),
            install_latest_aws_sdk=False,
        )
        suppress(
            lookup,
            "IAM5",
            "ec2:DescribeManagedPrefixLists supports no resource-level permissions, so its resource is `*` "
            "(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html); "
            "it reads only.",
            applies_to=["Resource::*"],
        )
        suppress_custom_resource(stack)
        return lookup.get_response_field("PrefixLists.0.PrefixListId")

    def _add_interface_endpoints(self) -> None:
        # One security group for all interface endpoints: HTTPS from inside the VPC, nothing else.
        # The CIDR is the literal from config so that checks can read it (a token would hide it).
        security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="Interface VPC endpoints: HTTPS from inside the VPC",
            allow_all_outbound=False,
        )
        security_group.add_ingress_rule(ec2.Peer.ipv4(self.cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
        for name, service in _INTERFACE_ENDPOINTS.items():
            self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=self.workload_subnets,
                security_groups=[security_group],
                open=False,
                private_dns_enabled=True,
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
        self.network = Network(self, "Network", config=config)
