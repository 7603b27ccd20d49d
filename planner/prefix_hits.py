"""The prefix-cache hit rate a workload would get: closed-loop clients sending prompts that share a few
long beginnings, routed by the manager's own rule (`SequenceSlots.pick`, prefix-aware or least-loaded)
to workers whose engines cache what they have prefilled.

A worker's cache holds a prefix from the end of the first prefill that computed it (requests that
arrive while it is being computed compute it too, as the engine's block hashes are registered after the
forward pass) until it is evicted, least recently used first, when the prefixes it holds pass its
capacity. A request's prefill takes its uncached tokens at `prefill_tokens_per_s`, then it decodes for
`decode_s`. Hits count in prompt tokens, whole blocks only, as the engine counts them.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from dataclasses import dataclass

from contract.settings import GenerationRouting
from manager.pool import SequenceSlots
from manager.prefix_routing import prefix_key

MODEL = "model"


@dataclass(frozen=True)
class PrefixWorkload:
    prefixes: int  # distinct shared beginnings, each drawn with equal chance
    prefix_tokens: int  # each one's length
    question_tokens: int  # what follows it, different every request
    clients: int
    requests: int
    workers: int
    budget: int = 32  # sequences per worker (max_num_seqs)
    cache_tokens: int = 16_384  # a worker's KV cache
    block: int = 32
    prefill_tokens_per_s: float = 600.0
    decode_s: float = 0.8
    seed: int = 38


def hit_rate(load: PrefixWorkload, routing: GenerationRouting) -> float:
    """Share of the prompt tokens the workers' caches would hold when each request arrives."""
    draw = random.Random(load.seed)
    workers = [f"worker-{n}" for n in range(load.workers)]
    keys = [prefix_key(f"prefix {p} of the simulated workload") for p in range(load.prefixes)]
    shared = load.prefix_tokens // load.block * load.block
    slots = SequenceSlots()
    cached: dict[str, OrderedDict[int, float]] = {w: OrderedDict() for w in workers}  # prefix: ready at
    capacity = max(1, load.cache_tokens // max(1, load.prefix_tokens))  # prefixes a cache holds
    ends: list[tuple[float, int, str]] = []  # (when, request number, worker): one per request in flight
    hits = queried = 0
    sent = 0

    def send(now: float) -> None:
        nonlocal hits, queried, sent
        prefix = draw.randrange(load.prefixes)
        key = keys[prefix] if routing == "prefix" else None
        worker = slots.pick(workers, MODEL, load.budget, key) or min(
            workers, key=lambda w: slots.running(w, MODEL)
        )  # every worker full: the simulated client waits on the least loaded, as the queue would
        slots.acquire(worker, MODEL)
        cache = cached[worker]
        ready = cache.get(prefix)
        hit = shared if ready is not None and ready <= now else 0
        if ready is None:
            cache[prefix] = now + (load.prefix_tokens + load.question_tokens) / load.prefill_tokens_per_s
            while len(cache) > capacity:
                cache.popitem(last=False)
        cache.move_to_end(prefix)
        hits += hit
        queried += load.prefix_tokens + load.question_tokens
        uncached = load.prefix_tokens + load.question_tokens - hit
        heapq.heappush(ends, (now + uncached / load.prefill_tokens_per_s + load.decode_s, sent, worker))
        sent += 1

    for _ in range(min(load.clients, load.requests)):
        send(0.0)
    while ends:
        now, _, worker = heapq.heappop(ends)
        slots.release(worker, MODEL)
        if sent < load.requests:
            send(now)
    return hits / queried if queried else 0.0
