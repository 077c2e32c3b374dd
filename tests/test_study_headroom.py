"""Issue 42's parts of the study: the oracle arm (the settled prompts never sampled), each arm's position between the
post-hoc best static G and the oracle, where each arm's completions went by prompt kind; in verdict.json and study2.md.
Tables and stand-in runs: no training."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # `study` (benchmarks/study/)

from study import arms, report, stats, tasks  # noqa: E402
from tests.test_study_stats import REPORTED, TUNING, _stand_in_run  # noqa: E402

SIX = [[0, 0, 0]] * 6


def _bins(**at):
    """Six success bins `[groups, completions, informative]`, the given ones set (`b0`..`b5`)."""
    return [at.get(f"b{i}", [0, 0, 0]) for i in range(6)]


@pytest.mark.parametrize("probes, expected", [
    # one run: 8 completions at success <= 0.05 of which 4 on impossible prompts, 4 in 0.2-0.5, 4 at >= 0.95
    ([{"bins": _bins(b0=[2, 8, 0], b2=[1, 4, 4], b5=[1, 4, 0]), "impossible": [1, 4, 0]}],
     {"solved": 0.25, "impossible": 0.25, "rare-success": 0.25, "informative": 0.25}),
    # pooled over runs: completions, not runs, are weighed
    ([{"bins": _bins(b5=[1, 16, 0]), "impossible": [0, 0, 0]},
      {"bins": _bins(b0=[1, 16, 0], b1=[2, 32, 10]), "impossible": [1, 16, 0]}],
     {"solved": 0.25, "impossible": 0.25, "rare-success": 0.0, "informative": 0.5}),
    # the middle bins are all "informative"; no impossible prompt
    ([{"bins": _bins(b1=[1, 2, 2], b2=[1, 2, 0], b3=[1, 2, 2], b4=[1, 2, 0]), "impossible": [0, 0, 0]}],
     {"solved": 0.0, "impossible": 0.0, "rare-success": 0.0, "informative": 1.0}),
    ([{"bins": _bins(b0=[1, 4, 0])}], None),  # a run recorded before issue 42: no split of rare and impossible
    ([{"bins": SIX, "impossible": [0, 0, 0]}], None),  # nothing generated
    ([], None),
])  # fmt: skip
def test_completions_by_kind_splits_the_lowest_bin_into_impossible_and_rare(probes, expected):
    assert stats.completions_by_kind(probes) == expected


@pytest.mark.parametrize("oracle, arm, expected", [
    ((0.04, 0.6), (0.02, 0.8), (0.5, 0.5)),  # half the AUC gain, half the saving
    ((0.04, 0.6), (0.04, 0.6), (1.0, 1.0)),  # the oracle itself
    ((0.04, 0.6), (-0.01, 1.2), (-0.25, -0.5)),  # below the best static G: negative shares
    ((0.04, 0.6), (0.06, 0.4), (1.5, 1.5)),  # beyond the oracle
    ((0.04, 0.6), (0.01, math.inf), (0.25, None)),  # never reaches 90%: no saving share
    ((-0.01, 1.1), (0.01, 0.9), (None, None)),  # an oracle with nothing to capture: no shares
])  # fmt: skip
def test_headroom_places_each_arm_between_the_best_static_g_and_the_oracle(oracle, arm, expected):
    rows = {"oracle_g4": {"auc_diff_median": oracle[0], "ratio90_median": oracle[1]},
            "per_prompt": {"auc_diff_median": arm[0], "ratio90_median": arm[1]}}
    got = stats.headroom(rows, "oracle_g4")["per_prompt"]
    assert (got["auc_gain_share"], got["saving_share"]) == pytest.approx(expected)


def _settled_runs():
    """Stand-in runs of a settled task: static_g4 is the best static G on every seed set, oracle_g4 above it on the
    reported seeds by 0.1 of exact reward after the start, per_prompt half way, oracle_g8 below oracle_g4."""
    curves = {"static_g2": [0.5, 0.55, 0.6, 0.65], "static_g4": [0.5, 0.6, 0.7, 0.8],
              "oracle_g4": [0.5, 0.7, 0.8, 0.9], "oracle_g8": [0.5, 0.65, 0.75, 0.85],
              "per_prompt": [0.5, 0.65, 0.75, 0.85]}  # fmt: skip
    runs = []
    for seed in TUNING + REPORTED:
        for arm, ys in curves.items():
            if arm.startswith("oracle") and seed in TUNING:
                continue  # the oracle never runs on tuning seeds (never tuned, never a default)
            run = _stand_in_run(arm, seed, [y + 0.001 * seed for y in ys], 50)
            run["task"] = "prefix_settled"
            solved = 0 if arm.startswith("oracle") else 20
            run["probe"]["bins"] = _bins(b0=[5, 20, 0], b2=[10, 60 - solved, 30], b5=[5, 20 + solved, 0])
            run["probe"]["impossible"] = [0, 0, 0] if arm.startswith("oracle") else [3, 10, 0]
            runs.append(run)
    return runs


def test_the_report_places_each_arm_against_the_oracle_and_says_where_the_completions_went(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    for run in _settled_runs():
        arms.run_path(tmp_path, run["task"], run["seed"], run["arm"]).write_text(json.dumps(run))
    monkeypatch.setattr(report, "plot", lambda *args: None)
    text = report.report(tmp_path, ["prefix_settled"], TUNING, REPORTED, "python benchmarks/study --x", False, 48, 16,
                         ["oracle_g4", "oracle_g8"])  # fmt: skip
    task = json.loads((tmp_path / "verdict.json").read_text())["tasks"]["prefix_settled"]
    oracle = task["oracle"]
    assert (oracle["arm"], oracle["against"]) == ("oracle_g4", "static_g4")  # the better oracle, the best static G
    assert oracle["auc_diff_median"] > 0 and oracle["auc_diff_ci"][0] > 0
    position = oracle["position"]
    assert position["oracle_g4"] == {"auc_gain_share": 1.0, "saving_share": 1.0}
    assert position["per_prompt"]["auc_gain_share"] == pytest.approx(0.5, abs=0.01)
    assert 0 < position["oracle_g8"]["auc_gain_share"] < 1
    kinds = task["arms"]["per_prompt"]["completions_by_kind"]
    assert kinds == pytest.approx({"solved": 0.4, "impossible": 0.1, "rare-success": 0.1, "informative": 0.4})
    assert task["arms"]["oracle_g4"]["completions_by_kind"]["impossible"] == 0.0
    assert task["arms"]["oracle_g4"]["role"] == "extra" and task["arms"]["oracle_g4"]["mode"] == "oracle"
    assert "share of the oracle's AUC gain" in text and "| `per_prompt` | +0.0" in text
    assert "| `oracle_g4` | +0.0" in text and "| 100% |" in text


def test_a_task_without_settled_prompts_has_no_oracle(tmp_path, monkeypatch):
    runs = [r for r in _settled_runs() if not r["arm"].startswith("oracle")]
    summary = stats.summarise(runs, "prefix_settled", TUNING, REPORTED)
    assert summary["oracle"] is None and report.headroom_lines(summary) == []
    assert summary["kinds"]["per_prompt"]["solved"] == pytest.approx(0.4)


def test_the_oracle_trains_on_the_prompts_less_the_settled_ones():
    train = tasks.level_dataset("prefix_settled", 256, 0, tasks.TASKS["prefix_settled"][1],
                                tasks.IMPOSSIBLE["prefix_settled"])  # fmt: skip
    kept = tasks.without_settled(train)
    assert 0 < len(kept) < len(train)
    assert all(ok and level > 0 for ok, level in zip(kept["solvable"], kept["level"], strict=True))
    expected = [p for p, ok, level in zip(train["prompt"], train["solvable"], train["level"], strict=True)
                if ok and level > 0]  # fmt: skip
    assert kept["prompt"] == expected  # the same prompts in the same order
    assert [t for t in tasks.TASKS if tasks.has_settled(t)] == ["prefix_settled", "settled_heavy", "settled_tail"]
    assert [s.num_generations for s in arms.arm_stages("oracle_g8")] == [8]
    assert "oracle" in arms.PEER_MODES  # never tuned, never a default


def test_the_control_arm_is_static_g4_with_only_the_trainer_seeded_apart():
    assert [s.num_generations for s in arms.arm_stages("static_g4_reseeded")] == [4]
    assert arms.arm_stages("static_g4_reseeded")[0].adaptive is None
    assert arms.trainer_seed("static_g4", 800) == 800
    assert arms.trainer_seed("static_g4_reseeded", 800) == 800 + arms.CONTROL_SEED_OFFSET
    assert "control" in arms.PEER_MODES  # never tuned, never a default: reported with `--extra`


def test_an_oracle_arm_on_a_task_without_settled_prompts_fails_before_training():
    with pytest.raises(ValueError, match="needs a task with settled prompts"):
        arms.run_arm("prefix_levels", "oracle_g4", 0, 1, 1, warm={})  # before any training


def test_the_tuning_variants_are_not_reported_by_default():
    assert set(tasks.REPORTED_TASKS) | {"settled_heavy", "settled_tail"} == set(tasks.TASKS)
    for variant in ("settled_heavy", "settled_tail"):
        data = tasks.level_dataset(variant, 256, 0, tasks.TASKS[variant][1], tasks.IMPOSSIBLE[variant])
        assert sum(not ok for ok in data["solvable"]) == round(256 * tasks.IMPOSSIBLE[variant])
        assert 0 in data["level"]  # solved prompts (level 0)


def _main():
    import importlib.util

    spec = importlib.util.spec_from_file_location("study_main", Path(arms.__file__).parent / "__main__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_runs_the_given_arms_on_a_disjoint_seed_set_and_the_oracle_only_where_it_applies(tmp_path, monkeypatch):
    main = _main()
    jobs = []
    monkeypatch.setattr(main, "run_jobs", lambda js, processes: jobs.extend(js))
    assert main.main(["--out", str(tmp_path), "--tasks", "prefix_settled", "prefix_levels", "--reported", "2",
                      "--reported-from", "500", "--only", "static_g4", "oracle_g4"]) == 0  # fmt: skip
    got = {(task, seed): tuple(arm_list) for _, task, seed, arm_list, *_ in jobs}
    assert got == {("prefix_settled", 500): ("static_g4", "oracle_g4"), ("prefix_levels", 500): ("static_g4",),
                   ("prefix_settled", 501): ("static_g4", "oracle_g4"), ("prefix_levels", 501): ("static_g4",)}
    with pytest.raises(SystemExit):  # reported seeds may never be tuning seeds
        main.main(["--out", str(tmp_path), "--reported-from", "100", "--only", "static_g4"])
