"""`synapse plan batch`: how long a Batch API batch of N lines of one model takes on the pool the
autoscaler gives it, from an idle platform (no worker running, no other traffic).

It steps through the batch a second at a time (the autoscaler's tick), as the platform runs it:
- the batch runner (manager/batch_runner.py) keeps at most `batch_lines_in_flight` lines queued or
  running and refills their places once a pass (`batch_tick_s`): the lines move at most that many a pass;
- the autoscaler's own policy (`manager.autoscaling.Autoscaler`, limits from the settings as the manager
  takes them) sees those lines: as batch backlog due by the lines' deadline (a line's job times out at
  the window's end, or after the longest job timeout, whichever is sooner), and for a generative model
  as sequences against each engine's budget; a worker it asks for serves `--startup-s` later;
- a worker completes jobs at the model's latency profile T(b) (`LatencyProfile.capacity`, the planner's
  model of throughput) with b the lines each of its batches gets: the lines in flight shared over the
  workers' batches in flight (one-shot and embedding models; an embedding line counted as one text) or
  over its engine's sequences (generative models: T(b) the time of one generation among b).
Interactive traffic on the same pool is left out: it gives batch lines the capacity it leaves, so a busy
platform finishes a batch sooner than this estimate, never later for want of workers.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from contract.catalog import ServedModel
from contract.settings import Settings
from manager.autoscaler import limits_from
from manager.autoscaling import Autoscaler, LoadSnapshot, ScalingLimits
from manager.batch_runner import line_timeout_ms
from planner.cold_start import ColdStartParameters, cold_start
from planner.simulator import LatencyProfile

STEP_S = 1.0  # the autoscaler's tick
PROFILE_PARAMETERS = ("base_ms", "per_item_ms")  # a model config's own latency profile (gpu-sim's)


@dataclass(frozen=True, slots=True)
class BatchPlanRequest:
    model: ServedModel
    lines: int
    profile: LatencyProfile
    limits: ScalingLimits
    lines_in_flight: int
    runner_tick_s: float
    window_s: float
    startup_s: float
    max_inflight: int = 2  # a one-shot worker's batches in flight (the manager's setting)
    gpu_price_per_hour: float = Settings.model_fields["gpu_price_per_hour"].default

    @property
    def max_batch(self) -> int:
        return self.model.max_num_seqs if self.model.generates else self.model.max_batch_size

    @property
    def runner_rate(self) -> float:
        """Lines a second the runner can move: each place in flight is refilled at most once a pass."""
        return self.lines_in_flight / self.runner_tick_s


@dataclass(frozen=True, slots=True)
class BatchPlan:
    request: BatchPlanRequest
    seconds: float  # creation to the last line's result, or the window's end
    lines_left: int  # lines without a result at the window's end: they expire (`batch_expired`)
    peak_workers: int
    worker_seconds: float  # every worker from when it was asked for until the batch ended

    @property
    def gpu_cost(self) -> float:
        return self.worker_seconds * self.request.gpu_price_per_hour / 3600

    def table(self) -> str:
        req = self.request
        kind = "sequences per engine" if req.model.generates else "max batch"
        verdict = (
            f"**{duration(self.seconds)}**"
            if not self.lines_left
            else f"**expires** after {duration(self.seconds)} with {self.lines_left:,} lines left"
        )
        rows = [
            ("model", f"{req.model.name} ({req.model.kind.value}, {kind} {req.max_batch})"),
            ("latency profile T(b)", req.profile.describe()),
            ("lines", f"{req.lines:,}"),
            ("lines in flight", f"{req.lines_in_flight}, refilled once a {req.runner_tick_s:g} s pass"),
            ("the runner's pace", f"at most {req.runner_rate:,.0f} lines/s"),
            ("worker limits", f"{req.limits.min_workers} to {req.limits.max_workers}"),
            ("a new worker serves after", f"{req.startup_s:g} s"),
            ("workers the autoscaler gives", f"{self.peak_workers}"),
            ("time to the last result", verdict),
            ("completion window", duration(req.window_s)),
            ("worker time", f"{self.worker_seconds / 3600:,.2f} worker-hours"),
            ("GPU cost", f"${self.gpu_cost:,.4f} (at ${req.gpu_price_per_hour:g} per GPU-hour)"),
        ]
        return "\n".join(["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)])


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate(req: BatchPlanRequest) -> BatchPlan:
    """Steps the batch through the runner, the autoscaler and the pool until its last line or its window."""
    if req.lines < 1:
        raise ValueError(f"a batch holds at least one line, got {req.lines}")
    autoscaler = Autoscaler(req.limits)
    ready_at: list[float] = []  # when each worker asked for serves
    left = float(req.lines)
    measured = 0.0  # one worker's throughput as the pool last measured it (0: never)
    worker_seconds = 0.0
    peak = 0
    now = 0.0
    while left > 1e-9 and now < req.window_s:
        ready = sum(1 for t in ready_at if t <= now)
        in_flight = min(float(req.lines_in_flight), left)
        per_worker = req.max_inflight if not req.model.generates else 1
        size = max(1, min(req.max_batch, math.ceil(in_flight / max(1, ready * per_worker))))
        capacity = req.profile.capacity(size)
        pool_rate = ready * capacity
        rate = min(pool_rate, req.runner_rate)
        if ready:
            measured = capacity
        # The oldest line's time in the queue (Little's law), at most the batch's age.
        wait = min(now, in_flight / rate) if rate > 0 else now
        window_left = req.window_s - (now - wait)
        load = LoadSnapshot(
            now=now,
            backlog=0,
            running=ready,
            throughput=measured,
            busy_ratio=rate / pool_rate if pool_rate > 0 else 0.0,
            last_job_at=now,
            engine_workers=math.ceil(in_flight / req.model.max_num_seqs) if req.model.generates else 0,
            batch_backlog=math.ceil(in_flight),
            batch_due_s=line_timeout_ms(int(window_left * 1000)) / 1000 - wait,
        )
        desired = autoscaler.decide(load, len(ready_at)).desired
        ready_at.extend(now + req.startup_s for _ in range(desired - len(ready_at)))
        del ready_at[desired:]  # a scale-down retires the newest first
        peak = max(peak, len(ready_at))
        step = min(STEP_S, left / rate) if rate > 0 else STEP_S
        left -= rate * step
        worker_seconds += len(ready_at) * step
        now += step
    return BatchPlan(req, now, max(0, math.ceil(left - 1e-9)), peak, worker_seconds)


def profile_of(repository: Path, model: str) -> LatencyProfile | None:
    """The latency profile a model's config.pbtxt states (gpu-sim's `base_ms`, `per_item_ms`), or None."""
    from contract.catalog_build import CONFIG_FILE, triton_config

    path = repository / model / CONFIG_FILE
    if not path.is_file():
        return None
    parameters = triton_config(path.read_text()).get("parameters") or {}
    stated = {k: parameters[k].get("string_value") for k in PROFILE_PARAMETERS if k in parameters}
    if "base_ms" not in stated:
        return None
    return LatencyProfile(float(stated["base_ms"]), float(stated.get("per_item_ms") or 0.0))


def served_model(settings: Settings, model: str) -> ServedModel:
    """The model's catalog entry: a served one's, else the one its folder in the repository gives."""
    from contract.catalog_build import catalog_of
    from contract.catalog_build import served_model as from_folder

    found = catalog_of(settings).get(model)
    if found is not None:
        return found
    if (settings.model_repository / model).is_dir():
        return from_folder(settings.model_repository / model)
    served = ", ".join(settings.models)
    raise SystemExit(f"synapse plan batch: no model {model!r} (served: {served}; nor a folder in "
                     f"{settings.model_repository})")  # fmt: skip


def parser(defaults: Settings) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="synapse plan batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--model", required=True, help="the model every line names")
    p.add_argument("--lines", type=int, required=True, help="lines in the batch's input file")
    p.add_argument("--profile", type=LatencyProfile.parse,
                   help="T(b) in ms: `100` or `20+0.5b`; default: the one the model's config.pbtxt states "
                        "(gpu-sim's), needed for any other model")  # fmt: skip
    p.add_argument("--max-workers", type=int, default=defaults.max_workers, help="workers allowed")
    p.add_argument("--min-workers", type=int, default=defaults.min_workers)
    warm = cold_start(ColdStartParameters(), "warm").high_s
    p.add_argument("--startup-s", type=float, default=warm,
                   help="a new worker's time to serve; default: the warm path's high total in "
                        f"`synapse plan cold-start` ({warm:.0f} s)")  # fmt: skip
    p.add_argument(
        "--lines-in-flight",
        type=int,
        default=defaults.batch_lines_in_flight,
        help="SYNAPSE_BATCH_LINES_IN_FLIGHT (a tenant's max_inflight, where lower, bounds it too)",
    )
    p.add_argument("--gpu-price", type=float, default=defaults.gpu_price_per_hour, help="$ per GPU-hour")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    settings = Settings.from_env()
    args = parser(settings).parse_args(argv)
    model = served_model(settings, args.model)
    profile = args.profile or profile_of(settings.model_repository, args.model)
    if profile is None:
        sys.exit(f"synapse plan batch: {args.model}'s config states no latency profile: give --profile "
                 "(T(b) in ms, as `synapse bench` measures it)")  # fmt: skip
    # A deployed pool: a GPU per worker, every one of them may run an engine.
    limits = replace(
        limits_from(settings), min_workers=args.min_workers, max_workers=args.max_workers,
        max_engine_workers=None,
    )  # fmt: skip
    request = BatchPlanRequest(
        model=model,
        lines=args.lines,
        profile=profile,
        limits=limits,
        lines_in_flight=args.lines_in_flight,
        runner_tick_s=settings.batch_tick_s,
        window_s=settings.batch_window_s,
        startup_s=args.startup_s,
        max_inflight=settings.max_inflight_batches,
        gpu_price_per_hour=args.gpu_price,
    )
    print(estimate(request).table())
