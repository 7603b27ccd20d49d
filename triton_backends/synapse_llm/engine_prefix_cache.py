"""What the engine's prefix cache does, as metrics: tokens of prompts looked up and found, blocks
holding live sequences, blocks kept only for later prompts, and blocks evicted.

The cache itself is Hugging Face's (continuous batching's block sharing): a prompt's complete KV blocks
are registered by a hash chained over their tokens, and a later prompt that starts with the same
tokens shares them instead of computing them again. Blocks no sequence uses stay cached in the order
they were last released; when live sequences need the room, HF evicts all of them before it would
delay or offload a running request. HF keeps no counts of any of this, so the engine wraps the two
calls that do it, on each cache it builds (a rebuilt engine has a new one).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from engine_stream import Metrics

SEEN_REQUESTS = 4096  # request ids remembered, so a prompt looked up again while it waits counts once


class PrefixCacheMeter:
    """Counts the prefix cache's lookups, hits and evictions, and publishes its block gauges."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._cache: Any = None
        self._seen: OrderedDict[str, bool] = OrderedDict()  # request id: whether it has hit yet

    def watch(self, manager: Any) -> None:
        """Wraps the manager's cache once it exists (the generation thread builds it), and publishes the
        blocks in use and cached now. Called from the dispatcher's periodic check."""
        cache = getattr(getattr(manager, "batch_processor", None), "cache", None)
        if cache is None:
            return
        if cache is not self._cache:
            self._cache = cache
            self._wrap(cache)
        allocators = cache.cache_allocators.values()
        cached = {a: len(a.ledger.cached_blocks) for a in allocators}
        capacity = cache.num_sectors * cache.bytes_per_sector
        cached_share = sum(n * a.bytes_per_block for a, n in cached.items()) / capacity
        # HF counts cached blocks as taken; the share that live sequences hold is the rest
        live = 1.0 - float(cache.compute_free_capacity(relative=True)) - cached_share
        self.metrics.set("synapse_engine_kv_cache_usage", round(max(live, 0.0), 3))
        self.metrics.set("synapse_engine_kv_blocks_cached", sum(cached.values()))

    def _wrap(self, cache: Any) -> None:
        search, evict = cache.search_prefix_match, cache.evict_cached_blocks

        def search_prefix_match(request_id: str, prompt_ids: list[int]) -> int:
            hit = int(search(request_id, prompt_ids))
            self.looked_up(request_id, len(prompt_ids), hit)
            return hit

        def evict_cached_blocks() -> bool:
            cached = sum(len(a.ledger.cached_blocks) for a in cache.cache_allocators.values())
            evicted = bool(evict())
            left = sum(len(a.ledger.cached_blocks) for a in cache.cache_allocators.values())
            self.metrics.add("synapse_engine_prefix_cache_evicted_blocks_total", cached - left)
            return evicted

        cache.search_prefix_match = search_prefix_match
        cache.evict_cached_blocks = evict_cached_blocks

    def looked_up(self, request_id: str, prompt_tokens: int, hit_tokens: int) -> None:
        """One lookup of a waiting prompt. The scheduler looks a prompt up again at each step while it
        waits for room; only its first lookup counts as a query, and its first hit as its hit."""
        hit_before = self._seen.get(request_id)
        if hit_before is None:
            self._seen[request_id] = False
            while len(self._seen) > SEEN_REQUESTS:
                self._seen.popitem(last=False)
            self.metrics.add("synapse_engine_prefix_cache_queries_tokens_total", prompt_tokens)
        if hit_tokens and not hit_before:
            self._seen[request_id] = True
            self.metrics.add("synapse_engine_prefix_cache_hits_tokens_total", hit_tokens)
