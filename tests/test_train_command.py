"""`grpo-curriculum train`: resume, TRL's `ModelConfig` routing (LoRA) and `ScriptArguments` (splits, streaming)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_curriculum.cli import main

ROOT = Path(__file__).resolve().parent.parent
DEMO = str(ROOT / "recipes" / "demo.yaml")
FAST = ["--warm_start_steps", "0", "--save_strategy", "steps", "--save_steps", "2"]


def logged_steps(run_dir):
    state = json.loads((Path(run_dir) / "trainer_state.json").read_text())
    return [h["step"] for h in state["log_history"] if "loss" in h]


def test_train_resumes_from_the_newest_complete_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "4", *FAST]) == 0
    (out / "checkpoint-4" / "trainer_state.json").write_text("{")  # as if killed while writing it
    assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "6", "--resume_from_checkpoint", "true",
                 *FAST]) == 0  # fmt: skip
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
                 "--use_peft", "true", "--lora_r", "4", "--lora_target_modules", "[q_proj, v_proj]"]) == 0  # fmt: skip
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
