"""A stored response outlives every process of the platform, with the real chat model: a background
response followed as a stream survives `kill -9` of the gateway mid-answer (the client resumes with
`starting_after` and gets every event once, in order), a background response survives `kill -9` of the
manager mid-generation (a new manager completes it), and a stored response reads the same after the
whole stack, Redis included, restarts on the same data."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract.catalog import CHAT_MODEL
from local_stack.stack import redis_argv
from tests.integration.conftest import base_env, start_manager, start_worker
from tests.integration.helpers import start_gateway
from tests.processes import free_port, kill9, port_open, start, stop, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

API_KEY = "sk-durable-responses"
LONG = {"model": CHAT_MODEL, "input": "Tell me a long story about a lighthouse keeper.", "temperature": 0,
        "max_output_tokens": 200, "background": True}  # fmt: skip
FINAL_WITHIN_S = 180


@dataclass
class Platform:
    """One platform on a Redis of its own (so it can be restarted on its data), serving SmolLM2."""

    root: Path
    env: dict[str, str]
    redis_port: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api: str = ""

    def start_redis(self) -> None:
        log = self.root / "redis.log"
        proc = start(redis_argv(self.redis_port, self.root / "redis"), {}, log)
        wait_until(lambda: port_open(self.redis_port), 30, "redis", proc, log)
        self.procs["redis"] = proc

    def start_gateway(self) -> None:
        self.procs["gateway"], self.api = start_gateway(
            self.env, API_KEY, self.root, f"gateway-{time.time_ns()}"
        )

    def start_manager(self) -> None:
        self.procs["manager"] = start_manager(self.env, f"manager-{time.time_ns()}", self.root)

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.api}/v1", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
        )

    def response(self, response_id: str) -> dict[str, Any]:
        with self.client() as client:
            reply = client.get(f"/responses/{response_id}")
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body

    def final(self, response_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + FINAL_WITHIN_S
        while (body := self.response(response_id))["status"] in ("queued", "in_progress"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{response_id} still {body['status']} after {FINAL_WITHIN_S} s")
            time.sleep(0.25)
        return body


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    root = tmp_path_factory.mktemp("responses-durability")
    port = free_port()
    env = base_env(f"redis://127.0.0.1:{port}/0", root / "state")
    # A dead manager's jobs are taken over soon: past a Triton call's limit, which a generation stays under.
    env.update(SYNAPSE_TRITON_TIMEOUT_S="12", SYNAPSE_RECLAIM_IDLE_S="15", SYNAPSE_HEARTBEAT_S="1")
    platform = Platform(root, env, port)
    platform.start_redis()
    platform.procs["worker"] = start_worker(env, "worker-durable", root, models=CHAT_MODEL)
    platform.start_manager()
    platform.start_gateway()
    yield platform
    for name in ("gateway", "manager", "worker", "redis"):
        if name in platform.procs:
            stop(platform.procs.pop(name))


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Each whole event's data; an event cut by a lost connection is not one."""
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


def test_a_followed_background_response_resumes_after_the_gateway_is_killed(platform: Platform) -> None:
    received: list[dict[str, Any]] = []
    with (
        platform.client() as client,
        client.stream("POST", "/responses", json={**LONG, "stream": True}) as first,
    ):
        assert first.status_code == 200
        for event in sse_events(first.iter_lines()):
            received.append(event)
            if sum(e["type"] == "response.output_text.delta" for e in received) == 10:
                break
        kill9(platform.procs.pop("gateway"))  # mid-answer: the client's connection breaks with it
    response_id = received[0]["response"]["id"]
    assert received[0]["response"]["status"] == "queued"

    platform.start_gateway()
    after = received[-1]["sequence_number"]
    with (
        platform.client() as client,
        client.stream(
            "GET", f"/responses/{response_id}", params={"stream": "true", "starting_after": after}
        ) as rest,
    ):
        assert rest.status_code == 200
        received += list(sse_events(rest.iter_lines()))

    assert [e["sequence_number"] for e in received] == list(range(len(received)))
    assert received[-1]["type"] in ("response.completed", "response.incomplete")
    text = "".join(e["delta"] for e in received if e["type"] == "response.output_text.delta")
    assert text == received[-1]["response"]["output"][0]["content"][0]["text"]
    assert platform.response(response_id)["output"] == received[-1]["response"]["output"]


def test_a_background_response_completes_after_its_manager_is_killed(platform: Platform) -> None:
    with platform.client() as client:
        created = client.post("/responses", json=LONG).json()
    assert created["status"] in ("queued", "in_progress")
    wait_until(
        lambda: platform.response(created["id"])["status"] == "in_progress", 60, "the generation to start"
    )
    kill9(platform.procs.pop("manager"))
    platform.start_manager()
    final = platform.final(created["id"])
    assert final["status"] in ("completed", "incomplete") and final["output"][0]["content"][0]["text"]


def test_a_stored_response_reads_the_same_after_the_whole_stack_restarts(platform: Platform) -> None:
    with platform.client() as client:
        created = client.post(
            "/responses",
            json={"model": CHAT_MODEL, "input": "Say hi.", "max_output_tokens": 8, "temperature": 0},
        ).json()
    assert created["status"] in ("completed", "incomplete")
    for name in ("gateway", "manager", "worker", "redis"):
        stop(platform.procs.pop(name))
    platform.start_redis()
    platform.start_gateway()  # no worker, no manager: reading a response needs neither
    assert platform.response(created["id"]) == created
    with platform.client() as client:
        items = client.get(f"/responses/{created['id']}/input_items").json()
    assert [item["content"][0]["text"] for item in items["data"]] == ["Say hi."]
