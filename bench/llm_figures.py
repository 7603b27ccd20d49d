"""One row of the LLM benchmark (a path at one concurrency) and where its figures come from: aiperf's
export for the paths through the platform, the engine-alone run's own per-request timings otherwise.

Both sides define the figures alike, as aiperf does: TTFT from sending a request to its first token;
a request's inter-token latency is (latency - TTFT) / (output tokens - 1), and its P50 and P99 are
taken over requests; output tokens/s and requests/s are what the successful requests produced over
the run, from the first request sent to the last answer in hand.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import pct

SUMMARY = "profile_export_aiperf.json"  # aiperf's aggregate figures
RECORDS = "profile_export.jsonl"  # one line per request, errors included
INPUTS = "inputs.json"  # the payloads aiperf sent
SERVING_PROCESSES = ("worker", "engine")  # bench.llm_cpu's names: the platform's worker, the engine alone


@dataclass(frozen=True)
class LlmRow:
    path: str
    concurrency: int
    requests: int  # answered successfully
    errors: int
    duration_s: float
    output_tokens: int
    output_tps: float
    request_rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float  # NaN where no request had two tokens apart (one chunk for the whole answer)
    itl_p99_ms: float
    notes: tuple[str, ...] = field(default=())
    cores: dict[str, float] = field(default_factory=dict)  # mean cores each process used under load

    @property
    def serving_cores(self) -> float:
        """The cores the process serving the model used: the platform's worker (its agent, Triton and
        model stub), or the engine alone's process; NaN where not measured."""
        return next((self.cores[k] for k in SERVING_PROCESSES if k in self.cores), math.nan)

    @property
    def tps_per_core(self) -> float:
        """Output tokens per core-second of the serving process: what the platform costs per token,
        whatever else shares the machine."""
        cores = self.serving_cores
        return self.output_tps / cores if cores > 0 else math.nan

    @property
    def tokens_per_answer(self) -> float:
        return self.output_tokens / self.requests if self.requests else math.nan

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LlmRow:
        return cls(**{**data, "notes": tuple(data.get("notes", ()))})


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One answered request, as the engine-alone run times it (seconds on one monotonic clock)."""

    sent_s: float
    first_token_s: float
    done_s: float
    output_tokens: int

    @property
    def itl_s(self) -> float:
        if self.output_tokens < 2:
            return math.nan
        return (self.done_s - self.first_token_s) / (self.output_tokens - 1)


def row_from_timings(path: str, concurrency: int, done: Sequence[RequestTiming], errors: int) -> LlmRow:
    """The row of a run timed by the bench itself (the engine alone)."""
    if not done:
        return _failed(path, concurrency, errors, ())
    duration = max(t.done_s for t in done) - min(t.sent_s for t in done)
    tokens = sum(t.output_tokens for t in done)
    ttft = [(t.first_token_s - t.sent_s) * 1000 for t in done]
    itl = [t.itl_s * 1000 for t in done if not math.isnan(t.itl_s)]
    per_s = 1 / duration if duration > 0 else math.nan
    return LlmRow(
        path=path,
        concurrency=concurrency,
        requests=len(done),
        errors=errors,
        duration_s=duration,
        output_tokens=tokens,
        output_tps=tokens * per_s,
        request_rate=len(done) * per_s,
        ttft_p50_ms=pct(ttft, 50),
        ttft_p99_ms=pct(ttft, 99),
        itl_p50_ms=pct(itl, 50),
        itl_p99_ms=pct(itl, 99),
    )


def _metric(summary: dict[str, Any], name: str, stat: str = "avg") -> float:
    value = summary.get(name, {}).get(stat)
    return float(value) if value is not None else math.nan


def _error_kinds(records: Path) -> tuple[int, Counter[str]]:
    """Profiling-phase requests that failed, and why (HTTP status or exception type)."""
    kinds: Counter[str] = Counter()
    if not records.exists():
        return 0, kinds
    for line in records.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        error = record.get("error")
        if not error or record.get("metadata", {}).get("benchmark_phase") != "profiling":
            continue
        kinds[str(error.get("code") or error.get("type") or "error")] += 1
    return sum(kinds.values()), kinds


def _failed(path: str, concurrency: int, errors: int, notes: tuple[str, ...]) -> LlmRow:
    nan = math.nan
    return LlmRow(path, concurrency, 0, errors, nan, 0, nan, nan, nan, nan, nan, nan, notes)


def row_from_aiperf(path: str, concurrency: int, artifacts: Path) -> LlmRow:
    """The row of one aiperf run, from its summary export (its own figures, not recomputed here).

    aiperf writes no summary when every request failed; the per-request records still count them.
    A path that answers in one chunk has no inter-token latency: aiperf reports 0 ms, shown as none.
    """
    errors, kinds = _error_kinds(artifacts / RECORDS)
    notes = tuple(f"{n} failed: {kind}" for kind, n in kinds.most_common())
    if not (artifacts / SUMMARY).exists():
        return _failed(path, concurrency, errors, notes)
    summary = json.loads((artifacts / SUMMARY).read_text())
    if "error_request_count" in summary:
        errors = max(errors, int(_metric(summary, "error_request_count")))
    tokens = _metric(summary, "total_output_tokens")
    one_chunk = _metric(summary, "decode_duration", "max") == 0
    return LlmRow(
        path=path,
        concurrency=concurrency,
        requests=int(_metric(summary, "request_count")),
        errors=errors,
        duration_s=_metric(summary, "benchmark_duration"),
        output_tokens=0 if math.isnan(tokens) else int(tokens),
        output_tps=_metric(summary, "output_token_throughput"),
        request_rate=_metric(summary, "request_throughput"),
        ttft_p50_ms=_metric(summary, "time_to_first_token", "p50"),
        ttft_p99_ms=_metric(summary, "time_to_first_token", "p99"),
        itl_p50_ms=math.nan if one_chunk else _metric(summary, "inter_token_latency", "p50"),
        itl_p99_ms=math.nan if one_chunk else _metric(summary, "inter_token_latency", "p99"),
        notes=notes,
    )


def load_window(artifacts: Path) -> tuple[float, float] | None:
    """Wall-clock seconds from the first request sent to the last answer of the run's profiling phase."""
    starts, ends = [], []
    records = artifacts / RECORDS
    for line in records.read_text().splitlines() if records.exists() else []:
        meta = json.loads(line).get("metadata", {}) if line.strip() else {}
        if meta.get("benchmark_phase") == "profiling" and "request_start_ns" in meta:
            starts.append(int(meta["request_start_ns"]))
            ends.append(int(meta.get("request_end_ns") or meta["request_start_ns"]))
    return (min(starts) / 1e9, max(ends) / 1e9) if starts else None


@dataclass(frozen=True, slots=True)
class Payload:
    """One request aiperf sent: its chat messages (role, content) and max_completion_tokens."""

    messages: tuple[tuple[str, str], ...]
    max_tokens: int


def _sessions(artifacts: Path) -> dict[str, list[Payload]]:
    """aiperf's dataset from the inputs file it exports: each conversation's payloads, in its order."""
    data = json.loads((artifacts / INPUTS).read_text())
    sessions: dict[str, list[Payload]] = {}
    for session in data["data"]:
        payloads = sessions.setdefault(str(session.get("session_id", len(sessions))), [])
        for payload in session["payloads"]:
            messages = tuple((str(m["role"]), str(m["content"])) for m in payload["messages"])
            tokens = payload.get("max_completion_tokens") or payload.get("max_tokens") or 16
            payloads.append(Payload(messages, int(tokens)))
    return sessions


def sent_payloads(artifacts: Path) -> list[Payload]:
    """aiperf's dataset, in its order, from the inputs file it exports."""
    return [payload for payloads in _sessions(artifacts).values() for payload in payloads]


def sent_in_order(artifacts: Path) -> list[Payload]:
    """What aiperf sent in the run's profiling phase, in the order it sent it (its per-request records
    name each request's conversation and turn): the very requests, answered or not. Empty when the
    records are missing or name a conversation the inputs file does not hold."""
    sessions = _sessions(artifacts)
    records = artifacts / RECORDS
    sent = []
    for line in records.read_text().splitlines() if records.exists() else []:
        meta = json.loads(line).get("metadata", {}) if line.strip() else {}
        if meta.get("benchmark_phase") != "profiling":
            continue
        turns = sessions.get(str(meta.get("conversation_id")), [])
        turn = int(meta.get("turn_index", 0))
        if turn >= len(turns):
            return []
        issued = meta.get("credit_issued_ns") or meta.get("request_start_ns") or 0
        sent.append((int(issued), turns[turn]))
    return [payload for _, payload in sorted(sent, key=lambda s: s[0])]
