"""The `demo`, `train` and `plot` commands end to end, and the examples' two-line diff."""

from __future__ import annotations

import difflib
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def test_demo_smoke(tmp_path, capsys):
    out = tmp_path / "demo"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # pytest's configuration ignores FutureWarnings: record them here
        assert main(["demo", "--out", str(out), "--max-steps", "6"]) == 0
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
    captured = capsys.readouterr()
    printed = captured.out
    # The stages once, each switch once as it happens, with the step of the first log line at the new setting.
    assert printed.count("stage 1 compare: steps 4-6, G 8, temperature 1") == 1
    assert printed.count("switch at step 4 (round 4): G 2 -> 8, temperature 0.8 -> 1 (stage 1 (compare) starts)") == 1
    assert "1 switch, printed above and saved with its reason in" in printed and "torch threads: 1" in printed
    assert "mean reward" in printed and "0 explore" in printed and "1 compare" in printed
    assert "Warning" not in captured.err and "Traceback" not in captured.err
    assert (out / "curriculum.png").stat().st_size > 10_000
    state = json.loads((out / "trainer_state.json").read_text())
    steps = [h for h in state["log_history"] if "reward" in h]
    assert [h["curriculum/num_generations"] for h in steps] == [2, 2, 2, 8, 8, 8]
    assert [h["step"] for h in steps if h["curriculum/num_generations"] == 8][0] == 4
    saved = [json.loads(line) for line in (out / "switches.jsonl").read_text().splitlines()]
    assert [(s["step"], s["from"]["num_generations"], s["to"]["num_generations"], s["reason"]) for s in saved] == [
        (4, 2, 8, "stage 1 (compare) starts")
    ]
    in_state = [h for h in state["log_history"] if "curriculum/switch" in h]
    assert [{"step": h["step"], **h["curriculum/switch"]} for h in in_state] == saved
    assert not (tmp_path / "demo.partial").exists()
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask  # as `mkdir` makes it (it was 0700, from the staging folder)


def test_per_prompt_demo_recipe_is_checked_and_its_summary_gives_the_g_distribution(tmp_path, capsys):
    shipped = ROOT / "grpo_curriculum" / "recipes" / "per-prompt-demo.yaml"
    assert (ROOT / "recipes" / "per-prompt-demo.yaml").resolve() == shipped.resolve()  # shipped, linked from recipes/
    assert main(["check", str(shipped)]) == 0
    # One per-prompt stage: no switch at all, yet G ranges over the candidates.
    text = shipped.read_text()
    recipe = tmp_path / "per-prompt.yaml"
    recipe.write_text(text[: text.index("    - name: warmup")] + text[text.index("    - name: per-prompt") :])
    out = tmp_path / "demo"
    assert main(["demo", "--recipe", str(recipe), "--out", str(out), "--max-steps", "8"]) == 0
    printed = capsys.readouterr().out
    assert "kept one setting" not in printed
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    counts = {}
    for entry in history:
        for g in (2, 4, 8, 16):
            counts[g] = counts.get(g, 0) + entry.get(f"curriculum/prompts_at_g{g}", 0)
    counts = {g: n for g, n in counts.items() if n}
    assert sum(g * n for g, n in counts.items()) == 8 * 16  # every completion of the 8 rounds
    total = sum(counts.values())
    shares = ", ".join(f"{g} for {n} ({100 * n / total:.0f}%)" for g, n in counts.items())
    mean = sum(g * n for g, n in counts.items()) / total
    assert (f"no switch of stage or temperature: the curriculum chose G per prompt\n"
            f"G per prompt over {total} prompts: {shares}; mean {mean:.2f}\n") in printed
    assert f"| {min(counts)}-{max(counts)} per prompt (mean {mean:.2f}) |" in printed


def test_torch_threads_one_for_the_tiny_model_and_the_free_cpus_for_another():
    from grpo_curriculum.config.recipe import load_recipe
    from grpo_curriculum.cli.launch import torch_threads

    tiny = load_recipe(ROOT / "recipes" / "demo.yaml")
    smollm2 = load_recipe(ROOT / "recipes" / "smollm2-arithmetic.yaml")
    assert torch_threads(tiny, environ={})[0] == 1
    assert torch_threads(tiny, environ={"OMP_NUM_THREADS": "4"}) == (None, "OMP_NUM_THREADS")
    assert torch_threads(smollm2, environ={"OMP_NUM_THREADS": "4"}) == (None, "OMP_NUM_THREADS")
    # A busy 2-CPU machine (load 6): one thread (a SmolLM2 step took 75 s at torch's default, 25 s on one thread).
    threads, why = torch_threads(smollm2, environ={}, cpus=2, load=6.0, default=2)
    assert threads == 1 and "2 CPUs, load average 6.0: 1 free" in why
    assert torch_threads(smollm2, environ={}, cpus=16, load=0.2, default=8)[0] == 8  # idle: torch's default
    assert torch_threads(smollm2, environ={}, cpus=16, load=10.4, default=8)[0] == 6  # busy: the free CPUs
    assert torch_threads(smollm2, environ={"LOCAL_WORLD_SIZE": "2"}, cpus=16, load=0.0, default=8)[0] == 4


def test_demo_refuses_an_output_it_would_overwrite(tmp_path, capsys, monkeypatch):
    """`--out` naming a file or a folder holding files: exit 2 before training, nothing touched (the demo deleted it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("keep")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("keep")
    for out, rule in ((".", "is a folder that already holds files"), ("full", "is a folder that already holds files"),
                      ("mine.txt", "names a file")):
        assert main(["demo", "--out", out, "--max-steps", "2"]) == 2
        captured = capsys.readouterr()
        assert f"--out = {out!r}: {rule}" in captured.err and "Traceback" not in captured.err
        assert "trained" not in captured.out
    assert sorted(os.listdir(tmp_path)) == ["full", "mine.txt"]  # nothing deleted, nothing left behind
    assert os.listdir(tmp_path / "full") == ["notes.txt"] and (tmp_path / "mine.txt").read_text() == "keep"


def test_demo_twice_writes_a_second_folder(tmp_path, capsys, monkeypatch):
    """A second `make demo` is still one command: a new folder, the first run kept (it was deleted and replaced)."""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["demo", "--max-steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "run directory: runs/demo (" in printed and "run directory: runs/demo-2 (" in printed
    assert sorted(os.listdir(tmp_path / "runs")) == ["demo", "demo-2"]  # no staging folder left
    assert (tmp_path / "runs" / "demo" / "curriculum.png").exists()
    assert (tmp_path / "runs" / "demo-2" / "curriculum.png").exists()


def test_a_killed_demo_leaves_no_folder_that_counts_and_the_next_removes_its_leftover(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "grpo_curriculum", "demo", "--out", "runs/a"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("runs/.a.partial-*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until the run has its staging folder
    time.sleep(2)  # building the trainer
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert list((tmp_path / "runs").glob(".a.partial-*")) and not (tmp_path / "runs" / "a").exists()
    assert main(["demo", "--out", "runs/a", "--max-steps", "2"]) == 0
    assert os.listdir(tmp_path / "runs") == ["a"]  # the dead run's staging folder is gone


def test_demo_without_matplotlib_stops_before_training(tmp_path, capsys, hide_package):
    hide_package("matplotlib")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "matplotlib" in captured.err and "pip install matplotlib" in captured.err
    assert "Traceback" not in captured.err and "trained" not in captured.out
    assert not out.exists() and not (tmp_path / "demo.partial").exists()


def test_demo_with_a_bad_recipe_writes_nothing(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text((ROOT / "recipes" / "demo.yaml").read_text().replace("num_generations: 8", "num_generations: 5"))
    out = tmp_path / "out"
    assert main(["demo", "--recipe", str(recipe), "--out", str(out)]) == 1  # as `check` and `train`
    error = capsys.readouterr().err
    assert "curriculum.stages[1].num_generations" in error and "Traceback" not in error
    assert not out.exists() and not (tmp_path / "out.partial").exists()


def test_train_then_plot(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", str(ROOT / "recipes" / "demo.yaml"), "--output_dir", str(out), "--max_steps", "4",
                 "--warm_start_steps", "0"])  # fmt: skip
    assert code == 0
    assert (out / "trainer_state.json").exists() and (out / "model.safetensors").exists()
    assert main(["plot", str(out), "-o", str(tmp_path / "plot.png")]) == 0
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    assert main(["plot", str(tmp_path / "nowhere")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_examples_differ_in_two_lines_and_run_from_any_directory(tmp_path):
    plain = (ROOT / "examples" / "grpo_plain.py").read_text().splitlines()
    curriculum = (ROOT / "examples" / "grpo_with_curriculum.py").read_text().splitlines()
    changed = [line for line in difflib.unified_diff(plain, curriculum, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]  # fmt: skip
    assert len(changed) == 4  # two lines removed, two added
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "grpo_with_curriculum.py"), "--max-steps", "4", "--output-dir",
         str(tmp_path / "run")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "curriculum switch at step 3 (round 3): G 2 -> 8, temperature 0.8 -> 1" in result.stderr
    assert (tmp_path / "run" / "switches.jsonl").read_text().count("\n") == 1


def test_train_refuses_vllm_when_it_is_not_installed(tmp_path, capsys, hide_package):
    hide_package("vllm")
    out = tmp_path / "run"
    code = main(["train", str(ROOT / "recipes" / "demo.yaml"), "--use_vllm", "true", "--output_dir", str(out)])
    error = capsys.readouterr().err
    assert code == 2 and "use_vllm = True: needs `vllm`, which is not installed" in error and "Traceback" not in error
    assert not out.exists()


def test_the_suite_runs_torch_on_omp_num_threads():
    import torch

    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])  # 1 unless set (tests/conftest.py)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: p.write_text('{"log_history": [{"step": 1'), r"trainer_state\.json cannot be read \(.*\): the"),
        (lambda p: p.write_text('{"global_step": 4, "log_history": 5}'), r"log_history = 5: must be a list"),
        (lambda p: p.write_text('["log_history"]'), r"top level = \['log_history'\]: must be a mapping"),
        (lambda p: p.write_text(json.dumps({"global_step": 1, "log_history": [
            {"step": 1, "curriculum/stage": 0, "curriculum/temperature": 1.0, "reward": "high"}]})),
         r"log_history\[0\]\.reward = 'high': must be a number"),
        (lambda p: p.write_text(json.dumps({"global_step": 1, "log_history": [
            {"step": "one", "curriculum/switch": {}}]})), r"log_history\[0\]\.step = 'one': must be an integer >= 0"),
        (lambda p: p.symlink_to("/dev/zero"), r"trainer_state\.json is a character device, not a regular file"),
        (lambda p: os.mkfifo(p), r"trainer_state\.json is a FIFO \(named pipe\), not a regular file"),
    ],
    ids=["truncated", "history-not-a-list", "not-a-mapping", "reward-string", "switch-step-string", "dev-zero",
         "fifo"],
)  # fmt: skip
def test_plot_of_a_malformed_trainer_state_exits_2(tmp_path, capsys, write, message):
    """Each was a raw traceback (or, for /dev/zero and a FIFO, a hang); the test runs the CLI in a subprocess with a
    time and memory limit, so a regression fails instead of hanging."""
    import resource

    run = tmp_path / "run"
    run.mkdir()
    write(run / "trainer_state.json")

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    result = subprocess.run([sys.executable, "-m", "grpo_curriculum", "plot", str(run)], capture_output=True,
                            text=True, timeout=120, preexec_fn=limit_memory,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert re.search(message, result.stderr) and "Traceback" not in result.stderr
    assert f"grpo-curriculum plot: error: {run / 'trainer_state.json'}" in result.stderr
    assert "Fix: pass the output directory of a grpo-curriculum run" in result.stderr
    assert not (run / "curriculum.png").exists()


def test_plot_of_a_directory_without_trainer_state_names_it(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2
    assert main(["plot", str(tmp_path / "nowhere")]) == 2
    error = capsys.readouterr().err
    assert f"{tmp_path / 'empty'} holds no trainer_state.json (nor a checkpoint-N folder with one)" in error
    assert f"{tmp_path / 'nowhere'} does not exist" in error and "Traceback" not in error


def _logged_run(folder):
    folder.mkdir()
    history = [{"step": s, "curriculum/stage": 0, "curriculum/temperature": 1.0, "curriculum/num_generations": 2,
                "reward": 0.1 * s} for s in (1, 2, 3)]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": history}))
    return folder


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_plot_to_a_full_device_fails(tmp_path, capsys):
    run = _logged_run(tmp_path / "run")
    assert main(["plot", str(run), "-o", "/dev/full"]) == 2  # savefig("/dev/full") wrote /dev/full.png: exit 0
    captured = capsys.readouterr()
    assert "-o = '/dev/full': could not be written: No space left on device" in captured.err
    assert "Traceback" not in captured.err and "/dev/full" not in captured.out


def test_plot_prints_the_path_it_wrote(tmp_path, capsys):
    run = _logged_run(tmp_path / "run")
    folder = tmp_path / "plots"
    folder.mkdir()
    assert main(["plot", str(run), "-o", str(folder)]) == 0  # a folder: the plot goes into it
    assert capsys.readouterr().out == f"{folder / 'curriculum.png'}\n"
    assert (folder / "curriculum.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "plots.png").exists()
    assert main(["plot", str(run), "-o", str(tmp_path / "named")]) == 0  # no extension: PNG, as matplotlib names it
    assert capsys.readouterr().out == f"{tmp_path / 'named.png'}\n" and (tmp_path / "named.png").stat().st_size > 1000
    assert main(["plot", str(run), "-o", str(tmp_path / "plot.svg")]) == 0
    assert (tmp_path / "plot.svg").read_text().lstrip().startswith("<?xml")
    assert main(["plot", str(run), "-o", str(tmp_path / "plot.txt")]) == 2
    err = capsys.readouterr().err
    assert "names a .txt file, a format the plot cannot be written in" in err and not (tmp_path / "plot.txt").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
def test_stage_table_counts_optimizer_steps_and_generated_completions():
    """
    The per-stage table counts the optimizer steps each log line covers (`logging_steps` 4: 8 and 4 steps, not 2 and
    1 lines), and its completions/s the completions generated: `curriculum/generated` where a stage samples in
    increments (dynamic sampling's extra rounds included), else a round's completions per step.
    """
    from grpo_curriculum.cli.summary import stage_summary

    def line(step, stage, **extra):
        return {"step": step, "curriculum/stage": stage, "curriculum/temperature": 1.0,
                "curriculum/num_generations": 4, "reward": 0.5, "frac_reward_zero_std": 0.0, "step_time": 0.5, **extra}

    history = [line(4, 0), {"curriculum/switch": {}, "step": 9}, line(8, 0),
               line(12, 1, **{"curriculum/generated": 96}), line(16, 1, **{"curriculum/generated": 0})]
    rows = stage_summary(history, generation_batch_size=32, steps_per_round=2.0)
    assert [row["steps"] for row in rows] == [8, 8]
    # Stage 0: 16 completions a step (a round of 32 trains 2 steps) over 0.5 s a step; stage 1: 96 over 8 x 0.5 s.
    assert [row["completions/s"] for row in rows] == [32.0, 24.0]


def test_stage_table_counts_the_steps_that_train_a_round_generated_earlier():
    """Issue 44: with `steps_per_generation: 4` and `max_steps: 2` the table showed 1 step: step 2 trains the round
    generated at step 1, so its log line has a loss and no reward. The closing summary line is not a step."""
    from grpo_curriculum.cli.summary import stage_summary

    base = {"curriculum/stage": 0, "curriculum/temperature": 0.8, "curriculum/num_generations": 2}
    history = [{**base, "step": 1, "loss": 0.0, "reward": 0.03}, {**base, "step": 2, "loss": -0.09},
               {**base, "step": 2, "train_runtime": 0.12}]
    (row,) = stage_summary(history, generation_batch_size=16, steps_per_round=4.0)
    assert row["steps"] == 2 and row["mean reward"] == 0.03


# --- issue 35: the launch environment --------------------------------------------------------------------------------


@pytest.mark.parametrize("environ, expected", [
    ({}, []),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "29500"}, []),
    ({"WORLD_SIZE": "abc"}, ["WORLD_SIZE = 'abc': must be an integer from 1 to 1048576"]),
    ({"WORLD_SIZE": "0"}, ["WORLD_SIZE = '0': must be an integer from 1"]),
    ({"RANK": "-1"}, ["RANK = '-1': must be an integer from 0"]),
    ({"LOCAL_RANK": "1.5"}, ["LOCAL_RANK = '1.5': must be an integer"]),
    ({"MASTER_PORT": "70000"}, ["MASTER_PORT = '70000': must be an integer from 1 to 65535"]),
    ({"WORLD_SIZE": "2", "RANK": "2"}, ["RANK = '2': must be below WORLD_SIZE (2)"]),
    ({"LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "1"}, ["LOCAL_RANK = '1': must be below LOCAL_WORLD_SIZE (1)"]),
    ({"WORLD_SIZE": "x", "RANK": "5"}, ["WORLD_SIZE = 'x'"]),  # no relation drawn from a refused value
])
def test_malformed_launcher_variables_are_named(environ, expected):
    from grpo_curriculum.cli.launch import launch_problems

    found = [str(problem) for problem in launch_problems(environ)]
    assert len(found) == len(expected) and all(text in line for text, line in zip(expected, found)), found


def test_train_with_a_malformed_world_size_exits_2_before_any_model_loads(tmp_path, monkeypatch, capsys):
    """`WORLD_SIZE=abc grpo-curriculum train ...` ended in `ValueError: invalid literal for int()`."""
    monkeypatch.setenv("WORLD_SIZE", "abc")
    assert main(["train", str(ROOT / "recipes" / "demo.yaml"), "--output_dir", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err
    assert "WORLD_SIZE = 'abc': must be an integer" in error and "unset WORLD_SIZE" in error
    assert "Traceback" not in error and not (tmp_path / "o").exists()


def test_train_on_trl_1_15_without_a_gpu_exits_2_before_any_model_loads(tmp_path, monkeypatch, capsys):
    """Every training command died in TRL 1.15's Triton-only fused LM head (`'NoneType' object has no attribute
    'apply'`) on a CPU."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.15.0" if name == "trl" else real(name))
    assert main(["train", str(ROOT / "recipes" / "demo.yaml"), "--output_dir", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err
    assert "trl = '1.15.0': TRL 1.15.0 cannot train on a CPU" in error and "Traceback" not in error
    assert not (tmp_path / "o").exists()


def test_plot_of_a_run_whose_newest_checkpoint_was_cut_short_plots_the_newest_complete_one(tmp_path, capsys, caplog):
    """`plot` failed on a half-written newest checkpoint (a run killed while saving it)."""
    run = tmp_path / "run"
    run.mkdir()
    _logged_run(run / "checkpoint-3")
    (run / "checkpoint-6").mkdir()
    (run / "checkpoint-6" / "trainer_state.json").write_text('{"log_history": [{"st')  # killed while writing it
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        assert main(["plot", str(run), "-o", str(tmp_path / "p.png")]) == 0
    assert f"{run / 'checkpoint-6' / 'trainer_state.json'} cannot be read (a checkpoint cut short?): plotting " \
           f"{run / 'checkpoint-3' / 'trainer_state.json'}" in caplog.text
    assert (tmp_path / "p.png").stat().st_size > 10_000
    (run / "checkpoint-3" / "trainer_state.json").write_text("{")  # none complete: the newest one's error
    assert main(["plot", str(run)]) == 2
    assert f"{run / 'checkpoint-6' / 'trainer_state.json'} cannot be read" in capsys.readouterr().err
