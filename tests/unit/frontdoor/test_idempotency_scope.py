"""Idempotency keys are namespaced per route (the Redis prefix) and per caller (the hashed payload)."""

from __future__ import annotations

import hashlib

from contract.keys import idempotency_prefix
from frontdoor.idempotency import caller_scope, idempotency_payload
from openai_api.errors import Problem, body_for


def test_api_gateways_key_id_wins_over_the_presented_key():
    assert caller_scope("k1", {"x-api-key": "secret"}) == "id:k1"


def test_a_presented_key_is_hashed_never_kept():
    scope = caller_scope(None, {"X-Api-Key": "secret"})
    assert scope == "sha256:" + hashlib.sha256(b"secret").hexdigest()
    assert "secret" not in scope


def test_a_bearer_token_is_the_same_caller_as_the_same_key_in_x_api_key():
    bearer = caller_scope(None, {"Authorization": "Bearer secret"})
    assert bearer == caller_scope(None, {"x-api-key": "secret"})


def test_different_keys_are_different_callers_and_no_key_is_the_empty_scope():
    assert caller_scope(None, {"x-api-key": "a"}) != caller_scope(None, {"x-api-key": "b"})
    assert caller_scope(None, {}) == ""


def test_the_record_is_named_by_caller_and_key_and_checked_against_the_body():
    payload = idempotency_payload("id:k1", "retry-1", {"model": "gpu-sim", "prompt": "x"})
    assert payload == {
        "key": {"caller": "id:k1", "key": "retry-1"},
        "body": {"model": "gpu-sim", "prompt": "x"},
    }
    assert idempotency_payload("id:k2", "retry-1", {})["key"] != payload["key"]


def test_each_route_has_its_own_prefix():
    prefixes = {idempotency_prefix(r) for r in ("async-infer", "completions", "chat-completions")}
    assert len(prefixes) == 3
    assert all(p.startswith("{synapse}:idem:") for p in prefixes)


def test_errors_take_the_shape_of_the_path():
    problem = Problem(504, "timeout", "still running", job_id="j-1")
    assert body_for("/async-infer", problem) == {
        "error": {"code": "timeout", "message": "still running", "jobId": "j-1"}
    }
    assert body_for("/v1/completions", problem) == {
        "error": {
            "message": "still running",
            "type": "server_error",
            "param": None,
            "code": "timeout",
            "jobId": "j-1",
        }
    }
    assert body_for("/v1x", problem)["error"].keys() == {"code", "message", "jobId"}
