"""A request's progress and its responses, pure as engine_rules.py is (no Triton, no torch), for unit tests.

- `read_options`: how a request wants its responses (Triton's vLLM backend's inputs besides the prompt).
- `Generation`: one choice's answer as the engine's cumulative outputs come in: incremental
  detokenisation (`Detokenizer`), stop strings held back until they cannot start (`StopMatcher`), token
  counts and the finish reason.
- `response_outputs`: a response's output tensors, named and typed as Triton's vLLM backend's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from engine_rules import RequestError

OPTIONAL_OUTPUTS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
REPLACEMENT = "\ufffd"  # what decoding an incomplete UTF-8 sequence ends with


# ------------------------------------------------------------------ options --------------------------


@dataclass(frozen=True, slots=True)
class Options:
    """How a request wants its responses (vLLM backend's inputs besides the prompt)."""

    stream: bool = False
    prepend_prompt: bool = True
    return_finish_reason: bool = False
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False


def read_options(
    stream: bool | None, exclude_input_in_output: bool | None, returns: Mapping[str, bool | None]
) -> Options:
    """vLLM backend's rules: the prompt is prepended to a non-streamed answer unless the request
    excludes it; a streamed answer never repeats the prompt, and asking for it is refused."""
    streaming = bool(stream)
    prepend = not streaming if exclude_input_in_output is None else not exclude_input_in_output
    if prepend and streaming:
        raise RequestError("exclude_input_in_output false is not allowed when streaming")
    flags = {name: bool(returns.get(name)) for name in OPTIONAL_OUTPUTS}
    return Options(stream=streaming, prepend_prompt=prepend, **flags)


# ------------------------------------------------------------------ generation -----------------------


class Detokenizer:
    """Text of a growing token sequence, piece by piece: the pieces joined equal the decode of all the
    tokens. A piece ending in an incomplete UTF-8 character is held back until the character completes
    (or the sequence ends). Each step decodes a short window, not the whole sequence."""

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._tokens: list[int] = []
        self._prefix = 0  # the window starts here: a boundary where the text so far was complete
        self._read = 0  # tokens up to here have been turned into text

    def feed(self, tokens: Sequence[int]) -> str:
        self._tokens.extend(tokens)
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        self._prefix, self._read = self._read, len(self._tokens)
        return after[len(before) :]

    def flush(self) -> str:
        """The end of the sequence: what was held back, incomplete characters and all."""
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        self._prefix = self._read = len(self._tokens)
        return after[len(before) :]


class StopMatcher:
    """Cuts the text before the first stop string (excluded, as OpenAI does) and holds back any tail
    that could still become one, so streamed text never has to be taken back."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Text that is final; after a stop string, nothing more."""
        if self.stopped or not self._stops:
            return "" if self.stopped else text
        pending = self._held + text
        cut = min((i for i in (pending.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return pending[:cut]
        keep = self._longest_open_tail(pending)
        self._held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """The end of the text: a held-back tail that never became a stop string is final after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_open_tail(self, text: str) -> int:
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[len(text) - size :]):
                    longest = size
                    break
        return longest


@dataclass(slots=True)
class Step:
    """What one engine output adds to a request's answer."""

    text: str = ""
    tokens: int = 0  # generated tokens this step accounts for (EOS included)
    finish_reason: str | None = None  # "stop" or "length" once the request is over


@dataclass(slots=True)
class Generation:
    """One request's answer as the engine's cumulative outputs come in.

    Tokens are counted as the engine generated them, EOS included (as vLLM counts it); text is the
    decode of the tokens before EOS, special tokens skipped. A stop string ends the answer at the token
    that completed it: tokens after it (the engine may run a step before it drops the request) are
    neither counted nor decoded.
    """

    decode: Callable[[Sequence[int]], str]
    stops: tuple[str, ...]
    eos_ids: frozenset[int]
    max_tokens: int
    consumed: int = 0
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    _detokenizer: Detokenizer = field(init=False)
    _matcher: StopMatcher = field(init=False)

    def __post_init__(self) -> None:
        self._detokenizer = Detokenizer(self.decode)
        self._matcher = StopMatcher(self.stops)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def advance(self, generated: Sequence[int], engine_finished: bool) -> Step:
        """`generated`: every token the engine generated so far for this request."""
        step = Step()
        if self.finished:
            return step
        for token in generated[self.consumed :]:
            self.consumed += 1
            step.tokens += 1
            if token in self.eos_ids:
                self._finish(step, "stop")
                return step
            step.text += self._matcher.feed(self._detokenizer.feed([token]))
            if self._matcher.stopped:
                self._finish(step, "stop")
                return step
        if engine_finished or self.consumed >= self.max_tokens:
            self._finish(step, "length")
        else:
            self.text.append(step.text)
        return step

    def _finish(self, step: Step, reason: str) -> None:
        if not self._matcher.stopped:
            step.text += self._matcher.feed(self._detokenizer.flush())
        step.text += self._matcher.flush()
        self.text.append(step.text)
        self.finish_reason = step.finish_reason = "stop" if self._matcher.stopped else reason


# ------------------------------------------------------------------ responses ------------------------


@dataclass(frozen=True, slots=True)
class ChoiceStep:
    """What one response says of one choice: its new text (or all of it), its finish reason once it is
    over, the tokens this response accounts for, and their log-probabilities (JSON) when asked for."""

    text: str = ""
    finish_reason: str | None = None
    tokens: int = 0
    logprobs: str = "[]"


def response_outputs(
    options: Options, choices: Sequence[ChoiceStep], num_input_tokens: int, with_logprobs: bool
) -> dict[str, np.ndarray]:
    """One response's outputs, as vLLM's backend builds them, an element per choice: `text_output` always;
    the others only when the matching `return_*` input was true (`logprobs` when the sampling parameters
    asked for them). A choice not finished yet has finish_reason "None" (vLLM sends str(None) there)."""
    outputs = {"text_output": np.array([c.text.encode("utf-8") for c in choices], dtype=np.object_)}
    if options.return_finish_reason:
        reasons = [str(c.finish_reason).encode("utf-8") for c in choices]
        outputs["finish_reason"] = np.array(reasons, dtype=np.object_)
    if options.return_num_input_tokens:
        outputs["num_input_tokens"] = np.array([num_input_tokens], dtype=np.uint32)
    if options.return_num_output_tokens:
        outputs["num_output_tokens"] = np.array([c.tokens for c in choices], dtype=np.uint32)
    if with_logprobs:
        outputs["logprobs"] = np.array([c.logprobs.encode("utf-8") for c in choices], dtype=np.object_)
    return outputs
