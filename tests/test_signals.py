"""Tests for `grpo_curriculum.signals`: round statistics from flat rewards, and the per-prompt report."""

import json
import math
import os
import statistics

import pytest

from grpo_curriculum.signals import PromptReport, RoundStats, round_stats


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
        # groups of different sizes: each group's statistics over its own rows
        ([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], (2, 4, 2), dict(
            num_groups=3, zero_std_fraction=2 / 3, mean_group_std=math.sqrt(3 / 16) / 3, mean_reward=3 / 8,
            group_success=(1.0, 0.25, 0.0), group_counts=(2, 4, 2), group_zero_std=(True, False, True))),
    ],
)
def test_round_stats(rewards, G, expected):
    stats = round_stats(rewards, G)
    assert isinstance(stats, RoundStats)
    sizes = G if isinstance(G, tuple) else (G,) * (len(rewards) // G)
    assert stats.group_sizes == sizes
    assert stats.num_generations == (sizes[0] if len(set(sizes)) == 1 else None)
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


# --- PromptReport ----------------------------------------------------------------------------------------------------


def test_prompt_report_matches_direct_statistics_across_rounds():
    rounds = [
        (["a", "b"], [1.0, 0.0, 0.5, 0.5], 2),
        (["a", "c"], [0.0, 0.0, 1.0, None, 1.0, NAN, 0.2, 0.3], 4),
        (["b", "a"], [0.1, 0.9, 0.3, 1.0], 2),
    ]
    report, seen = PromptReport(), {}
    for keys, rewards, G in rounds:
        report.update(keys, rewards, G)
        for i, key in enumerate(keys):
            seen.setdefault(key, []).append([r for r in rewards[i * G : (i + 1) * G] if r is not None and r == r])
    rows = {row["prompt_key"]: row for row in report.rows()}
    assert len(report) == 3
    for key, groups in seen.items():
        flat = [r for group in groups for r in group]
        assert rows[key]["mean"] == pytest.approx(statistics.fmean(flat))
        assert rows[key]["variance"] == pytest.approx(statistics.pvariance(flat))
        assert rows[key]["times_seen"] == len(groups)
        assert rows[key]["completions"] == len(flat)


@pytest.mark.parametrize(
    "keys, rewards, G, order",
    [
        # highest variance first
        (["low", "high", "mid"], [0.5, 0.5, 0.0, 1.0, 0.25, 0.75], 2, ["high", "mid", "low"]),
        # ties broken by key; prompts without a finite reward last
        (["b", "n", "a", "c"], [0.0, 1.0, None, NAN, 1.0, 0.0, 0.3, 0.3], 2, ["a", "b", "c", "n"]),
    ],
)
def test_prompt_report_ordering(keys, rewards, G, order):
    report = PromptReport()
    report.update(keys, rewards, G)
    rows = report.rows()
    assert [row["prompt_key"] for row in rows] == order
    if "n" in order:
        assert rows[-1]["mean"] is None and rows[-1]["variance"] is None and rows[-1]["completions"] == 0


def test_prompt_report_texts_stored_on_first_sight():
    report = PromptReport()
    report.update(["a", "b"], [1, 0, 1, 1], 2)
    report.update(["a", "b"], [1, 0, 1, 1], 2, texts=["first a", [{"role": "user", "content": "b?"}]])
    report.update(["a"], [1, 0], 2, texts=["second a"])
    prompts = {row["prompt_key"]: row["prompt"] for row in report.rows()}
    assert prompts == {"a": "first a", "b": [{"role": "user", "content": "b?"}]}


def test_prompt_report_jsonl_and_state_round_trip(tmp_path):
    report = PromptReport()
    report.update([1, 2, 3], [0.0, 1.0, 0.5, 0.5, None, NAN], 2, texts=["one", "two", "three"])
    report.update([2, 4], [1.0, 0.0, 0.2, 0.4], 2, texts=["two again", "four"])
    path = tmp_path / "prompts.jsonl"
    path.write_text("stale\n")
    report.write_jsonl(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == report.rows()
    assert list(json.loads(lines[0])) == ["prompt_key", "prompt", "mean", "variance", "times_seen", "completions"]
    assert os.listdir(tmp_path) == ["prompts.jsonl"]  # the temporary file was replaced, not left behind

    restored = PromptReport()
    restored.load_state_dict(json.loads(json.dumps(report.state_dict())))
    assert restored.rows() == report.rows()
    restored.update([1], [1.0, 1.0], 2)
    report.update([1], [1.0, 1.0], 2)
    assert restored.rows() == report.rows()


def test_prompt_report_errors():
    report = PromptReport()
    with pytest.raises(ValueError, match="prompt_keys has 1 entries"):
        report.update(["a"], [1, 0, 1, 0], 2)
    with pytest.raises(ValueError, match="texts has 1 entries"):
        report.update(["a", "b"], [1, 0, 1, 0], 2, texts=["a"])
    with pytest.raises(ValueError, match="state version"):
        report.load_state_dict({"version": 99, "prompts": {}})
