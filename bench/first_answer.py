"""From zero with every model: a 1,000-job burst's first answer against one worker's time to ready.

Each worker of `make up` loads all of its models (SmolLM2, MiniLM, tiny-gpt2, gpu-sim). A worker serves
each model as soon as it has loaded it, the one with jobs waiting first, and the local provider starts
workers at the pace the machine's cores load them, so a burst of gpu-sim jobs at zero workers is
answered at about one worker's time to ready: the target is at most 1.25x the time a worker started
alone takes to serve all its models (issue 41, item 7), measured in the same run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from bench.measure import read_jobs
from bench.report import FIRST_ANSWER_RATIO
from bench.scaling import BURST_JOBS, BURST_MAX_WORKERS, post_burst
from bench.scenarios import Options, Section
from bench.stack import BenchStack
from contract.catalog_build import catalog_of
from contract.keys import stream_key, worker_key
from contract.settings import Settings
from worker_image.checkpoint import PROJECT_CHECKPOINTS

Registration = Callable[[str | None, set[str]], bool]  # (state, models served) -> reached


def served_models() -> tuple[str, ...]:
    """What `make up` serves: every model of the project's repository."""
    return catalog_of(Settings.from_env({})).names()


def built_checkpoints(root: Path) -> Path:
    """The project's checkpoints, built before anything is timed (a first `make up` builds them once)."""
    for model, build in PROJECT_CHECKPOINTS.items():
        build(root / model)
    return root


def seconds_until(stack: BenchStack, name: str, reached: Registration, began: float) -> float:
    """Seconds since `began` until the worker's registration has reached what `reached` asks."""
    client = stack.redis()

    def registered() -> bool:
        fields: dict[str, str] = client.hgetall(worker_key(name))  # type: ignore[assignment]
        return reached(fields.get("state"), set(fields.get("models", "").split(",")))

    stack.wait_for(name, registered)
    return time.monotonic() - began


def worker_alone(stack: BenchStack, models: tuple[str, ...]) -> tuple[float, float]:
    """Seconds until one worker, alone and with no job waiting, is READY, and until it serves every
    model."""
    stack.start_redis()
    began = time.monotonic()
    stack.launch_worker("alone")
    ready = seconds_until(stack, "alone", lambda state, _: state == "READY", began)
    loaded = seconds_until(stack, "alone", lambda _, served: set(models) <= served, began)
    return ready, loaded


def burst_first_answer(stack: BenchStack, n: int) -> tuple[float, int, int]:
    """Seconds from the burst until its first answer, with how many of the n jobs completed and how many
    the gateway accepted."""
    stack.start_redis()
    stack.start_manager(
        SYNAPSE_WORKER_PROVIDER="local", SYNAPSE_MIN_WORKERS="0", SYNAPSE_MAX_WORKERS=str(BURST_MAX_WORKERS)
    )
    stack.start_gateway()
    client = stack.redis()
    began = time.time()
    ids = asyncio.run(post_burst(stack.api, n))
    stack.wait_for("manager", lambda: client.xlen(stream_key("gpu-sim")) == 0)
    done = [j for j in read_jobs(client, ids) if j is not None and j.status == "COMPLETED"]
    first = min(j.completed_ms for j in done) / 1000 - began if done else float("nan")
    return first, len(done), len(ids)


def first_answer(opts: Options) -> Section:
    n = 200 if opts.quick else BURST_JOBS
    raw = opts.out / "raw" / "first-answer"
    checkpoints = built_checkpoints(raw / "checkpoints")
    models = served_models()
    listed = ",".join(models)
    with BenchStack(raw / "alone", models=listed, checkpoint_dir=checkpoints) as stack:
        ready_s, loaded_s = worker_alone(stack, models)
    with BenchStack(raw / "burst", models=listed, checkpoint_dir=checkpoints) as stack:
        first_s, completed, accepted = burst_first_answer(stack, n)
    ratio = first_s / loaded_s
    markdown = f"""Every worker loads {", ".join(models)}, as `make up`'s do. One worker started alone,
no job waiting: READY (its first model) after {ready_s:.1f} s, serving all {len(models)} models after
{loaded_s:.1f} s.
Then {n:,} gpu-sim jobs POSTed at once with 0 workers running (local provider, at most {BURST_MAX_WORKERS}):
first answer after {first_s:.1f} s, {ratio:.2f}x the lone worker's time to serve every model (target at
most {FIRST_ANSWER_RATIO}x) and {first_s / ready_s:.2f}x its time to READY with its first (which includes
neither the autoscaler's tick that starts a worker nor the job's own batch); {completed:,} of
{accepted:,} accepted jobs completed.
"""
    key = {"first_answer_s": first_s, "first_answer_alone_s": loaded_s, "first_answer_ratio": ratio,
           "first_answer_ready_s": ready_s}  # fmt: skip
    return Section("First answer from zero with every model", markdown, key=key)
