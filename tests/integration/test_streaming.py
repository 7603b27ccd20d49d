"""Token streaming on the local stack, as a client sees it: the official `openai` client streaming from
the continuous-batching engine (tiny-gpt2's, and SmolLM2's where a generation must last), and an
asynchronous job's stream over SSE."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import openai
import pytest
from transformers import AutoTokenizer

from contract.catalog import CHAT_MODEL
from tests.integration.conftest import Stack
from tests.integration.helpers import (
    SHARING,
    api,
    cancel_stopped_its_generation,
    engines,
    longest_generation,
    submit,
)
from tests.models import shared_checkpoints
from tests.processes import wait_until

pytestmark = pytest.mark.integration

MODEL = "tiny-gpt2"
# Where a test needs generations that last (a first chunk before the end, a request joining others),
# it runs them on SmolLM2 with its end-of-text tokens banned: tiny-gpt2 makes 200 tokens in well under
# a second, which a loaded machine's latency outlasts, and the banned end makes every answer run to
# max_tokens.
SLOW_MODEL = CHAT_MODEL
LONG_TOKENS = 96  # the long answers
JOIN_MARGIN_TOKENS = 64  # the short one (4 tokens) must have joined with at least this much still to come
JOIN_ATTEMPTS = 5  # runs of the three long ones, until one shows the join
OpenAI = openai.OpenAI


@pytest.fixture(scope="module")
def client(stack: Stack) -> OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=60)


def job_view(stack: Stack, job_id: str) -> dict[str, Any]:
    view: dict[str, Any] = api(stack).get(f"/results/{job_id}").json()
    return view


def job_id_of(chunk_id: str) -> str:
    return chunk_id.split("-", 1)[1]


def stream_chat(client: OpenAI, prompt: str, model: str = MODEL, **options: Any) -> Iterator[Any]:
    return iter(
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], stream=True, **options
        )
    )


@cache
def endless() -> dict[str, int]:
    """A logit_bias that bans SLOW_MODEL's end-of-text tokens: its answers run to max_tokens."""
    tokenizer = AutoTokenizer.from_pretrained(Path(shared_checkpoints()) / SLOW_MODEL)
    ends = {tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])}
    return {str(token): -100 for token in ends if token is not None}


def text_of(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_chunks_arrive_while_the_model_still_generates(client: OpenAI, stack: Stack):
    stream = stream_chat(
        client, "The three laws of batching", SLOW_MODEL, max_tokens=48, temperature=0.9, seed=7,
        logit_bias=endless(),
    )  # fmt: skip
    first = next(stream)
    status_at_first_chunk = job_view(stack, job_id_of(first.id))["status"]
    chunks = [first, *stream]

    assert status_at_first_chunk == "RUNNING"  # the first text came before the generation ended
    assert first.choices[0].delta.role == "assistant"
    with_text = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(with_text) > 1
    view = job_view(stack, job_id_of(first.id))
    assert view["status"] == "COMPLETED"
    assert text_of(chunks) == view["result"]["text"]  # the stream is exactly the job's result
    assert chunks[-1].choices[0].finish_reason == view["result"]["finish_reason"]


def test_sixteen_concurrent_streams_each_get_their_own_text(client: OpenAI, stack: Stack):
    def one(i: int) -> tuple[str, str]:
        chunks = list(stream_chat(client, f"Prompt number {i}: the queue holds", max_tokens=24))
        return job_id_of(chunks[0].id), text_of(chunks)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))

    assert len({job for job, _ in results}) == 16
    for job, text in results:
        view = job_view(stack, job)
        assert view["status"] == "COMPLETED"
        assert text == view["result"]["text"]


def join_while_long_ones_generate(
    client: OpenAI, stack: Stack
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Three long generations, then a short one sent as soon as each long one has begun: the views."""
    # Greedy: the same text every run, and these prompts run to max_tokens (no end of text by chance).
    long_streams = [
        stream_chat(
            client,
            f"A long story {i}",
            SLOW_MODEL,
            max_tokens=LONG_TOKENS,
            temperature=0,
            logit_bias=endless(),
        )
        for i in range(3)
    ]
    long_jobs = [job_id_of(next(s).id) for s in long_streams]  # each has begun generating
    short_chunks = list(stream_chat(client, "Short", SLOW_MODEL, max_tokens=4))
    short = job_view(stack, job_id_of(short_chunks[0].id))
    for stream in long_streams:
        for _ in stream:
            pass
    return short, [job_view(stack, job) for job in long_jobs]


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp() * 1000


def tokens_left_when_joined(short: dict[str, Any], longs: list[dict[str, Any]]) -> float:
    """How many tokens the long generation nearest its end still had to make when the short one started
    running, each long one's pace read from its own timings: the platform's timestamps, not the test's."""
    started = _ms(short["createdAt"]) + short["timings"]["queueMs"]
    return min((_ms(v["completedAt"]) - started) / (v["timings"]["inferMs"] / LONG_TOKENS) for v in longs)


def test_a_request_that_joins_while_others_generate_finishes_before_them(client: OpenAI, stack: Stack):
    # The long ones take well under a second on this CPU: a stall of the loaded 2-core machine between
    # them and the short one can let the short one start with only a token or two of theirs to go (or
    # none), and such a run shows nothing about joining. It is run again, a few times at most, until the
    # short one started with JOIN_MARGIN_TOKENS of every long one still to come; then it must end first.
    for _ in range(JOIN_ATTEMPTS):
        short, longs = join_while_long_ones_generate(client, stack)
        if tokens_left_when_joined(short, longs) >= JOIN_MARGIN_TOKENS:
            break
    assert [v["result"]["finish_reason"] for v in longs] == ["length"] * 3
    left = tokens_left_when_joined(short, longs)
    assert left >= JOIN_MARGIN_TOKENS, f"no run joined early enough to show anything ({left:.1f} tokens left)"
    # The platform's own timestamps: started while the long ones ran, done before any of them.
    assert all(short["completedAt"] < v["completedAt"] for v in longs), (short, longs)


def test_a_client_that_leaves_cancels_its_generation(client: OpenAI, stack: Stack):
    client.completions.create(model=MODEL, prompt="warm", max_tokens=2)  # a warm engine
    longest = longest_generation(stack, MODEL)
    # Greedy from one prompt, SHARING at once: see cancel_stopped_its_generation.
    options: dict[str, Any] = {"model": MODEL, "prompt": "Go on", "max_tokens": longest, "temperature": 0}
    for _attempt in range(3):
        before = engines(stack, MODEL)
        with ThreadPoolExecutor(SHARING - 1) as pool:
            others = [pool.submit(client.completions.create, **options) for _ in range(SHARING - 1)]
            with client.completions.create(stream=True, **options) as stream:
                job = job_id_of(next(iter(stream)).id)  # and the client leaves at once
            finished = [other.result().choices[0].finish_reason for other in others]
        assert finished == ["length"] * (SHARING - 1)
        wait_until(lambda job=job: job_view(stack, job)["status"] != "RUNNING", 20, "the job to end")
        if cancel_stopped_its_generation(stack, MODEL, before, longest=longest):
            view = job_view(stack, job)
            assert (view["status"], view["error"]["code"]) == ("CANCELLED", "cancelled")
            return
    pytest.fail("the generation finished before its client left, three times over")


def test_the_same_seed_gives_the_same_text_while_others_run(client: OpenAI):
    noise = threading.Thread(
        target=lambda: list(stream_chat(client, "Background", max_tokens=60, temperature=1.0)), daemon=True
    )
    noise.start()
    options = {"max_tokens": 20, "temperature": 0.8, "seed": 1234}
    first = text_of(list(stream_chat(client, "Seeded", **options)))
    second = text_of(list(stream_chat(client, "Seeded", **options)))
    noise.join(60)

    assert first == second and first != ""


def test_stop_ends_the_text_before_the_stop_string(client: OpenAI):
    full = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=30, temperature=0)
    text = full.choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), f"the greedy text has no middle to stop at: {text!r}"

    stopped = client.completions.create(
        model=MODEL, prompt="The quick brown fox", max_tokens=30, temperature=0, stop=[stop]
    )

    assert stopped.choices[0].text == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_max_tokens_past_the_models_context_is_a_400_saying_the_limit(client: OpenAI):
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt="The three", max_tokens=4000)
    assert "limit of 255" in str(refused.value)
    with pytest.raises(openai.BadRequestError):
        list(stream_chat(client, "The three", max_tokens=4000))


def sse_events(stack: Stack, job_id: str, last_event_id: str | None = None) -> list[dict[str, str]]:
    headers = {"x-api-key": stack.api_key, "Accept": "text/event-stream"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    request = urllib.request.Request(f"{stack.api}/results/{job_id}/stream", headers=headers)
    events: list[dict[str, str]] = []
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        current: dict[str, str] = {}
        for raw in response:
            line = raw.decode().rstrip("\n")
            if not line:
                events.append(current)
                current = {}
                continue
            name, _, value = line.partition(": ")
            current[name] = value
    return events


def test_an_async_jobs_tokens_stream_over_sse_and_resume_after_an_event(stack: Stack):
    job = submit(api(stack), "Tokens go in", model=MODEL, parameters={"max_tokens": 30})

    events = sse_events(stack, job)

    deltas = [e for e in events if e["event"] == "delta"]
    assert events[-1]["event"] == "end"
    end = json.loads(events[-1]["data"])
    assert end["status"] == "COMPLETED"
    assert "".join(json.loads(e["data"])["text"] for e in deltas) == end["result"]["text"]
    if len(deltas) > 1:
        resumed = sse_events(stack, job, last_event_id=deltas[0]["id"])
        assert [e.get("id") for e in resumed[:-1]] == [e["id"] for e in deltas[1:]]


@pytest.mark.parametrize(
    "unknown", ["99999999999999999999-0", "18446744073709551615-0"], ids=["past 64-bit ids", "never sent"]
)
def test_an_id_the_stream_never_sent_restarts_it_from_the_beginning(stack: Stack, unknown: str):
    """An SSE client that got no event for its Last-Event-ID would reconnect with it for ever."""
    # Greedy: the same text every run. Sampled, tiny-gpt2's random weights (512 tokens) end the answer at
    # once now and then, with no text for the test to compare.
    job = submit(api(stack), "Start again", model=MODEL, parameters={"max_tokens": 30, "temperature": 0})

    while_running = sse_events(stack, job, last_event_id=unknown)  # the job is queued or running
    once_final = sse_events(stack, job, last_event_id=unknown)

    end = json.loads(while_running[-1]["data"])
    assert (while_running[-1]["event"], end["status"]) == ("end", "COMPLETED")
    assert end["result"]["text"]
    deltas = [json.loads(e["data"])["text"] for e in while_running if e["event"] == "delta"]
    assert "".join(deltas) == end["result"]["text"]
    assert [e.get("id") for e in once_final] == [e.get("id") for e in sse_events(stack, job)]
