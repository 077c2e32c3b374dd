"""
Reward-variance signals of a generation round.

Pure logic: the standard library only (no torch, no numpy). The trainer gathers the round's rewards from every process
and passes them here as flat lists, so every process computes the same [`RoundStats`] and the adaptive policies
([`~core.policies`]) take the same decisions. A group whose rewards are all equal has zero advantage in GRPO
and wastes its completions; the share of completions in such groups is the main signal.

A *zero-std group* is one definition for everything the curriculum computes and logs, TRL's `frac_reward_zero_std` of
curriculum training rounds included (see [`is_zero_std`]): a group with at least one finite reward whose finite
rewards are all equal (within `1e-6`), a single finite one included. In GRPO every completion of such a group gets
advantage 0 whatever `scale_rewards` (TRL's std of a single finite reward is NaN, and it sets NaN advantages to 0).
TRL's own test, `isclose(std, 0)` on the float32 group std, misses groups of equal rewards whose float32 mean rounds
(eight rewards of 0.3 have std 3e-8), and measures the batch's std under `scale_rewards="batch"`.

Groups are given by their sizes (G per prompt, in row order), so a round whose prompts have different G is described
by its real groups. Missing rewards: TRL turns a reward function's `None` into NaN. Here `None`, NaN and infinities
are *missing*: they are left out of every statistic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

ZERO_STD_TOLERANCE = 1e-6


def finite_or_none(value) -> float | None:
    """`value` as a float, or `None` when it is `None`, NaN or infinite (a reward that counts as missing)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def mean_std(values: list[float]) -> tuple[int, float, float]:
    """
    `(count, mean, population std)` of finite `values`, order-independent (`math.fsum`). Computed on the values scaled
    by their largest magnitude, so any finite rewards (1e300 included) give a finite mean and std, never an overflow.
    """
    if not values:
        return 0, 0.0, 0.0
    n, scale = len(values), max(abs(v) for v in values) or 1.0
    scaled = [v / scale for v in values]
    mean = math.fsum(scaled) / n
    return n, mean * scale, math.sqrt(math.fsum((v - mean) * (v - mean) for v in scaled) / n) * scale


def is_zero_std(finite: Sequence[float]) -> bool:
    """
    Whether a group whose finite rewards are `finite` is a zero-std group: it has at least one finite reward and they
    are all equal within `1e-6` (one finite reward counts). Every completion of such a group gets advantage 0.
    """
    return len(finite) > 0 and max(finite) - min(finite) <= ZERO_STD_TOLERANCE


def is_informative(rewards) -> bool:
    """Whether a group's rewards carry a learning signal: two finite rewards at least, not all equal
    ([`is_zero_std`])."""
    finite = [r for r in rewards if not math.isnan(r)]
    return len(finite) > 1 and not is_zero_std(finite)


def group_sizes_of(num_generations, num_rows: int, prompt_keys: Sequence | None = None) -> tuple[int, ...]:
    """
    The group sizes of a round of `num_rows` rows: `num_generations` is one G for every group, or the G of each group.

    Raises:
        `ValueError`: if a size is not a positive integer, the sizes do not add up to `num_rows`, or `prompt_keys` (one
        key per group) has another length.
    """
    if isinstance(num_generations, Sequence):
        sizes = tuple(num_generations)
    else:
        if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
            raise ValueError(f"num_generations must be a positive integer, got {num_generations!r}")
        sizes = (num_generations,) * (num_rows // num_generations)
    if any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in sizes):
        raise ValueError(f"group sizes must be positive integers, got {list(sizes)}")
    if sum(sizes) != num_rows:
        raise ValueError(
            f"{num_rows} rewards do not split into groups of {_describe_sizes(sizes)} (rewards must be flat, in group "
            "order: G consecutive rows per prompt)"
        )
    if prompt_keys is not None and len(prompt_keys) != len(sizes):
        raise ValueError(f"prompt_keys has {len(prompt_keys)} entries, but the round has {len(sizes)} groups")
    return sizes


def _describe_sizes(sizes: tuple[int, ...]) -> str:
    if len(set(sizes)) == 1:
        return f"num_generations={sizes[0]}"
    return f"sizes {list(sizes)} (sum {sum(sizes)})"


def split_groups(rows: Sequence, sizes: Sequence[int]) -> list:
    """`rows` (flat, in group order) cut into consecutive groups of `sizes`."""
    starts = itertools.accumulate(sizes, initial=0)
    return [rows[start : start + size] for start, size in zip(starts, sizes)]


@dataclass(frozen=True)
class RoundStats:
    """
    Reward-variance statistics of one generation round, from the rewards of every process.

    Args:
        group_sizes (`tuple[int, ...]`): Each group's G, in row order.
        num_groups (`int`): Groups (prompts) with at least one finite reward.
        zero_std_fraction (`float`):
            The share of the completions of those groups that are in a zero-std group ([`is_zero_std`]: zero
            advantage); with one G, the share of groups. Logged as `curriculum/zero_std_fraction` and as TRL's
            `frac_reward_zero_std`. NaN when `num_groups` is 0.
        mean_group_std (`float`): Mean over those groups of the population std of their finite rewards (NaN if none).
        mean_reward (`float`): Mean of the round's finite rewards (NaN if none).
        distinct_fraction (`float` or `None`):
            Mean over all groups of `distinct completion keys / G` (1.0: all completions differ; `1/G`: all identical).
            `None` when no completion keys were given.
        group_success (`tuple[float, ...]`):
            Per group, the fraction of finite rewards `>= success_threshold` (NaN for an all-NaN group).
        group_counts (`tuple[int, ...]`): Per group, the number of finite rewards.
        group_zero_std (`tuple[bool, ...]`): Per group, whether it is a zero-std group ([`is_zero_std`]).
        prompt_keys (`tuple[str, ...]` or `None`): Per group, the prompt's key (converted with `str`), when given.
    """

    group_sizes: tuple[int, ...]
    num_groups: int
    zero_std_fraction: float
    mean_group_std: float
    mean_reward: float
    distinct_fraction: float | None
    group_success: tuple[float, ...]
    group_counts: tuple[int, ...]
    group_zero_std: tuple[bool, ...]
    prompt_keys: tuple[str, ...] | None = None


def round_stats(
    rewards: Sequence,
    num_generations: int | Sequence[int],
    prompt_keys: Sequence[Hashable] | None = None,
    completion_keys: Sequence[Hashable] | None = None,
    success_threshold: float = 0.5,
) -> RoundStats:
    """
    Statistics of one round's rewards.

    Args:
        rewards (`Sequence[float | None]`):
            Flat rewards of the whole round (all processes), in group order: each group's G consecutive rows belong to
            one prompt. `None` and NaN are allowed.
        num_generations (`int` or `Sequence[int]`): The round's G, or each group's G; they must add up to
            `len(rewards)`.
        prompt_keys (`Sequence[Hashable]`, *optional*): One key per group (e.g. the dataset index).
        completion_keys (`Sequence[Hashable]`, *optional*):
            One hashable key per reward row (e.g. a completion's token ids as a tuple), to count distinct completions.
        success_threshold (`float`, *optional*, defaults to `0.5`): A reward `>=` this counts as a success.

    Returns:
        [`RoundStats`]

    Raises:
        `ValueError`: if the group sizes do not add up to `len(rewards)`, or `prompt_keys` / `completion_keys` have the
        wrong length.
    """
    sizes = group_sizes_of(num_generations, len(rewards), prompt_keys)
    groups = split_groups([finite_or_none(r) for r in rewards], sizes)
    if completion_keys is not None and len(completion_keys) != len(rewards):
        raise ValueError(f"completion_keys has {len(completion_keys)} entries, but there are {len(rewards)} rewards")
    success, counts, stds, zero_std, finite_all = [], [], [], [], []
    for group in groups:
        finite = [v for v in group if v is not None]
        count, _, std = mean_std(finite)
        counts.append(count)
        success.append(sum(v >= success_threshold for v in finite) / count if count else math.nan)
        zero_std.append(is_zero_std(finite))
        if count:
            finite_all += finite
            stds.append(std)
    n = len(stds)
    scored = sum(size for size, count in zip(sizes, counts) if count)  # completions of groups with a finite reward
    distinct = None
    if completion_keys is not None and sizes:
        per_group = [len(set(keys)) / len(keys) for keys in split_groups(completion_keys, sizes)]
        distinct = math.fsum(per_group) / len(per_group)
    return RoundStats(
        group_sizes=sizes,
        num_groups=n,
        zero_std_fraction=sum(size for size, zero in zip(sizes, zero_std) if zero) / scored if n else math.nan,
        mean_group_std=math.fsum(s / n for s in stds) if n else math.nan,
        mean_reward=mean_std(finite_all)[1] if finite_all else math.nan,
        distinct_fraction=distinct,
        group_success=tuple(success),
        group_counts=tuple(counts),
        group_zero_std=tuple(zero_std),
        prompt_keys=None if prompt_keys is None else tuple(str(k) for k in prompt_keys),
    )
