"""Small things a new user meets first: what `check` assumes, what an error's header says, where examples look."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.core.errors import CurriculumError, Problem

ROOT = Path(__file__).resolve().parent.parent


def test_check_of_a_curriculum_only_file_says_which_batch_it_assumed(tmp_path, capsys):
    path = tmp_path / "curriculum.yaml"
    path.write_text("curriculum:\n  stages:\n    - {num_generations: 4, temperature: 0.8}\n")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("assumed: per_device_train_batch_size 8, gradient_accumulation_steps 1 (TRL's defaults; no flag gave "
            "them): pass your run's, e.g. `--per-device-train-batch-size N --gradient-accumulation-steps N`") in out
    assert main(["check", str(path), "--per-device-train-batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "assumed: gradient_accumulation_steps 1 (TRL's defaults; no flag gave it)" in out
    assert "generation batch 16" in out
    assert main(["check", "--num-generations", "4", "--per-device-train-batch-size", "4",
                 "--gradient-accumulation-steps", "2"]) == 0  # fmt: skip
    assert "assumed: per_device" not in capsys.readouterr().out
    assert main(["check", "demo"]) == 0  # a recipe: its own geometry, nothing assumed but the process count
    assert "(TRL's defaults" not in capsys.readouterr().out


def test_an_error_about_other_keys_is_not_headed_as_a_curriculum_problem(tmp_path, capsys):
    assert str(CurriculumError([Problem("curriculum.stages[0].temperature", -1, "must be positive")])).startswith(
        "1 problem in the curriculum:")
    mixed = CurriculumError([Problem("learning_rate", "x", "must be a number"),
                             Problem("curriculum.stages", [], "must list a stage")], "recipe r.yaml")
    assert str(mixed).startswith("2 problems (recipe r.yaml):")
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert "error: 1 problem (recipe " in err and "in the curriculum" not in err


def test_the_cli_reference_lists_every_command_and_flag():
    """docs/cli.md cannot drift from the parser: each subcommand has its section and each of its flags is named."""
    import argparse

    from grpo_curriculum.cli.main import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    missing = [name for name in commands if f"\n## {name}\n" not in text]
    missing += [f"{name} {flag}" for name, parser in commands.items() for action in parser._actions
                for flag in action.option_strings if flag.startswith("--") and "_" not in flag and flag != "--help"
                and flag not in text]  # fmt: skip
    assert not missing, missing


@pytest.mark.parametrize("argv, flag, values", [
    (["train", "demo", "--max_steps", "2", "--max-steps", "3"], "--max_steps", ["2", "3"]),
    (["demo", "--out", "a", "--out=b"], "--out", ["a", "b"]),
    (["sweep", "demo", "--seeds", "2", "--num-generations", "2", "4", "--seeds", "3"], "--seeds", ["2", "3"]),
    (["train", "demo", "--report_to", "none", "--verbose", "--report-to=wandb"], "--report_to", ["none", "wandb"]),
])
def test_a_flag_given_twice_is_refused_naming_both_values(argv, flag, values, capsys):
    """Duplicate flags silently took the last value."""
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"{flag} = {values!r}: is given 2 times; only the last would be used" in error, error
    assert error.startswith(f"grpo-curriculum {argv[0]}: error: 1 problem (command line):")


def test_repeated_flags_reads_values_and_stops_at_a_bare_double_dash():
    from grpo_curriculum.cli.main import repeated_flags

    assert repeated_flags(["train", "r.yaml", "--num-generations", "2", "4", "--verbose"]) == []
    assert repeated_flags(["train", "r.yaml", "--", "--x", "1", "--x", "2"]) == []
    assert [p.value for p in repeated_flags(["check", "--verbose", "--verbose"])] == [["", ""]]
