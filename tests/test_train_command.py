"""`grpo-curriculum train`: resume, TRL's `ModelConfig` routing (LoRA) and `ScriptArguments` (splits, streaming)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.core.errors import CurriculumError

ROOT = Path(__file__).resolve().parent.parent
DEMO = str(ROOT / "recipes" / "demo.yaml")
FAST = ["--warm_start_steps", "0", "--save_strategy", "steps", "--save_steps", "2"]


def logged_steps(run_dir):
    state = json.loads((Path(run_dir) / "trainer_state.json").read_text())
    return [h["step"] for h in state["log_history"] if "loss" in h]


def test_train_resumes_from_the_newest_complete_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "4", *FAST]) == 0
    printed = capsys.readouterr().out  # `train` talks like `demo` (it printed nothing about the curriculum)
    assert "torch threads: 1" in printed and "curriculum stage 1 compare: steps 3-4, G 8, temperature 1" in printed
    assert "curriculum switch at step 3 (round 3): G 2 -> 8, temperature 0.8 -> 1" in printed
    assert "trained to step 4 in" in printed and "| 1 compare |" in printed and "mean reward" in printed
    (out / "checkpoint-4" / "trainer_state.json").write_text("{")  # as if killed while writing it
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "6", "--resume_from_checkpoint", "true",
                 *FAST]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert f"curriculum resumed from {out / 'checkpoint-2'} at step 2 (stage 0, G 2, temperature 0.8)" in printed
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6]  # steps 1-2 from checkpoint-2's history, then 3-6 trained again
    (out / "checkpoint-6" / "curriculum_state.json").unlink()  # not a curriculum checkpoint any more
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "8", "--resume_from_checkpoint",
                 str(out / "checkpoint-6"), *FAST]) == 2  # fmt: skip
    error = capsys.readouterr().err
    assert f"{out / 'checkpoint-6'} holds no curriculum_state.json" in error and "Traceback" not in error


def test_use_peft_trains_a_lora_adapter(tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "lora"
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "2", "--warm_start_steps", "0",
                 "--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"]) == 0  # as on trl grpo
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and set(adapter["target_modules"]) == {"q_proj", "v_proj"}


def test_script_arguments_reach_the_run(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split, n in (("train", 24), ("test", 8)):
        rows = [{"question": f"echo : {w} =", "target": w} for w in ["red", "cat", "sun", "dog"] * (n // 4)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = tmp_path / "local.yaml"
    recipe.write_text(Path(DEMO).read_text().replace("dataset_name: builtin:echo", f"dataset_name: {data}")
                      .replace("dataset_num_prompts: 256", "dataset_prompt_column: question")
                      .replace("warm_start_steps: 20", "warm_start_steps: 0"))  # fmt: skip
    out = tmp_path / "out"
    assert main(["train", str(recipe), "--output_dir", str(out), "--max_steps", "2", "--eval_strategy", "steps",
                 "--eval_steps", "2", "--per_device_eval_batch_size", "8", "--dataset_streaming", "true"]) == 0
    state = json.loads((out / "trainer_state.json").read_text())
    assert any("eval_reward" in h for h in state["log_history"])  # the test split was evaluated


@pytest.mark.parametrize(("overrides", "message"), [
    (["--ignore_bias_buffers", "true"], "ignore_bias_buffers = True: is not supported"),
    (["--dataset_streaming", "true"], "dataset_streaming = True: only applies to datasets loaded with `datasets`"),
    (["--load_in_4bit", "true"], "load_in_4bit = True: needs `bitsandbytes`"),
])
def test_unsupported_model_and_script_fields_fail_before_loading(tmp_path, capsys, overrides, message):
    out = tmp_path / "never"
    assert main(["train", DEMO, "--output_dir", str(out), *overrides]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error and not out.exists()


def test_train_refuses_an_output_dir_it_could_overwrite(tmp_path, capsys):
    afile, full = tmp_path / "afile", tmp_path / "full"
    afile.write_text("keep")
    full.mkdir()
    (full / "notes.txt").write_text("keep")
    assert main(["train", DEMO, "--output_dir", str(afile), "--max_steps", "2"]) == 2  # a traceback before
    assert main(["train", DEMO, "--output_dir", str(full), "--max_steps", "2"]) == 2
    error = capsys.readouterr().err
    assert "afile': names a file, not a folder" in error and "Traceback" not in error  # (long paths are shortened)
    assert "full': is a folder that already holds files" in error
    assert "`--resume_from_checkpoint true`" in error
    assert afile.read_text() == "keep" and os.listdir(full) == ["notes.txt"]


def test_reward_module_with_a_syntax_error_stops_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import grpo_curriculum.demo.tasks

    monkeypatch.chdir(tmp_path)  # reward modules import from the current directory, as with `trl grpo`
    (tmp_path / "broken_rewards.py").write_text("def reward(completions, **kwargs)\n    return [0.0]\n")
    recipe = tmp_path / "broken.yaml"
    recipe.write_text(Path(DEMO).read_text().replace("grpo_curriculum.demo.tasks:echo_reward",
                                                     "broken_rewards:reward"))
    monkeypatch.setattr(grpo_curriculum.demo.tasks, "build_model", lambda **kwargs: pytest.fail("the model was built"))
    assert main(["train", str(recipe), "--output_dir", str(tmp_path / "out")]) == 2  # a traceback before
    error = capsys.readouterr().err
    assert "reward_funcs = 'broken_rewards:reward': cannot be imported: its module fails (SyntaxError:" in error
    assert f"({tmp_path / 'broken_rewards.py'}, line 1)" in error and "Traceback" not in error


def test_an_infinite_reward_ends_train_with_exit_2_naming_the_function(tmp_path, capsys, monkeypatch):
    """Issue 35: a reward of inf trained to the end with loss 0; `train` now stops at the first one, exit 2, naming
    the reward function and the value, without a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inf_rewards.py").write_text("def reward(completions, **kwargs):\n"
                                             "    return [float('inf')] + [0.0] * (len(completions) - 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = tmp_path / "inf.yaml"
    recipe.write_text(Path(DEMO).read_text().replace("grpo_curriculum.demo.tasks:echo_reward", "inf_rewards:reward"))
    assert main(["train", str(recipe), "--output_dir", str(tmp_path / "out"), "--max_steps", "2", *FAST]) == 2
    error = capsys.readouterr().err
    assert "reward function reward = inf: returned inf for completion 0 of 4 on the preflight's stand-in" in error
    assert "a reward must be finite" in error and "Traceback" not in error  # the preflight's call: before training


def test_report_to_a_tracker_that_is_not_installed_stops_before_loading(tmp_path, capsys, hide_package):
    hide_package("wandb")
    out = tmp_path / "never"
    assert main(["train", DEMO, "--report_to", "wandb", "--output_dir", str(out)]) == 2  # 34 lines after 18 s before
    error = capsys.readouterr().err
    assert "report_to = 'wandb': needs `wandb`, which is not installed" in error and "Traceback" not in error
    assert "pip install 'wandb>=0.19'" in error and not out.exists()  # no grpo-curriculum release to install from


def test_check_and_train_exit_1_for_the_same_misfit_num_generations(tmp_path, capsys):
    recipe = tmp_path / "g5.yaml"
    recipe.write_text(Path(DEMO).read_text().replace("num_generations: 8", "num_generations: 5"))
    assert main(["check", str(recipe)]) == 1
    assert main(["train", str(recipe), "--output_dir", str(tmp_path / "never")]) == 1  # 2 before
    assert "curriculum.stages[1].num_generations = 5: must divide the generation batch" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


# --- the command line, read by TRL's parser ----------------------------------------------------------------------


def test_a_recipe_and_its_overrides_mean_what_they_mean_in_trl_grpo(tmp_path):
    """`train RECIPE ARGS` builds the GRPOConfig and ModelConfig `trl grpo --config RECIPE ARGS` builds."""
    from trl.scripts.grpo import make_parser

    from grpo_curriculum.cli.launch import launch_geometry
    from grpo_curriculum.config.arguments import RecipeParser, trl_arguments
    from grpo_curriculum.config.recipe import load_recipe

    args = ["--max_steps", "7", "--learning_rate", "1e-5", "--save_strategy", "no", "--report_to", "none",
            "--seed", "7", "--use_peft", "--lora_target_modules", "q_proj", "v_proj", "--dtype", "float32",
            "--output_dir", str(tmp_path / "out"), "--run_name", "2024"]  # fmt: skip
    _, trl_training, trl_model, _ = make_parser().parse_args_and_config(["--config", DEMO, *args],
                                                                        fail_with_unknown_args=False)
    recipe = load_recipe(DEMO, RecipeParser().overrides(args))
    training, model = trl_arguments(recipe, launch_geometry(recipe))
    assert model == trl_model and model.lora_target_modules == ["q_proj", "v_proj"]
    ours, theirs = training.to_dict(), trl_training.to_dict()
    assert (ours.pop("num_generations"), ours.pop("temperature")) == (2, 0.8)  # the curriculum's first stage
    assert (theirs.pop("num_generations"), theirs.pop("temperature")) == (8, 1.0)  # the recipe's top level
    if "activation_checkpointing" not in theirs:  # transformers < 5.23: `trl grpo` drops the recipe's new name unread
        assert (ours.pop("gradient_checkpointing"), theirs.pop("gradient_checkpointing")) == (False, True)
    if theirs.get("logging_dir") != ours.get("logging_dir"):  # transformers < 5 stamps the default with the second
        stamped = re.compile(re.escape(str(tmp_path / "out" / "runs")) + r"/\w{3}\d{2}_\d{2}-\d{2}-\d{2}_")
        assert stamped.match(ours.pop("logging_dir")) and stamped.match(theirs.pop("logging_dir"))
    assert ours == theirs and ours["run_name"] == "2024" and ours["seed"] == 7 and ours["save_strategy"] == "no"


def test_command_line_mistakes_are_named():
    from grpo_curriculum.config.arguments import RecipeParser
    from grpo_curriculum.config.recipe import load_recipe

    def refused(args, text):
        error = pytest.raises(CurriculumError, lambda: load_recipe(DEMO, RecipeParser().overrides(args))).value
        assert text in str(error), str(error)

    refused(["max_steps", "10"], "'max_steps' must be `--key value` after the recipe")
    refused(["--max_steps", "10", "20"], "'20' must be `--key value`")
    refused(["--max_steps", "ten"], "argument --max_steps/--max-steps: invalid int value: 'ten'")
    refused(["--save_strategy", "never"], "invalid choice: 'never'")
    refused(["--max_stepz", "5"], "max_stepz = '5': is not a recipe key")
    refused(["--max_stepz=5", "--bogus"], "did you mean `max_steps`?")
    refused(["--warm_start_steps", "-1"], "warm_start_steps = -1: must be an integer >= 0")
    parser, bomb = RecipeParser(), "[" + ",".join(["&a [x,x,x,x,x,x,x,x,x]"] + ["*a"] * 2000) + "]"
    assert parser.overrides(["--run_name", bomb, "--hub_model_id", "9" * 5000]) == {
        "run_name": bomb, "hub_model_id": "9" * 5000}  # text, as TRL reads it: never expanded
    assert parser.overrides(["--resume_from_checkpoint", "true"]) == {"resume_from_checkpoint": True}  # the newest


def test_train_and_check_know_the_same_keys():
    """Every key the import-free check accepts is a field of the dataclasses train parses, and only those."""
    from grpo_curriculum.config.arguments import RecipeParser
    from grpo_curriculum.config.recipe import RECIPE_KEYS, UNSUPPORTED
    from grpo_curriculum.config.trl_fields import trl_fields

    parsed = {action.dest for action in RecipeParser()._actions} - {"help"}
    assert parsed - set(UNSUPPORTED) == {*trl_fields(), *RECIPE_KEYS}


def test_a_setting_trl_refuses_stops_before_loading(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["train", DEMO, "--auto_find_batch_size", "true", "--output_dir", str(out)]) == 2  # a traceback before
    error = capsys.readouterr().err
    assert "demo.yaml: is refused by TRL's config: auto_find_batch_size is not supported by GRPO" in error
    assert "Traceback" not in error and not out.exists()


# (`top_up_cannot_fill` is well formed and misfits the geometry: exit 1, `test_cli_check.py` compares check and train)
MALFORMED = sorted(p for p in (ROOT / "tests" / "data" / "bad_recipes").glob("*.yaml") if p.stem != "top_up_cannot_fill")


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_train_refuses_each_malformed_recipe_as_check_does(path, tmp_path, capsys):
    assert main(["check", str(path)]) == 2
    checked = capsys.readouterr().err.replace("grpo-curriculum check: error: ", "")
    assert main(["train", str(path), "--output_dir", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err.replace("grpo-curriculum train: error: ", "")
    status = "grpo-curriculum train: loading torch, transformers and TRL ...\n"  # train's first line, then the same
    assert err.removeprefix(status) == checked
    assert not (tmp_path / "never").exists()


def test_beta_builds_the_reference_model_of_the_builtin_model(tmp_path, capsys):
    # TRL reloads the reference from `config._name_or_path`, which an in-memory model lacks ('': "Repo id must use
    # alphanumeric chars"); it is a copy of the policy the run starts from, so the KL is 0 at the first step.
    out = tmp_path / "kl"
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "3", "--warm_start_steps", "2",
                 "--beta", "0.1", "--report_to", "none"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    kl = [h["kl"] for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "kl" in h]
    assert len(kl) == 3 and kl[0] == 0 and kl[-1] > 0


def test_the_reference_model_of_an_instance_is_a_separate_copy(tmp_path):
    from grpo_curriculum.cli.build import build_trainer
    from grpo_curriculum.config.recipe import load_recipe

    trainer = build_trainer(load_recipe(DEMO, {"beta": 0.5, "warm_start_steps": 0, "report_to": "none"}),
                            output_dir=str(tmp_path / "never"))
    policy, reference = dict(trainer.model.named_parameters()), dict(trainer.ref_model.named_parameters())
    assert policy.keys() == reference.keys()
    assert all((policy[k] == reference[k]).all() and policy[k].data_ptr() != reference[k].data_ptr() for k in policy)


def _stopped_train(out: Path, checkpoint: str, signum: int, wait: float = 0.0):
    """`train` (max_steps 100000, a checkpoint every 2 steps) in a process of its own, sent `signum` `wait` seconds
    after `checkpoint` appeared: its exit status and standard error."""
    import subprocess
    import sys
    import time

    command = [sys.executable, "-m", "grpo_curriculum", "train", DEMO, "--max_steps", "100000", "--output_dir",
               str(out), *FAST, "--report_to", "none"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 240
    while not (out / checkpoint / "trainer_state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(wait)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_ctrl_c_names_the_last_complete_checkpoint_and_the_resume_command(tmp_path):
    import signal

    out = tmp_path / "run"
    returncode, err = _stopped_train(out, "checkpoint-4", signal.SIGINT, wait=0.5)
    assert returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    lines = err.splitlines()
    last = lines[next(i for i, line in enumerate(lines) if "interrupted at step" in line):][:2]  # on a line of its own
    from grpo_curriculum.training.checkpoint import check_checkpoint
    from grpo_curriculum.training.files import CurriculumStateError

    match = re.fullmatch(r"grpo-curriculum train: interrupted at step (\d+); the last complete checkpoint is "
                         r"(.*checkpoint-(\d+))\. Resume from it with:", last[0])
    assert match and int(match[1]) >= int(match[3]) >= 4 and Path(match[2]).parent == out
    check_checkpoint(match[2])  # complete; a newer folder is one the interrupt cut short while saving it
    for newer in (p for p in out.glob("checkpoint-*") if int(p.name.split("-")[1]) > int(match[3])):
        with pytest.raises(CurriculumStateError):
            check_checkpoint(newer)
    assert last[1] == (f"  grpo-curriculum train {DEMO} --max_steps 100000 {' '.join(FAST)} --report_to none "
                       f"--output_dir {out} --resume_from_checkpoint true")


@pytest.mark.parametrize(("flag", "value", "what"), [("num_generations", "3", "G"),
                                                     ("temperature", "0", "the sampling temperature")])
def test_train_refuses_flags_the_curriculum_overrides(tmp_path, capsys, flag, value, what):
    never = tmp_path / "never"
    assert main(["train", DEMO, f"--{flag}", value, "--output_dir", str(never)]) == 2  # was run, the flag ignored
    err = capsys.readouterr().err
    shown = {"3": "3", "0": "0.0"}[value]  # read by the field's type, as `trl grpo` reads it
    assert f"--{flag} = {shown}: is not used: the recipe's curriculum sets {what} (each stage's `{flag}`)" in err
    assert f"fix: change `curriculum.stages[N].{flag}` in the recipe" in err and "Traceback" not in err
    assert not never.exists()


def test_without_a_curriculum_num_generations_and_temperature_flags_are_the_run(tmp_path):
    from grpo_curriculum.cli.launch import unused_override_problems
    from grpo_curriculum.config.recipe import load_recipe

    plain = tmp_path / "plain.yaml"
    plain.write_text(Path(DEMO).read_text().split("curriculum:")[0])
    given = {"num_generations": 4, "temperature": 0.7}
    recipe = load_recipe(str(plain), given)
    assert unused_override_problems(recipe, given) == []
    assert (recipe.curriculum.stages[0].num_generations, recipe.curriculum.stages[0].temperature) == (4, 0.7)


_CALLS = []


def swallowing_reward(*args, **kwargs):
    """The demo's reward; at its 5th call a Ctrl-C arrives where something swallows the KeyboardInterrupt (as a
    `__del__` run by the garbage collector during a checkpoint save does: "Exception ignored ...")."""
    import signal
    import time

    from grpo_curriculum.demo.tasks import echo_reward

    _CALLS.append(1)
    if len(_CALLS) == 5:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs here
        except KeyboardInterrupt:
            pass
    return echo_reward(*args, **kwargs)


def test_a_ctrl_c_that_something_swallows_still_ends_the_run_at_the_next_step(tmp_path, capsys):
    """Issue 35 item 15: once, a Ctrl-C did not end `train` (max_steps 100000): 120 s later it was still training."""
    out = tmp_path / "run"
    _CALLS.clear()
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "40", *FAST, "--reward_funcs",
                 "tests.test_train_command:swallowing_reward", "--report_to", "none"]) == 130  # fmt: skip
    error = capsys.readouterr().err
    step = int(re.search(r"grpo-curriculum train: interrupted at step (\d+); the last complete checkpoint is", error)[1])
    assert 4 <= step <= 6 and "Traceback" not in error, error  # the 5th round's step, or the one after it


def test_sigterm_ends_train_with_the_last_checkpoint_and_the_resume_command(tmp_path):
    """SIGTERM (a scheduler's stop) ended `train` with exit 143 and no word on the last checkpoint."""
    import signal

    out = tmp_path / "run"
    returncode, err = _stopped_train(out, "checkpoint-2", signal.SIGTERM)
    assert returncode == 143 and "Traceback" not in err, err[-3000:]
    assert re.search(r"grpo-curriculum train: stopped by SIGTERM at step \d+; the last complete checkpoint is "
                     rf"{re.escape(str(out))}/checkpoint-\d+\. Resume from it with:", err), err[-3000:]
