"""`synapse plan cold-start`: how long a job sent at zero waits on AWS for its first result.

From zero, nothing runs but the manager. Its autoscaler raises the worker service's desired count and,
given the workers' Auto Scaling groups (SYNAPSE_ECS_WORKER_ASGS), their desired capacity itself, the
warm group first and then the burst group; a group starts an instance, whose ECS agent registers; ECS
places the task, attaches its network interface (awsvpc) and starts the container, which loads its
models. Every step below is a parameter
with a default and its source (`SOURCES`); the paths differ only in which steps they take and which
end of a range they use:
- warm pool (the lean default): a stopped warm-pool instance starts; `stacks/prewarm.sh` pulled the
  worker image onto its disk while the pool prepared it, so no layer is pulled (prefer-cached); the
  launch hook that pauses it again as it leaves the pool is released beside the ECS agent, not before it;
- cold instance: no warm instance is left, a new one of the burst group boots from the AMI's snapshot
  (which EBS copies onto its volume at the launch template's provisioned initialization rate), goes in
  service at once (the burst group has no launch hook: nothing to prepare for a warm pool), and pulls
  the whole image onto a volume provisioned past gp3's baseline (contract/launch_volume.py);
- refill: the warm group's pool is empty while it prepares a fresh instance, and the group's in-service
  one is gone too (a deploy's instance refresh replaces both), so the group launches a new instance
  straight into service: the same launch volume as a burst instance, and a launch hook released beside
  the agent;
- best case: the warm path at the fast end of every range.
The default models are baked into the worker image (no download); `--model-gb` adds one for a model
served from the model bucket. Without SYNAPSE_ECS_WORKER_ASGS (`--no-manager-starts-instances`), ECS
managed scaling's CloudWatch alarm starts the instance instead, one to two minutes later.

Target (issue 29): at most 120 s warm, at most 6 min cold. Derivation: with the avoidable steps gone
(the alarm, the image pull and the model download on a warm start, the launch hook ahead of the agent),
what is left on the warm path is AWS's own sequence (instance start, agent registration, placement,
network interface) and the worker's container start, model load and first batch. At the fast end quoted
for a warm start (30 s, the best case) that sum is within the target; `table` prints each path's miss or
margin against it. The default warm start (60 s, an estimate for a GPU instance) misses it by about
twenty seconds, all of it in steps AWS runs; the cold paths meet 6 min with little to spare, most of
their time the image pull, whose extraction is bound by the CPU's gzip inflation rather than the disk.
Honest figures stay: a step that misses is shown missing, not trimmed to fit. The default
asynchronous deadline (`contract.jobs.DEFAULT_TIMEOUT_MS`) must outlive the slowest path with
margin (tests/unit/planner/test_cold_start.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal

from contract.launch_volume import (
    IMAGE_EXTRACTION_MIB_S,
    LAUNCH_THROUGHPUT_MIB_S,
    VOLUME_INITIALIZATION_RATE_MIB_S,
)
from contract.worker_image_size import IMAGE_COMPRESSED_GB, IMAGE_EXTRACTED_GB

MB_PER_GB = 1000
MB_PER_MIB = 1.048576
StartPath = Literal["best", "warm", "cold", "refill"]
PATHS: tuple[StartPath, ...] = ("warm", "cold", "refill", "best")
TITLES: dict[StartPath, str] = {
    "warm": "warm pool, image on its disk (lean default)",
    "cold": "cold burst instance, image pulled",
    "refill": "warm group while its pool refills: a new instance, image pulled",
    "best": "best case",
}
# Issue 29's targets, from a job at zero to its first result: a new instance of either group is a cold start.
TARGET_S: dict[StartPath, float] = {"warm": 120.0, "cold": 360.0, "refill": 360.0, "best": 120.0}
NEW_INSTANCE_PATHS: tuple[StartPath, ...] = ("cold", "refill")
# The paths on an instance of the warm group, the one with a launch hook (stacks/workers.py).
WARM_GROUP_PATHS: tuple[StartPath, ...] = ("warm", "refill", "best")


@dataclass(frozen=True, slots=True)
class ColdStartParameters:
    """Every figure of the cold-start path, in seconds unless named otherwise; `SOURCES` says where each
    default comes from. A `_fast` twin is the fast end of a range that the best case takes."""

    autoscaler_tick_s: float = 1.0
    update_service_s: float = 2.0
    manager_starts_instances: bool = True
    set_desired_capacity_s: float = 1.0
    capacity_alarm_s: float = 120.0
    capacity_alarm_fast_s: float = 60.0
    warm_instance_start_s: float = 60.0
    warm_instance_start_fast_s: float = 30.0
    prewarm_in_service_s: float = 2.0
    cold_instance_boot_s: float = 90.0
    ami_first_read_gb: float = 3.0
    volume_initialization_mib_per_s: float = VOLUME_INITIALIZATION_RATE_MIB_S
    agent_registration_s: float = 20.0
    task_placement_s: float = 10.0
    task_eni_s: float = 15.0
    image_compressed_gb: float = IMAGE_COMPRESSED_GB
    ecr_download_mb_per_s: float = 150.0
    image_extracted_gb: float = IMAGE_EXTRACTED_GB
    gp3_throughput_mib_per_s: float = LAUNCH_THROUGHPUT_MIB_S
    image_extraction_mib_per_s: float = IMAGE_EXTRACTION_MIB_S
    container_start_s: float = 10.0
    model_gb: float = 0.0
    model_download_mb_per_s: float = 100.0
    model_load_s: float = 20.0
    first_batch_s: float = 3.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, bool) and value < 0:
                raise ValueError(f"{field.name} must be >= 0, got {value}")
        for rate in RATES:
            if getattr(self, rate) <= 0:
                raise ValueError(f"{rate} must be > 0, got {getattr(self, rate)}")

    @property
    def ami_first_read_s(self) -> float:
        return self.ami_first_read_gb * MB_PER_GB / (self.volume_initialization_mib_per_s * MB_PER_MIB)

    @property
    def image_download_s(self) -> float:
        return self.image_compressed_gb * MB_PER_GB / self.ecr_download_mb_per_s

    @property
    def extraction_bound_by_disk(self) -> bool:
        """Whether the volume's throughput, not the CPU's decompression, sets the extraction's pace."""
        return self.gp3_throughput_mib_per_s < self.image_extraction_mib_per_s

    @property
    def extraction_mib_per_s(self) -> float:
        return min(self.gp3_throughput_mib_per_s, self.image_extraction_mib_per_s)

    @property
    def image_extraction_s(self) -> float:
        return self.image_extracted_gb * MB_PER_GB / (self.extraction_mib_per_s * MB_PER_MIB)

    @property
    def image_pull_s(self) -> float:
        return self.image_download_s + self.image_extraction_s

    @property
    def model_download_s(self) -> float:
        return self.model_gb * MB_PER_GB / self.model_download_mb_per_s


RATES = (
    "volume_initialization_mib_per_s",
    "ecr_download_mb_per_s",
    "gp3_throughput_mib_per_s",
    "image_extraction_mib_per_s",
    "model_download_mb_per_s",
)

_ASG = "https://docs.aws.amazon.com/autoscaling/ec2/userguide"
_ECS = "https://docs.aws.amazon.com/AmazonECS/latest/developerguide"
SOURCES: dict[str, str] = {
    "autoscaler_tick_s": "manager/autoscaler.py TICK_S: the leader's autoscaler reads the queues once a tick",
    "update_service_s": "the ECS UpdateService call (manager/providers/ecs.py), one API round trip and its "
    "scheduler finding no instance to place on",
    "manager_starts_instances": "SYNAPSE_ECS_WORKER_ASGS is set: the manager raises the groups' desired "
    "capacity itself, warm group first, then burst (manager/providers/ecs.py); without it, managed scaling's "
    "alarm does, later",
    "set_desired_capacity_s": "DescribeAutoScalingGroups and SetDesiredCapacity (HonorCooldown false), "
    "two API round trips",
    "capacity_alarm_s": "without SYNAPSE_ECS_WORKER_ASGS: CapacityProviderReservation is published each "
    f"minute and its target-tracking alarm needs a datapoint over the target, 1 to 2 min ({_ECS}/"
    "cluster-auto-scaling.html)",
    "capacity_alarm_fast_s": "the fast end of that range: the first datapoint fires the alarm",
    "warm_instance_start_s": "a stopped warm-pool instance (g5) starts and boots, its NVIDIA driver loading; "
    f"estimate, between the fast end and a first boot ({_ASG}/ec2-auto-scaling-warm-pools.html)",
    "warm_instance_start_fast_s": "the fast end: warm pools start instances in as low as 30 s (issue 29's "
    "anchor, an AWS claim for warm pools; not a figure the user guide states)",
    "prewarm_in_service_s": "a warm-group instance headed into service (out of the pool, where the launch "
    f"hook pauses it again: {_ASG}/warm-pool-instance-lifecycle.html, or launched straight in): "
    "stacks/prewarm.sh, which cloud-init runs before the ECS agent may start, reads the target state from "
    "IMDS and hands the hook's release (and, on a new instance, the AWS CLI's install) to a transient unit "
    "beside the agent, which reads only the target state (the install takes one of the 4 vCPUs while the "
    "extraction inflates on another); estimate",
    "cold_instance_boot_s": "a new GPU instance (no warm one left): RunInstances, then the ECS GPU AMI boots "
    "and loads the NVIDIA driver; estimate",
    "ami_first_read_gb": "what the first boot, Docker and the ECS agent read of the AMI's 30 GB volume "
    "(kernel, driver modules, the agent's image); estimate",
    "volume_initialization_mib_per_s": "both launch templates' provisioned rate for volume "
    "initialization (contract/launch_volume.py): EBS copies the AMI's snapshot onto the new volume at it, "
    "within 10 percent 99 percent of the time (https://docs.aws.amazon.com/ebs/latest/userguide/"
    "initalize-volume.html). EBS does not say in which order the blocks come; the whole snapshot, 30 GiB "
    "at most, is there about 100 s after the volume's creation, during the boot, so the first reads take "
    "about their own size at that rate",
    "agent_registration_s": "the ECS agent starts (the AMI orders it after cloud-init's final stage, which "
    "runs stacks/prewarm.sh) and registers the container instance. On the warm group it first reads the "
    f"target state (ECS_WARM_POOLS_CHECK, {_ECS}/using-warm-pool.html), InService already, and goes on at "
    "once: it never waits for the launch hook, only for a state IMDS has (amazon-ecs-agent, agent/app/"
    "agent.go, waitUntilInstanceInService); the burst group has no warm pool and no check, which would cost "
    "a minute's sleep if IMDS had no state yet; estimate",
    "task_placement_s": "the service scheduler places the pending task on the new instance; estimate",
    "task_eni_s": "the worker task uses awsvpc (stacks/workers.py): ECS creates a network interface and "
    f"attaches it to the instance before the containers start ({_ECS}/task-networking-awsvpc.html); "
    "estimate",
    "image_compressed_gb": "the worker image as ECR stores it: tritonserver:25.10-py3 (about 7 GB "
    "compressed), PyPI's torch and its nvidia-*-cu13 CUDA wheels (about 3.5 GB), the baked models and "
    "the rest (under 0.5 GB); worker_image/Dockerfile, estimate",
    "ecr_download_mb_per_s": "layers from ECR, three at a time (Docker's default), effective; estimate",
    "image_extracted_gb": "the same image on disk: Triton about 16 GB (its 24.06 image is 15.5 GB), torch "
    "and the CUDA wheels installed about 7.5 GB, the rest under 0.5 GB; estimate",
    "gp3_throughput_mib_per_s": "both launch templates provision a new instance's gp3 root volume's "
    "throughput (contract/launch_volume.py; the manager lowers an instance stopped into the warm pool, its "
    "image on disk, to gp3's baseline, 125 MiB/s: https://docs.aws.amazon.com/ebs/latest/userguide/"
    "general-purpose.html); extraction writes every layer through it, at this rate or the decompression's, "
    "whichever is lower",
    "image_extraction_mib_per_s": "what the CPU lets Docker extract, in MiB/s of extracted files: layers "
    "are applied one at a time, each a single gzip stream inflated on one core of a 4-vCPU g5/g6.xlarge "
    "(contract/launch_volume.py); estimate",
    "container_start_s": "the network namespace, the container with the NVIDIA runtime, the worker agent "
    "and Triton start; no pull: ECS_IMAGE_PULL_BEHAVIOR=prefer-cached uses the image on disk "
    f"({_ECS}/pull-behavior.html); estimate",
    "model_gb": "the models to fetch from the model bucket: 0 for the default ones, baked into the image",
    "model_download_mb_per_s": "S3 through the VPC gateway endpoint, one stream",
    "model_load_s": "Triton loads the models (the Python backend stubs import torch, CUDA context, "
    "weights to the GPU); estimate, a deploy measures it as synapse_worker_model_load_seconds",
    "first_batch_s": "the manager sees the READY registration and runs the first batch: at most a "
    "heartbeat (SYNAPSE_HEARTBEAT_S, 2 s) and a tick",
}


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class ColdStart:
    """One path from zero to a first result, step by step."""

    path: StartPath
    steps: tuple[Step, ...]

    @property
    def total_s(self) -> float:
        return sum(step.seconds for step in self.steps)

    @property
    def target_s(self) -> float:
        return TARGET_S[self.path]


def _instance_request(params: ColdStartParameters, fast: bool) -> Step:
    if params.manager_starts_instances:
        return Step("SetDesiredCapacity by the manager", params.set_desired_capacity_s)
    alarm = params.capacity_alarm_fast_s if fast else params.capacity_alarm_s
    return Step("capacity provider metric and alarm", alarm)


def _extraction_name(params: ColdStartParameters) -> str:
    rate = f"at {params.extraction_mib_per_s:g} MiB/s"
    bound = f"onto gp3 {rate}" if params.extraction_bound_by_disk else f"{rate}, decompression-bound"
    return f"image extraction ({params.image_extracted_gb:g} GB {bound})"


def cold_start(params: ColdStartParameters, path: StartPath) -> ColdStart:
    """The steps a job sent at zero waits through on `path`, in order."""
    fast = path == "best"
    steps = [
        Step("manager tick and UpdateService", params.autoscaler_tick_s + params.update_service_s),
        _instance_request(params, fast),
    ]
    if path in NEW_INSTANCE_PATHS:
        steps += [
            Step("cold instance launch and boot", params.cold_instance_boot_s),
            Step(
                f"AMI volume first reads from its snapshot ({params.ami_first_read_gb:g} GB at "
                f"{params.volume_initialization_mib_per_s:g} MiB/s)",
                params.ami_first_read_s,
            ),
        ]
    else:
        start = params.warm_instance_start_fast_s if fast else params.warm_instance_start_s
        steps.append(Step("warm-pool instance start", start))
    if path in WARM_GROUP_PATHS:
        steps.append(
            Step("prewarm.sh: target state read, hook released beside the agent", params.prewarm_in_service_s)
        )
    steps += [
        Step("ECS agent registration", params.agent_registration_s),
        Step("task placement", params.task_placement_s),
        Step("task network interface (awsvpc)", params.task_eni_s),
    ]
    if path in NEW_INSTANCE_PATHS:
        steps += [
            Step(f"image download ({params.image_compressed_gb:g} GB from ECR)", params.image_download_s),
            Step(_extraction_name(params), params.image_extraction_s),
        ]
    steps.append(Step("container start", params.container_start_s))
    if params.model_gb > 0:
        steps.append(Step(f"model download ({params.model_gb:g} GB)", params.model_download_s))
    steps += [
        Step("model load", params.model_load_s),
        Step("READY seen, first batch", params.first_batch_s),
    ]
    return ColdStart(path, tuple(steps))


def every_path(params: ColdStartParameters) -> list[ColdStart]:
    return [cold_start(params, path) for path in PATHS]


def slowest(params: ColdStartParameters) -> ColdStart:
    return max(every_path(params), key=lambda start: start.total_s)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def verdict(start: ColdStart) -> str:
    """The path against its target: met with a margin, or missed by how much."""
    gap = round(start.total_s) - round(start.target_s)
    against = f"Target {start.target_s:.0f} s ({minutes(start.target_s)}):"
    return f"{against} missed by {gap} s." if gap > 0 else f"{against} met, {-gap} s to spare."


def table(starts: Sequence[ColdStart]) -> str:
    """A Markdown table per path (step, seconds) with its total and its target."""
    parts: list[str] = []
    for start in starts:
        rows = [f"| {step.name} | {step.seconds:.0f} |" for step in start.steps]
        total = f"| **time to first result** | **{start.total_s:.0f}** ({minutes(start.total_s)}) |"
        heading = f"### {TITLES[start.path]}"
        parts.append(
            "\n".join([heading, "", "| step | s |", "| --- | ---: |", *rows, total, "", verdict(start)])
        )
    return "\n\n".join(parts)


def as_json(params: ColdStartParameters, starts: Sequence[ColdStart]) -> str:
    paths = {
        start.path: {
            "title": TITLES[start.path],
            "steps": [asdict(step) for step in start.steps],
            "total_s": start.total_s,
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
        if isinstance(default, bool):
            p.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=SOURCES[field.name]
            )
        else:
            p.add_argument(
                flag, type=float, default=default, help=f"{SOURCES[field.name]} (default {default:g})"
            )
    p.add_argument("--json", action="store_true", help="print the parameters and paths as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(parser().parse_args(argv))
    as_json_output = args.pop("json")
    params = ColdStartParameters(**args)
    starts = every_path(params)
    print(as_json(params, starts) if as_json_output else table(starts))
