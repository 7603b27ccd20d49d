"""tiny-gpt2's engine rules (triton_backends/synapse_llm/engine_rules.py and engine_generation.py): request
validation and its messages, stop strings held back across deltas, incremental detokenisation, the
responses' tensors, and the seeded sampler's token choice. Imported from the backend's folder, as Triton
imports them."""

from __future__ import annotations

import json
import random
import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.models import MODELS, model_module

VERSION = MODELS / "tiny-gpt2" / "1"
PARAMETER = re.compile(r'parameters: \{ key: "([^"]+)" value: \{ string_value: "([^"]*)" \} \}')


def load(name: str) -> types.ModuleType:
    return model_module("tiny-gpt2", name)


rules: Any = load("engine_rules")
progress: Any = load("engine_generation")
LIMIT = 256


def refusal(raw: Any) -> str:
    with pytest.raises(rules.RequestError) as caught:
        rules.parse_sampling_parameters(raw if isinstance(raw, str) else json.dumps(raw), LIMIT)
    message = str(caught.value)
    assert message.startswith("invalid request: ")
    return message


# ------------------------------------------------------------------ sampling parameters


@pytest.mark.parametrize("raw", [None, "", "  ", "{}", b"{}", '{"max_tokens": null, "stop": null}'])
def test_missing_parameters_take_vllm_defaults(raw: Any):
    params = rules.parse_sampling_parameters(raw, LIMIT)
    assert params == rules.SamplingParams(max_tokens=16, temperature=1.0, top_p=1.0, top_k=0, seed=None)
    assert not params.greedy


def test_numbers_may_come_as_strings_as_vllm_accepts_them():
    as_numbers = {"max_tokens": 12, "temperature": 0.8, "top_p": 0.9, "top_k": 5, "seed": 42}
    as_strings = {key: str(value) for key, value in as_numbers.items()}
    parsed = rules.parse_sampling_parameters(json.dumps(as_strings), LIMIT)
    assert parsed == rules.parse_sampling_parameters(json.dumps(as_numbers), LIMIT)
    assert (parsed.max_tokens, parsed.temperature, parsed.top_p, parsed.top_k, parsed.seed) == (
        12, 0.8, 0.9, 5, 42,
    )  # fmt: skip
    assert rules.parse_sampling_parameters('{"max_tokens": 12.0}', LIMIT).max_tokens == 12


def test_temperature_zero_is_greedy_and_top_k_minus_one_is_every_token():
    params = rules.parse_sampling_parameters('{"temperature": 0, "top_k": -1}', LIMIT)
    assert params.greedy and params.top_k == 0
    assert rules.parse_sampling_parameters('{"temperature": "1e-6"}', LIMIT).greedy


def test_stop_is_a_string_or_a_list_of_strings():
    assert rules.parse_sampling_parameters('{"stop": "\\n"}', LIMIT).stop == ("\n",)
    assert rules.parse_sampling_parameters('{"stop": ["a", "b", "a"]}', LIMIT).stop == ("a", "b")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("{not json", "sampling_parameters is not JSON"),
        ("[1, 2]", "sampling_parameters must be a JSON object"),
        ({"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
        ({"max_tokens": 256}, "max_tokens 256 is over this model's limit of 255"),
        ({"max_tokens": 1.5}, "max_tokens must be an integer, got 1.5"),
        ({"max_tokens": "many"}, 'max_tokens must be an integer, got "many"'),
        ({"max_tokens": True}, "max_tokens must be an integer, got true"),
        ({"temperature": -0.5}, "temperature must be at least 0, got -0.5"),
        ({"temperature": "hot"}, 'temperature must be a number, got "hot"'),
        ({"top_p": 0}, "top_p must be in (0, 1], got 0.0"),
        ({"top_p": "1.5"}, "top_p must be in (0, 1], got 1.5"),
        ({"top_k": -2}, "top_k must be -1 or 0 (every token) or at least 1, got -2"),
        ({"seed": 2**64}, "seed must fit in 64 bits"),
        ({"stop": [1]}, "stop must be a string or a list of strings"),
        ({"stop": ["ok", ""]}, "stop strings must not be empty"),
        ({"lora_name": "x"}, "unknown sampling parameter 'lora_name'; this model supports max_tokens,"),
        ({"repetition_penalty": 1.5}, "sampling parameter 'repetition_penalty' = 1.5 is not supported"),
        ({"ignore_eos": True}, "sampling parameter 'ignore_eos' = true is not supported"),
        ({"n": 0}, "n must be between 1 and 16, got 0"),
        ({"n": 17}, "n must be between 1 and 16, got 17"),
        ({"logprobs": 21}, "logprobs must be between 0 and 20, got 21"),
        ({"presence_penalty": 2.5}, "presence_penalty must be between -2 and 2, got 2.5"),
        ({"frequency_penalty": "-3"}, "frequency_penalty must be between -2 and 2, got -3.0"),
        ({"logit_bias": [1]}, "logit_bias must be an object of token ids to numbers"),
        ({"logit_bias": {"x": 1}}, 'logit_bias keys must be token ids (integers), got "x"'),
        ({"logit_bias": {"5": 101}}, "logit_bias[5] must be a number in [-100, 100], got 101"),
        ({"structured_outputs": {"regex": "a+"}}, "structured_outputs.regex is not supported"),
        ({"structured_outputs": {}}, "structured_outputs must set exactly one of json, json_object, grammar"),
        ({"structured_outputs": {"grammar": " "}}, "structured_outputs.grammar must be a Lark grammar"),
        (
            {"structured_outputs": {"grammar": {"start": 1}}},
            "structured_outputs.grammar must be a Lark grammar",
        ),
        ({"structured_outputs": {"json": "{no"}}, "structured_outputs.json is not JSON"),
        ({"structured_outputs": {"json": [1]}}, "structured_outputs.json must be a JSON schema (an object)"),
    ],
)
def test_bad_parameters_are_refused_with_a_message_for_the_client(raw: Any, expected: str):
    assert expected in refusal(raw)


def test_vllm_parameters_at_their_neutral_value_are_accepted():
    neutral = {"best_of": 1, "min_p": "0", "repetition_penalty": 1.0, "ignore_eos": False}
    assert rules.parse_sampling_parameters(json.dumps(neutral), LIMIT) == rules.SamplingParams()


def test_prompt_and_max_tokens_must_fit_the_context():
    rules.check_context(12, 244, LIMIT)
    with pytest.raises(rules.RequestError) as over:
        rules.check_context(12, 245, LIMIT)
    assert str(over.value) == (
        "invalid request: max_tokens 245 plus the prompt's 12 tokens is over the model's context "
        "of 256 tokens"
    )
    with pytest.raises(rules.RequestError, match=r"^invalid request: the prompt is empty"):
        rules.check_context(0, 16, LIMIT)


# ------------------------------------------------------------------ request options


@pytest.mark.parametrize(
    ("stream", "exclude", "prepend"),
    [(None, None, True), (False, None, True), (False, True, False), (True, None, False), (True, True, False)],
)
def test_the_prompt_is_prepended_as_vllm_does(stream: bool | None, exclude: bool | None, prepend: bool):
    options = progress.read_options(stream, exclude, {})
    assert (options.stream, options.prepend_prompt) == (bool(stream), prepend)


def test_streaming_with_the_prompt_in_the_output_is_refused():
    with pytest.raises(rules.RequestError, match=r"^invalid request: exclude_input_in_output false"):
        progress.read_options(True, False, {})


def test_optional_outputs_are_asked_for_one_by_one():
    options = progress.read_options(
        True, None, {"return_num_output_tokens": True, "return_finish_reason": None}
    )
    assert options.return_num_output_tokens
    assert not options.return_finish_reason and not options.return_num_input_tokens


# ------------------------------------------------------------------ config.pbtxt


def served_parameters() -> dict[str, dict[str, str]]:
    text = (MODELS / "tiny-gpt2" / "config.pbtxt").read_text()
    return {key: {"string_value": value} for key, value in PARAMETER.findall(text)}


def test_the_served_config_states_every_engine_parameter_at_its_default():
    params = served_parameters()
    # gpu_capable is the worker's placement opt-in (worker_image/placement.py), not the engine's.
    assert params.pop("gpu_capable") == {"string_value": "true"}
    assert set(params) == {"checkpoint", "max_num_seqs", "max_model_len", "max_batch_tokens", "block_size",
                           "num_blocks", "prefix_caching"}  # fmt: skip
    assert rules.EngineSettings.from_parameters(params) == rules.EngineSettings()
    assert rules.EngineSettings.from_parameters({}) == rules.EngineSettings()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"max_num_seqs": "0"}, "max_num_seqs must be a positive integer"),
        ({"num_blocks": "many"}, "num_blocks must be a positive integer"),
        ({"num_blocks": "4", "block_size": "32"}, "cannot hold one context of max_model_len 256"),
        ({"block_size": "2"}, "block_size must be at least 4"),
        ({"prefix_caching": "yes"}, "prefix_caching must be true or false, got 'yes'"),
    ],
)
def test_bad_engine_parameters_stop_the_model_from_loading(changes: dict[str, str], expected: str):
    params = {**served_parameters(), **{k: {"string_value": v} for k, v in changes.items()}}
    with pytest.raises(ValueError, match=re.escape(expected)):
        rules.EngineSettings.from_parameters(params)


def test_a_context_longer_than_the_checkpoint_is_refused_at_load():
    rules.EngineSettings(max_model_len=256).check_model(256)
    with pytest.raises(ValueError, match="max_model_len 1024 is over the checkpoint's 256 positions"):
        rules.EngineSettings(max_model_len=1024).check_model(256)


# ------------------------------------------------------------------ stop strings


def matched(stops: list[str], pieces: list[str]) -> tuple[list[str], bool]:
    matcher = progress.StopMatcher(stops)
    out = [matcher.feed(piece) for piece in pieces]
    return [*out, matcher.flush()], matcher.stopped


def test_a_stop_string_split_across_deltas_is_held_back_then_cut():
    out, stopped = matched(["world"], ["Hello wo", "rl", "d! and more"])
    assert out == ["Hello ", "", "", ""] and stopped


def test_a_held_back_tail_that_never_becomes_a_stop_string_is_released():
    out, stopped = matched(["world"], ["Hello wo", "w", "!"])
    assert "".join(out) == "Hello wow!" and not stopped
    assert out[:2] == ["Hello ", "wo"]  # "wo" + "w": only the last "w" may still start "world"


def test_the_earliest_of_several_stop_strings_wins_and_is_excluded():
    out, stopped = matched(["C", "AB"], ["xxAB", "C"])
    assert "".join(out) == "xx" and stopped


def test_without_stop_strings_text_passes_at_once():
    assert matched([], ["a", "b"]) == (["a", "b", ""], False)


@pytest.mark.parametrize("seed", range(20))
def test_stop_matching_never_emits_what_it_takes_back(seed: int):
    rng = random.Random(seed)
    text = "".join(rng.choice("ab ") for _ in range(60))
    stops = ["".join(rng.choice("ab ") for _ in range(rng.randint(1, 4))) for _ in range(2)]
    cuts = sorted(rng.sample(range(1, len(text)), 8))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out, stopped = matched(stops, pieces)
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    expected = text[: min(found)] if found else text
    assert "".join(out) == expected and stopped == bool(found)
    for stop in stops:  # every emitted prefix stays a prefix: nothing streamed is ever withdrawn
        assert stop not in "".join(out)


# ------------------------------------------------------------------ detokenisation


def utf8_bytes(tokens: Any) -> str:
    """A decoder whose tokens are single bytes: every multi-byte character spans several tokens."""
    return bytes(tokens).decode("utf-8", "replace")


def pieces(decode: Any, tokens: list[int], chunk: int = 1) -> list[str]:
    detokenizer = progress.Detokenizer(decode)
    out = [detokenizer.feed(tokens[i : i + chunk]) for i in range(0, len(tokens), chunk)]
    return [*out, detokenizer.flush()]


def test_a_character_split_across_tokens_comes_out_whole():
    out = pieces(utf8_bytes, list("héllo 🙂".encode()))
    assert "".join(out) == "héllo 🙂"
    assert all("\ufffd" not in piece for piece in out)
    assert "🙂" in out


def test_an_incomplete_character_at_the_end_is_flushed_as_the_full_decode_has_it():
    tokens = list("ok 🙂".encode())[:-2]
    assert "".join(pieces(utf8_bytes, tokens)) == utf8_bytes(tokens)


@pytest.mark.parametrize("seed", range(10))
def test_deltas_joined_equal_the_decode_of_all_tokens(seed: int):
    rng = random.Random(seed)
    text = "".join(rng.choice(["a", " ", "é", "日本", "🙂", "\n"]) for _ in range(40))
    tokens = list(text.encode())
    for i in rng.sample(range(len(tokens)), 3):  # stray bytes: invalid UTF-8 decodes the same either way
        tokens[i] = rng.choice([0x80, 0xBF, 0xE6, 0xF0])
    for chunk in (1, 2, 5):
        assert "".join(pieces(utf8_bytes, tokens, chunk)) == utf8_bytes(tokens)


@pytest.fixture(scope="module")
def bpe() -> Iterator[Any]:
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    corpus = [
        "The three laws of batching: fill the GPU, bound the wait.",
        "Déjà vu, naïve café 日本語 🙂",
    ] * 4
    tokenizer.train_from_iterator(corpus, vocab_size=300, min_frequency=1, show_progress=False)
    yield tokenizer


@pytest.mark.parametrize("seed", range(5))
def test_with_a_byte_level_bpe_tokenizer_deltas_joined_equal_its_decode(bpe: Any, seed: int):
    rng = random.Random(seed)
    ids = bpe.encode("Déjà vu: the naïve café serves 日本語 🙂 to the GPU").ids
    tokens = ids + [rng.randrange(bpe.get_vocab_size()) for _ in range(30)]  # any ids, bytes included

    def decode(t: Any) -> str:
        return str(bpe.decode(list(t)))

    assert "".join(pieces(decode, tokens)) == decode(tokens)


# ------------------------------------------------------------------ one request's generation

EOS = 0


def generation(stops: tuple[str, ...] = (), max_tokens: int = 50) -> Any:
    return progress.Generation(utf8_bytes, stops, frozenset([EOS]), max_tokens)


def tokens_of(text: str) -> list[int]:
    return list(text.encode())


def test_eos_ends_with_stop_counts_as_a_token_and_adds_no_text():
    gen = generation()
    first = gen.advance(tokens_of("Hi"), engine_finished=False)
    last = gen.advance([*tokens_of("Hi"), EOS], engine_finished=True)
    assert (first.text, first.tokens, first.finish_reason) == ("Hi", 2, None)
    assert (last.text, last.tokens, last.finish_reason) == ("", 1, "stop")
    assert "".join(gen.text) == "Hi" and gen.consumed == 3


def test_the_engine_finishing_without_eos_is_length():
    gen = generation(max_tokens=3)
    step = gen.advance(tokens_of("abc"), engine_finished=True)
    assert (step.text, step.tokens, step.finish_reason) == ("abc", 3, "length")
    assert gen.advance(tokens_of("abcd"), engine_finished=True).tokens == 0  # over: nothing more counts


def test_a_stop_string_ends_the_answer_at_the_token_that_completed_it():
    gen = generation(stops=("END",))
    streamed = [gen.advance(tokens_of("one EN"), engine_finished=False)]
    streamed.append(gen.advance(tokens_of("one END and on"), engine_finished=False))
    assert [s.text for s in streamed] == ["one ", ""]
    assert [s.tokens for s in streamed] == [6, 1]  # "D" completed it; " and on" is neither text nor usage
    assert streamed[-1].finish_reason == "stop" and gen.finished
    assert "".join(gen.text) == "one "


def test_outputs_collapsed_into_one_give_the_same_text_and_usage_as_step_by_step():
    tokens = [*tokens_of("le café 🙂 ok"), EOS]
    one_by_one, collapsed = generation(), generation()
    steps = [
        one_by_one.advance(tokens[:n], engine_finished=n == len(tokens)) for n in range(1, len(tokens) + 1)
    ]
    batch = [collapsed.advance(tokens[:5], False), collapsed.advance(tokens, True)]
    assert "".join(s.text for s in steps) == "".join(s.text for s in batch) == "le café 🙂 ok"
    assert sum(s.tokens for s in steps) == sum(s.tokens for s in batch) == len(tokens)


# ------------------------------------------------------------------ responses


def test_a_response_carries_only_the_outputs_asked_for():
    bare = progress.response_outputs(progress.Options(), [progress.ChoiceStep("hé", None, 1)], 3, False)
    assert list(bare) == ["text_output"]
    assert bare["text_output"].dtype == np.object_ and bare["text_output"].tolist() == ["hé".encode()]


def test_every_optional_output_has_vllm_backends_type_and_shape():
    options = progress.Options(True, False, True, True, True)
    middle = progress.response_outputs(options, [progress.ChoiceStep("a", None, 2)], 7, False)
    last = progress.response_outputs(options, [progress.ChoiceStep("", "length", 1)], 7, False)
    assert middle["finish_reason"].tolist() == [b"None"] and last["finish_reason"].tolist() == [b"length"]
    assert middle["num_input_tokens"].dtype == np.uint32 and middle["num_input_tokens"].tolist() == [7]
    assert middle["num_output_tokens"].dtype == np.uint32 and middle["num_output_tokens"].tolist() == [2]
    assert all(array.shape == (1,) for array in middle.values())


def test_each_choice_is_an_element_of_every_output_and_logprobs_come_only_when_asked_for():
    options = progress.Options(True, False, True, True, True)
    choices = [progress.ChoiceStep("a", None, 1, '[{"token":"a"}]'), progress.ChoiceStep("", "stop", 1)]
    outputs = progress.response_outputs(options, choices, 7, True)
    assert outputs["text_output"].tolist() == [b"a", b""]
    assert outputs["finish_reason"].tolist() == [b"None", b"stop"]
    assert outputs["num_output_tokens"].tolist() == [1, 1] and outputs["num_input_tokens"].tolist() == [7]
    assert outputs["logprobs"].tolist() == [b'[{"token":"a"}]', b"[]"]


def test_the_new_sampling_parameters_are_read_in_vllms_names():
    given = {
        "n": 3, "logprobs": 0, "presence_penalty": 0.5, "frequency_penalty": -1, "logit_bias": {"7": -100},
        "structured_outputs": {"json": {"type": "object"}},
    }  # fmt: skip
    params = rules.parse_sampling_parameters(json.dumps(given), LIMIT)
    assert (params.n, params.logprobs, params.presence_penalty, params.frequency_penalty) == (3, 0, 0.5, -1)
    assert params.logit_bias == ((7, -100.0),)
    assert params.structured == rules.Structured("json", '{"type":"object"}')
    json_object = rules.parse_sampling_parameters('{"structured_outputs": {"json_object": true}}', LIMIT)
    assert json_object.structured == rules.Structured("json_object")
    lark = rules.parse_sampling_parameters('{"structured_outputs": {"grammar": "start: \\"yes\\""}}', LIMIT)
    assert lark.structured == rules.Structured("grammar", 'start: "yes"')


def test_each_choice_has_a_seed_of_its_own_that_the_request_seed_fixes():
    params = rules.parse_sampling_parameters('{"seed": 42, "n": 3}', LIMIT)
    seeds = [params.choice_seed(i, random_seed=1) for i in range(3)]
    assert len(set(seeds)) == 3 and seeds == [params.choice_seed(i, random_seed=2) for i in range(3)]
    assert seeds[0] == 42


# ------------------------------------------------------------------ seeded sampling


def test_a_draw_depends_on_seed_and_position_only_and_fits_float32():
    draws = [rules.uniform_draw(seed, position) for seed in (1, 2) for position in (10, 11)]
    assert draws == [rules.uniform_draw(seed, position) for seed in (1, 2) for position in (10, 11)]
    assert len(set(draws)) == 4
    assert all(0 <= d < 1 and float(np.float32(d)) == d for d in draws)


@pytest.fixture(scope="module")
def sampler() -> Any:
    sys.path.insert(0, str(VERSION))  # engine_sampler imports engine_rules, as in Triton
    try:
        return load("engine_sampler")
    finally:
        sys.path.remove(str(VERSION))


def choose(sampler: Any, scores: Any, draws: list[float], **per_row: list[Any]) -> list[int]:
    import torch

    rows = len(draws)
    columns = {"temperatures": [1.0] * rows, "top_ks": [0] * rows, "top_ps": [1.0] * rows, **per_row}
    chosen = sampler.choose_tokens(
        scores, torch.tensor(draws), *(torch.tensor(columns[k]) for k in ("temperatures", "top_ks", "top_ps"))
    )
    return list(chosen.tolist())


def test_the_sampler_draws_by_inverse_cdf_never_a_masked_token_and_takes_the_argmax_when_greedy(sampler: Any):
    import torch

    scores = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]] * 4 + [[1.0, 3.0, 2.0, 0.0]])
    picked = choose(sampler, scores, [0.0, 0.49, 0.5, 1 - 2**-24, -1.0])
    assert picked == [0, 0, 2, 2, 1]
    certain = sampler.only_token(scores, torch.tensor(picked))
    assert certain.argmax(-1).tolist() == picked
    assert torch.isinf(certain).sum().item() == certain.numel() - len(picked)


def test_top_k_and_top_p_cut_only_the_rows_that_ask(sampler: Any):
    import torch

    probs = torch.tensor([0.05, 0.5, 0.3, 0.15])
    scores = probs.log().expand(4, 4)
    high = 1 - 2**-24  # the draw that picks the last possible token
    assert choose(sampler, scores, [high] * 4, top_ks=[2, 0, 0, 1], top_ps=[1.0, 0.7, 1.0, 1.0]) == [
        2,
        2,
        3,
        1,
    ]
    # row 0: top-2 keeps {1, 2}; row 1: top-p 0.7 keeps {1, 2} (0.5 < 0.7 <= 0.8); row 2: all; row 3: top-1


def test_temperature_sharpens_and_flattens_the_draw(sampler: Any):
    import torch

    scores = torch.tensor([[2.0, 0.0]] * 2)
    # P(token 0) is 0.88 at T=1, 0.9999 at T=0.2, 0.62 at T=4: a draw of 0.8 picks 0, 0, then 1
    assert choose(
        sampler, torch.cat([scores, scores[:1]]), [0.8, 0.8, 0.8], temperatures=[1.0, 0.2, 4.0]
    ) == [0, 0, 1]


def test_sampled_tokens_follow_the_distribution(sampler: Any):
    import torch

    probs = torch.tensor([0.1, 0.6, 0.3])
    draws = [rules.uniform_draw(7, position) for position in range(4000)]
    picked = torch.tensor(choose(sampler, probs.log().expand(len(draws), 3), draws))
    shares = torch.bincount(picked, minlength=3).float() / len(draws)
    assert torch.allclose(shares, probs, atol=0.03)


def test_each_request_draws_from_its_own_seed_and_position_and_greedy_ones_draw_none(sampler: Any):
    import torch

    def future(seed: int, prompt: int, generated: int, **kwargs: Any) -> Any:
        state = types.SimpleNamespace(
            request_id=f"r{seed}-{prompt}-{generated}",
            logit_processor_kwargs={sampler.SEED_KWARG: seed, **kwargs},
            initial_tokens=[1] * prompt,
            generated_tokens=[2] * generated,
        )
        return types.SimpleNamespace(state=state)

    # the same seed and position in another batch, beside other requests: the same draw
    alone = sampler.SeededSampling().prepare_tensor_args([future(9, 3, 2)])
    crowded = sampler.SeededSampling()
    draws = crowded.prepare_tensor_args(
        [future(5, 1, 0, temperature=0.5, top_k=3), future(sampler.GREEDY, 4, 4), future(9, 4, 1, top_p=0.9)]
    ).view(torch.float32)
    assert alone.view(torch.float32).tolist() == [draws[2].item()] == [rules.uniform_draw(9, 5)]
    assert draws[1].item() == -1.0
    scores = torch.zeros(3, 5)
    picked = crowded(scores, draws.view(torch.int32))
    assert (picked == 0).sum().item() == 3 and torch.isinf(picked).sum().item() == 12


def test_a_generation_ends_at_the_tokenizers_end_and_every_end_the_generation_config_names():
    assert rules.end_ids(0, [2, 0], None) == frozenset({0, 2})
    assert rules.end_ids(None, None) == frozenset()
