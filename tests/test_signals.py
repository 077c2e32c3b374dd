"""Tests for `grpo_curriculum.core.signals`: round statistics from flat rewards, over groups of any size."""

import math

import pytest

from grpo_curriculum.core.signals import RoundStats, round_stats


NAN = float("nan")


def same(a, b):
    """Equality where NaN equals NaN (also inside tuples)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == pytest.approx(b) if isinstance(b, float) else a == b


@pytest.mark.parametrize(
    "rewards, G, expected",
    [
        # all equal within each group: every group wastes its completions
        ([1.0, 1.0, 0.0, 0.0], 2, dict(num_groups=2, zero_std_fraction=1.0, mean_group_std=0.0, mean_reward=0.5,
                                       group_success=(1.0, 0.0), group_zero_std=(True, True))),
        ([1.0, 0.0, 1.0, 1.0], 2, dict(num_groups=2, zero_std_fraction=0.5, mean_group_std=0.25, mean_reward=0.75,
                                       group_success=(0.5, 1.0), group_zero_std=(False, True))),
        # equal within 1e-6 counts as zero std
        ([1.0, 1.0 + 1e-7, 0.2, 0.4], 2, dict(zero_std_fraction=0.5, group_success=(1.0, 0.0))),
        # None and NaN are missing; a group with < 2 finite rewards has zero std; an all-NaN group is not counted
        ([None, 1.0, NAN, NAN], 2, dict(num_groups=1, zero_std_fraction=1.0, mean_group_std=0.0, mean_reward=1.0,
                                        group_success=(1.0, NAN), group_counts=(1, 0), group_zero_std=(True, False))),
        ([0.0, float("inf"), 1.0, None, 0.0, 1.0], 3, dict(num_groups=2, zero_std_fraction=0.0, group_counts=(2, 2))),
        # an all-NaN round: no group, NaN statistics, no crash
        ([None, NAN, None, NAN], 2, dict(num_groups=0, zero_std_fraction=NAN, mean_group_std=NAN, mean_reward=NAN,
                                         group_success=(NAN, NAN), group_counts=(0, 0))),
        ([], 4, dict(num_groups=0, zero_std_fraction=NAN, group_sizes=())),
        # population std: (0, 1, 2) has std sqrt(2/3)
        ([0, 1, 2], 3, dict(num_groups=1, zero_std_fraction=0.0, mean_group_std=math.sqrt(2 / 3), mean_reward=1.0,
                            group_success=(2 / 3,))),
        # rewards of any finite magnitude: finite statistics, no OverflowError ((v - mean) ** 2 overflowed at 1e160)
        ([1e300, -1e300, 1e308, 1e308], 2, dict(num_groups=2, zero_std_fraction=0.5, mean_group_std=5e299,
                                                 mean_reward=1e308 / 2, group_zero_std=(False, True))),
        # groups of different sizes: each group's statistics over its own rows; the zero-std share is of completions
        ([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], (2, 4, 2), dict(
            num_groups=3, zero_std_fraction=4 / 8, mean_group_std=math.sqrt(3 / 16) / 3, mean_reward=3 / 8,
            group_success=(1.0, 0.25, 0.0), group_counts=(2, 4, 2), group_zero_std=(True, False, True))),
    ],
)
def test_round_stats(rewards, G, expected):
    stats = round_stats(rewards, G)
    assert isinstance(stats, RoundStats)
    sizes = G if isinstance(G, tuple) else (G,) * (len(rewards) // G)
    assert stats.group_sizes == sizes
    assert stats.distinct_fraction is None and stats.prompt_keys is None
    for name, value in expected.items():
        assert same(getattr(stats, name), value), (name, getattr(stats, name), value)


@pytest.mark.parametrize("rewards, G", [([1.0] * 6, 4), ([1.0] * 6, (2, 2)), ([1.0] * 4, (2, 0, 2)), ([1.0] * 4, 0)])
def test_round_stats_rejects_groups_that_do_not_tile_the_round(rewards, G):
    with pytest.raises(ValueError, match="group|num_generations"):
        round_stats(rewards, G)


@pytest.mark.parametrize(
    "completion_keys, G, distinct",
    [
        ([(1, 2), (1, 2), (3,), (4,)], 2, 0.75),
        (["a", "a", "a", "a"], 4, 0.25),
        (["a", "b", "c", "d"], 4, 1.0),
        ([0, 0, 1, 1, 2, 3], 3, (2 / 3 + 3 / 3) / 2),
    ],
)
def test_distinct_fraction(completion_keys, G, distinct):
    stats = round_stats([1.0] * len(completion_keys), G, completion_keys=completion_keys)
    assert stats.distinct_fraction == pytest.approx(distinct)


@pytest.mark.parametrize("threshold, success", [(0.5, (0.5, 1.0)), (0.95, (0.5, 0.0)), (0.0, (1.0, 1.0))])
def test_success_threshold(threshold, success):
    assert round_stats([1.0, 0.0, 0.9, 0.6], 2, success_threshold=threshold).group_success == success


def test_prompt_keys_are_strings_in_group_order():
    stats = round_stats([1, 0, 1, 1, 0, 0], 2, prompt_keys=[7, "b", 3])
    assert stats.prompt_keys == ("7", "b", "3")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rewards=[1.0] * 5, num_generations=2), "groups of num_generations=2"),
        (dict(rewards=[1.0] * 4, num_generations=0), "positive integer"),
        (dict(rewards=[1.0] * 4, num_generations=2, prompt_keys=["a"]), "prompt_keys has 1 entries"),
        (dict(rewards=[1.0] * 4, num_generations=2, completion_keys=[1, 2, 3]), "completion_keys has 3 entries"),
    ],
)
def test_round_stats_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        round_stats(**kwargs)
