"""The comparison curriculum's pure rules: which completions keep their advantage, validation, the margin's ramp."""

import math

import pytest

from grpo_curriculum.core.comparison import Comparison, comparison_keep, largest_margin
from grpo_curriculum.core.errors import CurriculumError
from grpo_curriculum.core.schedule import Stage, StageSchedule

from .test_cli_check import ROOT, check

NAN = float("nan")


@pytest.mark.parametrize("rewards, sizes, keep", [
    ([0.0, 0.5, 1.0, 0.2], [4], [True, False, True, False]),                 # best and worst only
    ([1.0, 1.0, 0.0, 0.5], [4], [True, True, True, False]),                  # ties at the top all keep it
    ([1.0, 1.0 + 5e-7, 0.0, 0.0], [4], [True, True, True, True]),            # ties within 1e-6
    ([0.0, 1.0], [2], [True, True]),                                         # G 2: unchanged
    ([0.3] * 8, [8], [False] * 8),                                           # all equal: nothing to compare
    ([NAN, 0.0, 1.0, 0.5], [4], [False, True, True, False]),                 # unscored rows never keep one
    ([NAN, NAN, 1.0, NAN], [4], [False] * 4),                                # one finite reward: no comparison
    ([None, 2.0, 3.0], [3], [False, True, True]),
    ([0.0, 1.0, 0.5, 2.0, 2.0, 2.0, 9.0], [3, 3, 1], [True, True, False, False, False, False, False]),
])
def test_extremes(rewards, sizes, keep):
    assert comparison_keep(rewards, sizes, "extremes") == keep


def test_margin_is_group_stds_from_the_mean():
    rewards = [0.0, 1.0, 2.0, 3.0, 4.0]  # mean 2, Bessel std sqrt(2.5) = 1.581
    assert comparison_keep(rewards, [5], "margin", 1.0) == [True, False, False, False, True]
    assert comparison_keep(rewards, [5], "margin", 0.6) == [True, True, False, True, True]
    assert comparison_keep(rewards, [5], "margin", 0.0) == [True, True, True, True, True]
    assert comparison_keep(rewards, [5], "margin", 1.27) == [False] * 5  # 2 / 1.581 = 1.265
    # the boundary itself counts: 2 / std at exactly that margin
    assert comparison_keep(rewards, [5], "margin", 2 / math.sqrt(2.5)) == [True, False, False, False, True]


def test_margin_matches_trl_group_scaled_advantages():
    rewards = [0.1, 0.9, 0.4, 0.4, 0.75, 0.0]
    n, mean = len(rewards), sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    advantages = [(r - mean) / std for r in rewards]
    for margin in (0.0, 0.3, 0.8, 1.2, 1.5):
        assert comparison_keep(rewards, [n], "margin", margin) == [abs(a) >= margin for a in advantages]


def test_all_keeps_everything_and_sizes_must_add_up():
    assert comparison_keep([NAN, 0.0, 0.0], [3], "all") == [True] * 3
    with pytest.raises(ValueError, match="add up"):
        comparison_keep([0.0, 1.0, 0.5], [2], "extremes")


@pytest.mark.parametrize("value, message", [
    ({"mode": "best"}, "must be one of ['all', 'extremes', 'margin']"),
    ({"mode": "margin"}, "is required with `mode: margin`"),
    ({"mode": "margin", "margin": NAN}, "must be a number in [0, 64]"),
    ({"mode": "margin", "margin": 65}, "must be a number in [0, 64]"),
    ({"mode": "margin", "margin": True}, "must be a number"),
    ({"mode": "extremes", "margin_end": 0.0}, "only applies with `mode: margin`"),
    ({"margin": 1.0}, "only applies with `mode: margin`"),
    ({"mode": "all", "extra": 1}, "is not a comparison setting"),
    ("extremes", "must be a mapping of comparison settings"),
])
def test_bad_comparisons_are_refused_with_the_key(value, message):
    with pytest.raises(CurriculumError) as error:
        Stage(num_generations=4, temperature=1.0, comparison=value)
    assert message in str(error.value) and "Stage.comparison" in str(error.value)


@pytest.mark.parametrize("g, expected", [(2, 0.7071), (3, 1.1547), (4, 1.5), (8, 2.4749), (16, 3.75)])
def test_the_largest_margin_is_reached_by_one_outlier_and_by_nothing_beyond(g, expected):
    """(G - 1) / sqrt(G): one completion apart from G - 1 equal ones keeps its advantage at exactly that margin; no
    group of G rewards keeps any completion above it (random groups, and every 0/1 group)."""
    import random

    bound = largest_margin(g)
    assert round(bound, 4) == expected
    outlier = [1.0] + [0.0] * (g - 1)
    assert comparison_keep(outlier, [g], "margin", bound) == [True] + [g == 2] * (g - 1)  # (at G 2 both are)
    rng = random.Random(g)
    groups = [[float(bit) for bit in format(mask, f"0{g}b")] for mask in range(1, 2**g - 1)][:300]
    groups += [[rng.gauss(0, 1) for _ in range(g)] for _ in range(300)]
    for rewards in groups:
        assert not any(comparison_keep(rewards, [g], "margin", bound * 1.001)), rewards


@pytest.mark.parametrize("stage, key, bound, which", [
    ({"num_generations": 2, "comparison": {"mode": "margin", "margin": 0.8}}, "margin", "0.7071", "the stage's G"),
    ({"num_generations": 4, "comparison": {"mode": "margin", "margin": 64}}, "margin", "1.5", "the stage's G"),
    ({"num_generations": 4, "comparison": {"mode": "margin", "margin": 1.0, "margin_end": 1.6}}, "margin_end", "1.5",
     "the stage's G"),
    ({"adaptive": {"num_generations": [2, 8]}, "comparison": {"mode": "margin", "margin": 1.0}}, "margin", "0.7071",
     "the stage's smallest adaptive candidate"),
    ({"adaptive": {"policy": "per_prompt", "num_generations": [4, 8]}, "comparison": {"mode": "margin", "margin": 2}},
     "margin", "1.5", "the stage's smallest adaptive candidate"),
    ({"adaptive": {"policy": "top_up", "num_generations": [2, 16]}, "comparison": {"mode": "margin", "margin": 1.0}},
     "margin", "0.7071", "the top-up pilot"),
])
def test_a_margin_no_completion_can_reach_is_refused_naming_the_bound(stage, key, bound, which):
    with pytest.raises(CurriculumError) as error:
        Stage(temperature=1.0, **stage)
    (problem,) = error.value.problems
    assert problem.key == f"Stage.comparison.{key}"
    assert problem.rule.startswith(f"must be at most {bound}, (G - 1) / sqrt(G)") and which in problem.rule
    assert "zeroes every advantage" in problem.rule and f"lower `{key}` to at most" in problem.fix


@pytest.mark.parametrize("stage", [
    {"num_generations": 2, "comparison": {"mode": "margin", "margin": 0.707, "margin_end": 0.0}},
    {"num_generations": 4, "comparison": {"mode": "margin", "margin": 1.5}},
    {"num_generations": 2, "comparison": {"mode": "margin", "margin": largest_margin(2)}},
    {"adaptive": {"num_generations": [4, 8]}, "comparison": {"mode": "margin", "margin": 1.5}},
    {"adaptive": {"policy": "top_up", "num_generations": [4, 16]}, "comparison": {"mode": "margin", "margin": 1.5}},
])
def test_a_margin_within_reach_of_the_smallest_group_is_accepted(stage):
    assert Stage(temperature=1.0, **stage).comparison.mode == "margin"


def test_check_refuses_an_unreachable_margin_in_any_stage(capsys, tmp_path):
    """`check` and `train` validate the same recipe: a margin beyond a later stage's reach is exit 2, naming it."""
    recipe = tmp_path / "margin.yaml"
    text = (ROOT / "recipes" / "comparison-demo.yaml").read_text()
    recipe.write_text(text.replace("      comparison: {mode: extremes}",
                                   "      comparison: {mode: margin, margin: 2.6}"))  # G 8: at most 2.47
    code, _, err = check(capsys, recipe)
    assert code == 2
    assert "curriculum.stages[0].comparison.margin = 2.6: must be at most 2.475, (G - 1) / sqrt(G) at G 8" in err


def test_margin_ramps_over_the_stage_and_describes_itself():
    schedule = StageSchedule([
        Stage(num_generations=4, temperature=1.0, until_step=10, comparison={"mode": "extremes"}),
        Stage(num_generations=4, temperature=1.0, comparison=Comparison("margin", 1.0, 0.0)),
        ]).resolve(30)
    assert schedule.comparison_at(0) == ("extremes", None)
    assert schedule.comparison_at(10) == ("margin", 1.0)
    assert schedule.comparison_at(20) == ("margin", 0.5)
    assert schedule.describe() == [
        "stage 0: steps 1-10, G 4, temperature 1, comparisons: best and worst of each group",
        "stage 1: steps 11-30, G 4, temperature 1, comparisons: margin 1 -> 0 group stds"]
    plain = StageSchedule([Stage(num_generations=4, temperature=1.0)]).resolve(30)
    assert plain.comparison_at(5) == ("all", None)


def test_check_describes_each_stage_s_comparisons(capsys):
    code, out, _ = check(capsys, "comparison-demo")
    assert code == 0
    assert "stage 0 (extremes): G=8, temperature 1, comparisons: best and worst of each group, until 0.5" in out
