"""
A round's next increment, decided from what the round has sampled so far (pure: no torch). The trainer calls these
once per increment and applies the decision to its `Round`:

- **top-up** ([`top_up_next`]): grow the groups whose rewards are all equal (or the least varied) by `pilot`
  completions each, until the round holds `generation_batch_size` completions;
- **dynamic sampling** ([`dynamic_next`]): draw another batch of prompts at the stage's G until enough groups are
  informative or `max_rounds` increments are sampled; then choose the groups trained on and the fill-up groups masked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .sampling import DynamicSampling, TopUp, top_up_increment
from .signals import is_informative


def top_up_next(groups_rewards: Sequence[Sequence[float]], sizes: Sequence[int], top_up: TopUp,
                batch: int) -> list[int] | None:  # fmt: skip
    """
    The completions each group of a top-up round gets in its next increment ([`top_up_increment`]), or `None` when
    the round already holds `batch` completions.

    Raises:
        `RuntimeError`: when the round is short of `batch` and no group can grow (a bug if the geometry check passed).
    """
    budget = batch - sum(sizes)
    if budget == 0:
        return None
    added = top_up_increment(groups_rewards, sizes, top_up.pilot, top_up.largest, budget)
    if not any(added):
        raise RuntimeError(f"grpo-curriculum: a top-up round holds {sum(sizes)} completions and can "
                           f"add none: it cannot reach generation_batch_size {batch}. This is a bug if the "
                           "geometry check passed.")  # fmt: skip
    return added


@dataclass(frozen=True)
class DynamicNext:
    """
    What a dynamic-sampling round does after an increment.

    Args:
        more (`int`): Prompts to draw for the next increment at the stage's G; 0: the round is complete.
        trained (`list[int]` or `None`): The groups trained on, in group order, when the round holds more groups than
            a training batch needs (the informative ones first, then zero-std ones, in sampling order); `None`: all.
        masked (`list[int]`): Trained groups whose tokens are out of the loss (`on_limit: mask`'s fill-up).
    """

    more: int = 0
    trained: list[int] | None = None
    masked: list[int] | None = None


def dynamic_next(groups_rewards: Sequence[Sequence[float]], num_generations: int, batch: int,
                 dynamic: DynamicSampling, increments: int, stage: int, generated: int) -> DynamicNext:  # fmt: skip
    """
    The next step of a dynamic-sampling round of G `num_generations` that has sampled `increments` increments
    (`generated` completions; `stage` names the stage in the error): more prompts while fewer than
    `batch // num_generations` groups are informative and `max_rounds` allows, else the groups to train.

    Raises:
        `RuntimeError`: at `max_rounds` with too few informative groups under `on_limit: error`.
    """
    if dynamic.max_rounds == 1:  # nothing drawn again, nothing dropped or masked: plain GRPO
        return DynamicNext()
    needed = batch // num_generations
    informative = [g for g, group in enumerate(groups_rewards) if is_informative(group)]
    if len(informative) < needed and not dynamic.at_limit(increments):
        return DynamicNext(more=needed)
    short = needed - min(len(informative), needed)
    if short and dynamic.on_limit == "error":
        raise RuntimeError(
            f"grpo-curriculum: dynamic sampling (stage {stage}) drew max_rounds "
            f"{dynamic.max_rounds} generation rounds ({generated} completions) and found "
            f"{len(informative)} informative groups of the {needed} a training batch needs (all-equal "
            "rewards in the others). Fix: raise `dynamic_sampling.max_rounds` (at most 1024), set "
            "`on_limit: mask` to train on the informative groups only, or use easier prompts or a "
            "higher temperature."
        )  # fmt: skip
    trained = None
    if len(groups_rewards) > needed:  # the informative groups first, then zero-std ones, in sampling order
        rest = [g for g in range(len(groups_rewards)) if g not in set(informative)]
        trained = sorted((informative + rest)[:needed])
    masked = None
    if short and dynamic.on_limit == "mask":  # the fill-up groups: no weight in the loss
        kept = set(informative[:needed])
        masked = [g for g in (range(len(groups_rewards)) if trained is None else trained) if g not in kept]
    return DynamicNext(trained=trained, masked=masked)
