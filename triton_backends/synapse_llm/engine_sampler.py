"""Per-request sampling inside Hugging Face's continuous batching: temperature, top-k, top-p and seeds.

HF CB samples the whole batch with one generator and has no per-request seed; a temperature of 0 divides
the logits by zero and kills the generation thread for every request; and its per-request top-k and
top-p processors sort the whole vocabulary for every row at every step, even for rows that asked for
neither (on CPU, for GPT-2 small's 50,257 tokens and 32 rows, two sorts cost more than the forward pass).
So the engine decodes greedily (`do_sample=False`) and this processor, its only one, picks each row's
token itself and leaves only that token possible:

- greedy rows take the argmax, and a batch of greedy rows costs one argmax;
- sampled rows are scaled by their temperature, cut to their top-k (one `topk` for the rows that ask)
  and top-p (a sort of those rows only), and drawn by inverse CDF at one number u in [0, 1):
  `uniform_draw(seed, position)` (engine_rules.py), a hash of the request's seed and the token's
  position, so the same seed gives the same text in any batch. Requests without a seed get a random one.

The batch's parameters are kept on the processor between `prepare_tensor_args` and `__call__` (the draws
also travel as its tensor argument), which holds because the engine runs one step at a time: the model
turns off HF's asynchronous double-buffering and CUDA graphs.
"""

from __future__ import annotations

from typing import Any

import torch
from engine_rules import uniform_draw

SEED_KWARG = "draw_seed"  # the request's seed, or GREEDY
GREEDY = -1
KWARGS: dict[str, type] = {SEED_KWARG: int, "temperature": float, "top_k": int, "top_p": float}


class SeededSampling:
    """The processor's methods; `install` mixes them into HF's processor base class (imported there, so
    this module loads with torch alone)."""

    supported_kwargs: dict[str, type] = KWARGS
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        int32_tensor.copy_(torch.full_like(int32_tensor, -1.0, dtype=torch.float32).view(torch.int32))

    def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> torch.Tensor:
        draws, temperatures, top_ks, top_ps = [], [], [], []
        for future in requests_with_new_token:
            state = future.state
            kwargs = state.logit_processor_kwargs
            seed = kwargs.get(SEED_KWARG, GREEDY)
            # prompt + generated stays the same when HF re-queues a request with its tokens as its prompt
            position = len(state.initial_tokens) + len(state.generated_tokens)
            draws.append(-1.0 if seed == GREEDY else uniform_draw(seed, position))
            temperatures.append(kwargs.get("temperature", 1.0))
            top_ks.append(kwargs.get("top_k", 0))
            top_ps.append(kwargs.get("top_p", 1.0))
        self._rows = (torch.tensor(temperatures), torch.tensor(top_ks), torch.tensor(top_ps))
        return torch.tensor(draws, dtype=torch.float32, device="cpu").view(torch.int32)

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        """The first rows are the step's requests with a new token, in order; HF pads `scores` with a
        row per request still in its prefill (a prompt split over steps), which nothing reads."""
        assert self._rows is not None, "sampling before the step was prepared"
        rows = len(self._rows[0])
        assert rows <= scores.size(0), "a step's rows changed before sampling"
        draws = tensor_arg[:rows].view(torch.float32)
        temperatures, top_ks, top_ps = (t.to(scores.device) for t in self._rows)
        head = scores[:rows]
        picked = only_token(head, choose_tokens(head, draws, temperatures, top_ks, top_ps))
        return picked if rows == scores.size(0) else torch.cat([picked, scores[rows:]])


def choose_tokens(
    scores: torch.Tensor,
    draws: torch.Tensor,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor,
    top_ps: torch.Tensor,
) -> torch.Tensor:
    """One token per row: argmax where draws < 0, else sampled at draws[i] from softmax(scores / T)
    restricted to the row's top-k (k <= 0: all) and top-p (1: all)."""
    tokens = scores.argmax(dim=-1)
    sampled = (draws >= 0).nonzero().squeeze(-1)
    if sampled.numel() == 0:
        return tokens
    logits = scores[sampled].float() / temperatures[sampled].unsqueeze(-1)
    logits = _top_k(logits, top_ks[sampled])
    logits = _top_p(logits, top_ps[sampled])
    tokens[sampled] = inverse_cdf(logits, draws[sampled])
    return tokens


def _top_k(logits: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    limited = (ks > 0) & (ks < logits.size(-1))
    if not bool(limited.any()):
        return logits
    widest = int(ks[limited].max())
    kth = logits.topk(widest, dim=-1).values.gather(1, (ks.clamp(1, widest) - 1).unsqueeze(-1))
    threshold = torch.where(limited.unsqueeze(-1), kth, torch.full_like(kth, float("-inf")))
    return logits.masked_fill(logits < threshold, float("-inf"))


def _top_p(logits: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    nucleus = (ps < 1).nonzero().squeeze(-1)
    if nucleus.numel() == 0:
        return logits
    rows = logits[nucleus]
    ordered, order = rows.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    # keep the smallest set of likeliest tokens whose probability reaches p (the first always stays)
    beyond = (probs.cumsum(dim=-1) - probs) >= ps[nucleus].unsqueeze(-1)
    drop = beyond.scatter(1, order, beyond)
    logits = logits.clone()
    logits[nucleus] = rows.masked_fill(drop, float("-inf"))
    return logits


def inverse_cdf(logits: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Row i's token: where the cumulative probability of softmax(logits[i]) first exceeds draws[i]."""
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)
    thresholds = draws.unsqueeze(-1) * cdf[:, -1:]
    crossed = (cdf <= thresholds).sum(dim=-1)
    # u * total can round up to the total itself (about once in 2**24): the likeliest token then
    return torch.where(crossed >= logits.size(-1), logits.argmax(dim=-1), crossed)


def only_token(scores: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Logits under which `tokens` (one per row) is certain, sampled or argmax alike."""
    certain = torch.full_like(scores, float("-inf"))
    return certain.scatter_(1, tokens.unsqueeze(-1), 0.0)


def install(manager: Any) -> None:
    """Makes the sampler the manager's logits processor; call before `start()`, which sizes the
    processors' argument storage. (HF has no public hook for a custom CB processor; these are the
    attributes its processor list reads.)"""
    from transformers.generation.continuous_batching.cb_logits_processors import (
        ContinuousBatchingLogitsProcessor,
    )

    sampler = type("SeededSampler", (SeededSampling, ContinuousBatchingLogitsProcessor), {})
    processors = manager.logit_processor
    if len(processors.logits_processor):
        raise RuntimeError(f"the engine already has logits processors: {processors.logits_processor}")
    processors.logits_processor.append(sampler())
    processors.tensors_required += 1
    processors.supported_keys.update(KWARGS)
    processors.do_processing = True
