"""The task and the per-run measures of benchmarks/async_allocation.py (benchmarks/async_allocation_task.py): the
success rates, the hash-fixed Bernoulli reward TRL's spawned worker unpickles, the measures of what was trained and
generated, and the paired statistics. Pure: no torch, no vLLM."""

from __future__ import annotations

import json
import pickle
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import async_allocation_task as task  # noqa: E402


def test_success_rates_are_a_third_each_kind_shuffled_by_the_seed():
    rates = task.success_rates(24, seed=500)
    assert rates.count(1.0) == 8 and rates.count(0.0) == 8
    middle = sorted(r for r in rates if 0 < r < 1)
    assert middle[0] == pytest.approx(0.2) and middle[-1] == pytest.approx(0.8) and len(set(middle)) == 8
    assert rates == task.success_rates(24, seed=500) and rates != task.success_rates(24, seed=600)
    assert task.success_rates(3, seed=0).count(0.5) == 1
    with pytest.raises(ValueError, match="multiple of 3"):
        task.success_rates(25)


def test_prompts_are_distinct_words_of_the_demo_vocabulary():
    from grpo_curriculum.demo.tasks import VOCAB

    texts = task.prompt_texts(24)
    assert len(set(texts)) == 24 and all(word in VOCAB for text in texts for word in text.split())
    with pytest.raises(ValueError, match="at most"):
        task.prompt_texts(10_000)


def _messages(text):
    return [{"role": "user", "content": text}]


def test_the_reward_is_a_bernoulli_draw_at_the_prompt_rate_fixed_by_the_text_and_seed():
    completions = [[{"role": "assistant", "content": f"red {i} blue"}] for i in range(4000)]

    def rewards(rate, seed):
        n = len(completions)
        return task.bernoulli_reward([_messages("count red")] * n, completions, [rate] * n, [seed] * n)

    for rate in (0.0, 0.3, 1.0):
        drawn = rewards(rate, 7)
        assert set(drawn) <= {0.0, 1.0}
        assert statistics.mean(drawn) == pytest.approx(rate, abs=0.03)
    assert rewards(0.3, 7) == rewards(0.3, 7) and rewards(0.3, 7) != rewards(0.3, 8)


def test_the_reward_logs_one_line_a_call_and_is_picklable_by_name(tmp_path):
    log = tmp_path / "scored.jsonl"
    prompts, completions = [_messages("echo cat dog")] * 2, [[{"role": "assistant", "content": "a"}]] * 2
    task.bernoulli_reward(prompts, completions, [1.0, 1.0], [0, 0], log=[str(log)] * 2)
    task.bernoulli_reward(prompts, completions, [0.0, 0.0], [0, 0], log=[str(log)] * 2)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [{"prompts": ["echo cat dog"], "rewards": [1.0, 1.0]},
                     {"prompts": ["echo cat dog"], "rewards": [0.0, 0.0]}]  # fmt: skip
    assert pickle.loads(pickle.dumps(task.bernoulli_reward)) is task.bernoulli_reward  # by reference, as spawn needs
    assert task.rows(3, seed=1, log="x")["log"] == ["x"] * 3


def _taken(group_id, prompt, rewards, g=None):
    return [SimpleNamespace(group_id=group_id, prompt=prompt, reward=r, num_generations=float(g or len(rewards)),
                            model_version=1) for r in rewards]  # fmt: skip


RATES = {"easy": 1.0, "hard": 0.0, "mid": 0.5}


def test_run_measures_count_whole_groups_their_settled_share_and_informative_groups():
    taken = (_taken(0, "easy", [1, 1, 1, 1]) + _taken(1, "mid", [0, 1]) + _taken(2, "mid", [1, 1, 1, 1])
             + _taken(3, "hard", [0, 0]) + _taken(4, "mid", [0, 1], g=8))  # the last taken part way: left out
    m = task.run_measures(taken, RATES, windows=2)
    assert m["trained"] == 12 and m["groups"] == 4
    assert m["settled_share"] == pytest.approx(6 / 12)
    assert m["informative_per_100"] == pytest.approx(100 * 1 / 12)
    assert m["mean_g_settled"] == 3 and m["mean_g_unsettled"] == 3
    assert m["settled_share_by_window"] == [pytest.approx(4 / 6), pytest.approx(2 / 6)]


def test_a_group_taken_in_two_pieces_is_an_error():
    with pytest.raises(ValueError, match="two pieces"):
        task.groups(_taken(0, "mid", [0, 1]) + _taken(1, "mid", [0, 1]) + _taken(0, "mid", [0, 1]))


def test_scored_measures_count_every_generated_group():
    lines = [{"prompts": ["easy"], "rewards": [1, 1]}, {"prompts": ["mid"], "rewards": [0, 1, 1, 1]},
             {"prompts": ["hard"], "rewards": [0, 0]}]  # fmt: skip
    m = task.scored_measures(lines, RATES, windows=4)
    assert (m["generated"], m["generated_groups"]) == (8, 3)
    assert m["generated_settled_share"] == pytest.approx(0.5)
    assert m["generated_informative_per_100"] == pytest.approx(100 / 8)
    assert m["generated_settled_share_by_window"] == [1.0, 0.0, 0.0, 1.0]
    assert task.by_window([True], 2) == [None, 1.0]


def test_paired_differences_by_seed_with_the_study_statistics():
    runs = [{"seed": s, "arm": arm, "x": s + (1.0 if arm == "a" else 0.0)} for s in range(5) for arm in ("a", "b")]
    runs.append({"seed": 9, "arm": "a", "x": 100.0})  # no reference run: left out
    p = task.paired(runs, "x", "a", "b", [0, 1, 2, 3, 4, 9])
    assert p["seeds"] == 5 and p["diffs"] == [1.0] * 5 and p["median"] == 1.0
    assert (p["low"], p["high"], p["verdict"]) == (1.0, 1.0, 1)
    mixed = task.paired([{"seed": s, "arm": arm, "x": (s % 2) * 2 - 1 if arm == "a" else 0} for s in range(6)
                         for arm in ("a", "b")], "x", "a", "b", range(6))  # fmt: skip
    assert mixed["verdict"] == 0


def test_settled_share_between_completion_counts():
    groups = [["easy", 4, False], ["mid", 2, True], ["mid", 2, False], ["hard", 8, False]]
    assert task.settled_share_between(groups, RATES, [0, 4, 8]) == [1.0, 0.0, 1.0]
    assert task.settled_share_between(groups, RATES, [0, 100]) == [pytest.approx(12 / 16), None]


def test_by_kind_shares_and_mean_g():
    groups = [["easy", 4, False], ["mid", 2, True], ["mid", 8, False], ["hard", 2, False]]
    m = task.by_kind(groups, RATES)
    assert m["solved"] == {"share": 0.25, "mean_g": 4.0}
    assert m["informative"] == {"share": 0.625, "mean_g": 5.0}
    assert m["impossible"] == {"share": 0.125, "mean_g": 2.0}
