"""The arithmetic task for pretrained chat models: prompts, splits, difficulty mix and the exact-answer reward."""

from __future__ import annotations

import collections

import pytest

from grpo_curriculum.demo import arithmetic
from grpo_curriculum.demo.arithmetic import LEVELS, arithmetic_dataset, arithmetic_reward, solve, split_of
from grpo_curriculum.demo.tasks import TASKS


def arithmetic_rows(*args, **kwargs) -> list[dict]:
    """The rows of [`arithmetic_dataset`], as plain dicts."""
    return arithmetic_dataset(*args, **kwargs).to_list()


@pytest.mark.parametrize(
    ("completion", "answer", "reward"),
    [
        ("19", "19", 1.0),
        ("The answer is 19.", "19", 1.0),
        ("12 + 7 = 19", "19", 1.0),  # the operands come first: the last number counts
        ("12 + 7 = 19\nThe", "19", 1.0),  # truncated after the answer
        ("19 + 3 = 22", "19", 0.0),  # the last number is not the answer
        ("12 + 7 =", "19", 0.0),  # truncated before the answer: the last number is an operand
        ("1,234", "1234", 1.0),  # thousands separators
        ("19.0", "19", 1.0),
        ("19.5", "19", 0.0),
        ("-19", "19", 0.0),
        ("45 - 19 = 26", "26", 1.0),
        ("nineteen", "19", 0.0),  # no number at all
        ("", "19", 0.0),
        ("0", "0", 1.0),
    ],
)  # fmt: skip
def test_reward_table(completion, answer, reward):
    assert arithmetic_reward([completion], [answer]) == [reward]
    conversational = [[{"role": "assistant", "content": completion}]]  # what GRPOTrainer passes for chat prompts
    assert arithmetic_reward(conversational, [answer]) == [reward]


def test_reward_is_one_value_per_completion_and_checks_lengths():
    assert arithmetic_reward(["7", "8", "x"], ["7", "7", "7"]) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        arithmetic_reward(["7", "8"], ["7"])


@pytest.mark.parametrize(
    ("a", "op", "b", "expected"),
    [(12, "+", 7, 19), (45, "-", 19, 26), (6, "*", 8, 48), (99, "*", 99, 9801), (10, "-", 10, 0)],
)  # fmt: skip
def test_solve(a, op, b, expected):
    assert solve(a, op, b) == expected


def test_levels_span_one_digit_sums_to_two_digit_products():
    assert list(LEVELS) == ["add1", "mul1", "add2", "sub2", "mul21", "mul2"]
    assert LEVELS["add1"].problems()[0] == (1, 1) and len(LEVELS["add1"].problems()) == 81
    assert len(LEVELS["mul2"].problems()) == 90 * 90
    assert all(a >= b for a, b in LEVELS["sub2"].problems())  # answers are never negative


def test_rows_are_conversational_with_exact_answers():
    for row in arithmetic_rows(60, seed=3):
        content = f"What is {row['question']}? Answer with just the number."
        assert row["prompt"] == [{"role": "user", "content": content}]
        a, op, b = row["question"].split()
        assert row["answer"] == str(solve(int(a), op, int(b)))
        assert op == LEVELS[row["level"]].op
        assert arithmetic_reward([f"The answer is {row['answer']}."], [row["answer"]]) == [1.0]


@pytest.mark.parametrize(
    ("num_prompts", "per_level"), [(60, [10] * 6), (64, [11, 11, 11, 11, 10, 10]), (3, [1, 1, 1, 0, 0, 0])]
)
def test_difficulty_mix_is_exact(num_prompts, per_level):
    counts = collections.Counter(row["level"] for row in arithmetic_rows(num_prompts, seed=0))
    assert [counts[name] for name in LEVELS] == per_level


def test_levels_can_be_chosen():
    rows = arithmetic_rows(20, seed=0, levels=("add1", "mul2"))
    assert collections.Counter(row["level"] for row in rows) == {"add1": 10, "mul2": 10}
    for bad in [("add3",), ()]:
        with pytest.raises(ValueError, match="unknown levels"):
            arithmetic_rows(4, levels=bad)
    with pytest.raises(ValueError, match="split"):
        arithmetic_rows(4, split="test")
    with pytest.raises(ValueError, match="num_prompts"):
        arithmetic_rows(0)


def test_rows_are_seeded_and_shuffled():
    a, b, c = arithmetic_rows(64, seed=1), arithmetic_rows(64, seed=1), arithmetic_rows(64, seed=2)
    assert a == b and a != c
    levels = [row["level"] for row in a]
    assert levels != sorted(levels, key=list(LEVELS).index)  # not in level blocks


def test_train_and_eval_are_disjoint_whatever_the_seeds():
    train = {row["question"] for seed in range(3) for row in arithmetic_rows(600, seed=seed)}
    held_out = {row["question"] for seed in range(3) for row in arithmetic_rows(120, seed=seed, split="eval")}
    assert train and held_out and not train & held_out
    for question in held_out:
        a, op, b = question.split()
        assert split_of(int(a), op, int(b)) == "eval"
    # about one problem in EVAL_SHARE is held out, on every level
    for name, level in LEVELS.items():
        share = sum(split_of(a, level.op, b) == "eval" for a, b in level.problems()) / len(level.problems())
        assert 0.5 / arithmetic.EVAL_SHARE < share < 2 / arithmetic.EVAL_SHARE, (name, share)


def test_no_repeats_until_a_level_runs_out():
    rows = arithmetic_rows(6 * 40, seed=0)  # 40 a level: add1 has 64 training problems, mul1 55
    questions = [row["question"] for row in rows]
    assert len(set(questions)) == len(questions)
    many = [row["question"] for row in arithmetic_rows(6 * 100, seed=0) if row["level"] == "mul1"]
    pool = sum(split_of(a, "*", b) == "train" for a, b in LEVELS["mul1"].problems())
    assert len(many) == 100 and len(set(many)) == pool  # every training problem once before any repeats


def test_dataset_and_builtin_registration():
    dataset = arithmetic_dataset(12, seed=0)
    assert dataset.column_names == ["prompt", "answer", "level", "question"]
    assert len(dataset) == 12 and dataset[0]["prompt"][0]["role"] == "user"
    assert TASKS["arithmetic"] == (arithmetic_dataset, arithmetic_reward)  # `dataset_name: builtin:arithmetic`
