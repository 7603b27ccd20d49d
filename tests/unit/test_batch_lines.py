"""A Batch API input file is checked line by line as OpenAI checks it, each problem with its line number."""

from __future__ import annotations

import json
from typing import Any

from frontdoor.batch_lines import parse_input

CHAT = "/v1/chat/completions"


def line(custom_id: str, **overrides: Any) -> str:
    value = {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {"model": "tiny-gpt2", "messages": []},
    }
    value.update(overrides)
    return json.dumps(value)


def test_a_valid_file_gives_its_lines_in_order():
    lines, problems = parse_input("\n".join(line(f"r{i}") for i in range(3)) + "\n", CHAT, 10)
    assert problems == []
    assert [x.custom_id for x in lines] == ["r0", "r1", "r2"]


def test_each_problem_names_its_line():
    text = "\n".join(
        [
            line("a"),
            "{not json",
            line("b", url="/v1/embeddings"),
            line("a"),
            line("c", method="GET"),
            json.dumps(["a list"]),
            line("d", extra=1),
            line("e", body="text"),
        ]
    )
    _, problems = parse_input(text, CHAT, 10)
    assert [(p["line"], p["code"], p["param"]) for p in problems] == [
        (2, "invalid_json_line", None),
        (3, "invalid_request", "url"),
        (4, "duplicate_custom_id", "custom_id"),
        (5, "invalid_request", "method"),
        (6, "invalid_request", None),
        (7, "invalid_request", "extra"),
        (8, "invalid_request", "body"),
    ]


def test_more_lines_than_the_limit_fail_at_the_first_line_past_it():
    _, problems = parse_input("\n".join(line(f"r{i}") for i in range(4)), CHAT, 3)
    assert [(p["line"], p["code"]) for p in problems] == [(4, "too_many_requests")]
    assert "limit of 3" in problems[0]["message"]


def test_an_empty_file_fails():
    _, problems = parse_input("\n\n", CHAT, 3)
    assert [p["code"] for p in problems] == ["empty_file"]
