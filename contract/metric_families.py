"""Prometheus families computed at scrape time from an immutable snapshot, for the manager and the worker.

A spec names each family once: (kind, name, help, labels, the snapshot's field holding it). Labels are
None (the field is the one sample), one name (the field maps that label's values to samples) or a tuple
of names (the field maps tuples of their values to samples).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# The Pushgateway job of worker groups; the grouping key is `worker`. Workers push to it, managers
# delete the group of a worker that crashed.
WORKER_PUSH_JOB = "synapse-worker"

FamilySpec = tuple[str, str, str, str | tuple[str, ...] | None, str]


def families(specs: tuple[FamilySpec, ...], source: object) -> Iterator[Metric]:
    for kind, name, documentation, labels, field_name in specs:
        value = getattr(source, field_name)
        family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        if labels is None:
            family = family_type(name, documentation)
            if value is not None:
                family.add_metric([], value)
        elif isinstance(labels, str):
            family = family_type(name, documentation, labels=[labels])
            for label_value, sample in sorted(value.items()):
                family.add_metric([label_value], sample)
        else:
            family = family_type(name, documentation, labels=list(labels))
            for label_values, sample in sorted(value.items()):
                family.add_metric(list(label_values), sample)
        yield family
