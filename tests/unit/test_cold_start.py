import json
import re
from dataclasses import replace

import pytest

from contract.settings import Settings
from frontdoor import token_stream
from frontdoor.jobs_routes import submission_problem
from frontdoor.openai_routes import STREAM_DEADLINE_MS
from frontdoor.schemas import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, SubmitRequest
from manager.autoscaler import TICK_S
from planner.cold_start import PATHS, SOURCES, ColdStartParameters, cold_start, every_path, main, slowest
from stacks.front_door import STREAM_TIMEOUT

DEFAULTS = ColdStartParameters()
# How much longer than the slowest cold start a job that names no deadline may wait, at the least.
DEADLINE_MARGIN = 1.25


def step_seconds(path: str, params: ColdStartParameters = DEFAULTS) -> dict[str, float]:
    return {step.name: step.seconds for step in cold_start(params, path).steps}  # type: ignore[arg-type]


@pytest.mark.parametrize("path", PATHS)
def test_each_total_is_the_sum_of_the_steps_it_shows(path: str):
    start = cold_start(DEFAULTS, path)  # type: ignore[arg-type]
    assert start.total_s == pytest.approx(sum(step.seconds for step in start.steps))


def test_the_printed_tables_add_up_to_their_totals(capsys: pytest.CaptureFixture[str]):
    main([])
    sections = capsys.readouterr().out.split("### ")[1:]
    assert len(sections) == len(PATHS)
    for section in sections:
        steps = [float(s) for s in re.findall(r"^\| [^*|][^|]* \| (\d+) \|$", section, re.M)]
        total = float(re.findall(r"\*\*(\d+)\*\*", section)[0])
        assert total == pytest.approx(sum(steps), abs=len(steps) / 2), section  # each row rounded to 1 s


def test_json_output_carries_the_same_paths_as_the_model(capsys: pytest.CaptureFixture[str]):
    main(["--json", "--image-gb", "6"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["parameters"]["image_gb"] == 6
    for start in every_path(replace(DEFAULTS, image_gb=6)):
        shown = printed["paths"][start.path]
        assert shown["total_s"] == pytest.approx(start.total_s)
        assert shown["total_s"] == pytest.approx(sum(step["seconds"] for step in shown["steps"]))


def test_the_warm_pool_paths_skip_the_image_pull_and_the_cold_one_takes_it():
    assert not any(name.startswith("image pull") for name in step_seconds("warm"))
    assert not any(name.startswith("image pull") for name in step_seconds("best"))
    pull = [s for name, s in step_seconds("cold").items() if name.startswith("image pull")]
    assert pull == [pytest.approx(DEFAULTS.image_gb * 1000 / DEFAULTS.image_pull_mb_per_s)]


def test_a_bigger_image_lengthens_only_the_cold_path_and_by_its_pull():
    bigger = replace(DEFAULTS, image_gb=DEFAULTS.image_gb * 2)
    for path in ("warm", "best"):
        assert cold_start(bigger, path).total_s == cold_start(DEFAULTS, path).total_s
    added = cold_start(bigger, "cold").total_s - cold_start(DEFAULTS, "cold").total_s
    assert added == pytest.approx(DEFAULTS.image_pull_s)


def test_a_slower_model_download_lengthens_every_path_alike():
    slower = replace(DEFAULTS, model_download_mb_per_s=DEFAULTS.model_download_mb_per_s / 2)
    for path in PATHS:
        added = cold_start(slower, path).total_s - cold_start(DEFAULTS, path).total_s
        assert added == pytest.approx(DEFAULTS.model_download_s)


def test_the_best_case_is_no_slower_than_the_warm_pool_which_is_no_slower_than_a_cold_instance():
    best, warm, cold = (cold_start(DEFAULTS, p).total_s for p in ("best", "warm", "cold"))
    assert best <= warm <= cold


def test_every_parameter_has_a_source_and_a_flag():
    names = set(ColdStartParameters.__dataclass_fields__)
    assert set(SOURCES) == names


def test_the_tick_is_the_manager_s_own():
    assert DEFAULTS.autoscaler_tick_s == TICK_S


def test_a_job_that_names_no_deadline_outlives_the_slowest_cold_start_with_margin():
    worst = slowest(DEFAULTS)
    assert worst.path == "cold"
    assert worst.total_s * DEADLINE_MARGIN <= DEFAULT_TIMEOUT_MS / 1000, (
        f"the default deadline ({DEFAULT_TIMEOUT_MS} ms) must outlive a cold start of "
        f"{worst.total_s:.0f} s by {DEADLINE_MARGIN}x: raise DEFAULT_TIMEOUT_MS in frontdoor/schemas.py"
    )
    assert DEFAULT_TIMEOUT_MS <= MAX_TIMEOUT_MS


def test_negative_figures_and_zero_throughputs_are_refused():
    with pytest.raises(ValueError, match="model_load_s"):
        ColdStartParameters(model_load_s=-1)
    with pytest.raises(ValueError, match="image_pull_mb_per_s"):
        ColdStartParameters(image_pull_mb_per_s=0)


def test_a_deadline_past_what_a_job_s_record_is_kept_for_is_refused():
    request = SubmitRequest(model="gpu-sim", prompt="x", timeoutMs=MAX_TIMEOUT_MS)
    assert submission_problem(request, Settings()) is None, "the default job TTL keeps an hour's job"
    short_lived = Settings(job_ttl_s=3600)
    refused = submission_problem(request, short_lived)
    assert refused is not None
    assert (refused.status, refused.code, refused.param) == (400, "timeout_too_long", "timeoutMs")
    default_deadline = SubmitRequest(model="gpu-sim", prompt="x")
    assert submission_problem(default_deadline, short_lived) is None


def test_a_streamed_v1_job_ends_before_its_stream_is_cut_off():
    followed_s = STREAM_DEADLINE_MS / 1000 + token_stream.GRACE_S
    assert followed_s < STREAM_TIMEOUT.to_seconds()
