"""`synapse plan cold-start`: how long a job sent at zero waits on AWS for its first result.

From zero, nothing runs but the manager. Its autoscaler raises the worker service's desired count and,
given the workers' Auto Scaling groups (SYNAPSE_ECS_WORKER_ASGS), their desired capacity itself, the
warm group first and then the burst group; a group starts an instance, whose ECS agent registers; ECS
places the task, attaches its network interface (awsvpc) and starts the container, which reads the
worker's libraries from disk and loads its models. Every figure is a parameter with a low and a high
end, each with its source (`SOURCES`: AWS documentation, a published measurement, the ECS agent's
source, the stacks' own settings, or an estimate named as one); each step shows its range, each path
its low and high total. The paths differ only in which steps they take:
- warm pool (the lean default): a stopped warm-pool instance starts; `stacks/prewarm.sh` pulled the
  worker image onto its disk while the pool prepared it, so no layer is pulled (prefer-cached), but the
  manager lowered that stopped volume to gp3's baseline, which the first reads of the libraries wait on;
  the launch hook that pauses it again as it leaves the pool is released beside the ECS agent;
- cold instance: no warm instance is left, a new one of the burst group boots from the AMI's snapshot
  (which EBS copies onto its volume at the launch template's provisioned initialization rate), goes in
  service at once (the burst group has no launch hook), and pulls the whole image onto a volume
  provisioned past gp3's baseline (contract/launch_volume.py);
- refill: the warm group's pool is empty while it prepares a fresh instance, and the group's in-service
  one is gone too (a deploy's instance refresh replaces both), so the group launches a new instance
  straight into service: the same launch volume as a burst instance, and a launch hook released beside
  the agent.
The default models are baked into the worker image (no download); `--model-gb` adds one for a model
served from the model bucket. Without SYNAPSE_ECS_WORKER_ASGS (`--no-manager-starts-instances`), ECS
managed scaling's CloudWatch alarm starts the instance instead, one to two minutes later.

Target (issue 29): at most 120 s warm, at most 6 min cold, judged against the high total (issue 40):
a path meets its target only if it does so when every step takes its high figure. `table` prints each
path's miss or margin. The default asynchronous deadline (`contract.jobs.DEFAULT_TIMEOUT_MS`) must
outlive the slowest path's high total with margin (tests/unit/planner/test_cold_start.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal

from contract.launch_volume import (
    GP3_BASELINE_THROUGHPUT_MIB_S,
    IMAGE_EXTRACTION_MIB_S,
    LAUNCH_THROUGHPUT_MIB_S,
    VOLUME_INITIALIZATION_RATE_MIB_S,
)
from contract.worker_image_size import IMAGE_COMPRESSED_GB, IMAGE_EXTRACTED_GB

MB_PER_GB = 1000
MB_PER_MIB = 1.048576
StartPath = Literal["warm", "cold", "refill"]
PATHS: tuple[StartPath, ...] = ("warm", "cold", "refill")
TITLES: dict[StartPath, str] = {
    "warm": "warm pool, image on its disk (lean default)",
    "cold": "cold burst instance, image pulled",
    "refill": "warm group while its pool refills: a new instance, image pulled",
}
# Issue 29's targets, from a job at zero to its first result: a new instance of either group is a cold start.
TARGET_S: dict[StartPath, float] = {"warm": 120.0, "cold": 360.0, "refill": 360.0}
NEW_INSTANCE_PATHS: tuple[StartPath, ...] = ("cold", "refill")
# The paths on an instance of the warm group, the one with a launch hook (stacks/workers.py).
WARM_GROUP_PATHS: tuple[StartPath, ...] = ("warm", "refill")
# EBS delivers a provisioned initialization rate within 10 percent of it 99 percent of the time.
INITIALIZATION_RATE_SPREAD = 0.10


@dataclass(frozen=True, slots=True)
class Span:
    """A figure's two ends, in its field's unit: `low` the fast or small end, `high` the slow or large one.
    For a rate, `low` is the slow end too, so a step's high seconds come from a rate's low end."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(f"a span needs 0 <= low <= high, got {self.low}-{self.high}")

    @classmethod
    def parse(cls, text: str) -> Span:
        """`60` (both ends) or `30-100`, as the flags take it."""
        low, _, high = text.partition("-")
        return cls(float(low), float(high or low))

    def __str__(self) -> str:
        return f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a span's ends come from; `high` None when one source gives both."""

    low: str
    high: str | None = None

    def __str__(self) -> str:
        return self.low if self.high is None else f"low: {self.low}; high: {self.high}"


@dataclass(frozen=True, slots=True)
class ColdStartParameters:
    """Every figure of the cold-start path, in seconds unless named otherwise; `SOURCES` says where each
    end comes from."""

    autoscaler_tick_s: Span = Span(0.0, 1.0)
    update_service_s: Span = Span(0.5, 2.0)
    manager_starts_instances: bool = True
    set_desired_capacity_s: Span = Span(0.5, 2.0)
    capacity_alarm_s: Span = Span(60.0, 120.0)
    warm_instance_start_s: Span = Span(30.0, 100.0)
    prewarm_in_service_s: Span = Span(1.0, 5.0)
    cold_instance_boot_s: Span = Span(60.0, 120.0)
    ami_first_read_gb: Span = Span(2.0, 4.0)
    volume_initialization_mib_per_s: Span = Span(
        VOLUME_INITIALIZATION_RATE_MIB_S * (1 - INITIALIZATION_RATE_SPREAD),
        VOLUME_INITIALIZATION_RATE_MIB_S * (1 + INITIALIZATION_RATE_SPREAD),
    )
    agent_registration_s: Span = Span(5.0, 20.0)
    task_placement_s: Span = Span(2.0, 20.0)
    task_eni_s: Span = Span(5.0, 40.0)
    image_compressed_gb: Span = Span(IMAGE_COMPRESSED_GB, IMAGE_COMPRESSED_GB)
    ecr_download_mb_per_s: Span = Span(100.0, 200.0)
    image_extracted_gb: Span = Span(IMAGE_EXTRACTED_GB, IMAGE_EXTRACTED_GB)
    gp3_throughput_mib_per_s: Span = Span(LAUNCH_THROUGHPUT_MIB_S, LAUNCH_THROUGHPUT_MIB_S)
    image_extraction_mib_per_s: Span = Span(150.0, IMAGE_EXTRACTION_MIB_S)
    warm_volume_mib_per_s: Span = Span(GP3_BASELINE_THROUGHPUT_MIB_S, GP3_BASELINE_THROUGHPUT_MIB_S)
    startup_read_gb: Span = Span(2.0, 4.0)
    container_start_s: Span = Span(5.0, 15.0)
    model_gb: Span = Span(0.0, 0.0)
    model_download_mb_per_s: Span = Span(80.0, 200.0)
    model_load_s: Span = Span(10.0, 20.0)
    first_batch_s: Span = Span(1.0, 3.0)

    def __post_init__(self) -> None:
        for rate in RATES:
            if getattr(self, rate).low <= 0:
                raise ValueError(f"{rate} must be > 0, got {getattr(self, rate)}")

    def spans(self) -> dict[str, Span]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "manager_starts_instances"}


RATES = (
    "volume_initialization_mib_per_s",
    "ecr_download_mb_per_s",
    "gp3_throughput_mib_per_s",
    "image_extraction_mib_per_s",
    "warm_volume_mib_per_s",
    "model_download_mb_per_s",
)

_ASG = "https://docs.aws.amazon.com/autoscaling/ec2/userguide"
_ECS = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide"
_EBS = "https://docs.aws.amazon.com/ebs/latest/userguide"
# Issue 40's independent estimate of the road from zero (a desk audit, nothing deployed): cited where no
# public figure exists, and named as an estimate.
_ISSUE_40 = "issue 40's independent estimate"
_ESTIMATE = "estimate, no public figure; a deploy measures it"
SOURCES: dict[str, Source] = {
    "autoscaler_tick_s": Source(
        "a job that lands just before the tick of manager/autoscaler.py",
        "manager/autoscaler.py TICK_S, a whole tick",
    ),
    "update_service_s": Source(
        f"the ECS UpdateService call (manager/providers/ecs.py), one round trip; {_ESTIMATE}"
    ),
    "manager_starts_instances": Source(
        "SYNAPSE_ECS_WORKER_ASGS is set: the manager raises the groups' desired capacity itself, warm group "
        "first, then burst (manager/providers/ecs.py); without it, managed scaling's alarm does, later"
    ),
    "set_desired_capacity_s": Source(
        "DescribeAutoScalingGroups and SetDesiredCapacity (HonorCooldown false), two round trips; "
        f"{_ESTIMATE}"
    ),
    "capacity_alarm_s": Source(
        "without SYNAPSE_ECS_WORKER_ASGS: CapacityProviderReservation is published each minute and its "
        "target-tracking alarm fires on the first datapoint over the target "
        f"({_ECS}/cluster-auto-scaling.html)",
        f"or on the second, a minute later ({_ECS}/cluster-auto-scaling.html)",
    ),
    "warm_instance_start_s": Source(
        "AWS's launch of warm pools: pre-initialized instances serve in as low as 30 s "
        "(https://www.infoq.com/news/2021/05/aws-warm-pools/; the user guide gives no figure: "
        f"{_ASG}/ec2-auto-scaling-warm-pools.html)",
        f"{_ISSUE_40}: a stopped g5 starts and boots, its NVIDIA driver loading, in 50-100 s",
    ),
    "prewarm_in_service_s": Source(
        "stacks/prewarm.sh, which cloud-init runs before the ECS agent may start, reads the target state "
        "from IMDS and hands the launch hook's release to a unit beside the agent "
        f"({_ASG}/warm-pool-instance-lifecycle.html): IMDS answers in milliseconds, the script polls each "
        "second",
        f"{_ESTIMATE}: the state IMDS has not yet written for a few polls",
    ),
    "cold_instance_boot_s": Source(
        "a new instance: RunInstances, then the ECS GPU AMI's first boot and driver load: the low end of "
        f"the warm start ({_ISSUE_40}, 50 s) plus RunInstances and cloud-init's first run, 10 s; estimate",
        f"the warm start's high end ({_ISSUE_40}, 100 s) plus 20 s for the same; estimate",
    ),
    "ami_first_read_gb": Source(
        "what the first boot, Docker and the ECS agent read of the AMI's 30 GB volume (kernel, driver "
        f"modules, the agent's image); {_ESTIMATE}"
    ),
    "volume_initialization_mib_per_s": Source(
        "both launch templates' provisioned rate for volume initialization (contract/launch_volume.py), "
        "which EBS delivers within 10 percent 99 percent of the time "
        f"({_EBS}/initalize-volume.html): the rate less 10 percent",
        f"the rate plus 10 percent ({_EBS}/initalize-volume.html)",
    ),
    "agent_registration_s": Source(
        "the ECS agent starts after cloud-init's final stage and registers the container instance; on the "
        f"warm group it reads the target state first (ECS_WARM_POOLS_CHECK, {_ECS}/using-warm-pool.html), "
        "InService already, and goes on (amazon-ecs-agent, agent/app/agent.go, waitUntilInstanceInService); "
        f"{_ESTIMATE}",
        f"{_ESTIMATE}; an agent that finds no target state sleeps a minute first (the same function), "
        "which prewarm.sh's wait rules out",
    ),
    "task_placement_s": Source(
        f"the service scheduler places the pending task once the instance registers; {_ESTIMATE}",
        f"{_ISSUE_40}: placement and the network interface together 20-60 s",
    ),
    "task_eni_s": Source(
        'awsvpc: ECS provisions and attaches an ENI through EC2\'s APIs, "an overhead of several seconds" '
        f"({_ECS}/task-recommendations.html)",
        f"{_ISSUE_40}: placement and the network interface together 20-60 s",
    ),
    "image_compressed_gb": Source(
        "the worker image as ECR stores it (contract/worker_image_size.py): tritonserver:25.10-py3 about "
        "7 GB, torch's CUDA wheels about 3.5 GB, the rest under 0.5 GB; estimate until a build measures it"
    ),
    "ecr_download_mb_per_s": Source(
        f"{_ISSUE_40}: the largest layers download as single streams; {_ESTIMATE}",
        "Docker pulls three layers at a time (dockerd --max-concurrent-downloads, default 3: "
        f"https://docs.docker.com/reference/cli/dockerd/); {_ESTIMATE}",
    ),
    "image_extracted_gb": Source(
        "the same image on disk (contract/worker_image_size.py): Triton about 16 GB, torch and the CUDA "
        "wheels about 7.5 GB, the rest under 0.5 GB; estimate until a build measures it"
    ),
    "gp3_throughput_mib_per_s": Source(
        "both launch templates provision a new instance's gp3 root volume's throughput "
        f"(contract/launch_volume.py, {_EBS}/general-purpose.html); extraction writes every layer through "
        "it, at this rate or the decompression's, whichever is lower"
    ),
    "image_extraction_mib_per_s": Source(
        f"{_ISSUE_40}: Docker applies the layers one at a time, each one gzip stream on one core; "
        f"{_ESTIMATE}",
        f"contract/launch_volume.py IMAGE_EXTRACTION_MIB_S; {_ESTIMATE}",
    ),
    "warm_volume_mib_per_s": Source(
        "a warm-pool instance's volume, which the manager lowers to gp3's baseline, 125 MiB/s, while it is "
        f"stopped (manager/providers/warm_volumes.py, {_EBS}/general-purpose.html); its blocks were written "
        "there by the pull, so EBS does not fetch them lazily"
    ),
    "startup_read_gb": Source(
        "what the worker reads from disk before its models serve, with a cold page cache: the Python "
        "backend stubs' torch and its CUDA libraries, Triton's own, the baked weights (issue 40: Triton and "
        f"the stubs read a cold page cache from a volume lowered to gp3's baseline); {_ESTIMATE}"
    ),
    "container_start_s": Source(
        "the network namespace, the container with the NVIDIA runtime, the worker agent and Triton start; "
        f"no pull: ECS_IMAGE_PULL_BEHAVIOR=prefer-cached uses the image on disk ({_ECS}/pull-behavior.html); "
        f"{_ESTIMATE}"
    ),
    "model_gb": Source(
        "the models to fetch from the model bucket: 0 for the default ones, baked into the image "
        "(worker_image/Dockerfile)"
    ),
    "model_download_mb_per_s": Source(
        f"S3 through the VPC gateway endpoint, one stream; {_ESTIMATE}",
        f"several streams; {_ESTIMATE}",
    ),
    "model_load_s": Source(
        "Triton loads the models once their files are in memory (CUDA context, weights to the GPU); "
        f"{_ESTIMATE} as synapse_worker_model_load_seconds",
    ),
    "first_batch_s": Source(
        "the manager sees the READY registration at its next tick (manager/autoscaler.py TICK_S)",
        "at most a heartbeat (SYNAPSE_HEARTBEAT_S, 2 s: contract/settings.py) and a tick",
    ),
}


@dataclass(frozen=True, slots=True)
class Step:
    """One step's low and high seconds, and the parameters whose sources give them."""

    name: str
    low_s: float
    high_s: float
    sources: tuple[str, ...]


def _step(name: str, span: Span, source: str) -> Step:
    return Step(name, span.low, span.high, (source,))


def _transfer(name: str, size_gb: Span, rate: Span, rate_mb: float, sources: tuple[str, ...]) -> Step:
    """Moving `size_gb` at `rate` (`rate_mb` MB a unit): the low end is the small size at the fast rate, the
    high end the reverse."""
    low, high = (
        size_gb.low * MB_PER_GB / (rate.high * rate_mb),
        size_gb.high * MB_PER_GB / (rate.low * rate_mb),
    )
    return Step(name, low, high, sources)


def _mib_read(name: str, params: ColdStartParameters, size: str, rate: Span, rate_name: str) -> Step:
    return _transfer(name, getattr(params, size), rate, MB_PER_MIB, (size, rate_name))


@dataclass(frozen=True, slots=True)
class ColdStart:
    """One path from zero to a first result, step by step."""

    path: StartPath
    steps: tuple[Step, ...]

    @property
    def low_s(self) -> float:
        return sum(step.low_s for step in self.steps)

    @property
    def high_s(self) -> float:
        return sum(step.high_s for step in self.steps)

    @property
    def target_s(self) -> float:
        return TARGET_S[self.path]


def extraction_rate(params: ColdStartParameters) -> Span:
    """The extraction's pace: the volume's throughput or the decompression's, whichever is lower."""
    disk, cpu = params.gp3_throughput_mib_per_s, params.image_extraction_mib_per_s
    return Span(min(disk.low, cpu.low), min(disk.high, cpu.high))


def _instance_steps(params: ColdStartParameters, path: StartPath) -> list[Step]:
    if params.manager_starts_instances:
        request = _step(
            "SetDesiredCapacity by the manager", params.set_desired_capacity_s, "set_desired_capacity_s"
        )
    else:
        request = _step("capacity provider metric and alarm", params.capacity_alarm_s, "capacity_alarm_s")
    if path not in NEW_INSTANCE_PATHS:
        return [
            request,
            _step("warm-pool instance start", params.warm_instance_start_s, "warm_instance_start_s"),
        ]
    rate = params.volume_initialization_mib_per_s
    return [
        request,
        _step("cold instance launch and boot", params.cold_instance_boot_s, "cold_instance_boot_s"),
        _mib_read(
            f"AMI volume first reads from its snapshot ({params.ami_first_read_gb} GB at {rate} MiB/s)",
            params,
            "ami_first_read_gb",
            rate,
            "volume_initialization_mib_per_s",
        ),
    ]


def _image_steps(params: ColdStartParameters) -> list[Step]:
    download = _transfer(
        f"image download ({params.image_compressed_gb} GB from ECR at {params.ecr_download_mb_per_s} MB/s)",
        params.image_compressed_gb,
        params.ecr_download_mb_per_s,
        1.0,
        ("image_compressed_gb", "ecr_download_mb_per_s"),
    )
    rate = extraction_rate(params)
    extraction = _transfer(
        f"image extraction ({params.image_extracted_gb} GB at {rate} MiB/s)",
        params.image_extracted_gb,
        rate,
        MB_PER_MIB,
        ("image_extracted_gb", "image_extraction_mib_per_s", "gp3_throughput_mib_per_s"),
    )
    return [download, extraction]


def cold_start(params: ColdStartParameters, path: StartPath) -> ColdStart:
    """The steps a job sent at zero waits through on `path`, in order."""
    tick, call = params.autoscaler_tick_s, params.update_service_s
    steps = [
        Step(
            "manager tick and UpdateService",
            tick.low + call.low,
            tick.high + call.high,
            ("autoscaler_tick_s", "update_service_s"),
        ),
        *_instance_steps(params, path),
    ]
    if path in WARM_GROUP_PATHS:
        steps.append(
            _step(
                "prewarm.sh: target state read, hook released beside the agent",
                params.prewarm_in_service_s,
                "prewarm_in_service_s",
            )
        )
    steps += [
        _step("ECS agent registration", params.agent_registration_s, "agent_registration_s"),
        _step("task placement", params.task_placement_s, "task_placement_s"),
        _step("task network interface (awsvpc)", params.task_eni_s, "task_eni_s"),
    ]
    if path in NEW_INSTANCE_PATHS:
        steps += _image_steps(params)
    steps.append(_step("container start", params.container_start_s, "container_start_s"))
    # A new instance reads what its pull just wrote, through the provisioned volume; a warm one, through
    # the baseline its stopped volume was lowered to.
    volume, volume_name = (
        (params.gp3_throughput_mib_per_s, "gp3_throughput_mib_per_s")
        if path in NEW_INSTANCE_PATHS
        else (params.warm_volume_mib_per_s, "warm_volume_mib_per_s")
    )
    steps.append(
        _mib_read(
            f"libraries and weights read, cold page cache ({params.startup_read_gb} GB at {volume} MiB/s)",
            params,
            "startup_read_gb",
            volume,
            volume_name,
        )
    )
    if params.model_gb.high > 0:
        steps.append(
            _transfer(
                f"model download ({params.model_gb} GB)",
                params.model_gb,
                params.model_download_mb_per_s,
                1.0,
                ("model_gb", "model_download_mb_per_s"),
            )
        )
    steps += [
        _step("model load", params.model_load_s, "model_load_s"),
        _step("READY seen, first batch", params.first_batch_s, "first_batch_s"),
    ]
    return ColdStart(path, tuple(steps))


def every_path(params: ColdStartParameters) -> list[ColdStart]:
    return [cold_start(params, path) for path in PATHS]


def slowest(params: ColdStartParameters) -> ColdStart:
    return max(every_path(params), key=lambda start: start.high_s)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def verdict(start: ColdStart) -> str:
    """The path's high total against its target: met with a margin, or missed by how much."""
    gap = round(start.high_s) - round(start.target_s)
    against = f"Target {start.target_s:.0f} s ({minutes(start.target_s)}), against the high total:"
    return f"{against} missed by {gap} s." if gap > 0 else f"{against} met, {-gap} s to spare."


def table(starts: Sequence[ColdStart]) -> str:
    """A Markdown table per path (step, low and high seconds, the parameters it cites) with its totals and
    its target."""
    parts: list[str] = []
    for start in starts:
        rows = [
            f"| {step.name} | {step.low_s:.0f} | {step.high_s:.0f} | {', '.join(step.sources)} |"
            for step in start.steps
        ]
        total = (
            f"| **time to first result** | **{start.low_s:.0f}** ({minutes(start.low_s)}) "
            f"| **{start.high_s:.0f}** ({minutes(start.high_s)}) | |"
        )
        header = ["| step | low s | high s | source |", "| --- | ---: | ---: | --- |"]
        parts.append("\n".join([f"### {TITLES[start.path]}", "", *header, *rows, total, "", verdict(start)]))
    return "\n\n".join(parts)


def sources(params: ColdStartParameters, starts: Sequence[ColdStart]) -> str:
    """Each parameter the tables cite, with its span and where each end comes from."""
    cited = dict.fromkeys(name for start in starts for step in start.steps for name in step.sources)
    spans = params.spans()
    lines = [f"- `{name}` = {spans[name]}: {SOURCES[name]}" for name in cited]
    return "\n".join(["### sources", "", *lines])


def as_json(params: ColdStartParameters, starts: Sequence[ColdStart]) -> str:
    paths = {
        start.path: {
            "title": TITLES[start.path],
            "steps": [asdict(step) for step in start.steps],
            "low_s": start.low_s,
            "high_s": start.high_s,
            "target_s": start.target_s,
        }
        for start in starts
    }
    return json.dumps({"parameters": asdict(params), "paths": paths}, indent=2)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="synapse plan cold-start", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    defaults = ColdStartParameters()
    for field in fields(ColdStartParameters):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        source = SOURCES[field.name]
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=str(source))
        else:
            p.add_argument(
                flag,
                type=Span.parse,
                default=default,
                metavar="LOW[-HIGH]",
                help=f"{source} (default {default})",
            )
    p.add_argument("--json", action="store_true", help="print the parameters and paths as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(parser().parse_args(argv))
    as_json_output = args.pop("json")
    params = ColdStartParameters(**args)
    starts = every_path(params)
    print(as_json(params, starts) if as_json_output else f"{table(starts)}\n\n{sources(params, starts)}")
