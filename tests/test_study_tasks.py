"""The study's tasks (benchmarks/study/tasks.py): the exact teacher-forced evaluation against sampling from the same
tiny model, the probe of where completions went, the noisy reward."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # `study` (benchmarks/study/)

from study.tasks import ExactAnswer, Probe, answer_probability  # noqa: E402



@pytest.fixture(scope="module")
def warm_model():
    import torch

    from grpo_curriculum.demo.tasks import build_model, build_tokenizer, echo_dataset, warm_start

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    model = build_model(seed=0)
    warm_start(model, tokenizer, echo_dataset(64, seed=0, length=1), steps=40, seed=0)
    return model, tokenizer


def test_answer_probability_matches_sampling_at_the_temperature(warm_model):
    import torch

    model, tokenizer = warm_model
    eos = tokenizer.eos_token_id
    prompt = tokenizer("echo : cat =").input_ids
    answer = tokenizer("cat").input_ids + [eos]
    temperature, samples = 0.8, 4000
    (p,) = answer_probability(model, [prompt], [answer], temperature)
    assert 0.05 < p < 0.95  # a probability sampling can estimate well
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=len(answer),
                             num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
    hits = sum(row[len(prompt) :].tolist() == answer for row in out)
    assert abs(hits / samples - p) < 4 * math.sqrt(p * (1 - p) / samples)


def test_answer_probability_does_not_depend_on_the_batch(warm_model):
    model, tokenizer = warm_model
    prompts = [tokenizer(p).input_ids for p in ("echo : cat =", "echo : red dog sun =", "count : fish fish =")]
    answers = [tokenizer(a).input_ids + [tokenizer.eos_token_id] for a in ("cat", "red dog sun", "two")]
    together = answer_probability(model, prompts, answers, 0.5)
    alone = [answer_probability(model, [p], [a], 0.5)[0] for p, a in zip(prompts, answers, strict=True)]
    assert together == pytest.approx(alone, rel=1e-5)
    # The answers' probabilities at temperature 1 and the sum over every one-token continuation.
    first = answer_probability(model, [prompts[0]] * 30, [[t] for t in range(30)], 1.0)
    assert sum(first) == pytest.approx(1.0, abs=1e-5)


def test_the_probe_counts_a_round_sampled_in_increments_by_its_whole_groups(warm_model):
    """Pilots of 2 for 3 prompts, then increments: each group counts once, at its final size, when the round is in."""
    model, tokenizer = warm_model
    reward = ExactAnswer(tokenizer)
    probe = Probe(model, reward, None, round_size=12)
    a, b, c = "echo two : cat red dog sun =", "echo one : fish fish cat red =", "echo four : dog dog dog dog ="
    targets = {a: "cat red", b: "fish", c: "dog dog dog dog"}
    calls = [([a, a, b, b, c, c], [0.0, 0.0, 1.0, 0.0, 1.0, 1.0]),  # pilots: a, c all equal; b informative
             ([a, a, c, c], [0.0, 1.0, 1.0, 1.0]),  # a becomes informative, c stays all equal
             ([c, c], [1.0, 1.0])]  # c at 6, the round holds 12
    for i, (prompts, rewards) in enumerate(calls):
        probe(prompts, [targets[p] for p in prompts], rewards, [True] * len(prompts))
        assert probe.completions == (12 if i == 2 else 0)  # nothing counted before the round is in
    assert probe.summary()["informative"] == 4 + 2  # a (4 completions) and b (2); c (6) never informative
    assert sum(bin_[0] for bin_ in probe.bins) == 3 and sum(bin_[1] for bin_ in probe.bins) == 12


def test_the_noisy_reward_flips_each_training_reward_with_its_probability_and_the_same_seed_flips_the_same(
        warm_model):  # fmt: skip
    """`prefix_noisy` (benchmarks/study/tasks.py): flip 0 is the exact reward, 1 its complement, 0.1 about a tenth."""
    _, tokenizer = warm_model
    exact = ExactAnswer(tokenizer)
    ids = exact.answer_ids("cat red")
    rows = [ids if i % 3 else ids[:-1] for i in range(3000)]
    call = {"prompts": ["p"] * len(rows), "completions": [""] * len(rows), "completion_ids": rows,
            "target": ["cat red"] * len(rows)}  # fmt: skip
    truth = exact(**call)
    assert truth == [float(i % 3 != 0) for i in range(len(rows))]
    assert ExactAnswer(tokenizer, flip=1.0)(**call) == [1.0 - r for r in truth]
    noisy = ExactAnswer(tokenizer, flip=0.1, seed=5)(**call)
    flipped = sum(a != b for a, b in zip(noisy, truth, strict=True)) / len(rows)
    assert 0.08 < flipped < 0.12
    assert ExactAnswer(tokenizer, flip=0.1, seed=5)(**call) == noisy
    assert ExactAnswer(tokenizer, flip=0.1, seed=6)(**call) != noisy
