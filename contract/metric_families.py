"""Prometheus families computed at scrape time from an immutable snapshot, for the manager and the worker.

A spec names each family once: (kind, name, help, label or None, the snapshot's field holding it).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# The Pushgateway job of worker groups; the grouping key is `worker`. Workers push to it, managers
# delete the group of a worker that crashed.
WORKER_PUSH_JOB = "synapse-worker"

FamilySpec = tuple[str, str, str, str | None, str]


def families(specs: tuple[FamilySpec, ...], source: object) -> Iterator[Metric]:
    for kind, name, documentation, label, field_name in specs:
        value = getattr(source, field_name)
        family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        if label is None:
            family = family_type(name, documentation)
            if value is not None:
                family.add_metric([], value)
        else:
            family = family_type(name, documentation, labels=[label])
            for label_value, sample in sorted(value.items()):
                family.add_metric([label_value], sample)
        yield family
