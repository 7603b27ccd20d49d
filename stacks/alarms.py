"""CloudWatch alarms and EventBridge rules for what the Prometheus rules cannot see: AWS itself failing
to give Synapse capacity, the cache refusing work, the front door or the API erroring.

Every alarm notifies the alerts topic when it fires and when it clears; each description says what is
wrong and where to look. Built last, because it watches resources of every other stack.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.config import SynapseConfig

# ECS managed scaling keeps CapacityProviderReservation at 100 when the instances fit the tasks; above
# it, tasks wait for instances. A start from zero passes 100 for 2 to 6 minutes; 15 is a failure.
CAPACITY_WAIT = cdk.Duration.minutes(15)
# Data storage at this share of the cache's configured maximum: writes fail at 100 %.
CACHE_STORAGE_WARNING = 0.8
# A share of API requests answered 5xx, sustained 15 minutes. `/v1` answers 503 while workers start
# from zero (a few minutes), which stays under the window.
API_5XX_RATIO = 0.05


class AlarmsStack(cdk.Stack):
    """AWS-side alarms of one Synapse deployment, all to `topic`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        topic: sns.ITopic,
        auto_scaling_groups: Sequence[autoscaling.IAutoScalingGroup],
        capacity_provider_names: Sequence[str],
        cluster: ecs.ICluster,
        worker_service: ecs.IService,
        cache_name: str,
        functions: Sequence[lambda_.IFunction],
        api: apigw.RestApi,
    ) -> None:
        super().__init__(
            scope, construct_id, env=env, description="Synapse: CloudWatch alarms to the alerts topic"
        )
        self._topic = topic
        self.alarms: list[cloudwatch.Alarm] = []
        self._launch_failures(auto_scaling_groups)
        for index, provider_name in enumerate(capacity_provider_names):
            # The first keeps its original id (and so its alarm); a second group's gets its own.
            self._capacity_wait(
                provider_name, cluster, worker_service, suffix="" if index == 0 else str(index + 1)
            )
        self._cache(cache_name, SynapseConfig.from_context(self).cache_max_storage_gb)
        for function in functions:
            self._function(function)
        self._api(api)

    def _alarm(
        self,
        construct_id: str,
        *,
        metric: cloudwatch.IMetric,
        above: float,
        periods: int,
        description: str,
        or_equal: bool = False,
        datapoints: int | None = None,
    ) -> cloudwatch.Alarm:
        """An alarm to the topic on firing and on clearing; no data (nothing running) is not a breach."""
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=above,
            comparison_operator=(
                cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
                if or_equal
                else cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
            ),
            evaluation_periods=periods,
            datapoints_to_alarm=datapoints,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        action = cloudwatch_actions.SnsAction(self._topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms.append(alarm)
        return alarm

    def _launch_failures(self, groups: Sequence[autoscaling.IAutoScalingGroup]) -> None:
        """No metric counts failed launches; Auto Scaling's own event says what failed, and why."""
        detail = events.EventField.from_path
        events.Rule(
            self,
            "GpuLaunchFailed",
            description="Synapse: the GPU Auto Scaling group could not launch an instance",
            event_pattern=events.EventPattern(
                source=["aws.autoscaling"],
                detail_type=["EC2 Instance Launch Unsuccessful"],
                detail={"AutoScalingGroupName": [group.auto_scaling_group_name for group in groups]},
            ),
            targets=[
                targets.SnsTopic(
                    self._topic,
                    message=events.RuleTargetInput.from_text(
                        f"Synapse could not start a GPU instance in {detail('$.detail.AutoScalingGroupName')}"
                        f" ({detail('$.detail.Details.Availability Zone')}):"
                        f" {detail('$.detail.StatusMessage')} "
                        f"Cause: {detail('$.detail.Cause')} Jobs wait until an instance starts. A quota "
                        "message means asking for more 'Running On-Demand G and VT instances' in Service "
                        "Quotas; InsufficientInstanceCapacity means the zone has none now: add zones or "
                        "instance types (synapse:availabilityZones, synapse:instanceTypes). The "
                        "group's Activity tab in the EC2 console lists every attempt."
                    ),
                )
            ],
        )

    def _capacity_wait(
        self, capacity_provider_name: str, cluster: ecs.ICluster, service: ecs.IService, *, suffix: str
    ) -> None:
        reservation = cloudwatch.Metric(
            namespace="AWS/ECS/ManagedScaling",
            metric_name="CapacityProviderReservation",
            dimensions_map={
                "ClusterName": cluster.cluster_name,
                "CapacityProviderName": capacity_provider_name,
            },
            statistic="Minimum",
            period=cdk.Duration.minutes(1),
        )
        minutes = int(CAPACITY_WAIT.to_minutes())
        self._alarm(
            f"WorkersWaitingForCapacity{suffix}",
            metric=reservation,
            above=100,
            periods=minutes,
            datapoints=minutes,
            description=(
                f"Worker tasks have waited {minutes} minutes for a GPU instance that does not come "
                "(capacity provider reservation above 100 %), and queued jobs are not served. See the "
                f"service's events: aws ecs describe-services --cluster {cluster.cluster_name} --services "
                f"{service.service_name}; and the GPU Auto Scaling group's activity (launch failures, "
                "quota). A separate notification names each failed launch."
            ),
        )

    def _cache(self, cache_name: str, max_storage_gb: int) -> None:
        def metric(name: str, statistic: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace="AWS/ElastiCache",
                metric_name=name,
                dimensions_map={"clusterId": cache_name},
                statistic=statistic,
                period=cdk.Duration.minutes(1),
            )

        self._alarm(
            "CacheThrottled",
            metric=metric("ThrottledCmds", "Sum"),
            above=0,
            periods=5,
            datapoints=3,
            description=(
                f"ElastiCache Serverless {cache_name} throttles commands: its ECPU limit "
                "(synapse:cacheMaxEcpuPerSecond) or its scaling speed is reached, so submissions and "
                "dispatch slow down or fail with 503. Look at ElastiCacheProcessingUnits in the cache's "
                "metrics; raise the limit if traffic is real."
            ),
        )
        self._alarm(
            "CacheStorageHigh",
            metric=metric("BytesUsedForCache", "Maximum"),
            above=CACHE_STORAGE_WARNING * max_storage_gb * 1024**3,
            periods=10,
            description=(
                f"ElastiCache Serverless {cache_name} holds over {CACHE_STORAGE_WARNING:.0%} of its "
                f"{max_storage_gb} GB data limit for 10 minutes. At the limit the cache evicts or refuses "
                "writes, and queued jobs or results are lost: raise synapse:cacheMaxStorageGb, or "
                "shorten SYNAPSE_JOB_TTL_S if finished jobs pile up."
            ),
        )
        self._alarm(
            "CacheEvicting",
            metric=metric("Evictions", "Sum"),
            above=0,
            periods=1,
            description=(
                f"ElastiCache Serverless {cache_name} evicted keys: each may be a queued job or a result "
                "that is now lost (the CloudWatch counterpart of the SynapseRedisEvictingKeys rule, which "
                "has no exporter on AWS). Check BytesUsedForCache against synapse:cacheMaxStorageGb."
            ),
        )

    def _function(self, function: lambda_.IFunction) -> None:
        # "SynapseApi/FrontDoor/Function" -> "FrontDoorFunction": unique, and readable in the console.
        node_id = "".join(function.node.path.split("/")[1:])
        five_minutes = cdk.Duration.minutes(5)
        self._alarm(
            f"{node_id}Errors",
            metric=function.metric_errors(period=five_minutes, statistic="Sum"),
            above=5,
            or_equal=True,
            periods=1,
            description=(
                f"Lambda {function.function_name} failed 5 or more invocations in 5 minutes (unhandled "
                "errors or timeouts, not 4xx answers). Clients get 502/504 from API Gateway. Its log group "
                f"/aws/lambda/{function.function_name} has the stack traces."
            ),
        )
        self._alarm(
            f"{node_id}Throttles",
            metric=function.metric_throttles(period=five_minutes, statistic="Sum"),
            above=0,
            periods=1,
            description=(
                f"Lambda {function.function_name} was throttled: its reserved concurrency or the account's "
                "is used up, and clients get 429/502. Compare ConcurrentExecutions with the reservation "
                "(synapse:v1RateLimit, synapse:accountConcurrency)."
            ),
        )

    def _api(self, api: apigw.RestApi) -> None:
        self._alarm(
            "Api5xx",
            metric=api.metric_server_error(period=cdk.Duration.minutes(5), statistic="Average"),
            above=API_5XX_RATIO,
            periods=3,
            description=(
                f"Over {API_5XX_RATIO:.0%} of {api.rest_api_name} requests answered 5xx for 15 minutes. "
                "503s with Retry-After mean no capacity (see the capacity alarm); 502/504 mean the front "
                "door failed (see its Lambda alarms and logs). API Gateway's execution logs and the "
                "front door's log group say which route."
            ),
        )
