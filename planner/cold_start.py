"""`synapse plan cold-start`: how long a job sent at zero waits on AWS for its first result.

From zero, nothing runs but the manager: its autoscaler asks ECS for a worker, ECS's capacity
provider asks Auto Scaling for an instance, and the worker downloads and loads its models. Each step
below is a parameter with a default and where that default comes from; the paths differ only in
which steps they take and which end of a range they use:
- warm pool, image cached (the lean default): a stopped warm-pool instance starts; its image was
  pulled when the pool prepared it;
- cold instance, image pulled: no warm instance is left, a new one boots and pulls the image;
- best case: the warm path at the fast end of every range.
The default asynchronous deadline (`frontdoor.schemas.DEFAULT_TIMEOUT_MS`) must outlive the slowest.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal

MB_PER_GB = 1000
StartPath = Literal["best", "warm", "cold"]
PATHS: tuple[StartPath, ...] = ("warm", "cold", "best")
TITLES: dict[StartPath, str] = {
    "warm": "warm pool, image cached (lean default)",
    "cold": "cold instance, image pulled",
    "best": "best case",
}


@dataclass(frozen=True, slots=True)
class ColdStartParameters:
    """Every figure of the cold-start path, in seconds unless named otherwise; `SOURCES` says where each
    default comes from. A `_fast` twin is the fast end of a range that the best case takes."""

    autoscaler_tick_s: float = 1.0
    update_service_s: float = 2.0
    capacity_alarm_s: float = 120.0
    capacity_alarm_fast_s: float = 60.0
    warm_instance_start_s: float = 90.0
    warm_instance_start_fast_s: float = 45.0
    cold_instance_boot_s: float = 180.0
    agent_registration_s: float = 20.0
    task_placement_s: float = 10.0
    image_gb: float = 12.0
    image_pull_mb_per_s: float = 40.0
    container_start_s: float = 10.0
    model_gb: float = 0.5
    model_download_mb_per_s: float = 100.0
    model_load_s: float = 20.0
    first_batch_s: float = 3.0

    def __post_init__(self) -> None:
        for field in fields(self):
            if getattr(self, field.name) < 0:
                raise ValueError(f"{field.name} must be >= 0, got {getattr(self, field.name)}")
        for rate in ("image_pull_mb_per_s", "model_download_mb_per_s"):
            if getattr(self, rate) <= 0:
                raise ValueError(f"{rate} must be > 0, got {getattr(self, rate)}")

    @property
    def image_pull_s(self) -> float:
        return self.image_gb * MB_PER_GB / self.image_pull_mb_per_s

    @property
    def model_download_s(self) -> float:
        return self.model_gb * MB_PER_GB / self.model_download_mb_per_s


SOURCES: dict[str, str] = {
    "autoscaler_tick_s": "manager/autoscaler.py TICK_S: the leader's autoscaler reads the queues once a tick",
    "update_service_s": "the ECS UpdateService call, and its scheduler finding no instance to place on",
    "capacity_alarm_s": "ECS managed scaling: CapacityProviderReservation is published each minute and its "
    "target-tracking alarm needs a datapoint over the target (1 to 2 min)",
    "capacity_alarm_fast_s": "the fast end of that range: the first datapoint fires the alarm",
    "warm_instance_start_s": "EC2 Auto Scaling warm pool: a stopped instance starts and boots (45 to 90 s)",
    "warm_instance_start_fast_s": "the fast end of that range",
    "cold_instance_boot_s": "a new GPU instance (no warm one left): launch, boot of the ECS GPU AMI, driver",
    "agent_registration_s": "the ECS agent starts and registers the container instance with the cluster",
    "task_placement_s": "the service scheduler places the pending task on the new instance",
    "image_gb": "the worker image, compressed (tritonserver:25.06-py3 and the torch CUDA wheel)",
    "image_pull_mb_per_s": "ECR download and layer extraction, effective; the warm pool pulled it already",
    "container_start_s": "the worker agent and Triton start",
    "model_gb": "the models to fetch from the model bucket (the lean default's are small)",
    "model_download_mb_per_s": "S3 through the VPC gateway endpoint, one stream",
    "model_load_s": "Triton loads the models (CUDA context, weights to the GPU)",
    "first_batch_s": "the manager sees the READY registration (a heartbeat) and runs the first batch",
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


def cold_start(params: ColdStartParameters, path: StartPath) -> ColdStart:
    """The steps a job sent at zero waits through on `path`."""
    fast = path == "best"
    steps = [
        Step("manager tick and UpdateService", params.autoscaler_tick_s + params.update_service_s),
        Step(
            "capacity provider metric and alarm",
            params.capacity_alarm_fast_s if fast else params.capacity_alarm_s,
        ),
    ]
    if path == "cold":
        steps.append(Step("cold instance launch and boot", params.cold_instance_boot_s))
    else:
        start = params.warm_instance_start_fast_s if fast else params.warm_instance_start_s
        steps.append(Step("warm-pool instance start", start))
    steps += [
        Step("ECS agent registration", params.agent_registration_s),
        Step("task placement", params.task_placement_s),
    ]
    if path == "cold":
        steps.append(Step(f"image pull ({params.image_gb:g} GB)", params.image_pull_s))
    steps += [
        Step("container start", params.container_start_s),
        Step(f"model download ({params.model_gb:g} GB)", params.model_download_s),
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


def table(starts: Sequence[ColdStart]) -> str:
    """A Markdown table per path (step, seconds) with its total."""
    parts: list[str] = []
    for start in starts:
        rows = [f"| {step.name} | {step.seconds:.0f} |" for step in start.steps]
        total = f"| **time to first result** | **{start.total_s:.0f}** ({minutes(start.total_s)}) |"
        parts.append(
            "\n".join([f"### {TITLES[start.path]}", "", "| step | s |", "| --- | ---: |", *rows, total])
        )
    return "\n\n".join(parts)


def as_json(params: ColdStartParameters, starts: Sequence[ColdStart]) -> str:
    paths = {
        start.path: {
            "title": TITLES[start.path],
            "steps": [asdict(step) for step in start.steps],
            "total_s": start.total_s,
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
        p.add_argument(flag, type=float, default=default, help=f"{SOURCES[field.name]} (default {default:g})")
    p.add_argument("--json", action="store_true", help="print the parameters and paths as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(parser().parse_args(argv))
    as_json_output = args.pop("json")
    params = ColdStartParameters(**args)
    starts = every_path(params)
    print(as_json(params, starts) if as_json_output else table(starts))
