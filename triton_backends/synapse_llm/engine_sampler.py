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

What HF CB cannot carry per request lives in a `Row` the model registers under the request's id
(`SeededSampling.rows`), and only rows that have one pay for it:

- log-probabilities of the raw logits (before any of the transforms below, as vLLM reports by default):
  the chosen token's and the k likeliest, recorded in the row as each token is chosen;
- `logit_bias` added to the logits, then presence and frequency penalties on the tokens the row has
  generated (OpenAI's and vLLM's definitions);
- structured output: an llguidance matcher (the row's JSON schema, compiled) masks every token the
  grammar does not allow, and consumes the chosen one; other rows of the batch are untouched.

The batch's parameters are kept on the processor between `prepare_tensor_args` and `__call__` (the draws
also travel as its tensor argument), which holds because the engine runs one step at a time: the model
turns off HF's asynchronous double-buffering and CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from engine_rules import uniform_draw

SEED_KWARG = "draw_seed"  # the request's seed, or GREEDY
GREEDY = -1
KWARGS: dict[str, type] = {SEED_KWARG: int, "temperature": float, "top_k": int, "top_p": float}


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """A generated token's log-probability and the likeliest tokens' at its position (ids, logprobs)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(slots=True)
class Row:
    """One sequence's state beyond HF's: what it asked for, what it generated, what was recorded."""

    logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    matcher: Any = None  # an llguidance LLMatcher, or None
    counts: dict[int, int] = field(default_factory=dict)  # tokens generated so far, when penalised
    recorded: list[TokenLogprobs] = field(default_factory=list)  # one per generated token, when asked
    grammar_error: str = ""  # the matcher refused a token: the model ends the request with this

    @property
    def penalised(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty)


class SeededSampling:
    """The processor's methods; `install` mixes them into HF's processor base class (imported there, so
    this module loads with torch alone)."""

    supported_kwargs: dict[str, type] = KWARGS
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._states: list[Row | None] = []
        self.rows: dict[str, Row] = {}  # by request id; the model adds and removes them
        self.bitmask: Any = None  # llguidance's helpers, set by the model with its tokenizer

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        int32_tensor.copy_(torch.full_like(int32_tensor, -1.0, dtype=torch.float32).view(torch.int32))

    def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> torch.Tensor:
        draws, temperatures, top_ks, top_ps = [], [], [], []
        self._states = [self.rows.get(future.state.request_id) for future in requests_with_new_token]
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
        special = [(i, row) for i, row in enumerate(self._states) if row is not None]
        if special:
            head = head.float().clone()
            raw = self._log_probabilities(head, special)
            self._constrain(head, special)
        tokens = choose_tokens(head, draws, temperatures, top_ks, top_ps)
        if special:
            self._record(tokens, special, raw)
        picked = only_token(head, tokens)
        return picked if rows == scores.size(0) else torch.cat([picked, scores[rows:]])

    def _log_probabilities(
        self, head: torch.Tensor, special: list[tuple[int, Row]]
    ) -> dict[int, torch.Tensor]:
        """log_softmax of the raw logits of the rows that asked for log-probabilities, by row."""
        asking = [i for i, row in special if row.logprobs is not None]
        if not asking:
            return {}
        values = torch.log_softmax(head[asking], dim=-1)
        return {i: values[j] for j, i in enumerate(asking)}

    def _constrain(self, head: torch.Tensor, special: list[tuple[int, Row]]) -> None:
        for i, row in special:
            if row.logit_bias:
                ids = torch.tensor([token for token, _ in row.logit_bias], device=head.device)
                bias = torch.tensor([b for _, b in row.logit_bias], device=head.device, dtype=head.dtype)
                head[i].index_add_(0, ids, bias)
            if row.penalised and row.counts:
                ids = torch.tensor(list(row.counts), device=head.device)
                counts = torch.tensor(list(row.counts.values()), device=head.device, dtype=head.dtype)
                head[i].index_add_(0, ids, -(row.presence_penalty + row.frequency_penalty * counts))
        constrained = [(i, row) for i, row in special if row.matcher is not None]
        if constrained:
            allocate, fill = self.bitmask
            masks = allocate(len(constrained), head.size(-1))
            for j, (_, row) in enumerate(constrained):
                fill(row.matcher, masks, j)
            allowed = allowed_tokens(masks, head.size(-1)).to(head.device)
            ids = [i for i, _ in constrained]
            head[ids] = head[ids].masked_fill(~allowed, float("-inf"))

    def _record(
        self, tokens: torch.Tensor, special: list[tuple[int, Row]], raw: dict[int, torch.Tensor]
    ) -> None:
        chosen = tokens.tolist()
        for i, row in special:
            token = int(chosen[i])
            if row.penalised:
                row.counts[token] = row.counts.get(token, 0) + 1
            if row.matcher is not None and not row.grammar_error and not row.matcher.consume_token(token):
                row.grammar_error = row.matcher.get_error() or f"the grammar refused token {token}"
            if i in raw:
                values = raw[i]
                top = values.topk(row.logprobs).indices.tolist() if row.logprobs else []
                pairs = tuple((int(t), float(values[t])) for t in top)
                row.recorded.append(TokenLogprobs(token, float(values[token]), pairs))


def allowed_tokens(masks: Any, vocab: int) -> torch.Tensor:
    """llguidance's bitmask (int32 words, token t at bit t % 32 of word t // 32) as booleans per token."""
    bits = np.unpackbits(np.ascontiguousarray(masks).view(np.uint8), axis=-1, bitorder="little")
    return torch.from_numpy(bits[:, :vocab].astype(bool))


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


def install(manager: Any, rows: dict[str, Row], bitmask: Any) -> SeededSampling:
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
    instance = sampler()
    instance.rows, instance.bitmask = rows, bitmask
    processors.logits_processor.append(instance)
    processors.tensors_required += 1
    processors.supported_keys.update(KWARGS)
    processors.do_processing = True
    return instance
