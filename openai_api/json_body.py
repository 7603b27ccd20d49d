"""A request body read as the API reads it: strict JSON (bounded nesting, no lone surrogates, no
integers past Python's limit) and pydantic's validation errors as one 400 that names the fields.
The routes and the Batch API's lines (openai_api/batch_lines.py) both read bodies through here."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from typing import Any

from openai_api.errors import Problem
from openai_api.schemas import UNSUPPORTED

# A valid body nests 5 deep (a chat's content parts); json.loads recurses once per level.
MAX_JSON_DEPTH = 64
MAX_LISTED_PROBLEMS = 5
MAX_LOCATION_CHARS = 80


def describe_validation_errors(errors: Any) -> Problem:
    """A 400 naming the fields that failed (a few, shortened: the names come from the client), or the
    first OpenAI option set to a value the platform cannot honour."""
    problems: list[str] = []
    first: str | None = None
    for err in errors:
        if err.get("type") == "json_invalid":
            why = (err.get("ctx") or {}).get("error") or "malformed"
            return Problem(400, "invalid_json", f"request body is not valid JSON: {why}")
        location = [str(p) for p in err.get("loc", ()) if p != "body"]
        if location and location[0] in UNSUPPORTED and err.get("type") != "extra_forbidden":
            return Problem(400, "unsupported_parameter", UNSUPPORTED[location[0]], param=location[0])
        where = ".".join(location)[:MAX_LOCATION_CHARS] or "body"
        first = first or where
        why = "unknown or unsupported parameter" if err.get("type") == "extra_forbidden" else err.get("msg")
        problems.append(f"{where}: {why or 'invalid'}")
    return Problem(400, "invalid_request", "; ".join(problems[:MAX_LISTED_PROBLEMS]), param=first)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


class JsonTooDeepError(ValueError):
    """The body nests arrays or objects past MAX_JSON_DEPTH; it was not parsed."""


# A JSON string, escapes and all; one left open runs to the end, so that no text is scanned twice.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


def nests_deeper_than(text: str, limit: int) -> bool:
    """Counted in a loop before parsing: json.loads recurses once per level, and 2 KB of brackets
    exhaust the interpreter's stack (a RecursionError: a 500 locally, a 502 in Lambda)."""
    depth = 0
    for bracket in _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return True
    return False


def strict_json_loads(text: str) -> Any:
    """JSON as I-JSON (RFC 7493) has it: a lone surrogate escape (\\ud800) is not text any UTF-8 store
    or model can take, so it fails here as malformed JSON instead of deep inside a route. Nesting is
    bounded before parsing, so nothing here recurses deeper than MAX_JSON_DEPTH. An integer too long
    for Python to read is malformed JSON too (a 400), however long."""
    if nests_deeper_than(text, MAX_JSON_DEPTH):
        raise JsonTooDeepError(f"nested over {MAX_JSON_DEPTH} levels deep")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # int() refuses a literal past sys.get_int_max_str_digits() (4,300 digits)
        why = f"an integer has more than {sys.get_int_max_str_digits()} digits"
        raise json.JSONDecodeError(why, text, 0) from exc
    for string in _strings(value):
        try:
            string.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise json.JSONDecodeError("lone surrogate in a string", text, 0) from exc
    return value
