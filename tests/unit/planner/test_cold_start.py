import json
import re
from dataclasses import fields, replace

import pytest

from contract.jobs import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS
from contract.launch_volume import (
    IMAGE_EXTRACTION_MIB_S,
    LAUNCH_THROUGHPUT_MIB_S,
    VOLUME_INITIALIZATION_RATE_MIB_S,
    initialization_per_launch,
    provisioned_per_hour,
)
from contract.settings import Settings
from frontdoor import token_stream
from frontdoor.jobs_routes import submission_problem
from frontdoor.openai_routes import STREAM_DEADLINE_MS
from frontdoor.schemas import SubmitRequest
from manager.autoscaler import TICK_S
from planner.cold_start import (
    PATHS,
    SOURCES,
    ColdStartParameters,
    cold_start,
    every_path,
    main,
    parser,
    slowest,
    table,
)
from stacks.config import AMI_DISK_GB
from stacks.front_door import STREAM_TIMEOUT
from tests.processes import REPO

DEFAULTS = ColdStartParameters()
# How much longer than the slowest cold start a job that names no deadline may wait, at the least.
DEADLINE_MARGIN = 1.25


def step_seconds(path: str, params: ColdStartParameters = DEFAULTS) -> dict[str, float]:
    return {step.name: step.seconds for step in cold_start(params, path).steps}  # type: ignore[arg-type]


@pytest.mark.parametrize("path", PATHS)
def image_steps(path: str, params: ColdStartParameters = DEFAULTS) -> dict[str, float]:
    return {name: s for name, s in step_seconds(path, params).items() if name.startswith("image ")}


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
    main(["--json", "--image-extracted-gb", "30"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["parameters"]["image_extracted_gb"] == 30
    for start in every_path(replace(DEFAULTS, image_extracted_gb=30)):
        shown = printed["paths"][start.path]
        assert shown["total_s"] == pytest.approx(start.total_s)
        assert shown["total_s"] == pytest.approx(sum(step["seconds"] for step in shown["steps"]))
        assert shown["target_s"] == start.target_s


@pytest.mark.parametrize("path", ["warm", "best"])
def test_a_warm_pool_start_pulls_no_image_waits_on_no_alarm_and_downloads_no_baked_model(path: str):
    names = step_seconds(path)
    assert not image_steps(path)
    assert not any("alarm" in name for name in names)
    assert not any(name.startswith("model download") for name in names)
    assert names["SetDesiredCapacity by the manager"] == DEFAULTS.set_desired_capacity_s


def test_the_new_instance_paths_are_timed_with_the_launch_templates_volume():
    # The constants stacks/workers.py puts on both groups' launch templates (tests/infra/test_compute.py).
    assert DEFAULTS.gp3_throughput_mib_per_s == LAUNCH_THROUGHPUT_MIB_S > 125
    assert DEFAULTS.volume_initialization_mib_per_s == VOLUME_INITIALIZATION_RATE_MIB_S
    assert DEFAULTS.image_extraction_mib_per_s == IMAGE_EXTRACTION_MIB_S


def test_a_cold_instance_pulls_the_whole_image_through_ecr_then_extracts_it_as_fast_as_the_cpu_allows():
    pulled = image_steps("cold")
    assert len(pulled) == 2
    download = DEFAULTS.image_compressed_gb * 1000 / DEFAULTS.ecr_download_mb_per_s
    # The provisioned volume takes more than one core inflates: the decompression sets the pace.
    assert DEFAULTS.image_extraction_mib_per_s < DEFAULTS.gp3_throughput_mib_per_s
    extraction = DEFAULTS.image_extracted_gb * 1000 / (DEFAULTS.image_extraction_mib_per_s * 1.048576)
    assert sum(pulled.values()) == pytest.approx(download + extraction)
    assert pulled["image extraction (24 GB at 250 MiB/s, decompression-bound)"] == pytest.approx(extraction)


@pytest.mark.parametrize(("throughput", "decompression", "rate"), [(125, 250, 125), (500, 1000, 500)])
def test_a_volume_slower_than_the_decompression_sets_the_extraction_s_pace(
    throughput: float, decompression: float, rate: float
):
    params = replace(DEFAULTS, gp3_throughput_mib_per_s=throughput, image_extraction_mib_per_s=decompression)
    extraction = DEFAULTS.image_extracted_gb * 1000 / (rate * 1.048576)
    name = f"image extraction (24 GB onto gp3 at {rate:g} MiB/s)"
    assert image_steps("cold", params)[name] == pytest.approx(extraction)


def test_only_a_cold_instance_reads_its_ami_volume_from_the_snapshot_at_the_initialization_rate():
    def first_reads(path: str, params: ColdStartParameters = DEFAULTS) -> list[float]:
        steps = step_seconds(path, params).items()
        return [s for name, s in steps if name.startswith("AMI volume first reads")]

    at_rate = DEFAULTS.ami_first_read_gb * 1000 / (DEFAULTS.volume_initialization_mib_per_s * 1.048576)
    assert first_reads("cold") == [pytest.approx(at_rate)]
    assert first_reads("warm") == first_reads("best") == []
    slowest_rate = replace(DEFAULTS, volume_initialization_mib_per_s=100)  # the least EBS provisions
    assert first_reads("cold", slowest_rate) == [
        pytest.approx(at_rate * DEFAULTS.volume_initialization_mib_per_s / 100)
    ]
    names = step_seconds("cold", slowest_rate)
    assert "AMI volume first reads from its snapshot (3 GB at 100 MiB/s)" in names


@pytest.mark.parametrize("path", PATHS)
def test_every_path_attaches_the_task_s_network_interface_and_no_path_waits_on_a_launch_hook(path: str):
    """A burst instance (the cold path) has no launch hook: it never enters a warm pool
    (stacks/workers.py). A warm-group instance has one, released beside the ECS agent: what it waits on
    is prewarm.sh reading the target state, not an AWS CLI install or the hook's release."""
    names = step_seconds(path)
    assert names["task network interface (awsvpc)"] == DEFAULTS.task_eni_s
    assert not [name for name in names if "launch hook" in name or "AWS CLI" in name]
    on_warm_group = [s for name, s in names.items() if name.startswith("prewarm.sh")]
    assert on_warm_group == ([] if path == "cold" else [DEFAULTS.prewarm_in_service_s])


def test_a_bigger_image_lengthens_only_the_cold_path_and_by_its_pull():
    bigger = replace(
        DEFAULTS,
        image_compressed_gb=DEFAULTS.image_compressed_gb * 2,
        image_extracted_gb=DEFAULTS.image_extracted_gb * 2,
    )
    for path in ("warm", "best"):
        assert cold_start(bigger, path).total_s == cold_start(DEFAULTS, path).total_s
    added = cold_start(bigger, "cold").total_s - cold_start(DEFAULTS, "cold").total_s
    assert added == pytest.approx(DEFAULTS.image_pull_s)


@pytest.mark.parametrize("path", ["cold", "refill"])
def test_the_launch_volume_shortens_only_a_new_instance_s_paths_by_its_extraction_and_first_reads(path: str):
    # gp3's baseline and the 50 MB/s first reads estimated for an unprovisioned volume: the road before.
    baseline = replace(DEFAULTS, gp3_throughput_mib_per_s=125, volume_initialization_mib_per_s=50 / 1.048576)
    saved = cold_start(baseline, path).total_s - cold_start(DEFAULTS, path).total_s  # type: ignore[arg-type]
    assert saved == pytest.approx(
        baseline.image_extraction_s
        - DEFAULTS.image_extraction_s
        + baseline.ami_first_read_s
        - DEFAULTS.ami_first_read_s
    )
    assert saved > 120
    for warm in ("warm", "best"):
        assert cold_start(baseline, warm).total_s == cold_start(DEFAULTS, warm).total_s


def test_a_model_that_is_not_baked_adds_its_download_to_every_path(capsys: pytest.CaptureFixture[str]):
    fetched = replace(DEFAULTS, model_gb=2)
    for path in PATHS:
        added = cold_start(fetched, path).total_s - cold_start(DEFAULTS, path).total_s  # type: ignore[arg-type]
        assert added == pytest.approx(2 * 1000 / DEFAULTS.model_download_mb_per_s)
        assert step_seconds(path, fetched)["model download (2 GB)"] == pytest.approx(added)
    main(["--model-gb", "2"])
    assert capsys.readouterr().out.count("| model download (2 GB) | 20 |") == len(PATHS)


def test_without_the_worker_group_the_alarm_starts_the_instance_instead(capsys: pytest.CaptureFixture[str]):
    alarmed = replace(DEFAULTS, manager_starts_instances=False)
    for path, alarm in (("warm", DEFAULTS.capacity_alarm_s), ("best", DEFAULTS.capacity_alarm_fast_s)):
        names = step_seconds(path, alarmed)
        assert "SetDesiredCapacity by the manager" not in names
        assert names["capacity provider metric and alarm"] == alarm
        added = cold_start(alarmed, path).total_s - cold_start(DEFAULTS, path).total_s  # type: ignore[arg-type]
        assert added == pytest.approx(alarm - DEFAULTS.set_desired_capacity_s)
    main(["--no-manager-starts-instances"])
    assert capsys.readouterr().out.count("| capacity provider metric and alarm |") == len(PATHS)


def test_the_best_case_is_no_slower_than_the_warm_pool_which_is_no_slower_than_a_cold_instance():
    best, warm, cold = (cold_start(DEFAULTS, p).total_s for p in ("best", "warm", "cold"))
    assert best <= warm <= cold


def test_each_path_is_weighed_against_its_target_and_the_table_says_whether_it_meets_it():
    assert [cold_start(DEFAULTS, p).target_s for p in ("warm", "cold")] == [120, 360]
    printed = table(every_path(DEFAULTS))
    warm = cold_start(DEFAULTS, "warm")
    assert f"Target 120 s (2.0 min): missed by {round(warm.total_s) - 120} s." in printed
    quick = replace(DEFAULTS, warm_instance_start_s=20, warm_instance_start_fast_s=20)
    met = 120 - round(cold_start(quick, "warm").total_s)
    assert met > 0
    assert f"Target 120 s (2.0 min): met, {met} s to spare." in table([cold_start(quick, "warm")])


def test_every_parameter_has_a_source_and_a_flag():
    names = {field.name for field in fields(ColdStartParameters)}
    assert set(SOURCES) == names
    flags = {action.dest for action in parser()._actions}
    assert names <= flags


def test_the_tick_is_the_manager_s_own():
    assert DEFAULTS.autoscaler_tick_s == TICK_S


def test_the_first_batch_waits_at_most_a_heartbeat_and_a_tick():
    assert DEFAULTS.first_batch_s == Settings().heartbeat_s + TICK_S


def test_the_deploy_guide_shows_the_tables_the_planner_prints():
    guide = (REPO / "docs" / "deploy.md").read_text()
    section = guide.split("## Time from zero to first result", 1)[1].split("\n## ", 1)[0]
    assert table(every_path(DEFAULTS)) in section, "run `synapse plan cold-start` and paste its tables"


@pytest.mark.parametrize("manager_starts_instances", [True, False], ids=["worker-group-named", "alarm-only"])
def test_a_job_that_names_no_deadline_outlives_the_slowest_cold_start_with_margin(
    manager_starts_instances: bool,
):
    worst = slowest(replace(DEFAULTS, manager_starts_instances=manager_starts_instances))
    assert worst.path == "refill", "the warm group's own new instance: the baseline volume and the hook"
    assert worst.total_s * DEADLINE_MARGIN <= DEFAULT_TIMEOUT_MS / 1000, (
        f"the default deadline ({DEFAULT_TIMEOUT_MS} ms) must outlive a cold start of "
        f"{worst.total_s:.0f} s by {DEADLINE_MARGIN}x: raise DEFAULT_TIMEOUT_MS in contract/jobs.py"
    )
    assert DEFAULT_TIMEOUT_MS <= MAX_TIMEOUT_MS


def test_negative_figures_and_zero_throughputs_are_refused():
    with pytest.raises(ValueError, match="model_load_s"):
        ColdStartParameters(model_load_s=-1)
    rates = ("gp3_throughput_mib_per_s", "image_extraction_mib_per_s", "volume_initialization_mib_per_s")
    for rate in rates:
        with pytest.raises(ValueError, match=rate):
            ColdStartParameters(**{rate: 0})


def test_the_deploy_guide_states_what_the_launch_volume_adds_to_a_new_instance():
    guide = (REPO / "docs" / "deploy.md").read_text()
    section = guide.split("## Time from zero to first result", 1)[1].split("\n## ", 1)[0]
    assert f"${provisioned_per_hour():.3f} an hour" in section
    assert f"${initialization_per_launch(AMI_DISK_GB):.2f} once" in section
    assert f"{provisioned_per_hour() / Settings().gpu_price_per_hour:.0%} of a g5.xlarge" in section


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


def test_a_new_instance_of_the_warm_group_pulls_as_fast_as_a_burst_instance():
    """While the warm pool prepares a fresh instance and the group has none in service, the group launches
    one straight into service: the same launch volume as a burst instance (stacks/workers.py), so the same
    first reads and extraction; it differs only by prewarm.sh's reading of the target state."""
    names, burst_names = step_seconds("refill"), step_seconds("cold")
    assert "image extraction (24 GB at 250 MiB/s, decompression-bound)" in names
    assert {n: s for n, s in names.items() if not n.startswith("prewarm.sh")} == burst_names
    gap = cold_start(DEFAULTS, "refill").total_s - cold_start(DEFAULTS, "cold").total_s
    assert gap == DEFAULTS.prewarm_in_service_s
