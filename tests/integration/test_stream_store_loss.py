"""A job's stream whose store goes away ends with an `error` event, as a /v1 stream does: an SSE client
that met a bare EOF would take it for the end of a job that has not ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.conftest import base_env
from tests.integration.faults import FaultStack
from tests.processes import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def lone_gateway(tmp_path: Path) -> Iterator[FaultStack]:
    """Redis and a gateway, no manager: a job stays QUEUED and its stream open until Redis goes."""
    port = free_port()
    stack = FaultStack(tmp_path, port, base_env(f"redis://127.0.0.1:{port}/0", tmp_path / "state"))
    stack.start_redis()
    stack.start_gateway(max_queue_length=100)
    yield stack
    stack.stop_all()


def events_of(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append(fields)
    return events


async def test_a_job_stream_whose_store_goes_away_ends_with_an_error_event(lone_gateway: FaultStack):
    headers = {"x-api-key": lone_gateway.api_key}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        body = {"model": "gpu-sim", "prompt": "never run"}
        async with session.post(f"{lone_gateway.api}/async-infer", json=body, headers=headers) as reply:
            assert reply.status == 202
            job_id = (await reply.json())["jobId"]
        async with session.get(f"{lone_gateway.api}/results/{job_id}/stream", headers=headers) as stream:
            assert stream.status == 200
            lone_gateway.stop_redis()
            text = await stream.text()
    last = events_of(text)[-1]
    assert last.get("event") == "error", text
    error = json.loads(last["data"])["error"]
    assert error["code"] == "unavailable"
    assert job_id in error["message"]
