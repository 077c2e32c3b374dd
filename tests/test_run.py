"""The `demo`, `train` and `plot` commands end to end, and the examples' two-line diff."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

from grpo_curriculum.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_demo_smoke(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--max-steps", "6"]) == 0
    printed = capsys.readouterr().out
    assert "switch at step 3: G 2 -> 8" in printed
    assert "mean reward" in printed and "0 explore" in printed and "1 compare" in printed
    assert (out / "curriculum.png").stat().st_size > 10_000
    state = json.loads((out / "trainer_state.json").read_text())
    steps = [h for h in state["log_history"] if "reward" in h]
    assert [h["curriculum/num_generations"] for h in steps] == [2, 2, 2, 8, 8, 8]
    assert not (tmp_path / "demo.partial").exists()


def test_demo_with_a_bad_recipe_writes_nothing(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text((ROOT / "recipes" / "demo.yaml").read_text().replace("num_generations: 8", "num_generations: 5"))
    out = tmp_path / "out"
    assert main(["demo", "--recipe", str(recipe), "--out", str(out)]) == 2
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


def test_examples_differ_in_two_lines_and_run(tmp_path):
    plain = (ROOT / "examples" / "grpo_plain.py").read_text().splitlines()
    curriculum = (ROOT / "examples" / "grpo_with_curriculum.py").read_text().splitlines()
    changed = [line for line in difflib.unified_diff(plain, curriculum, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]  # fmt: skip
    assert len(changed) == 4  # two lines removed, two added
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "examples/grpo_with_curriculum.py", "--max-steps", "4", "--output-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'curriculum/stage': 1" in result.stdout  # the demo recipe's second stage was reached


def test_train_refuses_vllm_when_it_is_not_installed(tmp_path, capsys, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    out = tmp_path / "run"
    code = main(["train", str(ROOT / "recipes" / "demo.yaml"), "--use_vllm", "true", "--output_dir", str(out)])
    error = capsys.readouterr().err
    assert code == 2 and "use_vllm = True: needs vLLM, which is not installed" in error and "Traceback" not in error
    assert not out.exists()
