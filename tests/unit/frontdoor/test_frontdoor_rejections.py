"""Requests the front door turns away before touching Redis: no store is configured here at all."""

import base64
import json
from typing import Any

import pytest

from contract.settings import Settings
from frontdoor.handler import lambda_handler


def event(
    method: str,
    path: str,
    body: str | None = None,
    content_type: str = "application/json",
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": content_type},
        "multiValueHeaders": {"Content-Type": [content_type]},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "requestContext": {"stage": "local", "path": path, "httpMethod": method, "requestId": "r"},
        "body": body,
        "isBase64Encoded": False,
    }


def call(ev: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = lambda_handler(ev, None)
    return response["statusCode"], json.loads(response["body"])


@pytest.mark.parametrize(
    ("body", "code", "mentions"),
    [
        ("not json", "invalid_json", "JSON"),
        ("{}", "invalid_request", "model"),
        ('{"model": "gpu-sim"}', "invalid_request", "prompt"),
        ('{"model": "gpu-sim", "prompt": ""}', "invalid_request", "prompt"),
        ('{"model": "gpu-sim", "prompt": 5}', "invalid_request", "prompt"),
        (
            '{"model": "gpu-sim", "prompt": "x", "parameters": {"max_tokens": -1}}',
            "invalid_request",
            "max_tokens",
        ),
        ('{"model": "gpu-sim", "prompt": "x", "colour": "red"}', "invalid_request", "colour"),
        ('{"model": "llama-9000", "prompt": "x"}', "unknown_model", "llama-9000"),
    ],
)
def test_bad_submissions_get_a_400_naming_the_problem(body: str, code: str, mentions: str):
    status, payload = call(event("POST", "/async-infer", body))
    assert status == 400
    assert payload["error"]["code"] == code
    assert mentions in payload["error"]["message"]


def test_a_prompt_over_the_limit_gets_413(monkeypatch: pytest.MonkeyPatch):
    from frontdoor import handler

    limit = handler.settings().max_prompt_chars
    status, payload = call(
        event("POST", "/async-infer", json.dumps({"model": "gpu-sim", "prompt": "x" * (limit + 1)}))
    )
    assert status == 413
    assert payload["error"]["code"] == "prompt_too_large"


def test_a_max_tokens_past_a_generative_models_context_is_refused_before_any_worker_ran_it():
    """The limit is the catalog's (tiny-gpt2's config.pbtxt: max_model_len 256), known with no worker and no
    store at all here: the refusal comes before anything could be enqueued."""
    body = {"model": "tiny-gpt2", "prompt": "x", "parameters": {"max_tokens": 256}}
    status, payload = call(event("POST", "/async-infer", json.dumps(body)))
    assert status == 400
    assert payload["error"]["code"] == "max_tokens_too_large"
    assert "limit of 255 for tiny-gpt2" in payload["error"]["message"]


def test_a_form_encoded_body_gets_415():
    status, payload = call(
        event("POST", "/async-infer", "model=gpu-sim&prompt=x", "application/x-www-form-urlencoded")
    )
    assert status == 415
    assert payload["error"]["code"] == "unsupported_media_type"


def test_a_wait_beyond_20_seconds_gets_400():
    ev = event("GET", "/results/00000000-0000-0000-0000-000000000000", query={"wait": "99"})
    status, payload = call(ev)
    assert status == 400
    assert "wait" in payload["error"]["message"]


def test_an_unknown_route_gets_a_json_404():
    status, payload = call(event("GET", "/nowhere"))
    assert status == 404
    assert payload["error"]["code"] == "not_found"


def openai_error(response: dict[str, Any]) -> dict[str, Any]:
    error = json.loads(response["body"])["error"]
    assert error.keys() >= {"message", "type", "param", "code"}
    return dict(error)


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "param"),
    [
        ("/v1/completions", '{"model": "gpu-sim", "prompt": ""}', 400, "invalid_request", "prompt"),
        ("/v1/completions", '{"model": "gpu-sim", "prompt": 5}', 400, "invalid_request", "prompt"),
        ("/v1/completions", '{"model": "gpu-sim", "prompt": "x", "max_tokens": -1}', 400, "invalid_request",
         "max_tokens"),
        ("/v1/completions", '{"model": "llama-9000", "prompt": "x"}', 404, "model_not_found", "model"),
        # Refused before the capacity check (no store here at all): it never wakes the pool.
        ("/v1/completions", '{"model": "tiny-gpt2", "prompt": "x", "max_tokens": 256}', 400,
         "max_tokens_too_large", "max_tokens"),
        ("/v1/completions", "not json", 400, "invalid_json", None),
        ("/v1/chat/completions", '{"model": "gpu-sim", "messages": []}', 400, "invalid_request", "messages"),
        ("/v1/chat/completions", '{"model": "gpu-sim", "messages": [{"role": "user", "content": "x"}], '
         '"tools": []}', 400, "invalid_request", "tools"),
        ("/v1/chat/completions", '{"model": "gpu-sim", "messages": [{"role": "robot", "content": "x"}]}', 400,
         "invalid_request", "messages.0.role"),
    ],
)  # fmt: skip
def test_bad_openai_requests_get_openai_errors(
    path: str, body: str, status: int, code: str, param: str | None
):
    response = lambda_handler(event("POST", path, body), None)
    assert response["statusCode"] == status
    error = openai_error(response)
    assert (error["code"], error["param"]) == (code, param)
    assert error["type"] == "invalid_request_error"


def test_a_lone_surrogate_is_malformed_json_not_a_crash():
    body = '{"model": "gpu-sim", "prompt": "\\ud800 half a character"}'
    status, payload = call(event("POST", "/async-infer", body))
    assert status == 400
    assert payload["error"]["code"] == "invalid_json"
    assert "surrogate" in payload["error"]["message"]


def test_a_body_that_is_not_utf8_gets_400():
    ev = event("POST", "/v1/completions", base64.b64encode(b'{"model": "\xff"}').decode())
    ev["isBase64Encoded"] = True
    response = lambda_handler(ev, None)
    assert response["statusCode"] == 400
    assert openai_error(response)["code"] == "invalid_json"


def test_a_known_path_with_another_method_gets_405_and_allow():
    response = lambda_handler(event("DELETE", "/v1/completions"), None)
    assert response["statusCode"] == 405
    assert response["multiValueHeaders"]["Allow"] == ["POST"]
    assert openai_error(response)["code"] == "method_not_allowed"


def test_media_types_are_case_insensitive_and_others_get_415_in_the_paths_shape():
    upper = lambda_handler(event("POST", "/v1/completions", '{"model": "x"}', "Application/JSON"), None)
    assert upper["statusCode"] == 400, "the body is read as JSON and fails on the missing prompt"
    form = lambda_handler(event("POST", "/v1/completions", "a=b", "application/x-www-form-urlencoded"), None)
    assert form["statusCode"] == 415
    assert openai_error(form)["code"] == "unsupported_media_type"


def test_the_models_list_needs_no_store():
    status, payload = call(event("GET", "/v1/models"))
    assert status == 200
    assert [m["id"] for m in payload["data"]] == list(Settings().models)
    assert {m["object"] for m in payload["data"]} == {"model"}


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"echo": True}, "echo"),
        ({"suffix": "end"}, "suffix"),
        ({"logprobs": 1}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -1}, "frequency_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ],
)
def test_an_option_the_platform_cannot_honour_gets_a_400_saying_why(options: dict[str, object], param: str):
    body = json.dumps({"model": "gpu-sim", "prompt": "x", **options})
    response = lambda_handler(event("POST", "/v1/completions", body), None)
    assert response["statusCode"] == 400
    error = openai_error(response)
    assert (error["code"], error["param"]) == ("unsupported_parameter", param)
    message = error["message"]
    assert "not supported" in message or "only" in message or "needs a generative model" in message


def test_chat_top_logprobs_without_logprobs_is_refused():
    body = json.dumps({"model": "gpu-sim", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})
    response = lambda_handler(event("POST", "/v1/chat/completions", body), None)
    assert response["statusCode"] == 400
    assert "top_logprobs needs logprobs" in openai_error(response)["message"]


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": "required",
                "response_format": {"type": "json_object"},
            },
            "response_format",
            "both constrain",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice",
            "not among the tools",
        ),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ],
)
def test_a_tool_choice_that_cannot_be_honoured_is_refused_by_name(
    extra: dict[str, object], param: str, words: str
):
    messages = [{"role": "user", "content": "x"}]
    body = json.dumps({"model": "tiny-gpt2", "messages": messages, **extra})
    response = lambda_handler(event("POST", "/v1/chat/completions", body), None)
    assert response["statusCode"] == 400, response
    error = openai_error(response)
    assert error["param"] == param and words in error["message"]


def test_an_unknown_field_named_like_an_openai_option_is_still_unknown_on_synapse_routes():
    status, payload = call(event("POST", "/async-infer", '{"model": "gpu-sim", "prompt": "x", "n": 2}'))
    assert (status, payload["error"]["code"]) == (400, "invalid_request")
    assert "n: unknown" in payload["error"]["message"]


def test_embeddings_too_many_to_answer_in_time_are_refused_naming_the_limit_and_the_async_route():
    """Past SYNAPSE_MAX_SYNC_EMBEDDING_CHARS in all (each text within its own limit), a synchronous call
    could only answer 504 after its wait; it is refused before anything is queued (no store here)."""
    from frontdoor import handler

    limit = handler.settings().max_sync_embedding_chars
    text = "x" * 4_000
    body = json.dumps({"model": "minilm", "input": [text] * (limit // len(text) + 1)})
    status, payload = call(event("POST", "/v1/embeddings", body))
    assert status == 413
    error = payload["error"]
    assert error["code"] == "input_too_large_for_sync"
    assert error["param"] == "input"
    assert "SYNAPSE_MAX_SYNC_EMBEDDING_CHARS" in error["message"]
    assert "POST /async-infer" in error["message"]
