"""The task of benchmarks/async_learning.py (benchmarks/async_learning_task.py): the reward TRL's spawned worker
unpickles, the exact expected reward (the answer's probability as the first token, as the worker renders the prompt),
and the paired mean difference with its t interval. No vLLM."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import async_learning_task as task  # noqa: E402


def test_the_reward_scores_the_first_word_of_message_completions_and_pickles_by_name():
    columns = task.rows(6, seed=3, max_count=5)
    assert len(columns["prompt"]) == 6 and columns["prompt"][0][0]["role"] == "user"
    target = columns["target"][:3]
    completions = [[{"role": "assistant", "content": f"{target[0]} red"}],
                   [{"role": "assistant", "content": f"red {target[1]}"}], f"{target[2]}"]  # fmt: skip
    assert task.count_reward(completions, target) == [1.0, 0.0, 1.0]
    assert pickle.loads(pickle.dumps(task.count_reward)) is task.count_reward


def test_exact_rewards_are_the_answers_first_token_probabilities():
    from grpo_curriculum.demo.tasks import build_model

    from .async_real import chat_tokenizer

    tokenizer, model = chat_tokenizer(), build_model(0, hidden_size=32)
    columns = task.rows(4, seed=0, max_count=5)
    exact = task.exact_rewards(model, tokenizer, columns)
    for prompt, target, value in zip(columns["prompt"], columns["target"], exact, strict=True):
        ids = tokenizer(prompt[0]["content"]).input_ids  # the chat template renders the content alone
        with torch.no_grad():
            probs = model(torch.tensor([ids])).logits[0, -1].softmax(-1)
        assert value == pytest.approx(probs[tokenizer.convert_tokens_to_ids(target)].item(), rel=1e-5)


def test_the_paired_difference_has_a_95_percent_t_interval():
    runs = [{"seed": s, "arm": arm, "final_exact": value}
            for s, (a, b) in enumerate([(0.5, 0.6), (0.4, 0.45), (0.3, 0.42)])
            for arm, value in (("static-G4", a), ("per-prompt", b))]  # fmt: skip
    p = task.paired(runs, "final_exact", [0, 1, 2, 9])  # seed 9 has no runs: left out
    assert p["n"] == 3 and p["mean"] == pytest.approx(0.09)
    half = 4.303 * 0.0360555 / 3**0.5  # t(0.975, 2) x sd / sqrt(n)
    assert (p["low"], p["high"]) == pytest.approx((0.09 - half, 0.09 + half), rel=1e-4)
    assert task.paired(runs, "final_exact", [0])["n"] == 1
