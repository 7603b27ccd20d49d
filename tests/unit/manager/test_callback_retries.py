"""The callback retry policy: pure, time passed in."""

from __future__ import annotations

from manager.callback_policy import Attempt, backoff_s, settle

HOUR_MS = 3_600_000


def test_the_wait_doubles_from_one_second_and_is_capped_at_five_minutes():
    assert [backoff_s(n) for n in range(1, 11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_a_delivered_try_ends_the_channel():
    settled = settle("callback", 3, Attempt(True), now=1_000, deadline=HOUR_MS)
    assert settled.fields == {"callback_attempts": "3", "callback_status": "delivered"}
    assert settled.retry_at_ms is None
    assert settled.outcome == "delivered"


def test_a_failed_try_is_due_again_after_its_backoff():
    settled = settle("callback", 2, Attempt(False, "HTTP 500"), now=1_000, deadline=HOUR_MS)
    assert settled.fields == {"callback_attempts": "2", "callback_error": "HTTP 500"}
    assert settled.retry_at_ms == 3_000
    assert settled.outcome == "retried"


def test_a_try_whose_next_one_would_fall_past_the_deadline_gives_up():
    settled = settle("sns", 5, Attempt(False, "throttled"), now=HOUR_MS - 10_000, deadline=HOUR_MS)
    assert settled.fields["sns_status"] == "undeliverable"
    assert settled.retry_at_ms is None
    assert settled.outcome == "undeliverable"


def test_a_refusal_no_retry_can_mend_gives_up_at_once():
    refused = Attempt(False, "no webhook secret for tenant acme", final=True)
    settled = settle("callback", 1, refused, now=1_000, deadline=HOUR_MS)
    assert settled.fields["callback_status"] == "undeliverable"
    assert settled.fields["callback_error"] == "no webhook secret for tenant acme"


def test_a_long_error_is_cut_to_fit_the_record():
    settled = settle("callback", 1, Attempt(False, "x" * 5000), now=1_000, deadline=HOUR_MS)
    assert len(settled.fields["callback_error"]) == 300
