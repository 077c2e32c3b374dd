"""A recipe's `trainer: rloo`: checked against RLOOConfig by `check` and `train` alike, and trained by `train`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_curriculum.cli.main import main
from grpo_curriculum.config import trainers
from grpo_curriculum.config.arguments import command_line_overrides
from grpo_curriculum.config.recipe import load_recipe, parse_recipe
from grpo_curriculum.core.errors import CurriculumError

ROOT = Path(__file__).resolve().parent.parent
RLOO_DEMO = ROOT / "recipes" / "rloo-demo.yaml"
BASE = {"model_name_or_path": "builtin:tiny", "dataset_name": "builtin:echo",
        "reward_funcs": ["grpo_curriculum.demo.tasks:echo_reward"]}


def problems(data: dict) -> list[str]:
    with pytest.raises(CurriculumError) as caught:
        parse_recipe(data)
    return [str(problem) for problem in caught.value.problems]


def test_rloo_demo_checks_and_trains_on_rloo_with_rloo_config(tmp_path, capsys):
    """The shipped recipe passes `check`, and `train` runs the real RLOOTrainer loop on it, a switch included,
    with RLOOConfig's defaults (beta 0.05) and its own fields from the command line."""
    import torch
    from trl import RLOOConfig

    assert main(["check", "rloo-demo"]) == 0
    out = capsys.readouterr().out
    assert "trainer rloo: RLOOConfig" in out and "result: OK, all 2 checks valid" in out
    run = tmp_path / "run"
    assert main(["train", "rloo-demo", "--output_dir", str(run), "--max_steps", "4", "--warm_start_steps", "0",
                 "--normalize_advantages", "true", "--reward_clip_range", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert "(trainer: CurriculumRLOOTrainer)" in out and "trained to step 4" in out
    assert "curriculum switch at step 3 (round 3): G 2 -> 8" in out
    args = torch.load(run / "training_args.bin", weights_only=False)
    assert type(args) is RLOOConfig and args.beta == 0.05 and args.normalize_advantages is True
    assert list(args.reward_clip_range) == [0.0, 1.0] and args.num_generations == 2  # the first stage's G


@pytest.mark.parametrize(("edit", "said"), [
    ({"trainer": "rloo", "loss_type": "dapo"},
     ["loss_type = 'dapo': is a field of GRPOConfig, not of RLOOConfig (this recipe's `trainer: rloo`)",
      "fix: remove it, or use `trainer: grpo`"]),
    ({"trainer": "bogus"}, ["trainer = 'bogus': must be one of ['grpo', 'rloo', 'async_grpo']"]),
    ({"normalize_advantages": True},
     ["normalize_advantages = True: is a field of RLOOConfig, not of GRPOConfig (`trainer: grpo`, the default)",
      "fix: remove it, or use `trainer: rloo`"]),
])
def test_a_key_of_the_other_trainer_or_an_unknown_trainer_exits_2_and_writes_nothing(tmp_path, capsys, edit, said):
    recipe = tmp_path / "recipe.yaml"
    data = {**yaml.safe_load(RLOO_DEMO.read_text()), **edit, "output_dir": str(tmp_path / "out")}
    data = {key: value for key, value in data.items() if not (key == "trainer" and "trainer" not in edit)}
    recipe.write_text(yaml.safe_dump(data))
    for command in (["check"], ["train"]):
        assert main([*command, str(recipe)]) == 2
        captured = capsys.readouterr()
        assert all(text in captured.err for text in said), captured.err
        assert "Traceback" not in captured.err + captured.out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["recipe.yaml"]  # no output folder, no lock


def test_a_grpo_only_override_is_refused_under_trainer_rloo(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["train", "rloo-demo", "--output_dir", str(out), "--scale_rewards", "none"]) == 2
    assert "scale_rewards = 'none': is a field of GRPOConfig, not of RLOOConfig" in capsys.readouterr().err
    assert not out.exists()


def test_every_problem_at_once_rloo_refusals_included():
    """RLOO's refused stages are reported with the recipe's other problems, an invalid stage's too."""
    stages = [{"num_generations": 2, "temperature": 0.8, "until_fraction": 0.2},
              {"temperature": 1.0, "until_fraction": 0.4, "adaptive": {"policy": "per_prompt",
                                                                       "num_generations": [2, 4]}},
              {"num_generations": 4, "temperature": 1.0, "until_fraction": 0.6, "dynamic_sampling": {"max_rounds": 2}},
              {"num_generations": 3, "temperature": -1.0, "until_fraction": 0.8},  # invalid on its own
              {"num_generations": 4, "temperature": 1.0, "comparison": {"mode": "extremes"}}]
    found = problems({**BASE, "trainer": "rloo", "use_vllm": True, "delta": 2.0, "curriculum": {"stages": stages}})
    keys = [text.split(" ")[0].rstrip(":") for text in found]
    # per_prompt and use_vllm are supported on RLOO; dynamic sampling's default on_limit (mask) is not
    assert keys == ["delta", "curriculum.stages[3].temperature", "curriculum.stages[2].dynamic_sampling.on_limit",
                    "curriculum.stages[4].comparison.mode"], found
    assert not any("use_vllm" in text for text in found)
    stages[3]["temperature"] = 1.0  # every stage valid: the same refusals, from the whole schedule
    found = problems({**BASE, "trainer": "rloo", "curriculum": {"stages": stages}})
    assert [text.split(" ")[0] for text in found] == ["curriculum.stages[2].dynamic_sampling.on_limit",
                                                      "curriculum.stages[4].comparison.mode"]
    assert parse_recipe({**BASE, "curriculum": {"stages": stages}}).trainer == "grpo"  # GRPO trains them all


def test_rloo_fields_and_defaults_come_from_rloo_config():
    rloo = parse_recipe({**BASE, "trainer": "rloo", "normalize_advantages": True, "reward_clip_range": [-1, 1]})
    assert rloo.trainer == "rloo" and rloo.training["num_generations"] == 2  # no curriculum: RLOOConfig's default G
    assert parse_recipe(BASE).training["num_generations"] == 8  # GRPOConfig's
    for clip, fix in (([1, 2, 3], "[-1.0, 1.0]"), ([2, -1], "[-1, 2]"), ([float("nan"), 1], "[-1.0, 1.0]")):
        (found,) = problems({**BASE, "trainer": "rloo", "reward_clip_range": clip})
        assert "must be two finite numbers [low, high] with low <= high" in found and fix in found
    (found,) = problems({**BASE, "trainer": "rloo", "normalize_advantages": "yes"})
    assert "normalize_advantages = 'yes': must be true or false (RLOOConfig.normalize_advantages)" in found


def test_overrides_are_read_with_the_named_trainers_config():
    assert command_line_overrides(["--normalize_advantages", "true"], {"trainer": "rloo"}) == {
        "normalize_advantages": True}
    assert command_line_overrides(["--trainer", "rloo", "--reward_clip_range", "-1", "1"], {}) == {
        "trainer": "rloo", "reward_clip_range": [-1.0, 1.0]}
    # under GRPO's parser an RLOO field stays text, for the recipe check to name it
    assert command_line_overrides(["--normalize_advantages", "true"], {}) == {"normalize_advantages": "true"}


def test_trainer_rloo_on_another_trl_release_is_refused_by_check_and_train(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trainers, "installed_version", lambda package: "1.15.2")
    with pytest.raises(CurriculumError) as caught:
        load_recipe(str(RLOO_DEMO))
    (problem,) = caught.value.problems
    assert str(problem).startswith("trainer = 'rloo': needs TRL 1.16 (CurriculumRLOOTrainer relies on RLOOTrainer's")
    assert "the installed TRL is 1.15.2" in problem.rule and "or use `trainer: grpo`" in problem.fix
    assert load_recipe("demo").trainer == "grpo"  # GRPO recipes are not concerned
    out = tmp_path / "never"
    for argv in (["check", "rloo-demo"], ["train", "rloo-demo", "--output_dir", str(out)]):
        assert main(argv) == 2
        assert "needs TRL 1.16" in capsys.readouterr().err
    assert not out.exists()


def test_sweep_arms_train_with_the_recipes_trainer_and_rloo_refusals_name_the_arm(tmp_path, capsys):
    from grpo_curriculum.cli.sweep.child import arm_recipe
    from grpo_curriculum.cli.sweep.table import Arm

    raw = yaml.safe_load(RLOO_DEMO.read_text())
    arm = Arm("g4", [{"num_generations": 4, "temperature": 0.8}], num_generations=4, temperature=0.8)
    assert arm_recipe(str(RLOO_DEMO), raw, arm, seed=1).trainer == "rloo"  # what the arm's run builds its trainer from
    out = tmp_path / "sweep"
    assert main(["sweep", "rloo-demo", "--arms", "g4", "dynamic", "--max-steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 arms refused, nothing was run" in err and "Traceback" not in err
    assert "arm dynamic (--arms dynamic): curriculum.stages[0].dynamic_sampling.on_limit = 'mask': is not " \
           "supported with RLOOTrainer" in err
    assert not out.exists()


@pytest.mark.parametrize(("edit", "refused"), [
    ({}, True),  # GRPOConfig's beta: 0
    ({"trainer": "rloo"}, False),  # RLOOConfig's: 0.05, a reference model
    ({"trainer": "rloo", "beta": 0.0}, True),
    ({"beta": 0.04}, False),
])
def test_sync_ref_model_needs_beta_read_from_the_trainers_defaults(edit, refused):
    """Both trainers refuse `sync_ref_model` without a reference model, after the model has loaded: said up front."""
    data = {**BASE, "sync_ref_model": True, **edit}
    if not refused:
        assert parse_recipe(data).training["sync_ref_model"] is True
        return
    (found,) = problems(data)
    assert found.startswith("sync_ref_model = True: needs a reference model, which the trainer builds only when")
    assert ("the trainer's default" in found) == ("beta" not in edit)
