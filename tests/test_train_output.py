"""What `train` prints: a progress line, the stages and switches, the table; TRL's log dicts only when asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.cli.progress import describe_g, postfix, split_output_flags
from grpo_curriculum.core.errors import CurriculumError

ROOT = Path(__file__).resolve().parent.parent
DEMO = str(ROOT / "recipes" / "demo.yaml")


def trained_lines(run_dir) -> list[dict]:
    state = json.loads((Path(run_dir) / "trainer_state.json").read_text())
    return [entry for entry in state["log_history"] if "loss" in entry]


def test_train_prints_a_progress_line_not_trls_dicts_and_still_logs_every_step(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "40", "--warm_start_steps", "0"]) == 0
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    assert "{'loss'" not in captured.out and "'grad_norm'" not in captured.out
    progress = [line for line in lines if line.startswith("step ")]
    assert len(progress) == 10 and progress[-1].startswith("step 40/40 (100%): G 8, T 1.00, reward ")
    assert progress[0].startswith("step 4/40 (10%): G 2, T 0.80, reward ")
    assert "(mean of 4 logged steps)" in progress[0]
    assert sum("curriculum switch at step 21 (round 21): G 2 -> 8" in line for line in lines) == 1
    assert "| 1 compare |" in captured.out and "grpo-curriculum train: loading torch" in captured.err
    assert [entry["step"] for entry in trained_lines(out)] == list(range(1, 41))  # logging_steps 1, as before


def test_log_every_prints_trls_dict_of_every_nth_step(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "6", "--warm_start_steps", "0",
                 "--log-every", "3"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    dicts = [line for line in printed.splitlines() if line.startswith("{")]
    assert len(dicts) == 3 and all("'loss'" in line for line in dicts[:2]) and "'train_runtime'" in dicts[2]
    assert "'epoch': '0.09375'" in dicts[0] and "'epoch': '0.1875'" in dicts[1]  # steps 3 and 6 of 32 a epoch
    assert len(trained_lines(out)) == 6


def test_verbose_gives_trls_own_output(tmp_path, capsys):
    assert main(["train", "--verbose", DEMO, "--output_dir", str(tmp_path / "run"), "--max_steps", "3",
                 "--warm_start_steps", "0"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.count("{'loss'") == 3 and not any(line.startswith("step ") for line in printed.splitlines())


@pytest.mark.parametrize("words, message", [
    (["--log-every", "0"], "--log-every = '0': must be a positive number"),
    (["--log-every"], "--log-every: must be a positive number"),
    (["--log_every=x"], "--log-every = 'x': must be a positive number"),
    (["--log-every", "2", "--verbose"], "cannot be combined with --verbose"),
])  # fmt: skip
def test_bad_output_flags_exit_2_before_anything_loads(tmp_path, capsys, words, message):
    assert main(["train", DEMO, "--output_dir", str(tmp_path / "run"), *words]) == 2
    err = capsys.readouterr().err
    assert message in err and "loading torch" not in err and not (tmp_path / "run").exists()


def test_output_flags_are_taken_out_of_the_overrides():
    assert split_output_flags(["--max_steps", "5", "--log-every", "7", "--seed", "1"]) == (
        ["--max_steps", "5", "--seed", "1"], 7, False)
    assert split_output_flags(["--verbose", "--use_peft"]) == (["--use_peft"], None, True)
    assert split_output_flags(["--log_every=4"], verbose=False) == ([], 4, False)
    with pytest.raises(CurriculumError, match="cannot be combined"):
        split_output_flags(["--verbose"], log_every=3)


def test_the_progress_shows_the_range_of_g_and_the_extra_completions_sampled():
    logs = {"curriculum/num_generations": 6.5, "curriculum/temperature": 1.0, "reward": 0.25,
            "curriculum/prompts_at_g4": 3, "curriculum/prompts_at_g8": 1, "curriculum/prompts_at_g12": 1,
            "curriculum/prompts": 2, "curriculum/generated": 16, "curriculum/dropped": 0}  # fmt: skip
    assert describe_g(logs) == "4-12 (mean 6.5)"
    assert postfix(logs) == {"G": "4-12 (mean 6.5)", "T": "1.00", "reward": "0.250"}  # top-up: no group dropped
    dynamic = {"curriculum/num_generations": 4, "curriculum/temperature": 1.0, "curriculum/prompts": 4,
               "curriculum/generated": 160, "curriculum/dropped": 20}  # 10 rounds a log line: 80 of 160 trained
    assert postfix(dynamic) == {"G": "4", "T": "1.00", "generated/trained": "2.00"}
    assert postfix({"curriculum/num_generations": 8, "curriculum/temperature": 0.7}) == {"G": "8", "T": "0.70"}


@pytest.mark.parametrize("argv", [["train", "demo", "--max_steps", "1", "--output_dir", "OUT"],
                                  ["demo", "--out", "OUT", "--max-steps", "1"]])
def test_the_first_output_comes_before_the_slow_imports(tmp_path, argv):
    """
    Before the slow imports (10 s and more on a busy machine) the command says what it is loading. Proved by order,
    not by a clock: torch, transformers and TRL are shadowed by packages that fail on import, so a command that
    imported any of them before its first line would print the failure first.
    """
    argv = [str(tmp_path / "run") if a == "OUT" else a for a in argv]
    shadows = tmp_path / "shadows"
    for name in ("torch", "transformers", "trl"):
        (shadows / name).mkdir(parents=True)
        (shadows / name / "__init__.py").write_text(f"raise ImportError('{name} imported before the first line')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadows), str(ROOT)])}
    result = subprocess.run([sys.executable, "-m", "grpo_curriculum", *argv], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, timeout=120, check=False)  # fmt: skip
    first = result.stderr.splitlines()[0] if result.stderr else ""
    assert first.startswith(f"grpo-curriculum {argv[0]}: loading torch, transformers and TRL"), result.stderr[-2000:]
    assert "imported before the first line" in result.stderr  # the shadows were reached: the test tests something
    assert not (tmp_path / "run").exists()


def test_on_a_terminal_the_progress_is_a_bar_with_g_temperature_and_reward():
    import io
    import types

    from grpo_curriculum.cli.progress import progress_callback

    stream = io.StringIO()
    callback = progress_callback(stream=stream, terminal=True)
    state = types.SimpleNamespace(is_world_process_zero=True, max_steps=4, global_step=0)
    callback.on_train_begin(None, state, None)
    for step in range(1, 5):
        state.global_step = step
        callback.on_log(None, state, None, logs={"loss": 0.0, "reward": 0.25 * step, "curriculum/temperature": 0.8,
                                                 "curriculum/num_generations": 2 if step < 3 else 8})  # fmt: skip
    callback.on_log(None, state, None, logs={"eval_reward": 0.5, "eval_loss": 0.25})
    callback.on_train_end(None, state, None)
    text = stream.getvalue()
    assert "evaluation at step 4: {'eval_reward': '0.5', 'eval_loss': '0.25'}" in text
    assert "train: 100%" in text and "4/4" in text and "G=8, T=0.80, reward=1.000" in text
    assert "step 4/4" not in text and "{'loss'" not in text  # the bar, not the lines; no dicts without --log-every
