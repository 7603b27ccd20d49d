"""The engine alone: Hugging Face transformers' continuous batching on the benchmark's checkpoint, with
no Triton, no manager, no HTTP: the ceiling the platform's engine path is measured against.

It takes the engine model's own settings (config.pbtxt's block_size, num_blocks, max_batch_tokens,
max_num_seqs), its end of sequence (the tokenizer's and the generation config's, as the engine model
takes them), greedy decoding as the benchmark asks of every path, and the very requests aiperf sent
the platform at the same concurrency, in the order it sent them (its inputs export and per-request
records), turned into prompts as the front door does (with the chat template the worker would
publish for the staged model, else the plain one): the same questions, answered to the same end of
turn. Each concurrency is a closed loop: that many clients, each sending its next request as soon as
its last one ends, with at most max_num_seqs in the engine at once as on the platform. Its own clock
times every request (see bench.llm_figures for the definitions).

Runs in a process of its own, so torch never shares the bench's:
`python -m bench.llm_engine PLAN.json OUT.json`, the plan written by `EnginePlan.write`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.llm_figures import (
    LlmRow,
    Payload,
    RequestTiming,
    row_from_timings,
    sent_in_order,
    sent_payloads,
)
from bench.model_code import load_model_module
from contract.catalog import ChatTemplate
from openai_api.chat_template import render_with
from openai_api.schemas import ChatMessage
from worker_image.triton_server import PROJECT_BACKENDS

PATH = "engine alone"
RESULT_TIMEOUT_S = 120.0  # no output for this long: the engine is stuck
# The engine model's defaults (triton_models/tiny-gpt2/config.pbtxt) for a parameter its config leaves out.
DEFAULTS = {"max_num_seqs": 32, "max_batch_tokens": 512, "block_size": 32, "num_blocks": 256}
PARAMETER = re.compile(r'key: "(\w+)" value: \{ string_value: "([^"]*)" \}')


def engine_rules() -> Any:
    """The engine's pure rules module (triton_backends/synapse_llm/engine_rules.py), as the engine reads
    its end-of-sequence tokens."""
    return load_model_module(PROJECT_BACKENDS / "synapse_llm", "engine_rules")


def engine_settings(config: Path) -> dict[str, int]:
    """The engine's sizes from a model's config.pbtxt parameters."""
    found = dict(PARAMETER.findall(config.read_text()))
    return {name: int(found.get(name, default)) for name, default in DEFAULTS.items()}


@dataclass(frozen=True)
class Cell:
    concurrency: int
    requests: int  # how many, where the artifacts do not say what aiperf sent (the dataset over again)
    warmup: int
    inputs: str  # an aiperf artifacts folder: its exports hold the requests to send


@dataclass(frozen=True)
class EnginePlan:
    checkpoint: str
    settings: dict[str, int]
    chat_template: ChatTemplate | None  # the model's, as the catalog has it (contract/catalog_build.py)
    cells: tuple[Cell, ...]

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def read(cls, path: Path) -> EnginePlan:
        data = json.loads(path.read_text())
        cells = tuple(Cell(**c) for c in data["cells"])
        template = ChatTemplate(**data["chat_template"]) if data["chat_template"] else None
        return cls(data["checkpoint"], data["settings"], template, cells)


def prompt_ids(tokenizer: Any, template: ChatTemplate | None, payload: Payload) -> list[int]:
    """The prompt as the platform's engine sees it: the chat rendered as the front door renders it."""
    messages = [ChatMessage.model_validate({"role": r, "content": c}) for r, c in payload.messages]
    return list(tokenizer(render_with(template, messages))["input_ids"])


class Engine:
    """One continuous-batching manager over the checkpoint, greedy, sized like the engine model."""

    def __init__(self, checkpoint: str, settings: dict[str, int]) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        model.eval()
        ends = engine_rules().end_ids(self.tokenizer.eos_token_id, model.generation_config.eos_token_id)
        eos = min(ends, default=-1)
        # Greedy, as the engine configures transformers (triton_backends/synapse_llm/engine_lifecycle.py).
        generation = GenerationConfig(
            do_sample=False, max_new_tokens=16, eos_token_id=eos, pad_token_id=max(eos, 0)
        )
        batching = ContinuousBatchingConfig(
            page_size=settings["block_size"],
            num_blocks=settings["num_blocks"],
            max_batch_tokens=settings["max_batch_tokens"],
            max_requests_per_batch=settings["max_num_seqs"],
            allow_block_sharing=False,
            use_async_batching=False,
            use_cuda_graph=False,
        )
        self.manager = model.init_continuous_batching(generation, batching)
        self.manager.start()
        self.max_num_seqs = settings["max_num_seqs"]
        self._ids = itertools.count()

    def send(self, ids: list[int], max_tokens: int) -> str:
        rid = f"bench-{next(self._ids)}"
        added = self.manager.add_request(ids, request_id=rid, max_new_tokens=max_tokens, streaming=True)
        if added is None:
            raise RuntimeError("the engine refused a request (its generation thread has stopped)")
        return rid

    def closed_loop(self, requests: Iterator[tuple[list[int], int]], concurrency: int, count: int) -> tuple[
        list[RequestTiming], int, float
    ]:  # fmt: skip
        """`count` requests from `concurrency` clients, each sending its next one when its last ends: the
        answered ones' timings, the failures, and the cores this process used meanwhile (every thread)."""
        cpu, wall = time.process_time(), time.perf_counter()
        loop = ClosedLoop(self, requests, count)
        for _ in range(min(concurrency, count)):
            loop.client_sends()
        loop.admit()
        while loop.in_engine:
            out = self.manager.get_result(timeout=RESULT_TIMEOUT_S)
            if out is None:
                raise RuntimeError(f"no output from the engine for {RESULT_TIMEOUT_S:.0f} s")
            loop.received(out, time.perf_counter())
        return loop.done, loop.errors, (time.process_time() - cpu) / (time.perf_counter() - wall)

    def close(self) -> None:
        self.manager.stop(block=True, timeout=30)


class ClosedLoop:
    """One closed-loop run's bookkeeping. At most `max_num_seqs` requests are in the engine at once, as
    the manager holds the platform's engine to it; the others wait their turn here, and their time to
    first token counts the wait, as the platform's does."""

    def __init__(self, engine: Engine, requests: Iterator[tuple[list[int], int]], count: int) -> None:
        self._engine = engine
        self._requests = requests
        self._left = count
        self._waiting: deque[tuple[list[int], int, float]] = deque()
        self.in_engine: dict[str, float] = {}  # request id: when its client sent it
        self._first: dict[str, float] = {}
        self.done: list[RequestTiming] = []
        self.errors = 0

    def client_sends(self) -> None:
        if self._left:
            ids, max_tokens = next(self._requests)
            self._waiting.append((ids, max_tokens, time.perf_counter()))
            self._left -= 1

    def admit(self) -> None:
        while self._waiting and len(self.in_engine) < self._engine.max_num_seqs:
            ids, max_tokens, at = self._waiting.popleft()
            self.in_engine[self._engine.send(ids, max_tokens)] = at

    def received(self, out: Any, now: float) -> None:
        """An output of the engine (a streamed snapshot of one request); a finished request's client
        sends its next one."""
        rid = out.request_id
        if rid not in self.in_engine:
            return
        if out.generated_tokens:
            self._first.setdefault(rid, now)
        if not out.is_finished():
            return
        sent = self.in_engine.pop(rid)
        if out.error is not None or not out.generated_tokens:
            self.errors += 1
        else:
            self.done.append(RequestTiming(sent, self._first[rid], now, len(out.generated_tokens)))
        self.client_sends()
        self.admit()


def requests_of(
    engine: Engine, template: ChatTemplate | None, payloads: Sequence[Payload]
) -> Iterator[tuple[list[int], int]]:
    """The payloads tokenised once, sent in order and over again if the run asks for more."""
    encoded = [(prompt_ids(engine.tokenizer, template, p), p.max_tokens) for p in payloads]
    return itertools.cycle(encoded)


def replay_of(cell: Cell) -> tuple[list[Payload], int]:
    """What to send at this cell and how many: what aiperf sent, in its order, where its records say;
    else its dataset in order, over again, for the cell's count."""
    sent = sent_in_order(Path(cell.inputs))
    return (sent, len(sent)) if sent else (sent_payloads(Path(cell.inputs)), cell.requests)


def run_plan(plan: EnginePlan) -> list[LlmRow]:
    engine = Engine(plan.checkpoint, plan.settings)
    rows = []
    try:
        for cell in plan.cells:
            if cell.warmup:  # the dataset's first requests, as aiperf warms up
                warmup = requests_of(engine, plan.chat_template, sent_payloads(Path(cell.inputs)))
                engine.closed_loop(warmup, min(cell.concurrency, cell.warmup), cell.warmup)
            payloads, count = replay_of(cell)
            requests = requests_of(engine, plan.chat_template, payloads)
            done, errors, cores = engine.closed_loop(requests, cell.concurrency, count)
            rows.append(
                replace(row_from_timings(PATH, cell.concurrency, done, errors), cores={"engine": cores})
            )
    finally:
        engine.close()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_engine", description=__doc__)
    parser.add_argument("plan", type=Path, help="the plan (EnginePlan.write)")
    parser.add_argument("out", type=Path, help="where the rows go (JSON)")
    args = parser.parse_args(argv)
    rows = run_plan(EnginePlan.read(args.plan))
    args.out.write_text(json.dumps([r.to_json() for r in rows], indent=2))


if __name__ == "__main__":
    main()
