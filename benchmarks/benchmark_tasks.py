"""
Mixed-difficulty variants of the tiny model's built-in tasks, for the benchmarks (kept out of the package: no recipe
names them; the recipes' `builtin:` datasets are `grpo_curriculum.demo.tasks.TASKS`).
"""

from __future__ import annotations

from collections.abc import Callable

from grpo_curriculum.demo.tasks import (
    DIGITS,
    TASKS,
    count_dataset,
    draw_echo_dataset,
    echo_reward,
    exact_first_word_reward,
)


def echo_mixed_dataset(num_prompts: int = 64, seed: int = 0, min_length: int = 1, max_length: int = 3):
    """
    The *echo* task with mixed difficulty: each prompt asks to repeat between `min_length` and `max_length` words
    (drawn uniformly per prompt). Longer prompts are harder: after the benchmarks' 40-step warm start, samples of
    three-word prompts (temperature 0.9) almost never reach half credit, those of one- and two-word prompts about a
    quarter of the time. Scored with [`echo_reward`] (partial credit: the fraction of words in place).

    Returns:
        [`~datasets.Dataset`]: Columns `prompt` (str) and `target` (str).
    """
    return draw_echo_dataset(num_prompts, seed, lambda rng: rng.randint(min_length, max_length))


def count_mixed_dataset(num_prompts: int = 64, seed: int = 0):
    """
    The *count* task with mixed difficulty: counts from 1 to 9 (the digit words the vocabulary holds; [`count_dataset`]
    stops at 5 by default), binary reward ([`exact_first_word_reward`]). The count's word repeated up to 9 times makes
    prompts of different lengths and difficulty.

    Returns:
        [`~datasets.Dataset`]: Columns `prompt` (str) and `target` (str).
    """
    return count_dataset(num_prompts, seed=seed, max_count=len(DIGITS) - 1)


def echo_tiers_dataset(num_prompts: int = 64, seed: int = 0, weights: tuple[int, ...] = (45, 25, 10, 20)):
    """
    The *echo* task in difficulty tiers, like real RL data: each prompt asks to repeat 1, 2, 3 or 4 words (drawn with
    `weights`), scored by [`exact_echo_reward`] (all words, nothing else). Warm-started on the one- and two-word
    prompts only (as the retired `sample_efficiency.py` did), most one-word prompts are solved at G 16, the three- and
    four-word ones hopeless, the two-word ones mixed; as training goes on, two-word prompts get solved.

    Returns:
        [`~datasets.Dataset`]: Columns `prompt` (str) and `target` (str).
    """
    tiers = range(1, len(weights) + 1)
    return draw_echo_dataset(num_prompts, seed, lambda rng: rng.choices(tiers, weights=weights)[0])


def exact_echo_reward(completions: list[str], target: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's words are exactly the target's, else 0.0."""
    return [float(c.split() == t.split()) for c, t in zip(completions, target, strict=True)]


MIXED_TASKS: dict[str, tuple[Callable, Callable]] = {
    "echo_mixed": (echo_mixed_dataset, echo_reward),
    "count_mixed": (count_mixed_dataset, exact_first_word_reward),
    "echo_tiers": (echo_tiers_dataset, exact_echo_reward),
}
"""Mixed-difficulty variants, kept apart from [`TASKS`] (the recipes' `builtin:` datasets)."""

BENCHMARK_TASKS: dict[str, tuple[Callable, Callable]] = {
    **{name: task for name, task in TASKS.items() if name != "arithmetic"}, **MIXED_TASKS
}
"""Every built-in task of the tiny model, for its benchmarks (`arithmetic`: `benchmarks/real_model.py`)."""
