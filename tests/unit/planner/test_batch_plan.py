"""`synapse plan batch`: a batch's time on the pool the autoscaler gives it (planner/batch.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.catalog import ModelKind, ServedModel
from local_stack.cli import main as synapse
from manager.autoscaling import ScalingLimits
from planner.batch import BatchPlanRequest, estimate
from planner.simulator import LatencyProfile
from tests.processes import REPO

ONE_SHOT = ServedModel("gpu-sim", ModelKind.ONE_SHOT, max_batch_size=128)
CHAT = ServedModel("chat", ModelKind.GENERATIVE, max_num_seqs=32)
BASE = BatchPlanRequest(
    model=ONE_SHOT,
    lines=50_000,
    profile=LatencyProfile(20, 0.5),
    limits=ScalingLimits(max_workers=4),
    lines_in_flight=512,
    runner_tick_s=0.5,
    window_s=86_400,
    startup_s=60,
)
# A chat model: a generation among b sequences takes 4 s + 20 ms per sequence.
GENERATIVE = replace(BASE, model=CHAT, lines=10_000, profile=LatencyProfile(4000, 20))


def test_a_batch_takes_longer_the_more_lines_it_holds() -> None:
    for request in (BASE, GENERATIVE):
        times = [estimate(replace(request, lines=n)).seconds for n in (1_000, 10_000, 50_000)]
        assert times[0] < times[1] < times[2]


def test_a_generative_batch_finishes_sooner_with_more_workers_allowed() -> None:
    plans = [estimate(replace(GENERATIVE, limits=ScalingLimits(max_workers=n))) for n in (1, 4, 16)]
    assert [p.peak_workers for p in plans] == [1, 4, 16]  # 512 lines in flight fill 16 engines of 32
    assert plans[0].seconds > plans[1].seconds > plans[2].seconds
    assert plans[0].seconds > 3 * plans[2].seconds


def test_a_one_shot_batch_gets_the_workers_that_meet_its_deadline_not_every_one_allowed() -> None:
    """The autoscaler sizes batch work to finish its lines in flight by their deadline: one worker does."""
    few, many = (estimate(replace(BASE, limits=ScalingLimits(max_workers=n))) for n in (4, 64))
    assert few.peak_workers == many.peak_workers == 1
    assert few.seconds == many.seconds
    # The runner's pace bounds it: 512 lines a 0.5 s pass, while one worker does 128 per 84 ms.
    assert few.seconds == pytest.approx(60 + 50_000 / 1024, abs=2)


def test_lines_the_window_cannot_hold_expire() -> None:
    slow = replace(
        BASE, profile=LatencyProfile(1000), model=replace(ONE_SHOT, max_batch_size=1), window_s=600
    )
    plan = estimate(slow)
    assert plan.lines_left > 0
    assert plan.seconds == pytest.approx(600, abs=1)
    assert estimate(replace(slow, lines=100)).lines_left == 0


def test_the_command_prints_the_estimate_and_its_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    synapse(["plan", "batch", "--model", "gpu-sim", "--lines", "20000", "--max-workers", "3"])
    out = capsys.readouterr().out
    for shown in ("gpu-sim (one-shot, max batch 128)", "20 + 0.5·b ms", "20,000", "0 to 3",
                  "time to the last result", "GPU cost"):  # fmt: skip
        assert shown in out


def test_a_model_without_a_stated_profile_needs_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="--profile"):
        synapse(["plan", "batch", "--model", "minilm", "--lines", "100"])


def test_the_commands_operations_md_shows_run(capsys: pytest.CaptureFixture[str]) -> None:
    page = (REPO / "docs" / "operations.md").read_text()
    commands = [line.split() for line in page.splitlines() if line.startswith("synapse plan batch ")]
    assert len(commands) == 2
    for command in commands:
        synapse(command[1:])
        assert "time to the last result" in capsys.readouterr().out
