"""The LLM benchmark's pieces in a tiny form: the engine alone on the tiny checkpoint, aiperf's exports
read into rows (fixtures from real aiperf 0.13 runs against the local stack, in aiperf_exports/), the
staged models, and the section with its targets. No figure is judged: these check the benchmark."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from bench.llm import (
    ALONE,
    ENGINE,
    FORMER_TITLES,
    SMOLLM2,
    STATIC,
    TINY,
    TITLE,
    annotated,
    llm_key,
    platform_paths,
)
from bench.llm_aiperf import AiperfRun, Prompts
from bench.llm_cpu import LOAD_GENERATOR, CpuSampler
from bench.llm_engine import Cell, ClosedLoop, EnginePlan, engine_settings, replay_of
from bench.llm_figures import LlmRow, load_window, row_from_aiperf, sent_in_order, sent_payloads
from bench.llm_prompts import QUESTIONS, write_dataset
from bench.report import (
    PER_CORE_TARGET,
    RETIRED_LLM_TARGETS,
    LlmSetup,
    Target,
    llm_markdown,
    merge_section,
    owned_targets,
    targets,
)
from tests.processes import REPO
from worker_image.checkpoint import build_tiny_gpt2

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXPORTS = Path(__file__).parent / "aiperf_exports"


def summary(name: str) -> dict[str, dict[str, float]]:
    path = EXPORTS / name / "profile_export_aiperf.json"
    data: dict[str, dict[str, float]] = json.loads(path.read_text())
    return data


def test_the_engine_alone_answers_every_request_aiperf_sent_and_times_each(tmp_path: Path):
    checkpoint = build_tiny_gpt2(tmp_path / "tiny-gpt2")
    settings = engine_settings(REPO / "triton_models" / "tiny-gpt2" / "config.pbtxt")
    # aiperf's records say it sent 8 requests: the engine alone sends those, whatever the cell's count.
    cells = (Cell(concurrency=2, requests=5, warmup=1, inputs=str(EXPORTS / "engine-c4")),)
    plan = EnginePlan(str(checkpoint), settings, None, cells).write(tmp_path / "plan.json")
    out = tmp_path / "rows.json"
    argv = [sys.executable, "-m", "bench.llm_engine", str(plan), str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [LlmRow.from_json(r) for r in json.loads(out.read_text())]
    assert (row.path, row.concurrency, row.requests, row.errors) == (ALONE, 2, 8, 0)
    assert row.output_tokens >= row.requests, "every answer has at least one token"
    assert row.output_tps > 0 and row.request_rate > 0
    assert 0 < row.ttft_p50_ms <= row.ttft_p99_ms
    assert set(row.cores) == {"engine"}, "the engine process reports the cores it used"


@dataclass
class Output:
    request_id: str
    generated_tokens: list[int]
    finished: bool
    error: str | None = None

    def is_finished(self) -> bool:
        return self.finished


class HeldEngine:
    """Accepts requests and answers only when told; remembers the most it held at once."""

    max_num_seqs = 2

    def __init__(self) -> None:
        self.held: list[str] = []
        self.most = 0
        self._ids = itertools.count()

    def send(self, ids: list[int], max_tokens: int) -> str:
        self.held.append(f"r{next(self._ids)}")
        self.most = max(self.most, len(self.held))
        return self.held[-1]


def test_the_engine_alone_holds_no_more_sequences_than_the_platform_lets_its_engine_hold():
    engine = HeldEngine()
    loop = ClosedLoop(engine, itertools.repeat(([1, 2, 3], 4)), count=6)  # type: ignore[arg-type]
    for _ in range(4):  # four clients
        loop.client_sends()
    loop.admit()
    while loop.in_engine:
        rid = next(iter(loop.in_engine))
        loop.received(Output(rid, [7], finished=False), time.perf_counter())
        engine.held.remove(rid)
        loop.received(Output(rid, [7, 8], finished=True), time.perf_counter())
    assert (len(loop.done), loop.errors, engine.most) == (6, 0, 2)
    assert all(t.output_tokens == 2 and t.sent_s <= t.first_token_s <= t.done_s for t in loop.done)


def test_a_streamed_export_gives_aiperfs_own_figures_and_inter_token_latency():
    row = row_from_aiperf(ENGINE, 4, EXPORTS / "engine-c4")
    figures = summary("engine-c4")
    assert row.requests == figures["request_count"]["avg"] == 8
    assert row.errors == 0
    assert row.output_tps == figures["output_token_throughput"]["avg"]
    assert row.request_rate == figures["request_throughput"]["avg"]
    assert row.output_tokens == figures["total_output_tokens"]["avg"]
    assert row.ttft_p50_ms == figures["time_to_first_token"]["p50"]
    assert row.itl_p99_ms == figures["inter_token_latency"]["p99"] > 0


def test_a_one_chunk_answer_has_no_inter_token_latency():
    row = row_from_aiperf(STATIC, 4, EXPORTS / "static-c4")
    assert row.requests == 8
    assert math.isnan(row.itl_p50_ms) and math.isnan(row.itl_p99_ms)
    assert row.ttft_p50_ms == summary("static-c4")["request_latency"]["p50"], "its TTFT is its latency"


def test_a_run_where_every_request_failed_counts_its_errors_from_the_records():
    row = row_from_aiperf(ENGINE, 2, EXPORTS / "all-failed")
    assert (row.requests, row.errors, row.output_tokens) == (0, 4, 0)
    assert math.isnan(row.output_tps)
    assert row.notes == ("4 failed: 404",)


def test_a_row_says_when_its_run_was_cut_short_and_which_jobs_did_not_complete():
    row = row_from_aiperf(ENGINE, 4, EXPORTS / "engine-c4")
    spec = AiperfRun(url="http://x", model="gpt2-bench", api_key="k", tokenizer=Path("t"), concurrency=4,
                     requests=10, prompts=Prompts(Path("q.jsonl"), 32), max_s=75)  # fmt: skip
    outcomes = Counter({"COMPLETED": 8, "FAILED (max_attempts_exceeded)": 2})
    assert annotated(row, spec, outcomes).notes == (
        "stopped sending at the 75 s cap: 8 of 10 sent",
        "jobs not completed when the run ended: 2 FAILED (max_attempts_exceeded)",
    )
    assert annotated(row, replace(spec, requests=8), Counter({"COMPLETED": 8})).notes == ()


def test_a_runs_load_window_spans_its_profiling_requests_only():
    window = load_window(EXPORTS / "engine-c4")
    assert window is not None
    start, end = window
    assert 0 < end - start < 3600
    assert load_window(EXPORTS / "nowhere") is None


def test_the_cpu_sampler_gives_each_process_tree_its_own_cores():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with CpuSampler({"redis": sleeper.pid}, every_s=0.05) as cpu:
            start = time.time()
            while time.time() - start < 0.3:  # this process works while the child sleeps
                pass
            end = time.time()
            time.sleep(0.1)
        cores = cpu.cores(start, end)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert set(cores) == {"redis", LOAD_GENERATOR}
    assert cores[LOAD_GENERATOR] > cores["redis"], "this process's work counts as the load generator's"


def test_the_engine_alone_replays_the_payloads_aiperf_sent_in_the_order_it_sent_them():
    payloads = sent_payloads(EXPORTS / "engine-c4")
    assert len(payloads) >= 8
    assert all(p.messages and p.messages[0][0] == "user" and p.max_tokens >= 1 for p in payloads)
    export = EXPORTS / "engine-c4"
    records = [json.loads(line)["metadata"] for line in (export / "profile_export.jsonl").open()]
    order = [r["conversation_id"] for r in sorted(records, key=lambda r: r["credit_issued_ns"])]
    sessions = json.loads((export / "inputs.json").read_text())["data"]
    index = {session["session_id"]: i for i, session in enumerate(sessions)}
    assert sent_in_order(export) == [payloads[index[c]] for c in order]
    cell = Cell(concurrency=4, requests=3, warmup=0, inputs=str(export))
    assert replay_of(cell) == (sent_in_order(export), 8), "what aiperf sent, not the cell's count"


def test_without_aiperfs_records_the_engine_alone_sends_the_dataset_over_again(tmp_path: Path):
    (tmp_path / "inputs.json").write_text((EXPORTS / "engine-c4" / "inputs.json").read_text())
    cell = Cell(concurrency=4, requests=3, warmup=0, inputs=str(tmp_path))
    assert replay_of(cell) == (sent_payloads(tmp_path), 3)


def test_the_prompts_are_real_questions_whose_answers_end_at_end_of_turn_under_a_cap(tmp_path: Path):
    dataset = write_dataset(tmp_path / "q.jsonl", 256)
    lines = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert [line["text"] for line in lines] == list(QUESTIONS) and len(set(QUESTIONS)) == len(QUESTIONS) >= 60
    assert {line["output_length"] for line in lines} == {256}
    argv = AiperfRun(url="http://x", model="m", api_key="k", tokenizer=Path("t"), concurrency=4, requests=8,
                     prompts=Prompts(dataset, 256)).argv(Path("aiperf"), tmp_path / "out")  # fmt: skip
    assert argv[argv.index("--input-file") + 1] == str(dataset)
    assert argv[argv.index("--custom-dataset-type") + 1] == "single_turn"
    assert not {"--osl", "--isl", "--output-tokens-mean"} & set(argv), "no fixed output length"
    assert "ignore_eos" not in " ".join(argv) and '"temperature": 0.0' in " ".join(argv)


def test_the_full_run_serves_smollm2_from_its_folder_and_quick_adds_the_static_path(tmp_path: Path):
    (engine,) = platform_paths(SMOLLM2, static=False)
    assert engine.source == REPO / "triton_models" / "smollm2-135m-instruct"
    config = (engine.stage(tmp_path, Path("/ckpt/smollm2"), SMOLLM2.context) / "config.pbtxt").read_text()
    assert f'name: "{engine.model}"' in config and 'backend: "synapse_llm"' in config
    assert 'key: "checkpoint" value: { string_value: "/ckpt/smollm2" }' in config
    assert 'key: "max_model_len" value: { string_value: "2048" }' in config
    assert [p.label for p in platform_paths(TINY, static=True)] == [ENGINE, STATIC]


def test_each_platform_path_is_staged_under_its_name_with_the_benchmark_checkpoint(tmp_path: Path):
    paths = platform_paths(TINY, static=True)
    for path in paths:
        config = (path.stage(tmp_path, Path("/ckpt/gpt2"), 1024) / "config.pbtxt").read_text()
        assert f'name: "{path.model}"' in config
        assert 'key: "checkpoint" value: { string_value: "/ckpt/gpt2" }' in config
    engine = (tmp_path / paths[0].model / "config.pbtxt").read_text()
    assert "decoupled: true" in engine, "the engine path serves the continuous-batching engine"
    assert 'key: "max_model_len" value: { string_value: "1024" }' in engine
    assert "decoupled" not in (tmp_path / paths[1].model / "config.pbtxt").read_text()


def with_cores(row: LlmRow, **changes: object) -> LlmRow:
    return LlmRow.from_json({**row.to_json(), **changes})


def test_the_section_shows_every_row_and_judges_the_targets_per_core_and_at_1_and_32_clients(tmp_path: Path):
    engine = row_from_aiperf(ENGINE, 4, EXPORTS / "engine-c4")
    static = row_from_aiperf(STATIC, 4, EXPORTS / "static-c4")
    worker = {"worker": 1.0, "aiperf": 0.2}
    rows = [
        *(with_cores(engine, concurrency=c, cores=worker) for c in (1, 32)),
        *(with_cores(static, concurrency=c, cores=worker) for c in (1, 32)),
        with_cores(engine, path=ALONE, concurrency=1, cores={"engine": 1.0}),
        with_cores(
            engine, path=ALONE, concurrency=32, output_tps=engine.output_tps * 2, cores={"engine": 1.6}
        ),
    ]
    key = llm_key(rows)
    setup = LlmSetup("tiny-gpt2", "a test", {1: 3, 32: 8}, "short", "0.13.0", (ENGINE, STATIC, ALONE), 75.0)
    text = llm_markdown(rows, tmp_path / "llm.png", key, setup)
    assert text.count(f"| {ENGINE} |") == 4 and text.count(f"| {ALONE} |") == 4, "the table and the cores"
    assert "| 32 |" in text and "| 0.80x |" in text, "the per-core table: 1 core against 2 / 1.6 alone"
    judged = {t.what: t for t in targets(key)}
    assert len([w for w in judged if w.startswith("LLM")]) == 4
    per_core = judged[PER_CORE_TARGET]
    assert not per_core.met and per_core.figure == "1.00x at 1, 0.80x at 32"
    assert "lowest 0.80x at 32" in per_core.gap
    assert judged["LLM, 1 client: TTFT P50 within 25 % of the engine alone"].met, "the same figures"


def test_without_the_static_path_its_targets_are_not_judged(tmp_path: Path):
    engine = row_from_aiperf(ENGINE, 4, EXPORTS / "engine-c4")
    rows = [with_cores(engine, concurrency=1, cores={"worker": 1.5}),
            with_cores(engine, path=ALONE, concurrency=1, cores={"engine": 2.0})]  # fmt: skip
    judged = [t.what for t in targets(llm_key(rows))]
    assert judged == [PER_CORE_TARGET, "LLM, 1 client: TTFT P50 within 25 % of the engine alone"]
    assert set(judged) | set(RETIRED_LLM_TARGETS) <= owned_targets(llm_key(rows))
    setup = LlmSetup("smollm2", "a test", {1: 3}, "short", "0.13.0", (ENGINE, ALONE), 240.0)
    assert STATIC not in llm_markdown(rows, tmp_path / "llm.png", llm_key(rows), setup)


PAGE = """# Synapse benchmarks

## Targets

| target | this run | verdict |
| --- | --- | --- |
| P99 < 250 ms | 213 ms | met |
| LLM, 1 client: TTFT P50 within 25 % of the engine alone | 9 vs 1 ms (9.00x alone) | **missed** |

## Sustained load

rows

## Capacity plan for 20,000 jobs/s (`synapse plan`)

plan
"""


def test_one_scenarios_section_and_targets_replace_their_earlier_version_in_the_page():
    judged = [
        Target("LLM, 1 client: TTFT P50 within 25 % of the engine alone", "1 vs 1 ms (1.00x alone)", True)
    ]
    first = merge_section(PAGE, f"## {TITLE}\n\nfirst run\n", judged)
    assert first.index("## Sustained load") < first.index(f"## {TITLE}") < first.index("## Capacity plan")
    assert "| P99 < 250 ms | 213 ms | met |" in first, "other targets stay"
    assert "(9.00x alone)" not in first and "| 1 vs 1 ms (1.00x alone) | met |" in first
    second = merge_section(first, f"## {TITLE}\n\nsecond run\n", judged)
    assert "second run" in second and "first run" not in second
    assert second.count(f"## {TITLE}") == 1 and second.count("LLM, 1 client") == 1


def test_publishing_replaces_the_sections_former_title_and_drops_the_targets_it_no_longer_judges():
    former = FORMER_TITLES[0]
    page = PAGE.replace(
        "| P99 < 250 ms | 213 ms | met |\n",
        "| P99 < 250 ms | 213 ms | met |\n"
        "| LLM, 32 clients: output tokens/s >= 1.5x static batching's | 1 | met |\n"
        f"| {RETIRED_LLM_TARGETS[0]} | 138 vs 211 tok/s | **missed** |\n",
    ).replace("## Sustained load\n", f"## {former}\n\nold run\n\n## Sustained load\n")
    judged = [Target(PER_CORE_TARGET, "0.95x at 1", True)]
    key = {"llm_engine_tps_c1": 1.0}
    merged = merge_section(page, f"## {TITLE}\n\nnew run\n", judged, owned=owned_targets(key),
                           former_titles=FORMER_TITLES)  # fmt: skip
    assert "old run" not in merged and former not in merged and merged.count(f"## {TITLE}") == 1
    assert merged.index(f"## {TITLE}") < merged.index("## Sustained load"), "in the former section's place"
    assert "static batching's" not in merged and RETIRED_LLM_TARGETS[0] not in merged
    assert "TTFT P50 within 25 %" not in merged, "an owned target this run did not judge goes"
    assert (
        f"| {PER_CORE_TARGET} | 0.95x at 1 | met |" in merged and "| P99 < 250 ms | 213 ms | met |" in merged
    )
