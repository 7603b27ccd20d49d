"""Where a job's stream resumes for a Last-Event-ID, and how a job stream that breaks off ends."""

import json

import pytest

from contract import tokens
from contract.jobs import JobStatus
from frontdoor.job_events import error_event
from frontdoor.resume import MAX_ID_PART, entry_id_of, events_after
from openai_api.errors import Problem

EVENTS = [
    tokens.Delta("5-0", "a", 1),
    tokens.Delta("6-0", "b", 1),
    tokens.End("7-0", JobStatus.COMPLETED),
]


@pytest.mark.parametrize(
    ("sent", "entry_id"),
    [
        ("5-0", "5-0"),
        (f"{MAX_ID_PART}-{MAX_ID_PART}", f"{MAX_ID_PART}-{MAX_ID_PART}"),
        (f"{MAX_ID_PART + 1}-0", None),  # past Redis's 64-bit ids: Redis would refuse to read after it
        ("99999999999999999999-0", None),
        ("5-99999999999999999999", None),
        ("0-0", None),
        ("five", None),
        ("", None),
        (None, None),
    ],
)
def test_only_an_id_redis_can_hold_is_an_entry_id(sent: str | None, entry_id: str | None):
    assert entry_id_of(sent) == entry_id


def test_a_buffered_stream_resumes_after_an_event_it_sent():
    assert events_after(EVENTS, "5-0") == EVENTS[1:]
    assert events_after(EVENTS, "7-0") == []


@pytest.mark.parametrize("sent", ["99999999999999999999-0", "8-0", "4-0", "garbage", None])
def test_an_id_the_stream_never_sent_starts_it_from_the_beginning(sent: str | None):
    assert events_after(EVENTS, sent) == EVENTS


def test_a_stream_that_broke_off_ends_with_an_error_event():
    text = error_event(Problem(503, "unavailable", "the job store did not answer"))
    lines = text.splitlines()
    assert lines[0] == "event: error"
    data = json.loads(lines[1].removeprefix("data: "))
    assert data == {"error": {"code": "unavailable", "message": "the job store did not answer"}}
    assert text.endswith("\n\n")
