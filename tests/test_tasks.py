"""The built-in tokenizer, model, tasks, rewards and warm start used by the demo, tests and benchmarks."""

from __future__ import annotations

import pytest

from grpo_curriculum.demo import tasks
from grpo_curriculum.rewards import gsm8k_accuracy_reward, last_number


def test_tokenizer_round_trip_and_specials():
    tokenizer = tasks.build_tokenizer()
    ids = tokenizer("echo : red cat =").input_ids
    assert tokenizer.decode(ids) == "echo : red cat ="
    assert tokenizer.pad_token == "<pad>" and tokenizer.eos_token == "<eos>" and tokenizer.padding_side == "left"
    assert tokenizer("zebra").input_ids == [tokenizer.unk_token_id]


@pytest.mark.parametrize(
    ("completion", "target", "reward"),
    [("red cat", "red cat", 1.0), ("red dog", "red cat", 0.5), ("cat red", "red cat", 0.0), ("", "red cat", 0.0),
     ("red cat sun", "red cat", 1.0)],
)  # fmt: skip
def test_echo_reward(completion, target, reward):
    assert tasks.echo_reward([completion], [target]) == [reward]


@pytest.mark.parametrize(("completion", "reward"), [("three", 1.0), ("three four", 1.0), ("four three", 0.0), ("", 0.0)])
def test_exact_first_word_reward(completion, reward):
    assert tasks.exact_first_word_reward([completion], ["three"]) == [reward]


@pytest.mark.parametrize(
    ("make", "reward"),
    [(tasks.echo_dataset, tasks.echo_reward), (tasks.count_dataset, tasks.exact_first_word_reward)],
)  # fmt: skip
def test_datasets_are_seeded_and_their_targets_score_1(make, reward):
    a, b = make(32, seed=1), make(32, seed=1)
    assert a["prompt"] == b["prompt"] and a["prompt"] != make(32, seed=2)["prompt"]
    assert reward(a["target"], a["target"]) == [1.0] * 32
    tokenizer = tasks.build_tokenizer()
    assert all(tokenizer.unk_token_id not in tokenizer(p).input_ids for p in a["prompt"])


def test_warm_start_lowers_the_answer_loss():
    import torch

    tokenizer, model = tasks.build_tokenizer(), tasks.build_model(seed=0)
    assert (model.generation_config.pad_token_id, model.generation_config.eos_token_id) == (
        tokenizer.pad_token_id, tokenizer.eos_token_id)  # generation stops at `<eos>` and pads with `<pad>`
    dataset = tasks.echo_dataset(64, seed=0)

    def answer_loss():
        text = [p + " " + t + " <eos>" for p, t in zip(dataset["prompt"][:16], dataset["target"][:16], strict=True)]
        batch = tokenizer(text, return_tensors="pt", padding=True)
        with torch.no_grad():
            return model(**batch, labels=batch.input_ids.masked_fill(batch.attention_mask == 0, -100)).loss.item()

    before = answer_loss()
    tasks.warm_start(model, tokenizer, dataset, steps=20, seed=0)
    assert answer_loss() < before - 0.5
    assert tasks.warm_start(model, tokenizer, dataset, steps=0) is model


@pytest.mark.parametrize(
    ("text", "number"), [("so 1,200 + 35 = 1,235 dollars.", 1235.0), ("x = -3.5", -3.5), ("no digits", None)]
)
def test_last_number(text, number):
    assert last_number(text) == number


def test_gsm8k_reward_plain_and_conversational():
    answers = ["Janet ... #### 18", "#### 1,000"]
    assert gsm8k_accuracy_reward(["She makes 18 dollars.", "about 999"], answers) == [1.0, 0.0]
    chat = [[{"role": "assistant", "content": "The answer is 18"}], [{"role": "assistant", "content": "1000"}]]
    assert gsm8k_accuracy_reward(chat, answers) == [1.0, 1.0]
