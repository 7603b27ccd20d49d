"""The prefix benchmark's workload and figures: system prompts that the manager tells apart, one draw for
both routing rules, and the hit rate, TTFT and ratios computed from what the clients and engines saw."""

from __future__ import annotations

import http.server
import math
import threading

import pytest

from bench.prefix_cache import (
    FULL,
    CachedRow,
    Call,
    engine_counts,
    prefix_cache_key,
    row_of,
    shared_workload,
    system_prompt,
)
from manager.prefix_routing import prefix_key

CHAT_START = "<|im_start|>system\n"  # SmolLM2's template, as the front door renders it


def test_each_system_prompt_has_a_prefix_key_of_its_own_and_is_long():
    prompts = [CHAT_START + system_prompt(i, FULL.rules) for i in range(FULL.prefixes)]
    assert len({prefix_key(p) for p in prompts}) == FULL.prefixes
    assert min(len(p) for p in prompts) > 4_000  # about 1,500 tokens (SmolLM2 counts 1,492 for the first)


def test_both_routing_rules_get_the_same_requests():
    first, again = shared_workload(FULL), shared_workload(FULL)
    assert first == again and len(first) == FULL.requests
    assert len({system for system, _ in first}) == FULL.prefixes  # every prefix drawn


def test_a_row_counts_errors_apart_and_takes_the_hit_rate_from_the_engines():
    calls = [
        Call(0.1, 1.0, 16, 1500),
        Call(0.3, 1.2, 16, 1500),
        Call(2.0, 3.0, 8, 1500),
        Call(math.nan, 0.5, 0, error="503"),
    ]
    row = row_of("prefix", calls, wall_s=4.0, hits=2_700.0, queries=4_500.0)
    assert (row.requests, row.errors) == (4, 1)
    assert row.hit_rate == pytest.approx(0.6)
    assert row.ttft_p50_ms == pytest.approx(300)
    assert row.tokens_per_s == pytest.approx(10.0)
    assert row.prompt_tokens == 1500


def test_the_key_compares_the_rules_and_the_cached_requests():
    calls = [Call(0.2, 1.0, 16, 1500)]
    prefix = row_of("prefix", calls, 1.0, 9.0, 10.0)
    least = row_of("least_loaded", [Call(0.6, 1.0, 16, 1500)], 1.0, 5.0, 10.0)
    key = prefix_cache_key([least, prefix], [CachedRow(1, 1000.0, 100.0)], FULL)
    assert key["prefix_hit_rate"] == pytest.approx(0.9)
    assert key["least_loaded_hit_rate"] == pytest.approx(0.5)
    assert key["prefix_ttft_gain"] == pytest.approx(3.0)
    assert key["prefix_tokens_ratio"] == pytest.approx(1.0)
    assert key["cached_ttft_ratio_1"] == pytest.approx(0.1)
    assert 0 < key["least_loaded_hit_rate_estimated"] < key["prefix_hit_rate_estimated"] < 1


def test_the_engines_counts_are_summed_over_workers_as_the_worker_reads_them():
    page = (
        b"# TYPE synapse_engine_prefix_cache_hits_tokens_total counter\n"
        b'synapse_engine_prefix_cache_hits_tokens_total{model="smollm2-bench"} 640\n'
        b"# TYPE synapse_engine_prefix_cache_queries_tokens_total counter\n"
        b'synapse_engine_prefix_cache_queries_tokens_total{model="smollm2-bench"} 1000\n'
    )

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        try:
            assert engine_counts([url, url]) == (1280.0, 2000.0)
        finally:
            server.shutdown()
