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

from bench.llm import ALONE, ENGINE, PATHS, STATIC, TITLE, annotated, llm_key
from bench.llm_aiperf import AiperfRun
from bench.llm_cpu import LOAD_GENERATOR, CpuSampler
from bench.llm_engine import Cell, ClosedLoop, EnginePlan, engine_settings
from bench.llm_figures import LlmRow, load_window, row_from_aiperf, sent_payloads
from bench.report import LlmSetup, Target, llm_markdown, merge_section, targets
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
    cells = (Cell(concurrency=2, requests=5, warmup=1, inputs=str(EXPORTS / "engine-c4")),)
    plan = EnginePlan(str(checkpoint), settings, None, cells).write(tmp_path / "plan.json")
    out = tmp_path / "rows.json"
    argv = [sys.executable, "-m", "bench.llm_engine", str(plan), str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [LlmRow.from_json(r) for r in json.loads(out.read_text())]
    assert (row.path, row.concurrency, row.requests, row.errors) == (ALONE, 2, 5, 0)
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
                     requests=10)  # fmt: skip
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


def test_the_engine_alone_replays_the_payloads_aiperf_sent():
    payloads = sent_payloads(EXPORTS / "engine-c4")
    assert len(payloads) >= 8
    assert all(p.messages and p.messages[0][0] == "user" and p.max_tokens >= 1 for p in payloads)


def test_each_platform_path_is_staged_under_its_name_with_the_benchmark_checkpoint(tmp_path: Path):
    for path in PATHS:
        config = (path.stage(tmp_path, Path("/ckpt/gpt2"), 1024) / "config.pbtxt").read_text()
        assert f'name: "{path.model}"' in config
        assert 'key: "checkpoint" value: { string_value: "/ckpt/gpt2" }' in config
    engine = (tmp_path / "gpt2-bench" / "config.pbtxt").read_text()
    assert "decoupled: true" in engine, "the engine path serves the continuous-batching engine"
    assert 'key: "max_model_len" value: { string_value: "1024" }' in engine
    assert "decoupled" not in (tmp_path / "gpt2-static" / "config.pbtxt").read_text()


def test_the_section_shows_every_row_and_judges_the_targets_at_32_and_1_clients(tmp_path: Path):
    engine = row_from_aiperf(ENGINE, 4, EXPORTS / "engine-c4")
    static = row_from_aiperf(STATIC, 4, EXPORTS / "static-c4")
    rows = [
        *(LlmRow.from_json({**r.to_json(), "concurrency": c}) for r in (engine, static) for c in (1, 32)),
        LlmRow.from_json({**engine.to_json(), "path": ALONE, "concurrency": 1}),
        LlmRow.from_json({**engine.to_json(), "path": ALONE, "concurrency": 32, "output_tps": 1e9}),
    ]
    key = llm_key(rows)
    setup = LlmSetup("tiny-gpt2", "a test", {1: 3, 32: 8}, "short", "0.13.0", (ENGINE, STATIC, ALONE), 75.0)
    text = llm_markdown(rows, tmp_path / "llm.png", key, setup)
    assert text.count(f"| {ENGINE} |") == 2 and text.count(f"| {ALONE} |") == 2
    judged = {t.what: t for t in targets(key)}
    assert len([w for w in judged if w.startswith("LLM")]) == 4
    assert not judged["LLM, 32 clients: output tokens/s >= 70 % of the engine alone"].met
    assert judged["LLM, 1 client: TTFT P50 within 25 % of the engine alone"].met, "the same figures"


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
