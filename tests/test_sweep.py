"""`grpo-curriculum sweep`: the table and recommendation arithmetic, refusals before anything runs, a real 3-arm sweep
of the tiny model, and resuming after a real SIGKILL of the sweep."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.cli.sweep.table import Arm, fluctuation, recommend, recommended_stages, summarise, table_rows
from grpo_curriculum.core.errors import CurriculumError

PROJECT = Path(__file__).resolve().parent.parent
FAST = ["--max-steps", "4", "--held-out", "8", "--eval-every", "2"]
ONE = ["--seeds", "1"]  # the tests of the mechanics: one run an arm


@pytest.fixture
def recipe(tmp_path):
    """The demo recipe on 64 prompts: a run of a few steps takes about a second."""
    import yaml

    data = yaml.safe_load((PROJECT / "recipes" / "demo.yaml").read_text())
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump({**data, "dataset_num_prompts": 64}))
    return str(path)


# --- the arithmetic ----------------------------------------------------------------------------------------------


def _run(name, rewards, seconds_per_eval=1.0, every=10, seed=0):
    """A run record whose held-out curve is `rewards` at steps 0, every, 2 * every, ..."""
    points = [{"step": i * every, "completions": i * every * 16, "time": i * seconds_per_eval, "reward": r}
              for i, r in enumerate(rewards)]  # fmt: skip
    return {"arm": name, "seed": seed, "steps": (len(rewards) - 1) * every, "completions_per_step": 16,
            "train_time": (len(rewards) - 1) * seconds_per_eval, "wall_time": 1.0, "num_tokens": 1000.0,
            "peak_memory": 2**20, "memory_kind": "rss", "held_out": "rows", "points": points,
            "train_reward": [0.1, 0.3, 0.2], "zero_std": [0.5, 0.25, None]}  # fmt: skip


def _static(g):
    return Arm(f"g{g}", [{"num_generations": g, "temperature": 0.8}], g, 0.8)


def _twice(runs):
    """Each arm's run at two seeds with the same numbers: a zero-width interval, so arms with different finals are
    separated and the recommendation rules below are what decides."""
    return {name: [*arm_runs, *({**run, "seed": run["seed"] + 1} for run in arm_runs)]
            for name, arm_runs in runs.items()}


def test_fluctuation_is_the_std_of_step_to_step_differences():
    assert fluctuation([0.0, 1.0, 1.0, 2.0]) == pytest.approx(math.sqrt(1 / 3))  # differences 1, 0, 1
    assert fluctuation([0.5, 0.5, 0.5]) == 0.0
    assert math.isnan(fluctuation([0.1, None, 0.2]))  # fewer than two differences


def test_summary_target_steps_and_completions_to_target_and_not_reached():
    arms = [_static(4), _static(8)]
    runs = {"g4": [_run("g4", [0.0, 0.5, 0.6])], "g8": [_run("g8", [0.0, 0.9, 1.0], seconds_per_eval=2.0)]}
    rows, target = summarise(arms, runs)
    assert target == pytest.approx(0.9)  # 90% of the way from 0 to the best final, 1.0
    g4, g8 = rows
    assert g4["to_target"] is None and g8["to_target"]["step"] == 10 and g8["to_target"]["completions"] == 160
    assert g8["final"] == (1.0, 0.0) and g8["gain_per_hour"][0] == pytest.approx(1.0 / (4 / 3600))
    assert g4["samples_per_s"][0] == pytest.approx(20 * 16 / 2)
    cells = table_rows(rows)
    assert cells[0]["steps to target"] == "not reached" and cells[1]["completions to target"] == "160"
    # one seed an arm measures no noise: no recommendation, whatever the means
    result = recommend(rows, target)
    assert result["recommended"] is False and result["line"].startswith("none: cannot separate g8 and g4: with one "
                                                                        "seed an arm")  # fmt: skip
    rows, target = summarise(arms, _twice(runs))
    assert recommend(rows, target)["arm"].name == "g8"  # the only arm that reaches the target


def test_seeds_give_a_mean_and_a_95_percent_interval():
    arms = [_static(4)]
    rows, _ = summarise(arms, {"g4": [_run("g4", [0.0, 0.4]), _run("g4", [0.0, 0.6], seed=1)]}, target=0.5)
    assert rows[0]["final"] == (pytest.approx(0.5), pytest.approx(math.sqrt(0.02)))
    assert rows[0]["to_target"]["step"] == 10  # the mean curve reaches 0.5
    half = 12.706 * math.sqrt(0.02) / math.sqrt(2)  # Student's t at 1 degree of freedom
    assert rows[0]["interval"] == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert table_rows(rows)[0]["final"] == "0.500 [-0.771, 1.771]" and table_rows(rows)[0]["best"] == "0.500 ± 0.141"


def test_arms_whose_intervals_overlap_are_not_told_apart():
    arms = [_static(4), _static(8)]
    runs = {"g4": [_run("g4", [0.0, 0.4]), _run("g4", [0.0, 0.6], seed=1)],
            "g8": [_run("g8", [0.0, 0.3]), _run("g8", [0.0, 0.5], seed=1)]}
    rows, target = summarise(arms, runs)
    result = recommend(rows, target)
    assert result["recommended"] is False and result["switch"] is None
    assert result["line"] == ("none: cannot separate g4 and g8: their final held-out rewards' 95% intervals over 2 "
                              "seeds: g4 0.500 [-0.771, 1.771], g8 0.400 [-0.871, 1.671] overlap; more seeds "
                              "(`--seeds N`) or more steps would tell")  # fmt: skip
    # three seeds, tight: separated, and the line says by how much
    runs = {"g4": [_run("g4", [0.0, r], seed=i) for i, r in enumerate([0.50, 0.52, 0.51])],
            "g8": [_run("g8", [0.0, r], seed=i) for i, r in enumerate([0.30, 0.31, 0.32])]}
    rows, target = summarise(arms, runs)
    result = recommend(rows, target)
    assert result["recommended"] is True and result["arm"].name == "g4"
    assert "g4's final is above every other arm's (95% intervals over 3 seeds: g4 0.510 [0.485, 0.535], g8 0.310 " \
           "[0.285, 0.335])" in result["line"]
    # one arm of three inseparable from the best: named, the separated one not
    runs["g2"] = [_run("g2", [0.0, r], seed=i) for i, r in enumerate([0.49, 0.53, 0.50])]
    rows, target = summarise([*arms, _static(2)], runs)
    assert recommend(rows, target)["line"].startswith("none: cannot separate g4 and g2: ")


def test_the_faster_arm_to_the_target_wins_and_a_tie_goes_to_the_higher_final():
    arms = [_static(4), _static(8)]
    # G 4 reaches 0.9 after 1 s, G 8 after 2 s; both end above the target, G 8 within 0.01 of G 4: no switch
    runs = {"g4": [_run("g4", [0.0, 0.9, 0.95])], "g8": [_run("g8", [0.0, 0.5, 0.955])]}
    rows, target = summarise(arms, _twice(runs), target=0.9)
    result = recommend(rows, target)
    assert result["arm"].name == "g4" and result["switch"] is None
    assert "G 4 T 0.8: reaches the target 0.900 in 1.0 s" in result["line"]
    assert "0.50x the time of G 8 T 0.8, whose final is 0.955" in result["line"]
    # the same wall time to the target (within 5%): the higher final wins
    runs = {"g4": [_run("g4", [0.0, 0.9, 0.92])], "g8": [_run("g8", [0.0, 0.91, 0.97], seconds_per_eval=1.04)]}
    rows, target = summarise(arms, _twice(runs), target=0.9)
    assert recommend(rows, target)["arm"].name == "g8"


def test_a_switch_is_recommended_only_when_the_measured_curves_cross():
    arms = [_static(4), _static(8)]
    # G 4 ahead early (and first to the target), G 8 ahead from step 30 on and ending clearly higher
    runs = {"g4": [_run("g4", [0.0, 0.6, 0.8, 0.85, 0.86])], "g8": [_run("g8", [0.0, 0.3, 0.6, 0.9, 0.95])]}
    rows, target = summarise(arms, _twice(runs), target=0.8)
    result = recommend(rows, target)
    assert result["switch"] == (4, 30, 8)
    assert result["line"].startswith("G 4 until step 30, then G 8: ") and "was not run" in result["line"]
    assert recommended_stages(result) == [{"num_generations": 4, "temperature": 0.8, "until_step": 30},
                                          {"num_generations": 8, "temperature": 0.8}]  # fmt: skip
    # G 8 ends higher but never leads G 4 over the last evaluations: no crossing, no switch
    runs = {"g4": [_run("g4", [0.0, 0.6, 0.8, 0.85, 0.86])], "g8": [_run("g8", [0.0, 0.3, 0.9, 0.8, 0.95])]}
    rows, target = summarise(arms, _twice(runs), target=0.8)
    assert recommend(rows, target)["switch"] is None
    # within the margin (0.01): no switch either
    runs = {"g4": [_run("g4", [0.0, 0.6, 0.8, 0.85, 0.86])], "g8": [_run("g8", [0.0, 0.3, 0.6, 0.86, 0.865])]}
    rows, target = summarise(arms, _twice(runs), target=0.8)
    assert recommend(rows, target)["switch"] is None


def test_a_recommended_switch_is_a_recipe_ready_for_train(tmp_path):
    from grpo_curriculum.cli.check import check_report
    from grpo_curriculum.cli.main import build_parser
    from grpo_curriculum.cli.sweep.command import _write_recommended
    from grpo_curriculum.config.recipe import load_recipe

    demo, path = load_recipe("demo"), str(tmp_path / "recommended.yaml")
    stages = [{"num_generations": 4, "temperature": 0.8, "until_step": 300},
              {"num_generations": 8, "temperature": 0.8}]
    _write_recommended(path, demo.path, demo.raw, stages, "G 4 until step 300, then G 8: ...", str(tmp_path))
    recipe = load_recipe(path)
    assert [(s.num_generations, s.until_step) for s in recipe.curriculum.stages] == [(4, 300), (8, None)]
    assert recipe.training["output_dir"] == str(tmp_path / "recommended-run") and recipe.training["max_steps"] == 600
    assert open(path).read().startswith("# Recommended by `grpo-curriculum sweep`")
    assert check_report(build_parser().parse_args(["check", path]))[1]


def test_no_arm_reaching_the_target_recommends_the_best_final():
    arms = [_static(4), _static(8)]
    rows, target = summarise(arms, _twice({"g4": [_run("g4", [0.0, 0.2])], "g8": [_run("g8", [0.0, 0.3])]}),
                             target=0.9)
    result = recommend(rows, target)
    assert result["arm"].name == "g8" and "no arm reached the target 0.900" in result["line"]


def test_no_gain_over_step_0_recommends_nothing():
    arms = [_static(4), _static(8)]
    rows, target = summarise(arms, {"g4": [_run("g4", [0.3, 0.2])], "g8": [_run("g8", [0.3, 0.3])]})
    result = recommend(rows, target)
    assert result["line"].startswith("none: no arm gained held-out reward over step 0 (0.300)")
    assert result["arm"].name == "g8" and result["switch"] is None


def test_build_arms_refuses_a_repeated_g_and_unpaired_temperatures():
    from grpo_curriculum.cli.sweep.command import build_arms
    from grpo_curriculum.config.recipe import load_recipe

    recipe = load_recipe("demo")
    arms = build_arms(recipe, [2, 4], [0.7, 1.0], curriculum=True)
    assert [a.name for a in arms] == ["g2-t0.7", "g4-t1", "recipe"] and arms[1].temperature == 1.0
    assert arms[2].stages == recipe.raw["curriculum"]["stages"]
    with pytest.raises(CurriculumError, match=r"--num-generations = \[4, 4\]: lists G 4 more than once"):
        build_arms(recipe, [4, 4])
    with pytest.raises(CurriculumError, match=r"--temperatures = \[0.7, 0.8, 0.9\]: gives 3 values for 2 G values"):
        build_arms(recipe, [2, 4], [0.7, 0.8, 0.9])


# --- refusals before anything runs -------------------------------------------------------------------------------


def test_invalid_arms_are_refused_with_their_fixes_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "demo", "--num-generations", "3", "4", "5", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "2 of 3 arms refused, nothing was run" in err
    assert "arm g3 (--num-generations 3): curriculum.stages[0].num_generations = 3" in err
    assert "must divide the generation batch" in err and "or leave G 3 out of --num-generations" in err
    assert "arm g5 (--num-generations 5)" in err and "arm g4" not in err
    assert not out.exists()
    # malformed (exit 2): a temperature no stage takes
    assert main(["sweep", "demo", "--num-generations", "4", "--temperatures", "-1", "--out", str(out)]) == 2
    assert "arm g4-t-1 (--num-generations 4): curriculum.stages[0].temperature = -1.0" in capsys.readouterr().err
    assert main(["sweep", "demo", "--num-generations", "4", "--target", "nan", "--out", str(out)]) == 2
    assert "--target = nan: must be a finite held-out reward" in capsys.readouterr().err
    assert not out.exists()


def test_a_reward_function_that_cannot_be_imported_stops_before_the_folder_is_written(tmp_path, capsys):
    out = tmp_path / "sweep"
    recipe = tmp_path / "bad.yaml"
    recipe.write_text((PROJECT / "recipes" / "demo.yaml").read_text().replace("tasks:echo_reward", "tasks:no_such"))
    assert main(["sweep", str(recipe), "--num-generations", "4", *FAST, "--out", str(out)]) == 2
    assert "reward_funcs = 'grpo_curriculum.demo.tasks:no_such': cannot be imported" in capsys.readouterr().err
    assert not out.exists()


def test_an_out_folder_holding_other_files_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["sweep", "demo", "--num-generations", "4", *FAST, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--out = '" in err and "is a folder that already holds files" in err and "choose a new folder" in err
    assert os.listdir(out) == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"


def test_held_out_rows_are_kept_out_of_training_and_of_the_warm_start(recipe, monkeypatch):
    from grpo_curriculum.cli.build import build_run
    from grpo_curriculum.cli.sweep.held_out import held_out_split
    from grpo_curriculum.config.recipe import load_recipe
    from grpo_curriculum.demo import tasks

    seen = []
    monkeypatch.setattr(tasks, "warm_start", lambda model, tokenizer, dataset, **kwargs: seen.append(dataset))
    loaded, held = load_recipe(recipe), {}
    dataset = build_run(loaded, held_out_split(loaded, 8, held))[2]
    assert held["name"] == "rows 56-63 of the train split `train`" and len(held["rows"]) == 8
    assert len(dataset) == 56 and len(seen[0]) == 56  # the warm start sees only the training rows
    full = tasks.TASKS["echo"][0](64, seed=0)["prompt"]  # the recipe's dataset: the last 8 are held out
    assert list(seen[0]["prompt"]) == full[:56] and [row["prompt"] for row in held["rows"]] == full[56:]
    with pytest.raises(CurriculumError, match="--held-out = 64: needs more rows than the train split `train` holds"):
        build_run(loaded, held_out_split(loaded, 64, {}))
    # a recipe that evaluates: its eval split is the held-out set, and every train row trains
    loaded, held = load_recipe(recipe, {"eval_strategy": "steps", "eval_steps": 2}), {}
    dataset, eval_dataset = build_run(loaded, held_out_split(loaded, 8, held))[2:4]
    assert held["name"] == "rows 0-7 of the eval split `test`" and len(dataset) == 64
    assert [row["prompt"] for row in held["rows"]] == eval_dataset["prompt"][:8]


def test_held_out_larger_than_the_data_is_refused_before_anything_is_written(tmp_path, recipe, capsys):
    out = tmp_path / "never"
    for size in ("64", "100"):  # 64 rows: one must be left to train on
        assert main(["sweep", recipe, "--num-generations", "4", "--max-steps", "2", "--held-out", size,
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert (f"--held-out = {size}: needs more rows than the train split `train` holds (64, and at least one must "
                "be left to train on)") in err and "fix: hold out fewer, e.g. `--held-out 16`" in err
        assert "Traceback" not in err and not out.exists()
    assert main(["sweep", recipe, "--num-generations", "4", "--held-out", "65", "--plan-memory",
                 "--out", str(out)]) == 2 and not out.exists()


def test_the_default_held_out_fits_small_datasets(tmp_path, recipe):
    from grpo_curriculum.cli.sweep.held_out import resolve_held_out
    from grpo_curriculum.config.recipe import load_recipe

    for prompts, default in ((2, 1), (16, 4), (64, 16), (255, 63), (256, 64), (4096, 64)):
        assert resolve_held_out(load_recipe(recipe, {"dataset_num_prompts": prompts}), None) == default
    evaluating = load_recipe(recipe, {"eval_strategy": "steps", "eval_steps": 2})  # the eval split: 64 rows, all
    assert resolve_held_out(evaluating, None) == 64
    with pytest.raises(CurriculumError, match="needs more rows than the train split `train` holds"):
        resolve_held_out(load_recipe(recipe, {"dataset_num_prompts": 1}), None)
    small = tmp_path / "small.yaml"
    small.write_text(Path(recipe).read_text().replace("dataset_num_prompts: 64", "dataset_num_prompts: 16"))
    out = tmp_path / "sweep"
    assert main(["sweep", str(small), "--num-generations", "4", "--max-steps", "1", "--eval-every", "1",
                 "--out", str(out)]) == 0  # the default of 64 was more than its 16 rows: the run failed
    assert json.loads((out / "sweep_manifest.json").read_text())["held_out"] == 4


def test_without_out_the_same_command_finds_its_own_sweep(tmp_path):
    from grpo_curriculum.cli.sweep.command import MANIFEST_FILE, default_out

    base, settings = str(tmp_path / "sweep"), {"arms": ["g4"]}
    assert default_out(settings, base) == base
    os.makedirs(base)
    (Path(base) / "notes.txt").write_text("not a sweep")
    os.makedirs(base + "-2")
    (Path(base + "-2") / MANIFEST_FILE).write_text(json.dumps({"arms": ["g8"]}))  # another sweep
    assert default_out(settings, base) == base + "-3"
    os.makedirs(base + "-3")
    (Path(base + "-3") / MANIFEST_FILE).write_text(json.dumps(settings))
    assert default_out(settings, base) == base + "-3"  # this sweep's: re-running resumes it


# --- real sweeps -------------------------------------------------------------------------------------------------


def _check_outputs(out: Path, arms: list[str]):
    from grpo_curriculum.cli.check import check_report
    from grpo_curriculum.cli.main import build_parser
    from grpo_curriculum.config.recipe import load_recipe

    table = (out / "sweep.md").read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines() if line[:1] == "|"]
    assert rows[0] == ["arm", "final", "best", "steps to target", "completions to target", "fluctuation", "samples/s",
                       "tokens/s", "peak memory", "zero-std", "reward/hour"]  # fmt: skip
    assert [row[0] for row in rows[2:]] == arms and all(row[8].endswith(" MiB") for row in rows[2:])
    assert "one greedy completion each" in table and "recommendation: " in table
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "sweep.json").read_text())
    assert [a["name"] for a in summary["arms"]] == arms and summary["recommendation"] in table
    for arm in summary["arms"]:
        assert [p["step"] for p in arm["curve"]] == [0, 2, 4] and arm["samples_per_s"][0] > 0
    if summary["recommended_stages"] is None:  # no recommendation from noise: no recipe of it
        assert summary["recommendation"].startswith("none: ") and not (out / "recommended.yaml").exists()
        return summary
    recipe = load_recipe(str(out / "recommended.yaml"))  # ready for `train`: it loads and checks
    assert summary["recommended_stages"] == recipe.raw["curriculum"]["stages"]
    lines, ok = check_report(build_parser().parse_args(["check", str(out / "recommended.yaml")]))
    assert ok, lines
    return summary


def test_a_three_arm_sweep_of_the_tiny_model_end_to_end(tmp_path, capsys, recipe):
    out = tmp_path / "sweep"
    assert main(["sweep", recipe, "--num-generations", "2", "4", "8", *FAST, *ONE, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = _check_outputs(out, ["g2", "g4", "g8"])
    assert summary["recommendation"].startswith("none: cannot separate g")  # one seed: never from noise
    assert "recommendation: " + summary["recommendation"] in printed
    results = [json.loads((out / "arms" / a / "seed-0" / "sweep_result.json").read_text()) for a in ("g2", "g4", "g8")]
    assert {r["points"][0]["reward"] for r in results} == {results[0]["points"][0]["reward"]}  # the same step-0 model
    assert results[0]["held_out"] == "rows 56-63 of the train split `train`"
    # the same command again: every run is finished, nothing is trained, the report is written again
    assert main(["sweep", recipe, "--num-generations", "2", "4", "8", *FAST, *ONE, "--out", str(out)]) == 0
    assert capsys.readouterr().out.count("finished earlier") == 3
    # other settings in the same folder: refused
    assert main(["sweep", recipe, "--num-generations", "2", "4", *FAST, *ONE, "--out", str(out)]) == 2
    assert "holds a sweep of other settings (arms differ" in capsys.readouterr().err


def test_a_killed_sweep_resumes_at_its_first_unfinished_run(tmp_path, capsys, recipe):
    out = tmp_path / "sweep"
    command = ["sweep", recipe, "--num-generations", "2", "4", "8", *FAST, *ONE, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "grpo_curriculum", *command], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    second = out / "arms" / "g4" / "seed-0"
    deadline = time.monotonic() + 300
    while not second.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert second.exists(), "the sweep never started its second arm"
    process.send_signal(signal.SIGKILL)  # the sweep process, during arm 2
    process.wait()
    while time.monotonic() < deadline:  # its arm is killed with it (Linux), or stops at its next step
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    first = out / "arms" / "g2" / "seed-0" / "sweep_result.json"
    before = (first.read_text(), first.stat().st_mtime_ns)
    assert not (second / "sweep_result.json").exists() and not (out / "sweep.md").exists()

    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "arm g2, seed 0: finished earlier" in printed and "arm g4 (G 4 T 0.8), seed 0: training" in printed
    assert (first.read_text(), first.stat().st_mtime_ns) == before  # arm 1 was not trained again
    _check_outputs(out, ["g2", "g4", "g8"])


def test_seeds_in_parallel_jobs_report_mean_and_spread(tmp_path, capsys, recipe):
    out = tmp_path / "sweep"
    assert main(["sweep", recipe, "--num-generations", "2", "4", "--seeds", "2", "--jobs", "2", *FAST,
                 "--out", str(out)]) == 0  # fmt: skip
    assert sorted(str(p.relative_to(out)) for p in out.glob("arms/*/*/sweep_result.json")) == [
        f"arms/{arm}/seed-{seed}/sweep_result.json" for arm in ("g2", "g4") for seed in (0, 1)]
    table = (out / "sweep.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("|")][2:]  # below the header
    assert "2 seeds an arm (final: mean [95% t-interval of the mean]; the others: mean ± std)" in table
    interval = r"\| -?[0-9.]+ \[-?[0-9.]+, -?[0-9.]+\] \|"  # the final: mean [low, high]
    assert [row.count(" ± ") for row in rows] == [7, 7] and all(re.search(interval, row) for row in rows)
    seeds = [json.loads((out / "arms" / "g4" / f"seed-{s}" / "sweep_result.json").read_text()) for s in (0, 1)]
    assert seeds[0]["train_reward"] != seeds[1]["train_reward"]  # two seeds, two runs
