"""The issue-25 study's analysis (benchmarks/study2.py: the tuning-seed choice, the halves check, verdict.json,
resuming), on stand-in runs: no training."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from tests.test_study import _stand_in_run  # noqa: E402

TUNING, REPORTED = [100, 101, 102], list(range(8))


def _runs(per_prompt_curve, top_up_curve=None):
    """Stand-in runs: on the tuning seeds static_g4 has the larger AUC, on the reported seeds static_g2 does."""
    runs = []
    for seed in TUNING:
        runs.append(_stand_in_run("static_g2", seed, [0.5, 0.6, 0.7, 0.8], 20))
        runs.append(_stand_in_run("static_g4", seed, [0.5, 0.7, 0.8, 0.85], 40))
        runs.append(_stand_in_run("per_prompt", seed, [0.5, 0.8, 0.85, 0.9], 50))
        runs.append(_stand_in_run("per_prompt_variance", seed, [0.5, 0.6, 0.7, 0.8], 50))
    for seed in REPORTED:
        runs.append(_stand_in_run("static_g2", seed, [0.5, 0.8, 0.85, 0.9], 20))
        runs.append(_stand_in_run("static_g4", seed, [0.5, 0.6 + 0.01 * seed, 0.7, 0.8], 40))
        runs.append(_stand_in_run("per_prompt", seed, per_prompt_curve(seed), 60))
        if top_up_curve is not None:
            runs.append(_stand_in_run("top_up", seed, top_up_curve(seed), 30))
    for seed in TUNING:
        runs.append(_stand_in_run("top_up", seed, [0.5, 0.6, 0.7, 0.8], 30))
    return runs


def test_the_reference_and_the_rule_variant_are_chosen_on_the_tuning_seeds_only():
    import study2

    runs = _runs(lambda seed: [0.5, 0.7, 0.8, 0.85])
    chosen = study2.choose(runs, "prefix_levels", TUNING)
    assert chosen["static"] == "static_g4"  # static_g2 is better on the reported seeds: not looked at
    assert chosen["per_prompt"] == "per_prompt" and chosen["top_up"] == "top_up"
    assert "dynamic" not in chosen  # no variant of it ran on every tuning seed


def test_a_verdict_that_flips_between_the_halves_is_undecided():
    import study2

    # per_prompt ahead of the reference on the first half of the seeds, behind it on the second
    flips = lambda seed: [0.5, 0.8, 0.85, 0.9] if seed < 4 else [0.5, 0.55, 0.6, 0.7]  # noqa: E731
    steady = lambda seed: [0.5, 0.75 + 0.01 * seed, 0.8, 0.85]  # noqa: E731  (ahead on every seed)
    summary = study2.summarise(_runs(flips, steady), "prefix_levels", TUNING, REPORTED)
    assert summary["reference"] == "static_g4" and summary["halves"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    pp, tu = summary["rows"]["per_prompt"], summary["rows"]["top_up"]
    assert pp["half_signs"] == [1, -1] and not pp["halves_agree"]
    assert study2.verdict_word(pp, False) == "undecided"
    assert tu["half_signs"] == [1, 1] and tu["halves_agree"] and study2.verdict_word(tu, False) == "better"
    assert tu["auc_diff_ci"][0] > 0
    assert summary["best_halves"] == ["per_prompt", "top_up"] and not summary["best_agree"]


def test_the_report_writes_verdict_json_in_the_issue_schema(tmp_path, monkeypatch):
    import study2

    never = lambda seed: [0.5, 0.5, 0.5, 0.5]  # noqa: E731  (never reaches 90% of the reference's gain)
    runs = _runs(never, lambda seed: [0.5, 0.75, 0.8, 0.85])
    (tmp_path / "runs").mkdir()
    for run in runs:
        study2.run_path(tmp_path, run["task"], run["seed"], run["arm"]).write_text(json.dumps(run))
    monkeypatch.setattr(study2, "plot", lambda *args: None)
    text = study2.report(tmp_path, ["prefix_levels"], TUNING, REPORTED, "python benchmarks/study2.py --x", False)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["command"] == "python benchmarks/study2.py --x"
    task = verdict["tasks"]["prefix_levels"]
    assert task["generation_batch"] == study2.GENERATION_BATCH
    assert (task["reported_seeds"], task["tuning_seeds"], task["reference"]) == (REPORTED, TUNING, "static_g4")
    keys = {"rise_seed_stds", "auc_diff_median", "auc_diff_ci", "ratio90_median", "ratio90_ci", "halves_agree"}
    assert set(task["arms"]) == {"static_g4", "per_prompt", "top_up"}
    assert all(keys <= set(arm) for arm in task["arms"].values())
    assert task["arms"]["per_prompt"]["ratio90_median"] is None  # never, as null
    assert task["arms"]["per_prompt"]["verdict"] == "worse" and task["arms"]["top_up"]["verdict"] == "better"
    assert task["arms"]["static_g4"]["ratio90_median"] == 1.0
    assert "| `per_prompt` | worse |" in text


def test_one_default_a_mode_is_chosen_over_every_task_on_the_tuning_seeds():
    """Each task's tuning seeds may prefer another variant; the library's default is the best on average."""
    import copy

    import study2

    levels = _runs(lambda seed: [0.5, 0.7, 0.8, 0.85])  # per_prompt far ahead of per_prompt_variance on tuning seeds
    tail = copy.deepcopy(levels)
    for run in tail:
        run["task"] = "prefix_tail"
        if run["seed"] in TUNING and run["arm"] == "per_prompt":  # just behind per_prompt_variance on this task
            for point, y in zip(run["eval"], [0.5, 0.6, 0.7, 0.75], strict=True):
                point["exact"] = y
    runs = levels + tail
    assert study2.choose(runs, "prefix_tail", TUNING)["per_prompt"] == "per_prompt_variance"
    assert study2.choose(runs, "prefix_levels", TUNING)["per_prompt"] == "per_prompt"
    assert study2.defaults(runs, ["prefix_levels", "prefix_tail"], TUNING) == {"per_prompt": "per_prompt",
                                                                               "top_up": "top_up"}  # fmt: skip
    default = study2.defaults(runs, ["prefix_levels", "prefix_tail"], TUNING)
    summary = study2.summarise(runs, "prefix_tail", TUNING, REPORTED, default)
    assert summary["preregistered"] == ["static_g4", "per_prompt"]  # the defaults (top_up has no reported runs)


def test_a_default_must_meet_its_modes_rule_on_the_tuning_seeds_when_a_variant_does():
    """top_up_p16 has the smaller AUC but raises the informative share over static G 4 (its mean G); top_up not."""
    import study2

    runs = _runs(lambda seed: [0.5, 0.7, 0.8, 0.85])
    runs += [_stand_in_run("top_up_p16", seed, [0.5, 0.55, 0.65, 0.75], 45) for seed in TUNING]
    assert not study2.meets_rule(runs, "prefix_levels", "top_up", TUNING)  # 0.30 vs static G 4's 0.40
    assert study2.meets_rule(runs, "prefix_levels", "top_up_p16", TUNING)  # 0.45
    assert study2.defaults(runs, ["prefix_levels"], TUNING)["top_up"] == "top_up_p16"
    for run in runs:  # now no variant meets it: the AUC alone decides
        if run["arm"] == "top_up_p16":
            run["probe"]["informative"] = 35
    assert study2.defaults(runs, ["prefix_levels"], TUNING)["top_up"] == "top_up"
    for run in runs:  # a deferring per-prompt variant does not meet its rule; per_prompt_variance (no deferral) does
        if run["arm"] == "per_prompt":
            run["deferred"] = 4
    assert study2.defaults(runs, ["prefix_levels"], TUNING)["per_prompt"] == "per_prompt_variance"


def test_the_targets_and_the_rules_are_measured_on_the_defaults():
    import study2

    fast = lambda seed: [0.5, 0.84 + 0.001 * seed, 0.85, 0.86]  # noqa: E731  (90% of the reference's gain at ~0.3x)
    runs = _runs(fast, lambda seed: [0.5, 0.45, 0.45, 0.5 - 0.001 * seed])  # top_up below the reference everywhere
    for run in runs:  # per_prompt, reported seeds: G 5 on prompts of success <= 0.05, G 10 on those of 0.5-0.8
        if run["arm"] == "per_prompt" and run["seed"] in REPORTED:
            run["probe"]["bins"] = [[10, 50, 20], [0, 0, 0], [0, 0, 0], [5, 50, 40], [0, 0, 0], [0, 0, 0]]
    default = study2.defaults(runs, ["prefix_levels"], TUNING)
    summary = study2.summarise(runs, "prefix_levels", TUNING, REPORTED, default)
    measured = study2.targets({"prefix_levels": summary})
    task = measured["tasks"]["prefix_levels"]
    per_prompt = summary["rows"]["per_prompt"]
    assert per_prompt["auc_diff_ci"][0] > 0 and per_prompt["ratio90_median"] <= study2.RATIO90_TARGET
    assert task["wins"] == ["per_prompt"] and task["losses"] == ["top_up"]
    assert not measured["product_met"]  # a default mode's CI is below 0 on a task
    rare = task["per_prompt_rare"]
    assert (rare["share"], rare["reference_share"], rare["mean_G_there"]) == (0.5, 1.0, 5.0)
    assert rare["mean_G"] == pytest.approx(100 / 15) and not rare["pass"]  # G 5 there, below its mean G
    informative = task["top_up_informative"]
    assert informative["static"] == "static_g4"  # top-up's mean G 4: the same budget as static G 4
    assert informative["diff_median"] == pytest.approx(-0.1) and not informative["pass"]
    for run in runs:  # the same G everywhere: not starved, unless a prompt was deferred
        if run["arm"] == "per_prompt" and run["seed"] in REPORTED:
            run["probe"]["bins"] = [[10, 50, 20], [0, 0, 0], [0, 0, 0], [10, 50, 40], [0, 0, 0], [0, 0, 0]]
    fair = study2.summarise(runs, "prefix_levels", TUNING, REPORTED, default)
    assert study2.rule_checks(fair)["per_prompt_rare"]["pass"]
    runs[-1 - next(i for i, r in enumerate(reversed(runs)) if r["arm"] == "per_prompt")]["deferred"] = 3
    assert not study2.rule_checks(study2.summarise(runs, "prefix_levels", TUNING, REPORTED, default))[
        "per_prompt_rare"]["pass"]  # fmt: skip
    text = "\n".join(study2.targets_lines(measured, {"prefix_levels": summary}))
    assert "**missed**" in text and "STARVED" in text and "NOT raised" in text


def test_a_rerun_skips_the_runs_already_on_disk(tmp_path, monkeypatch):
    import study2

    job = (tmp_path, "prefix_levels", 0, ["static_g2", "per_prompt"], 48, 16)
    (tmp_path / "runs").mkdir()
    study2.run_path(tmp_path, "prefix_levels", 0, "static_g2").write_text("{}")

    class Started(Exception):
        pass

    def pool(*args, **kwargs):
        raise Started

    monkeypatch.setattr(study2.multiprocessing, "get_context", lambda method: type("C", (), {"Pool": pool}))
    with pytest.raises(Started):  # per_prompt is missing: the job runs
        study2.run_jobs([job], 1)
    study2.run_path(tmp_path, "prefix_levels", 0, "per_prompt").write_text("{}")
    study2.run_jobs([job], 1)  # every run on disk: no process started
    assert study2.run_job(job) == []  # nor any training in a worker
