"""The planner's prefix-cache estimate: the manager's own routing rule on simulated workers, so it tells
when prefix-aware routing pays (caches that hold some of the prefixes, not all) and when it cannot."""

from __future__ import annotations

from dataclasses import replace

from planner.prefix_hits import PrefixWorkload, hit_rate

EIGHT = PrefixWorkload(
    prefixes=8, prefix_tokens=1500, question_tokens=30, clients=32, requests=256, workers=2, cache_tokens=9216
)


def test_prefix_aware_routing_keeps_hits_where_caches_hold_only_some_of_the_prefixes():
    assert hit_rate(EIGHT, "prefix") > 0.8
    assert hit_rate(EIGHT, "least_loaded") < 0.5  # each worker sees all eight, holds six


def test_with_room_for_every_prefix_on_every_worker_the_rule_matters_little():
    roomy = replace(EIGHT, cache_tokens=16 * 1024)
    assert abs(hit_rate(roomy, "prefix") - hit_rate(roomy, "least_loaded")) < 0.05


def test_one_worker_is_the_same_under_both_rules_and_more_requests_raise_the_rate():
    alone = replace(EIGHT, workers=1, cache_tokens=16 * 1024)
    assert hit_rate(alone, "prefix") == hit_rate(alone, "least_loaded")
    assert hit_rate(replace(EIGHT, requests=1024), "prefix") > hit_rate(EIGHT, "prefix")


def test_the_first_wave_of_clients_all_miss():
    # 32 clients at once over 8 prefixes: every first request computes its own prefix
    assert hit_rate(replace(EIGHT, requests=32), "prefix") == 0.0
