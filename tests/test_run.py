"""The `demo`, `train` and `plot` commands end to end, and the examples' two-line diff."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

from grpo_curriculum.cli import main

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


def test_demo_threads_only_for_the_tiny_model_without_omp_num_threads():
    from grpo_curriculum.recipe import load_recipe
    from grpo_curriculum.run import demo_threads

    tiny = load_recipe(ROOT / "recipes" / "demo.yaml")
    smollm2 = load_recipe(ROOT / "recipes" / "smollm2-arithmetic.yaml")
    assert demo_threads(tiny, environ={})[0] == 1
    assert demo_threads(tiny, environ={"OMP_NUM_THREADS": "4"}) == (None, "OMP_NUM_THREADS")
    assert demo_threads(smollm2, environ={})[0] is None


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
