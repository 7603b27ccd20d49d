"""Where a generation goes: to the worker most likely to hold its prompt's beginning in its engine's prefix
cache, unless that worker runs too many more of the model's sequences than the least-loaded one.

A prompt's key is a hash of its first `PREFIX_CHARS` characters of rendered text (a system prompt, the
tools, the start of a conversation: what later prompts repeat). Text, not tokens: the manager holds no
tokenizer, and equal text is equal tokens for one model, so the key groups the same prompts the engine's
block hashes would. Each key ranks the workers by rendezvous hashing (highest random weight): every
manager ranks them alike with no shared state, and a worker that leaves takes only its own keys with it.
The first-ranked worker within `load_bound` sequences of the least-loaded one gets the job ("bounded
load", as llm-d's and Ray Serve's prefix-aware routers bound theirs); with no key, the least loaded.
Pure, so the planner's estimate drives the same rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

# About 256 tokens of English: past the chat template's opening and into what makes a prompt's shared
# part its own, short enough that a short question's whole prompt is its key (and spreads evenly).
PREFIX_CHARS = 1024


def prefix_key(prompt: str) -> bytes:
    return hashlib.blake2b(prompt[:PREFIX_CHARS].encode(), digest_size=8).digest()


def load_bound(budget: int) -> int:
    """Sequences a preferred worker may run beyond the least-loaded one: a quarter of a worker's budget
    (8 of SmolLM2's 32), so a hot prefix fills its worker well before the others stand idle."""
    return max(1, budget // 4)


def _weight(key: bytes, worker: str) -> bytes:
    return hashlib.blake2b(key + worker.encode(), digest_size=8).digest()


def choose(
    candidates: Iterable[str], running: Callable[[str], int], budget: int, key: bytes | None,
    fits: Callable[[str], bool] = lambda _: True,
) -> str | None:  # fmt: skip
    """The worker for a job with this key (None: no prefix preference), among those under budget whose
    KV cache has room for it (`fits`)."""
    room = [worker for worker in candidates if running(worker) < budget and fits(worker)]
    if not room:
        return None
    least = min(running(worker) for worker in room)
    if key is None:
        return next(worker for worker in room if running(worker) == least)
    within = [worker for worker in room if running(worker) <= least + load_bound(budget)]
    return max(within, key=lambda worker: _weight(key, worker))
