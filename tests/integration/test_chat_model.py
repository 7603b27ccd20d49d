"""The default chat model (SmolLM2-135M-Instruct, real weights) through the official `openai` client on the
local stack: answers that mean something, a conversation it keeps, the end of its turn, and streamed text
that never splits a character."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from contract.catalog import CHAT_MODEL
from contract.catalog_build import catalog_of
from contract.settings import Settings
from openai_api.completions import prompt_of
from openai_api.prompt_tokens import count_tokens
from openai_api.schemas import ChatCompletionRequest
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack

# The model's answers, not the store's flavour, are under test: plain Redis only (the job path runs on
# both elsewhere).
pytestmark = [
    pytest.mark.integration,
    PLAIN_REDIS_ONLY,
]

# Greedy answers of this checkpoint (as transformers' own generate gives them), and a word each must hold.
FACTS = (
    ("What is the capital of France? Answer in one sentence.", "Paris"),
    ("How many days are in a week?", "7"),
    ("What is the chemical symbol for water?", "H2O"),
)


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=120)


def ask(client: openai.OpenAI, messages: list[Any], max_tokens: int = 64, **extra: Any) -> Any:
    return client.chat.completions.create(
        model=CHAT_MODEL, messages=messages, temperature=0, max_tokens=max_tokens, **extra
    )


def test_the_chat_model_is_listed(client: openai.OpenAI) -> None:
    assert CHAT_MODEL in [m.id for m in client.models.list()]


@pytest.mark.parametrize(("question", "word"), FACTS)
def test_a_factual_question_gets_the_right_answer_ending_at_its_turn(
    client: openai.OpenAI, question: str, word: str
) -> None:
    reply = ask(client, [{"role": "user", "content": question}])
    choice = reply.choices[0]
    assert word in (choice.message.content or ""), choice.message.content
    assert choice.finish_reason == "stop", "the answer ends at the model's end-of-turn token"
    assert "<|im_end|>" not in (choice.message.content or "")
    assert reply.usage is not None and 0 < reply.usage.completion_tokens < 64


def test_a_second_turn_refers_to_the_first(client: openai.OpenAI) -> None:
    first = [{"role": "user", "content": "Tell me one fact about elephants."}]
    said = ask(client, first).choices[0].message.content or ""
    assert "elephant" in said.lower(), said
    question = {"role": "user", "content": "Which animal did you just tell me about?"}
    answer = ask(client, [*first, {"role": "assistant", "content": said}, question])
    assert "elephant" in (answer.choices[0].message.content or "").lower(), answer
    alone = ask(client, [question]).choices[0].message.content or ""
    assert "elephant" not in alone.lower(), "the animal comes from the conversation, not the question"


def test_streamed_deltas_never_split_a_character(client: openai.OpenAI) -> None:
    # Answered in kana: characters of three bytes, which the byte-level tokenizer splits across tokens.
    question = [{"role": "user", "content": "How do you write 'thank you' in Japanese?"}]
    stream = ask(client, question, stream=True, max_tokens=48)
    deltas = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    text = "".join(deltas)
    assert any(ord(c) > 0x7FF for c in text), f"no character of three bytes, the test proves nothing: {text}"
    assert all("\ufffd" not in delta for delta in deltas), deltas
    assert text == ask(client, question, max_tokens=48).choices[0].message.content


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "Hi"}],
        [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "naïve café — 東京?"},
        ],
    ],
)
def test_the_front_door_counts_a_chats_tokens_as_the_engine_does(
    stack: Stack, client: openai.OpenAI, messages: list[Any]
) -> None:
    """The count that refuses an overlong prompt before it is queued (openai_api/prompt_tokens.py) is
    the one the engine reports once it has run the prompt."""
    settings = Settings(
        models=(CHAT_MODEL,),
        model_repository=Path(stack.env["SYNAPSE_MODEL_REPOSITORY"]),
        checkpoint_dir=Path(stack.env["SYNAPSE_CHECKPOINT_DIR"]),
    )
    catalog = catalog_of(settings)
    tokenizer = catalog[CHAT_MODEL].tokenizer
    assert tokenizer is not None and Path(tokenizer).is_file(), tokenizer
    prompt = prompt_of(ChatCompletionRequest(model=CHAT_MODEL, messages=messages), catalog)
    reply = ask(client, messages, max_tokens=1)
    assert reply.usage is not None
    assert count_tokens(tokenizer, prompt) == reply.usage.prompt_tokens
