"""
Issue 44: the preflight `check` and `train` share (grpo_curriculum/cli/preflight.py). Every bad input of the corpus in
tests/data/bad_inputs (datasets, reward functions, reward weights, generation kwargs) gets exit 2 from both commands,
the same problem lines naming the key and the rule, no traceback, and nothing written, before any model loads.
"""

from __future__ import annotations

import contextlib
import io
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

    assert preflight_problems(load_recipe("reward_one_short.yaml", {"reward_funcs": ["bad_rewards:good"]})) == []
    for name in ("demo", "rloo-demo", "per-prompt-demo"):  # the shipped recipes' built-in data and rewards
        assert preflight_problems(load_recipe(name)) == []


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
