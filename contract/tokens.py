"""A generative job's token stream: what the manager appends as text is produced, and what readers see.

One Redis stream per job (`keys.tokens_key`), entries in order:
  {"t": text, "n": tokens}   a delta: new text and how many tokens produced it; with "i": the index of
                             its choice (a job of n choices; absent: 0), "lp": its tokens'
                             log-probabilities (JSON, when the job asked for them)
  {"reset": reason}          the generation restarted (its worker failed): deltas before it are void
  {"end": status, ...}       the last entry: the job's final status, with `finish_reason`,
                             `prompt_tokens`, `completion_tokens` or `error_code`, `error_message`
The job's result text is exactly the deltas after the last reset, concatenated. Readers resume from an
entry id (SSE's Last-Event-ID). A job can end without an `end` entry (it failed before it ran, or its
manager died): readers also watch the job's status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contract.jobs import JobStatus, Outcome

START = "0-0"
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
# Entries kept per job: far past any max_tokens, since deltas group the tokens of a few ms each.
MAX_ENTRIES = 8192


@dataclass(frozen=True, slots=True)
class Delta:
    entry_id: str
    text: str
    tokens: int
    index: int = 0
    logprobs: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Reset:
    entry_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class End:
    entry_id: str
    status: JobStatus
    finish_reason: str = ""
    finish_reasons: tuple[str, ...] = ()  # each choice's, for a job of several; else ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error_code: str = ""
    error_message: str = ""


Event = Delta | Reset | End


def end_of(outcome: Outcome) -> End:
    """The end entry of a job that ended with this outcome."""
    return End(
        "",
        outcome.status,
        finish_reason=outcome.finish_reason,
        finish_reasons=tuple(choice.finish_reason for choice in outcome.choices),
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        error_code=outcome.error_code,
        error_message=outcome.error_message,
    )


def delta_fields(text: str, tokens: int, index: int = 0, logprobs: Sequence[Any] = ()) -> dict[str, str]:
    fields = {"t": text, "n": str(tokens)}
    if index:
        fields["i"] = str(index)
    if logprobs:
        fields["lp"] = json.dumps(list(logprobs), separators=(",", ":"), ensure_ascii=False)
    return fields


def reset_fields(reason: str) -> dict[str, str]:
    return {"reset": reason}


def end_fields(end: End) -> dict[str, str]:
    fields = {"end": end.status.value}
    if end.error_code:
        fields |= {"error_code": end.error_code, "error_message": end.error_message}
    else:
        fields |= {
            "finish_reason": end.finish_reason,
            **({"finish_reasons": ",".join(end.finish_reasons)} if end.finish_reasons else {}),
            "prompt_tokens": str(end.prompt_tokens),
            "completion_tokens": str(end.completion_tokens),
        }
    return fields


def parse(entry_id: str, fields: Mapping[str, str]) -> Event:
    if "end" in fields:
        return End(
            entry_id,
            JobStatus(fields["end"]),
            finish_reason=fields.get("finish_reason", ""),
            finish_reasons=tuple(fields["finish_reasons"].split(",")) if fields.get("finish_reasons") else (),
            prompt_tokens=int(fields.get("prompt_tokens") or 0),
            completion_tokens=int(fields.get("completion_tokens") or 0),
            error_code=fields.get("error_code", ""),
            error_message=fields.get("error_message", ""),
        )
    if "reset" in fields:
        return Reset(entry_id, fields["reset"])
    logprobs = tuple(json.loads(fields["lp"])) if fields.get("lp") else ()
    return Delta(
        entry_id, fields.get("t", ""), int(fields.get("n") or 0), int(fields.get("i") or 0), logprobs
    )


def position_after(last_event_id: str | None) -> str:
    """Where a reader resumes: after the entry a client last saw, or from the start for an id that is
    none of this stream's (SSE treats the id as opaque; a made-up one must not fail the stream)."""
    if last_event_id and _ENTRY_ID.fullmatch(last_event_id):
        return last_event_id
    return START
