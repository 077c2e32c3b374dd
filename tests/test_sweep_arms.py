"""`sweep --arms`: the adaptive modes next to static G, over seeds, with intervals and generated completions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.cli.sweep.command import add_generated
from grpo_curriculum.cli.sweep.arms import named_arms, parse_arms
from grpo_curriculum.cli.sweep.table import Arm, generates_more, summarise, table_rows
from grpo_curriculum.config.recipe import load_recipe
from grpo_curriculum.core.errors import CurriculumError

PROJECT = Path(__file__).resolve().parent.parent


def test_arm_names_are_read_and_bad_ones_named():
    assert parse_arms(["g4", "per_prompt", "top_up", "dynamic", "dynamic-g8", "recipe"]) == [
        ("static", 4), ("per_prompt", None), ("top_up", None), ("dynamic", None), ("dynamic", 8), ("recipe", None)]
    with pytest.raises(CurriculumError) as error:
        parse_arms(["g4", "per-prompt", "bogus", "g4"])
    text = str(error.value)
    assert "--arms = 'per-prompt': is not an arm" in text and "write it `per_prompt`" in text
    assert "--arms = 'bogus': is not an arm: one of gN (static G N), per_prompt" in text
    assert "--arms = 'g4': is listed more than once" in text
    with pytest.raises(CurriculumError) as error:  # both trained, or the message named --num-generations
        parse_arms(["g2", "g02", "dynamic-g8", "dynamic-g08", "top_up"])
    text = str(error.value)
    assert "--arms = 'g2': and g02 name one arm, listed 2 times" in text and "--num-generations" not in text
    assert "--arms = 'dynamic-g8': and dynamic-g08 name one arm" in text


def test_a_skip_arm_is_static_g_skipping_settled_prompts():
    """`skip-gN` / `skip`: G N (the recipe's first stage's) with `skip: true`; a recipe's own skipping stage is taken."""
    assert parse_arms(["skip", "skip-g4"]) == [("skip", None), ("skip", 4)]
    demo = load_recipe("demo")
    arms = {arm.name: arm for arm in named_arms(demo, ["g4", "skip-g4", "skip"])}
    assert arms["skip-g4"].stages == [{"num_generations": 4, "temperature": 0.8, "skip": True}]
    assert arms["skip"].stages[0]["num_generations"] == demo.curriculum.stages[0].num_generations
    assert arms["skip-g4"].label == "G 4 skipping settled prompts"
    with pytest.raises(CurriculumError, match="'skip-g1': needs G >= 2"):
        named_arms(demo, ["skip-g1"])


def test_a_sweep_whose_later_seeds_pass_the_largest_seed_is_refused_before_any_run(tmp_path, capsys):
    """`seed: 4294967295` with 2 seeds was refused only after the first arm trained."""
    import yaml


    data = yaml.safe_load(Path(load_recipe("demo").path).read_text())
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({**data, "seed": 4294967295}))
    assert main(["sweep", str(path), "--num-generations", "2", "--seeds", "2", "--max-steps", "2",
                 "--out", str(tmp_path / "sw")]) == 2
    error = capsys.readouterr().err
    assert "--seeds = 2: runs each arm at seeds 4294967295 to 4294967296, past numpy's and torch's largest seed" in error
    assert "at most 4294967294" in error and not (tmp_path / "sw").exists()


def test_adaptive_arms_take_the_recipes_candidates_or_the_static_arms():
    demo = load_recipe("demo")  # no adaptive stage: the static arms' G values are the candidates
    arms = {arm.name: arm for arm in named_arms(demo, ["g2", "g4", "g8", "per_prompt", "top_up", "dynamic"])}
    assert arms["per_prompt"].stages == [{"temperature": 0.8, "adaptive": {"policy": "per_prompt",
                                                                           "num_generations": [2, 4, 8]}}]
    assert arms["top_up"].label == "top-up [2, 4, 8]" and arms["per_prompt"].label == "per-prompt G from [2, 4, 8]"
    dynamic = {"num_generations": 2, "temperature": 0.8, "dynamic_sampling": {"max_rounds": 2}}  # the default
    assert arms["dynamic"].stages == [dynamic]
    assert arms["dynamic"].label == "dynamic sampling at G 2 (max_rounds 2)" and arms["g4"].label == "G 4 T 0.8"
    # a recipe with a per-prompt stage: that stage (its options kept, its end dropped), for the whole run
    per_prompt = load_recipe("per-prompt-demo")
    arm = named_arms(per_prompt, ["g4", "per_prompt"])[1]
    assert arm.stages == [{"temperature": 0.8, "adaptive": {"policy": "per_prompt", "num_generations": [2, 4, 8, 16],
                                                            "weight": "knapsack", "success_threshold": 0.5}}]
    with pytest.raises(CurriculumError, match="pairs with static arms"):
        named_arms(demo, ["per_prompt"], temperatures=[0.7])


def test_arms_cannot_be_mixed_with_num_generations_and_a_bad_arm_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "demo", "--arms", "g4", "per_prompt", "--num-generations", "4", "--out", str(out)]) == 2
    assert "--num-generations = [4]: cannot be combined with --arms" in capsys.readouterr().err
    assert main(["sweep", "demo", "--arms", "g4", "g3", "--out", str(out)]) == 1  # G 3 does not divide 16
    err = capsys.readouterr().err
    assert "arm g3 (--arms g3): curriculum.stages[0].num_generations" in err and "or leave g3 out of --arms" in err
    assert not out.exists()
    assert main(["sweep", "demo", "--arms", "g4", "dynamic-g3", "--out", str(out)]) == 1
    assert "arm dynamic-g3 (--arms dynamic-g3)" in capsys.readouterr().err and not out.exists()


def test_points_count_the_completions_generated():
    points = [{"step": 0, "completions": 0}, {"step": 2, "completions": 32}, {"step": 3, "completions": 48}]
    history = [{"step": 1, "curriculum/generated": 48}, {"step": 2, "curriculum/generated": 16}, {"step": 3}]
    add_generated(points, history, per_step=16)
    assert [p["generated"] for p in points] == [0, 64, 80]  # 48 + 16, then a plain step's 16


def _run(rewards, generated, seed=0):
    points = [{"step": 10 * i, "completions": 160 * i, "time": float(i), "reward": r, "generated": g}
              for i, (r, g) in enumerate(zip(rewards, generated))]  # fmt: skip
    return {"arm": "x", "seed": seed, "steps": 10 * (len(rewards) - 1), "completions_per_step": 16,
            "train_time": float(len(rewards) - 1), "wall_time": 1.0, "num_tokens": 100.0, "peak_memory": 2**20,
            "memory_kind": "rss", "held_out": "rows", "points": points, "train_reward": [0.1, 0.2, 0.3],
            "zero_std": [0.5]}  # fmt: skip


def test_completions_to_target_are_generated_and_a_loss_is_no_gain():
    arms = [Arm("g4", [{"num_generations": 4, "temperature": 0.8}], 4, 0.8),
            Arm("dynamic", [{"num_generations": 4, "temperature": 0.8, "dynamic_sampling": {"max_rounds": 4}}])]
    runs = {"g4": [_run([0.2, 0.1], [0, 160]), _run([0.2, 0.15], [0, 160], seed=1)],
            "dynamic": [_run([0.2, 0.6], [0, 480]), _run([0.2, 0.62], [0, 500], seed=1)]}
    rows, target = summarise(arms, runs)
    assert generates_more(rows)
    cells = table_rows(rows)
    assert cells[1]["completions to target generated (trained)"] == "490 (160)"
    assert cells[0]["reward/hour"] == "no gain" and cells[1]["reward/hour"] != "no gain"


def test_a_sweep_of_per_prompt_and_dynamic_arms_over_two_seeds_shows_intervals(tmp_path, capsys):
    """The done-when of the issue: on the demo recipe (64 prompts, 6 steps an arm), 2 seeds by default."""
    import yaml

    data = yaml.safe_load((PROJECT / "recipes" / "demo.yaml").read_text())
    recipe = tmp_path / "quick.yaml"
    recipe.write_text(yaml.safe_dump({**data, "dataset_num_prompts": 64}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(recipe), "--arms", "g4", "per_prompt", "dynamic-g4", "--max-steps", "6",
                 "--held-out", "8", "--eval-every", "3", "--out", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "3 arms (g4, per_prompt, dynamic-g4) x 2 seeds" in printed
    assert sorted(str(p.relative_to(out)) for p in out.glob("arms/*/*/sweep_result.json")) == [
        f"arms/{arm}/seed-{seed}/sweep_result.json" for arm in ("dynamic-g4", "g4", "per_prompt") for seed in (0, 1)]
    table = (out / "sweep.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert [row.split("|")[1].strip() for row in rows] == ["g4", "per_prompt", "dynamic-g4"]
    assert all(re.search(r"\| -?[0-9.]+ \[-?[0-9.]+, -?[0-9.]+\] \|", row) for row in rows), table  # intervals
    summary = json.loads((out / "sweep.json").read_text())
    dynamic = next(arm for arm in summary["arms"] if arm["name"] == "dynamic-g4")
    assert dynamic["final_interval"][0] <= dynamic["final"][0] <= dynamic["final_interval"][1]
    assert all(p["generated"] >= p["completions"] for p in dynamic["curve"])  # dynamic sampling drops groups
    result = json.loads((out / "arms" / "per_prompt" / "seed-0" / "sweep_result.json").read_text())
    assert [p["generated"] for p in result["points"]] == [p["completions"] for p in result["points"]]  # no extra
    line = summary["recommendation"]
    assert line in printed and (line.startswith("none: cannot separate") == (summary["recommended_stages"] is None))


def test_a_sweep_trains_a_skip_arm(tmp_path, capsys):
    """A user's own sweep shows what skipping buys on their data: `skip-g4` trains beside `g4`."""
    import yaml

    data = yaml.safe_load((PROJECT / "recipes" / "demo.yaml").read_text())
    recipe = tmp_path / "quick.yaml"
    recipe.write_text(yaml.safe_dump({**data, "dataset_num_prompts": 32}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(recipe), "--arms", "g4", "skip-g4", "--seeds", "1", "--max-steps", "8",
                 "--held-out", "8", "--eval-every", "4", "--out", str(out)]) == 0  # fmt: skip
    assert "2 arms (g4, skip-g4) x 1 seed" in capsys.readouterr().out
    result = json.loads((out / "arms" / "skip-g4" / "seed-0" / "sweep_result.json").read_text())
    assert result["points"] and (out / "arms" / "skip-g4" / "seed-0").is_dir()
