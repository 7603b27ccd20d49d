"""The Batch API benchmark's parts that need no platform: its input files, the checks that refuse a wrong
batch, the manager's ledger as its /metrics exports it, a path's bill per 1,000, and the target."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from bench.batch_api import (
    CHAT,
    INVALID,
    BatchCheckError,
    Counts,
    chat_lines,
    check_results,
    check_vectors,
    embedding_lines,
    run_count,
)
from bench.ledger import Bill, LedgerReading, parse_ledger
from bench.loadgen import Sample
from bench.report import BATCH_TARGET, owned_targets, targets
from contract.metric_families import families
from manager.busy import BusyClock
from manager.cost import PARTS, CostLedger
from manager.metrics import MANAGER_FAMILIES, FrontDoorUsage, ManagerSnapshot, snapshot


def test_a_chat_batch_has_its_count_of_lines_in_all_with_the_invalid_ones_spread_among_them():
    lines = chat_lines(400)
    ids = [line["custom_id"] for line in lines]
    assert len(ids) == len(set(ids)) == 400
    positions = sorted(ids.index(custom_id) for custom_id in INVALID)
    assert positions[0] > 0 and positions[-1] < 399, "neither first nor last"
    assert min(b - a for a, b in itertools.pairwise(positions)) > 50
    assert all(line["url"] == CHAT and line["method"] == "POST" for line in lines)
    assert {line["body"]["model"] for line in embedding_lines(5)} == {"minilm"}


def row(custom_id: str, status: int) -> dict[str, Any]:
    return {"custom_id": custom_id, "response": {"status_code": status, "body": {}}, "error": None}


IDS = ["a", "b", "bad", "c"]
GOOD = ([row("a", 200), row("b", 200), row("c", 200)], [row("bad", 400)])


def test_a_batch_whose_files_and_counts_agree_passes():
    check_results(IDS, {"bad"}, Counts(4, 3, 1), *GOOD)


@pytest.mark.parametrize(
    ("counts", "output", "errors", "says"),
    [
        (Counts(4, 3, 1), [row("a", 200), row("b", 200), row("c", 200)], [row("bad", 400), row("a", 400)],
         "in both files"),
        (Counts(4, 2, 1), [row("a", 200), row("b", 200)], [row("bad", 400)], "in neither file"),
        (Counts(4, 2, 2), [row("a", 200), row("b", 200)], [row("bad", 400), row("c", 500)],
         "valid but in the error file"),
        (Counts(4, 4, 0), [row("a", 200), row("b", 200), row("c", 200), row("bad", 200)], [],
         "invalid but not in the error file"),
        (Counts(4, 3, 1), GOOD[0], [row("bad", 500)], "invalid without a 4xx"),
        (Counts(4, 4, 0), *GOOD, "request_counts"),
        (None, *GOOD, "request_counts"),
    ],
)  # fmt: skip
def test_a_batch_whose_files_or_counts_are_wrong_is_refused_with_what_is_wrong(
    counts: Counts | None, output: list[dict[str, Any]], errors: list[dict[str, Any]], says: str
):
    with pytest.raises(BatchCheckError, match=says):
        check_results(IDS, {"bad"}, counts, output, errors)


def test_an_embeddings_answer_without_one_full_vector_is_refused():
    def answer(custom_id: str, *lengths: int) -> dict[str, Any]:
        data = [{"embedding": [0.0] * n} for n in lengths]
        return {"custom_id": custom_id, "response": {"status_code": 200, "body": {"data": data}}}

    check_vectors([answer("a", 384)])
    with pytest.raises(BatchCheckError, match=r"1 answers .*\['b'\]"):
        check_vectors([answer("a", 384), answer("b", 383)])
    with pytest.raises(BatchCheckError):
        check_vectors([answer("c", 384, 384)])


class _Families(Collector):
    def __init__(self, current: ManagerSnapshot) -> None:
        self.current = current

    def collect(self) -> Iterator[Metric]:
        return families(MANAGER_FAMILIES, self.current)


def test_the_ledger_is_read_from_the_series_the_manager_exports():
    ledger = CostLedger(1.0)
    ledger.add_uptime(3600.0)
    ledger.add_worker_time(1800.0, 1)
    ledger.observe_batch("gpu-sim", 1, 0.1)
    ledger.complete("gpu-sim", 10)
    usage = FrontDoorUsage({"submit": 3, "batch": 5}, {"submit": 0.01, "batch": 0.2})
    registry = CollectorRegistry()
    registry.register(_Families(snapshot({}, {}, BusyClock(), ledger, 0.0, usage=usage)))
    Counter("synapse_jobs_completed", "", ["model"], registry=registry).labels("gpu-sim").inc(10)

    reading = parse_ledger(generate_latest(registry).decode())

    assert reading.cost["gpu"] == pytest.approx(0.5)
    assert set(reading.cost) == set(PARTS)
    assert reading.naive["gpu"] == pytest.approx(10 * 0.1 / 3600)
    assert reading.completed == {"gpu-sim": 10}
    assert reading.requests == {"submit": 3, "batch": 5}
    assert reading.t1_s == {"gpu-sim": pytest.approx(0.1)}


def reading(dollars: float, naive: float, completed: float, requests: float) -> LedgerReading:
    return LedgerReading(
        cost=dict.fromkeys(PARTS, dollars),
        naive={"gpu": naive, "api_gateway": 0.0, "lambda": 0.0},
        completed={"gpu-sim": completed},
        requests={"batch": requests},
    )


def test_a_paths_bill_takes_the_time_parts_at_its_end_and_the_counted_parts_once_settled():
    before = reading(1.0, 10.0, 100, 7)
    end = reading(1.2, 10.0, 100, 7)  # the client has its last result; the counts are not all in yet
    settled = reading(1.5, 30.0, 2100, 12)  # seconds later: every count is in, and time went on
    bill = Bill.between(before, end, settled, "gpu-sim")

    assert bill.completed == 2000
    assert bill.cost["gpu"] == pytest.approx(0.2) and bill.cost["idle"] == pytest.approx(0.2)
    assert bill.cost["api_gateway"] == pytest.approx(0.5) and bill.cost["cache"] == pytest.approx(0.5)
    assert bill.requests == {"batch": 5}
    whole = 3 * 0.2 + 3 * 0.5
    assert bill.total_per_thousand == pytest.approx(1000 * whole / 2000)
    assert bill.naive_per_thousand == pytest.approx(1000 * 20.0 / 2000)
    assert bill.saving == pytest.approx(1 - whole / 20.0)


def test_a_bill_without_completed_jobs_has_no_cost_per_thousand():
    still = reading(1.0, 1.0, 5, 0)
    with pytest.raises(ValueError, match="no job completed"):
        _ = Bill.between(still, still, still, "gpu-sim").total_per_thousand


def batch_key(saving: float, **parts: float) -> dict[str, float]:
    key = {"batch_api_saving": saving, "batch_api_per_1000": 0.002, "batch_api_naive_per_1000": 0.03}
    key.update({f"batch_api_per_1000_{part}": value for part, value in parts.items()})
    return key


def test_the_batch_target_is_met_at_95_percent_and_a_miss_names_the_part_that_dominates():
    met = {t.what: t for t in targets(batch_key(0.96, gpu=0.001, api_gateway=0.0001))}[BATCH_TARGET]
    assert met.met and met.figure.startswith("96.0% below")
    missed = {t.what: t for t in targets(batch_key(0.90, gpu=0.0006, idle=0.0024))}[BATCH_TARGET]
    assert not missed.met
    assert "largest part: idle, 80% of the bill" in missed.gap
    assert owned_targets(batch_key(0.9)) == {BATCH_TARGET}
    assert BATCH_TARGET not in {t.what for t in targets({})}


class Counting:
    """A target that answers at once, and remembers which jobs it was asked for."""

    name = "counting"

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.closed = False

    async def call(self, index: int, sample: Sample) -> None:
        await asyncio.sleep(0)
        self.asked.append(index)
        sample.ok = index % 10 != 0

    async def aclose(self) -> None:
        self.closed = True


def test_a_fixed_number_of_jobs_is_sent_once_each_whatever_the_clients():
    target = Counting()
    samples = asyncio.run(run_count(target, 95, 8))
    assert sorted(target.asked) == list(range(95))
    assert sum(s.ok for s in samples) == 95 - 10
    assert target.closed
