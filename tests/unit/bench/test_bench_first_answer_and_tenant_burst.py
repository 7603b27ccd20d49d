"""The two scenarios of issue 41's numbers judge their targets from the figures they report."""

from __future__ import annotations

from bench.report import targets
from bench.tenant_burst import Timed, table_row


def verdict(key: dict[str, float], what: str) -> bool:
    [target] = [t for t in targets(key) if what in t.what]
    return target.met


def test_a_first_answer_within_a_quarter_more_than_one_workers_time_meets_its_target() -> None:
    at = {"first_answer_s": 24.0, "first_answer_alone_s": 20.0, "first_answer_ready_s": 2.0}
    assert verdict({**at, "first_answer_ratio": 1.2}, "first answer from zero")
    assert not verdict({**at, "first_answer_ratio": 1.3}, "first answer from zero")


def test_another_tenants_p99_of_a_second_or_less_meets_its_target() -> None:
    assert verdict({"tenant_burst_b_p99_s": 0.9}, "another tenant's P99")
    assert not verdict({"tenant_burst_b_p99_s": 2.56}, "another tenant's P99")


def test_a_row_gives_percentiles_in_ms_lateness_and_statuses() -> None:
    timed = [Timed("poll", 0.5 + i / 100, 0.001, 200) for i in range(99)] + [Timed("poll", 3.0, 0.2, 503)]
    row = table_row("poll", timed)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0:2] == ["poll", "100"]
    assert cells[2] == "995"  # the median of 500..1,480 ms and 3,000 ms
    assert cells[4] == "3,000"
    assert cells[6] == "200: 99, 503: 1"
