"""The manager's cost ledger (manager/cost.py) as its /metrics exports it, and what one path's run added
to it: each part of the bill and the naive baseline, per 1,000 completed inferences.

The ledger counts since the manager started, so a path's bill is the difference of two readings. Its
parts accrue two ways. `TIME_PARTS` grow with wall time whatever the load (a worker is billed busy or
idle), so they are read when the path's client has its last result: the path is charged for the time
it took, not for the benchmark's wait after it. The rest (API Gateway, Lambda, the cache's ECPUs) and
the naive baseline grow with requests and jobs, which reach the ledger late: the front door writes its
counts at most once a second, on its next request, and the manager samples them once a second. They are
read from a later, settled reading. The cache part mixes its ECPUs with its idle minimum: the few
settling seconds add about $0.00001 of that minimum to a path, below the last digit shown per 1,000.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from manager.cost import NAIVE_PARTS, PARTS

TIME_PARTS = frozenset({"gpu", "manager", "idle"})
SCRAPE_TIMEOUT_S = 5.0

# The series read, each by the label that splits it.
_SERIES = {
    "synapse_cost_dollars_total": "part",
    "synapse_naive_cost_dollars_total": "part",
    "synapse_jobs_completed_total": "model",
    "synapse_frontdoor_requests_total": "route",
    "synapse_batch_of_one_duration_seconds": "model",
}


@dataclass(frozen=True)
class LedgerReading:
    """One scrape: dollars by part (Synapse and naive), jobs completed by model, front-door requests by
    route, and each model's T1 (its measured batch of one, seconds)."""

    cost: Mapping[str, float] = field(default_factory=dict)
    naive: Mapping[str, float] = field(default_factory=dict)
    completed: Mapping[str, float] = field(default_factory=dict)
    requests: Mapping[str, float] = field(default_factory=dict)
    t1_s: Mapping[str, float] = field(default_factory=dict)


def parse_ledger(exposition: str) -> LedgerReading:
    found: dict[str, dict[str, float]] = {name: {} for name in _SERIES}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            label = _SERIES.get(sample.name)
            if label is not None and label in sample.labels:
                found[sample.name][sample.labels[label]] = sample.value
    return LedgerReading(
        cost=found["synapse_cost_dollars_total"],
        naive=found["synapse_naive_cost_dollars_total"],
        completed=found["synapse_jobs_completed_total"],
        requests=found["synapse_frontdoor_requests_total"],
        t1_s=found["synapse_batch_of_one_duration_seconds"],
    )


def read_ledger(url: str) -> LedgerReading:
    """The manager's ledger now, from its /metrics."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return parse_ledger(response.read().decode())


def _added(after: Mapping[str, float], before: Mapping[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


@dataclass(frozen=True)
class Bill:
    """What one path's run added to the ledger: dollars by part, naive dollars by part, the model's
    completed jobs (gpu-sim: one inference each) and the front door's requests by route."""

    completed: float
    cost: Mapping[str, float]
    naive: Mapping[str, float]
    requests: Mapping[str, float]

    @classmethod
    def between(cls, before: LedgerReading, end: LedgerReading, settled: LedgerReading, model: str) -> Bill:
        """`end`: read when the path's client had its last result; `settled`: once every count of the run
        has reached the ledger."""
        cost = {
            part: _added(end.cost if part in TIME_PARTS else settled.cost, before.cost, part)
            for part in PARTS
        }
        routes = set(before.requests) | set(settled.requests)
        return cls(
            completed=_added(settled.completed, before.completed, model),
            cost=cost,
            naive={part: _added(settled.naive, before.naive, part) for part in NAIVE_PARTS},
            requests={route: _added(settled.requests, before.requests, route) for route in sorted(routes)},
        )

    def per_thousand(self, dollars: float) -> float:
        if self.completed <= 0:
            raise ValueError("no job completed: there is no cost per 1,000 to show")
        return 1000.0 * dollars / self.completed

    @property
    def total_per_thousand(self) -> float:
        """The whole bill, every part."""
        return self.per_thousand(sum(self.cost.values()))

    @property
    def naive_per_thousand(self) -> float:
        return self.per_thousand(sum(self.naive.values()))

    @property
    def saving(self) -> float:
        """1 - cost / naive: how far below one invocation per request the whole bill is."""
        return 1.0 - self.total_per_thousand / self.naive_per_thousand

    @property
    def requests_total(self) -> float:
        return sum(self.requests.values())
