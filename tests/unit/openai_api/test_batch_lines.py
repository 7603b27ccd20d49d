"""A Batch API input file is checked line by line as OpenAI checks it, each problem with its line number."""

from __future__ import annotations

import json
from typing import Any

from openai_api.batch_lines import Line, read_line, request_spans, scan_input

CHAT = "/v1/chat/completions"


def parse_input(text: str, endpoint: str, max_lines: int) -> tuple[list[Line], list[dict[str, Any]]]:
    """Scans the text in chunks of 7 bytes (lines cross chunks) and reads back each line it found."""
    data = text.encode()
    spans, problems = scan_input((data[i : i + 7] for i in range(0, len(data), 7)), endpoint, max_lines)
    if not problems:
        assert request_spans([data]) == spans, "a restarted runner finds the same lines"
    lines = [read_line(data[spans[i] : spans[i + 1]]) for i in range(0, len(spans), 2)]
    return lines, problems


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


def test_lines_end_at_newlines_only_and_a_raw_line_separator_stays_inside_its_string():
    text = line("a", body={"model": "m", "messages": [{"role": "user", "content": "one\u2028two"}]})
    text = text.replace("\\u2028", "\u2028") + "\r\n" + line("b") + "\n"
    lines, problems = parse_input(text, CHAT, 10)
    assert problems == []
    assert [x.custom_id for x in lines] == ["a", "b"]
    assert lines[0].body["messages"][0]["content"] == "one\u2028two"


def test_a_line_that_is_not_utf8_is_refused_by_its_number():
    data = (line("a") + "\n").encode() + b'{"custom_id": "\xff"}\n'
    _, problems = scan_input([data], CHAT, 10)
    assert [(p["line"], p["code"]) for p in problems] == [(2, "invalid_json_line")]
