"""The embeddings benchmark's parts that need no platform: its sentences, the model alone, the load
generator against a small embeddings server of our own, the manager's batch sizes, and the target."""

from __future__ import annotations

import hashlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench.embeddings import (
    ALONE,
    DIMENSIONS,
    PLATFORM,
    SENTENCES,
    Row,
    batch_totals,
    drive,
    embeddings_key,
    load_embedder,
    measure_alone,
    platform_row,
    sentences,
)
from bench.report import Target, targets
from tests.unit.bench.loopback import serving

KEY = "sk-test"
TARGET = "embeddings, 64 clients: >= 0.8x the model alone at its best batch size"


def test_the_sentences_are_the_published_ones_distinct_and_8_to_25_words_long():
    # The figures in BENCHMARKS.md were taken on these: a change of the draw changes the workload.
    assert hashlib.sha256("\n".join(SENTENCES).encode()).hexdigest()[:16] == "54e923e0bc8011e4"
    assert len(set(SENTENCES)) == len(SENTENCES) == 200
    for seed in range(50):  # any seed keeps to the range
        assert all(8 <= len(s.split()) <= 25 and s.endswith(".") for s in sentences(seed=seed))


def test_the_model_alone_answers_every_text_of_its_calls():
    row = measure_alone(load_embedder(), 3, 0.0)
    assert (row.path, row.size, row.answered, row.errors) == (ALONE, 3, 3, 0)
    assert row.per_s > 0


@dataclass
class EmbeddingsServer:
    """`POST /v1/embeddings` in OpenAI's shape; every 3rd request a 503, every 4th a vector too short."""

    url: str = ""
    bodies: list[Any] = field(default_factory=list)
    auth: set[str] = field(default_factory=set)
    answered: dict[str, int] = field(default_factory=lambda: {"ok": 0, "503": 0, "short": 0})

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        self.auth.add(request.headers.get("Authorization", ""))
        n = len(self.bodies)
        if n % 3 == 0:
            self.answered["503"] += 1
            return web.json_response({"error": {"code": "overloaded"}}, status=503)
        size = DIMENSIONS - 1 if n % 4 == 0 else DIMENSIONS
        self.answered["short" if n % 4 == 0 else "ok"] += 1
        data = [{"object": "embedding", "index": 0, "embedding": [0.1] * size}]
        return web.json_response({"object": "list", "data": data, "model": "minilm"})


@pytest.fixture
async def server() -> AsyncIterator[EmbeddingsServer]:
    found = EmbeddingsServer()
    async with serving({"/v1/embeddings": found.handle}) as url:
        found.url = url
        yield found


async def test_the_load_generator_counts_only_well_formed_200s_and_reports_the_rest_as_errors(
    server: EmbeddingsServer,
):
    # Four clients send at least four requests: the 3rd answers 503 and the 4th a short vector.
    run = await drive(server.url, KEY, 4, 0.3)
    row = platform_row(run)
    assert len(run.samples) == len(server.bodies) >= 4
    assert (row.path, row.size) == (PLATFORM, 4)
    assert row.answered == server.answered["ok"]
    assert row.errors == server.answered["503"] + server.answered["short"]
    errors = sorted(s.error for s in run.samples if not s.ok)
    assert errors == sorted(["503"] * server.answered["503"] + ["malformed 200"] * server.answered["short"])
    assert server.auth == {f"Bearer {KEY}"}
    assert all(body["model"] == "minilm" and body["input"] in SENTENCES for body in server.bodies)
    assert row.per_s > 0 and row.p50_ms <= row.p99_ms


def test_the_mean_batch_comes_from_the_managers_histogram_for_minilm_alone():
    registry = CollectorRegistry()
    sizes = Histogram("synapse_batch_size", "Jobs per dispatched batch", ["model"], registry=registry)
    for model, size in (("minilm", 8), ("minilm", 24), ("gpu-sim", 100)):
        sizes.labels(model).observe(size)
    assert batch_totals(generate_latest(registry).decode()) == (32.0, 2.0)
    assert batch_totals(generate_latest(registry).decode(), model="tiny-gpt2") == (0.0, 0.0)


def rows(platform_per_s: float, errors: int = 0) -> list[Row]:
    return [
        Row(ALONE, 1, 100.0, 10, 12, 1000),
        Row(ALONE, 32, 400.0, 80, 90, 4000),
        Row(ALONE, 128, 380.0, 330, 350, 3840),
        Row(PLATFORM, 64, platform_per_s, 160, 300, 6000, errors, 30.5),
    ]


def judged(key: dict[str, float]) -> Target:
    return next(t for t in targets(key) if t.what == TARGET)


def test_the_target_compares_64_clients_with_the_best_batch_size_alone():
    met, missed = judged(embeddings_key(rows(330.0))), judged(embeddings_key(rows(200.0)))
    assert (met.met, met.figure) == (True, "330 vs 400 /s (0.82x alone, at batch 32)")
    assert (missed.met, missed.gap) == (False, "(needs at least 0.8x)")


def test_failed_requests_make_the_verdict_inconclusive():
    assert judged(embeddings_key(rows(330.0, errors=5))).doubt == "5 requests failed"


def test_no_platform_figures_no_target():
    key = embeddings_key(rows(330.0)[:3])
    assert TARGET not in [t.what for t in targets(key)]
    assert math.isclose(key["embeddings_alone_best_per_s"], 400.0)
