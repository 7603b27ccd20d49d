"""A prompt's length in its model's own tokens, counted before anything is queued.

The engine refuses a prompt that, with its max_tokens, is over the model's context; found there, after
the submit, it is a FAILED job the tenant is counted for, and a 400 `model_error` carrying a jobId
(issue 41: 3,000 chat messages to tiny-gpt2). So the front door counts first, with the tokenizer the
engine itself is built from (the checkpoint's `tokenizer.json`, which the catalog names: the Rust
`tokenizers` library, the backend of transformers' fast tokenizers, so both count the same tokens), and
refuses with OpenAI's `context_length_exceeded`. The rule is the engine's
(`contract.engine_limits.context_overflow`). Where the catalog names no tokenizer (the AWS Lambda,
which carries no checkpoint), or names one a worker has not built yet (a first `make up`), the engine
alone counts, as before.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from contract.catalog import Catalog
from contract.engine_limits import context_overflow
from openai_api.errors import Problem

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

TOKENIZERS_KEPT = 8  # served generative models whose tokenizer a process keeps loaded


@lru_cache(maxsize=TOKENIZERS_KEPT)
def tokenizer_at(path: str) -> Tokenizer | None:
    """The tokenizer saved at `path`, as transformers calls it for the engine: no truncation or padding
    (a tokenizer.json may carry either); None, said once, when it cannot be read."""
    from tokenizers import Tokenizer  # only where a catalog names a tokenizer: not in the Lambda

    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # the library raises bare Exceptions (a newer format, a broken file)
        log.warning("cannot read the tokenizer %s (%s): the engine alone counts its prompts", path, exc)
        return None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(tokenizer_file: str, prompt: str) -> int | None:
    """The prompt's tokens as the engine counts them (special tokens added as its tokenizer adds them);
    None while the file is not there (looked at again next time; once loaded, kept) or cannot be read."""
    if not Path(tokenizer_file).is_file():
        return None
    tokenizer = tokenizer_at(tokenizer_file)
    return None if tokenizer is None else len(tokenizer.encode(prompt).ids)


def context_problem(model: str, prompt: str, max_tokens: int, catalog: Catalog, param: str) -> Problem | None:
    """A 400 when the prompt is empty in tokens, or it and max_tokens are over the model's context;
    None when they fit, or when nothing here can count them."""
    served = catalog.get(model)
    if served is None or not served.generates or served.tokenizer is None or served.max_model_len is None:
        return None
    prompt_tokens = count_tokens(served.tokenizer, prompt)
    if prompt_tokens is None:
        return None
    if prompt_tokens == 0:
        return Problem(
            400, "empty_prompt", f"the {param} holds no token: {model} needs one at least", param=param
        )
    overflow = context_overflow(prompt_tokens, max_tokens, served.max_model_len)
    if overflow is None:
        return None
    message = f"{model}: {overflow}; send a shorter prompt or ask for fewer tokens"
    return Problem(400, "context_length_exceeded", message, param=param)
