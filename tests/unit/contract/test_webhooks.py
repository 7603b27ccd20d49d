"""Callback signatures: what a receiver's check accepts and what it turns away."""

from __future__ import annotations

import hashlib
import hmac

from contract.webhooks import sign, verify

SECRET = "whsec_test"
BODY = b'{"jobId":"j-1","status":"COMPLETED"}'
NOW = 1_700_000_000


def test_a_signed_body_verifies_with_its_secret():
    assert verify(SECRET, sign(SECRET, NOW, BODY), BODY, now=NOW + 5)


def test_the_signature_is_stripes_scheme_so_a_receiver_can_check_it_without_our_code():
    header = sign(SECRET, NOW, BODY)
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={expected}"


def test_another_secret_or_a_changed_body_does_not_verify():
    header = sign(SECRET, NOW, BODY)
    assert not verify("whsec_other", header, BODY, now=NOW)
    assert not verify(SECRET, header, BODY.replace(b"COMPLETED", b"FAILED"), now=NOW)


def test_a_replay_past_the_tolerance_does_not_verify():
    header = sign(SECRET, NOW, BODY)
    assert verify(SECRET, header, BODY, now=NOW + 300)
    assert not verify(SECRET, header, BODY, now=NOW + 301)
    assert not verify(SECRET, header, BODY, now=NOW + 60, tolerance_s=30)


def test_a_signature_from_the_future_past_the_tolerance_does_not_verify():
    assert not verify(SECRET, sign(SECRET, NOW + 301, BODY), BODY, now=NOW)


def test_any_of_several_v1_signatures_may_match_while_a_secret_is_rotated():
    old, new = sign("whsec_old", NOW, BODY), sign("whsec_new", NOW, BODY)
    both = f"{old},{new.split(',')[1]}"
    assert verify("whsec_old", both, BODY, now=NOW)
    assert verify("whsec_new", both, BODY, now=NOW)
    assert not verify("whsec_other", both, BODY, now=NOW)


def test_a_timestamp_cannot_be_swapped_under_a_signature():
    """The timestamp is signed with the body: a captured signature with a fresh t= fails."""
    captured = sign(SECRET, NOW, BODY).split(",")[1]
    assert not verify(SECRET, f"t={NOW + 3600},{captured}", BODY, now=NOW + 3600)


def test_malformed_headers_are_refused_not_raised():
    good = sign(SECRET, NOW, BODY)
    for header in (
        "",
        "garbage",
        f"t={NOW}",
        good.split(",")[1],
        "t=²,v1=00",
        f"t={NOW},v1=ünïcode",
        "t=,v1=",
    ):
        assert not verify(SECRET, header, BODY, now=NOW), header
