"""The study's report and runs (benchmarks/study/report.py, arms.py): verdict.json in the issue's schema, a rerun that
skips the runs on disk, every arm's stages. No training."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # `study` (benchmarks/study/)

from study import arms, report  # noqa: E402
from tests.test_study_stats import REPORTED, TUNING, _runs  # noqa: E402



def test_the_report_writes_verdict_json_in_the_issue_schema(tmp_path, monkeypatch):
    never = lambda seed: [0.5, 0.5, 0.5, 0.5]  # noqa: E731  (never reaches 90% of the reference's gain)
    runs = _runs(never, lambda seed: [0.5, 0.75, 0.8, 0.85])
    (tmp_path / "runs").mkdir()
    for run in runs:
        arms.run_path(tmp_path, run["task"], run["seed"], run["arm"]).write_text(json.dumps(run))
    monkeypatch.setattr(report, "plot", lambda *args: None)
    text = report.report(tmp_path, ["prefix_levels"], TUNING, REPORTED, "python benchmarks/study --x", False, 48, 16)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["command"] == "python benchmarks/study --x"
    task = verdict["tasks"]["prefix_levels"]
    assert task["generation_batch"] == arms.GENERATION_BATCH
    assert (task["reported_seeds"], task["tuning_seeds"], task["reference"]) == (REPORTED, TUNING, "static_g4")
    keys = {"rise_seed_stds", "auc_diff_median", "auc_diff_ci", "ratio90_median", "ratio90_ci", "halves_agree"}
    assert set(task["arms"]) == {"static_g4", "per_prompt", "top_up"}
    assert all(keys <= set(arm) for arm in task["arms"].values())
    assert task["arms"]["per_prompt"]["ratio90_median"] is None  # never, as null
    assert task["arms"]["per_prompt"]["verdict"] == "worse" and task["arms"]["top_up"]["verdict"] == "better"
    assert task["arms"]["static_g4"]["ratio90_median"] == 1.0
    assert "| `per_prompt` | worse |" in text


def test_a_rerun_skips_the_runs_already_on_disk(tmp_path, monkeypatch):
    job = (tmp_path, "prefix_levels", 0, ["static_g2", "per_prompt"], 48, 16)
    (tmp_path / "runs").mkdir()
    arms.run_path(tmp_path, "prefix_levels", 0, "static_g2").write_text("{}")

    class Started(Exception):
        pass

    def pool(*args, **kwargs):
        raise Started

    monkeypatch.setattr(arms.multiprocessing, "get_context", lambda method: type("C", (), {"Pool": pool}))
    with pytest.raises(Started):  # per_prompt is missing: the job runs
        arms.run_jobs([job], 1)
    arms.run_path(tmp_path, "prefix_levels", 0, "per_prompt").write_text("{}")
    arms.run_jobs([job], 1)  # every run on disk: no process started
    assert arms.run_job(job) == []  # nor any training in a worker


def test_every_arm_of_the_study_builds_its_stages():
    for arm in arms.LIBRARY_ARMS:
        stages = arms.arm_stages(arm)
        assert stages and all(stage.temperature == arms.TEMPERATURE for stage in stages)
    assert [arm for mode, names in arms.MODES.items() for arm in names] == arms.ARMS
    assert arms.LIBRARY_ARMS == [a for a in arms.ARMS if arms.mode_of(a) not in arms.PEER_MODES]
    with pytest.raises(ValueError, match="unknown arm"):
        arms.arm_stages("cgrpo")  # the first study's peer arm, retired with it (now `trl_cgrpo`, mode `peer`)
    with pytest.raises(ValueError, match="peer arm"):
        arms.arm_stages("trl_cgrpo")  # another package's trainer: no stages


def test_a_missing_peer_package_fails_with_its_install_command(monkeypatch):
    find_spec = arms.importlib.util.find_spec  # only the peer's package is missing (transformers asks for others)
    monkeypatch.setattr(arms.importlib.util, "find_spec", lambda name, *a: None if name == "trl_cgrpo" else
                        find_spec(name, *a))
    assert arms.peer_missing("static_g4") is None
    assert arms.peer_missing("trl_cgrpo") == "pip install --no-deps trl-cgrpo==0.2.0"
    with pytest.raises(ImportError, match=r"pip install --no-deps trl-cgrpo==0\.2\.0"):
        arms.run_arm("prefix_settled", "trl_cgrpo", 0, 1, 1, warm={})  # before any training


def test_cgrpo_calibration_answers_are_what_its_extractor_reads():
    """Level 0's answer is `<eos>` alone (decoded ""), an impossible prompt's reference is never decoded."""
    data = arms.cgrpo_calibration("prefix_settled", 0)
    assert len(data) == arms.CGRPO_CALIBRATION and sum(not ok for ok in data["solvable"]) == 8
    for target, ok, answer in zip(data["target"], data["solvable"], data["answer"], strict=True):
        assert answer == (arms.cgrpo_answer(target) if ok else arms.CGRPO_UNSOLVABLE)
    assert arms.cgrpo_answer(" ") == arms.CGRPO_EOS and arms.cgrpo_answer("red cat") == "red cat"
