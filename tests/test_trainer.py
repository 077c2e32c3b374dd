"""Real TRL training loops with a tiny model: the core invariants of a mid-training switch."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from trl import GRPOTrainer, RLOOConfig, RLOOTrainer
from trl.trainer.utils import nanstd

from grpo_curriculum import CurriculumError, Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.demo.tasks import build_model, build_tokenizer, echo_reward
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer

from .conftest import RoundRecorder, assert_whole_groups, grpo_args, indexed_dataset, per_prompt_stages


def sampling_temperatures(trainer, cells: list) -> dict[str, float]:
    """Where each copy of the sampling temperature stands: the trainer's, generation config's, vLLM's, fused head's."""
    found = {"trainer": trainer.temperature}
    if getattr(trainer, "generation_config", None) is not None:
        found["generation_config"] = trainer.generation_config.temperature
    if getattr(trainer, "generation_kwargs", None) is not None:
        found["generation_kwargs"] = trainer.generation_kwargs["temperature"]
    if getattr(trainer, "use_vllm", False):
        found["vllm"] = trainer.vllm_generation.temperature
    for i, cell in enumerate(cells):
        found[f"fused_lm_head[{i}]"] = cell.cell_contents
    return found


def make_trainer(tmp_path, stages, recorder=None, dataset=None, model=None, cls=CurriculumGRPOTrainer, eval_dataset=None,
                 **overrides):  # fmt: skip
    recorder = recorder or RoundRecorder()
    callbacks = [CurriculumCallback(stages)] if stages is not None else []
    trainer = cls(
        model=model or build_model(),
        processing_class=build_tokenizer(),
        reward_funcs=recorder,
        args=grpo_args(tmp_path, RLOOConfig if issubclass(cls, RLOOTrainer) else None, **overrides),
        train_dataset=dataset if dataset is not None else indexed_dataset(),
        eval_dataset=eval_dataset,
        callbacks=callbacks,
    )
    recorder.trainer = trainer
    return trainer, recorder


def train_history(trainer):
    return [h for h in trainer.state.log_history if "loss" in h]


def plain_and_curriculum(tmp_path, stages, dataset, **overrides) -> list[tuple]:
    """
    Train plain `GRPOTrainer` and `CurriculumGRPOTrainer` with `stages` on the same config and data; for each, what two
    runs must share to train alike: each round's prompts and completions, each step's reward, loss and zero-std share.
    """
    records = []
    for name, cls, run_stages in [("plain", GRPOTrainer, None), ("curriculum", CurriculumGRPOTrainer, stages)]:
        trainer, recorder = make_trainer(tmp_path / name, run_stages, recorder=RoundRecorder(reward_fn=echo_reward),
                                         dataset=dataset, cls=cls, **overrides)  # fmt: skip
        trainer.train()
        steps = [(h["reward"], h["loss"], h["frac_reward_zero_std"]) for h in train_history(trainer)]
        records.append(([c["idx"] for c in recorder.calls], [c["completions"] for c in recorder.calls], steps))
    return records


# Both trainers, for the tests of what they share (the round machinery of `CurriculumTrainerMixin`).
BOTH_TRAINERS = pytest.mark.parametrize("cls", [CurriculumGRPOTrainer, CurriculumRLOOTrainer], ids=["grpo", "rloo"])
TWO_STAGES = [Stage(num_generations=2, temperature=0.7, until_step=3), Stage(num_generations=4, temperature=1.3)]


def test_switch_regroups_whole_rounds(tmp_path):
    trainer, recorder = make_trainer(tmp_path, TWO_STAGES, max_steps=6)
    trainer.train()
    assert [c["step"] for c in recorder.calls] == [0, 1, 2, 3, 4, 5]
    for call in recorder.calls:
        g = 2 if call["step"] < 3 else 4
        assert call["num_generations"] == g
        assert len(call["idx"]) == 8  # the generation batch is fixed
        assert_whole_groups(call["idx"], g)
        assert len(set(call["idx"])) == 8 // g
    # Rewards equal the prompt index, so whole groups have zero std exactly when TRL groups by the same G as the
    # layout. A switch that only changed `num_generations` would group rows sampled for the old G.
    assert all(h["frac_reward_zero_std"] == 1.0 for h in train_history(trainer))
    assert [h["curriculum/num_generations"] for h in train_history(trainer)] == [2, 2, 2, 4, 4, 4]
    assert [h["curriculum/stage"] for h in train_history(trainer)] == [0, 0, 0, 1, 1, 1]
    assert [h["curriculum/temperature"] for h in train_history(trainer)] == [0.7] * 3 + [1.3] * 3


@BOTH_TRAINERS
def test_switch_with_read_ahead_never_reuses_old_grouping(tmp_path, cls):
    """Workers and accelerate prefetch rows grouped for the old G; none of them may reach a round with the new G."""
    stages = [Stage(num_generations=2, temperature=1.0, until_step=2), Stage(num_generations=8, temperature=1.0)]
    trainer, recorder = make_trainer(
        tmp_path, stages, cls=cls, max_steps=5, dataloader_num_workers=2, dataloader_prefetch_factor=4,
        shuffle_dataset=True,
    )
    trainer.train()
    seen = []
    for call in recorder.calls:
        g = call["num_generations"]
        assert g == (2 if call["step"] < 2 else 8)
        assert_whole_groups(call["idx"], g)
        seen += call["idx"][::g]
    # One pass over 48 prompts: 2 rounds x 4 prompts + 3 rounds x 1 prompt; none repeated, none skipped mid-pass.
    assert len(seen) == len(set(seen)) == 11
    assert all(h["frac_reward_zero_std"] == 1.0 for h in train_history(trainer))


@BOTH_TRAINERS
def test_round_boundary_with_steps_per_generation_and_iterations(tmp_path, cls):
    """A round spans steps_per_generation x num_iterations micro-steps; a switch waits for the next round."""
    # per-device 4, accumulation 2, steps_per_generation 4 -> generation batch 16, one round per 2 optimizer steps
    # (num_iterations 2 doubles it: one round every 4 optimizer steps).
    stages = [Stage(num_generations=4, temperature=0.8, until_step=3), Stage(num_generations=8, temperature=1.2)]
    trainer, recorder = make_trainer(
        tmp_path,
        stages,
        cls=cls,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        num_iterations=2,
        max_steps=9,
    )
    trainer.train()
    # Rounds start at steps 0, 4, 8: the stage ending at step 3 holds for the round started at 0; 4 is the first
    # round starting at >= 3.
    assert [(c["step"], c["num_generations"]) for c in recorder.calls] == [(0, 4), (4, 8), (8, 8)]
    for call in recorder.calls:
        assert len(call["idx"]) == 16
        assert_whole_groups(call["idx"], call["num_generations"])
    history = train_history(trainer)
    assert [h["curriculum/num_generations"] for h in history] == [4, 4, 4, 4, 8, 8, 8, 8, 8]


def test_several_rounds_per_optimizer_step(tmp_path):
    """steps_per_generation < gradient_accumulation_steps: rounds start mid-step; they share the step's setting."""
    stages = [Stage(num_generations=2, temperature=0.9, until_step=1), Stage(num_generations=4, temperature=1.1)]
    trainer, recorder = make_trainer(
        tmp_path, stages, per_device_train_batch_size=4, gradient_accumulation_steps=4, steps_per_generation=2,
        max_steps=3,
    )
    trainer.train()
    assert [(c["step"], c["num_generations"]) for c in recorder.calls] == [
        (0, 2), (0, 2), (1, 4), (1, 4), (2, 4), (2, 4)
    ]  # fmt: skip
    for call in recorder.calls:
        assert_whole_groups(call["idx"], call["num_generations"])


def _phase(trainer) -> str:
    return "train" if trainer.model.training else "eval"


def _spy_generation(trainer, phases: bool = False):
    """Record the temperature `model.generate` is called with (with `phases`: `(phase, temperature)`)."""
    seen = []
    original = trainer.model.generate

    def generate(*args, generation_config=None, **kwargs):
        temperature = generation_config.temperature
        seen.append((_phase(trainer), temperature) if phases else temperature)
        return original(*args, generation_config=generation_config, **kwargs)

    trainer.model.generate = generate
    return seen


def check_logps(trainer, temperature_of, tolerance: float = 1e-4, distinct_from=None) -> list[tuple]:
    """
    Check every log-prob computation of the policy and the reference model against a naive `log_softmax(logits / T)`
    at `T = temperature_of()` (with `distinct_from`, also that the one at `distinct_from(T)` differs, so the check can
    tell temperatures apart). Returns `(step, phase, T, is_reference)` per check.
    """
    checked = []
    original = trainer._get_per_token_logps_and_entropies

    def checked_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps, entropies, aux = original(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        temperature = temperature_of()
        mask = attention_mask[:, -logits_to_keep:].bool()
        got = logps[mask].detach()
        expected = _naive_logps(model, input_ids, attention_mask, logits_to_keep, temperature)
        torch.testing.assert_close(got, expected[mask], atol=tolerance, rtol=tolerance)
        if distinct_from is not None:
            wrong = _naive_logps(model, input_ids, attention_mask, logits_to_keep, distinct_from(temperature))
            assert (got - wrong[mask]).abs().max() > 1e-2
        checked.append((trainer.state.global_step, _phase(trainer), temperature, model is trainer.ref_model))
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = checked_logps
    return checked


def _naive_logps(model, input_ids, attention_mask, logits_to_keep, temperature):
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits[:, -logits_to_keep - 1 : -1] / temperature
    targets = input_ids[:, -logits_to_keep:]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def test_logprobs_at_the_sampling_temperature(tmp_path, tiny_model_dir):
    """Policy and reference log-probs are computed at the temperature the round was sampled at, after a switch."""
    stages = [Stage(num_generations=2, temperature=0.5, until_step=2), Stage(num_generations=4, temperature=2.0)]
    trainer, recorder = make_trainer(tmp_path, stages, model=tiny_model_dir, beta=0.1, max_steps=4)
    sampled_at = _spy_generation(trainer)
    checked = check_logps(trainer, lambda: sampled_at[-1])
    trainer.train()
    assert sampled_at == [0.5, 0.5, 2.0, 2.0]
    assert {t for _, _, t, ref in checked if ref} == {0.5, 2.0}  # the reference model too
    assert {t for _, _, t, ref in checked if not ref} == {0.5, 2.0}
    # every copy of the temperature agrees after the run
    found = sampling_temperatures(trainer, trainer._temperature_cells)
    # TRL >= 1.15 binds the temperature in the fused LM head of the policy and the reference model; earlier releases
    # divide by `trainer.temperature` at each computation, with no other copy to keep in step
    fused = hasattr(importlib.import_module("trl.trainer.grpo_trainer"), "add_fused_lm_head")
    assert len(trainer._temperature_cells) == (2 if fused else 0) and set(found.values()) == {2.0}, found


@pytest.mark.parametrize("iterable", [False, True], ids=["map", "iterable"])
def test_one_stage_schedule_trains_like_plain_grpo(tmp_path, iterable):
    """Adopting the plugin without a schedule change changes nothing: same prompts, rewards and losses per step."""
    overrides = dict(gradient_accumulation_steps=2, num_generations=4, temperature=0.9, max_steps=8, seed=3)
    dataset = indexed_dataset(num_prompts=20)  # 2 passes: the tail of each pass is dropped like RepeatSampler does
    if iterable:
        dataset = dataset.to_iterable_dataset()
    dataset = dataset.map(lambda row: {"target": row["prompt"].split(" : ")[1][:-2]})
    plain, ours = plain_and_curriculum(tmp_path, [Stage(num_generations=4, temperature=0.9)], dataset, **overrides)
    assert ours == plain


def near_equal_kinds(prompts, completions, idx, **kwargs):
    """By prompt index mod 4: 1 for every row; 1e-7 apart (TRL's std test: not zero); by row position; 0.3 for every
    row (float32 rounds the mean: not zero either)."""
    return [(1.0, 1.0 + 1e-7 * j, float(j % 2), 0.3)[i % 4] for j, i in enumerate(idx)]


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_one_stage_curriculum_logs_trls_metrics_bit_for_bit(tmp_path, tiny_model_dir, scale_rewards):
    """
    Where a round is TRL's own (one stage at TRL's G and temperature), every TRL metric of every log line is the value
    plain `GRPOTrainer` logs, bit for bit, `frac_reward_zero_std` included; the curriculum only adds `curriculum/...`
    keys.
    """
    overrides = dict(num_generations=4, temperature=0.9, max_steps=4, seed=3, per_device_train_batch_size=8,
                     scale_rewards=scale_rewards, beta=0.05)  # fmt: skip
    lines = {}
    for name, cls, stages in [("plain", GRPOTrainer, None),
                              ("curriculum", CurriculumGRPOTrainer, [Stage(num_generations=4, temperature=0.9)])]:
        trainer, _ = make_trainer(tmp_path / name, stages, recorder=RoundRecorder(reward_fn=near_equal_kinds),
                                  cls=cls, model=tiny_model_dir, **overrides)  # fmt: skip
        trainer.train()
        lines[name] = train_history(trainer)
    assert len(lines["plain"]) == len(lines["curriculum"]) == 4
    clock = {"step_time"}  # wall-clock seconds: the one value two runs cannot share
    for plain, ours in zip(lines["plain"], lines["curriculum"], strict=True):
        assert clock <= set(plain) and clock <= set(ours)
        trl_keys = {k: v for k, v in ours.items() if not k.startswith("curriculum/") and k not in clock}
        assert trl_keys == {k: v for k, v in plain.items() if k not in clock}  # key for key, == (not approx)
        assert any(k.startswith("curriculum/") for k in ours)
    # Rewards 1e-7 apart, or 0.3 each: zero-std groups for the curriculum, not for TRL's `torch.isclose(std, 0)`.
    assert any(ours["curriculum/zero_std_fraction"] != plain["frac_reward_zero_std"]
               for plain, ours in zip(lines["plain"], lines["curriculum"], strict=True))  # fmt: skip


def test_invalid_stage_fails_at_construction(tmp_path):
    stages = [Stage(num_generations=4, temperature=0.7, until_step=2), Stage(num_generations=5, temperature=0.9)]
    with pytest.raises(CurriculumError) as error:
        make_trainer(tmp_path, stages, per_device_train_batch_size=8)
    message = str(error.value)
    assert "stages[1].num_generations" in message and "5" in message
    assert "valid num_generations: 2, 4, 8" in message
    assert "generation batch 8" in message


def test_stage_past_max_steps_fails_at_construction(tmp_path):
    stages = [Stage(num_generations=2, temperature=0.7, until_step=10), Stage(num_generations=4, temperature=0.9)]
    with pytest.raises(CurriculumError, match=r"stages\[0\].until_step.*after the run's last optimizer step \(6\)"):
        make_trainer(tmp_path, stages, max_steps=6)


def test_callback_on_plain_grpo_trainer_refuses_to_train(tmp_path):
    trainer, recorder = make_trainer(tmp_path, TWO_STAGES, cls=GRPOTrainer)
    with pytest.raises(RuntimeError, match="CurriculumGRPOTrainer"):
        trainer.train()
    assert recorder.calls == [] and trainer.state.global_step == 0


def test_switches_recorded_once(tmp_path):
    stages = [
        Stage(num_generations=2, temperature=0.7, until_step=2),
        Stage(num_generations=4, temperature=0.9, until_step=4),
        Stage(num_generations=8, temperature=1.1),
    ]
    trainer, _ = make_trainer(tmp_path, stages, max_steps=6)
    trainer.train()
    switches = trainer._curriculum.switches
    assert [(s["step"], s["from"]["num_generations"], s["to"]["num_generations"]) for s in switches] == [
        (3, 2, 4),  # step 3 (logged "step": 3) is the first trained at G 4
        (5, 4, 8),
    ]


@BOTH_TRAINERS
def test_temperature_ramp_is_held_per_round(tmp_path, cls):
    stages = [Stage(num_generations=4, temperature=0.5, temperature_end=1.0, until_step=4), Stage(4, 1.0)]
    trainer, recorder = make_trainer(tmp_path, stages, cls=cls, max_steps=6)
    trainer.train()
    assert [c["temperature"] for c in recorder.calls] == pytest.approx([0.5, 0.625, 0.75, 0.875, 1.0, 1.0])
    assert all(math.isclose(h["curriculum/temperature"], c["temperature"]) for h, c in
               zip(train_history(trainer), recorder.calls, strict=True))  # fmt: skip


@pytest.mark.parametrize("variant", ["no-shuffle", "iterable"])
@BOTH_TRAINERS
def test_switch_with_unshuffled_and_iterable_datasets(tmp_path, variant, cls):
    dataset = indexed_dataset(num_prompts=30)
    overrides = dict(max_steps=6, shuffle_dataset=variant != "no-shuffle")
    if variant == "iterable":
        dataset = dataset.to_iterable_dataset()
    stages = [Stage(num_generations=2, temperature=0.7, until_step=3), Stage(num_generations=8, temperature=1.1)]
    trainer, recorder = make_trainer(tmp_path, stages, dataset=dataset, cls=cls, **overrides)
    trainer.train()
    prompts = []
    for call in recorder.calls:
        assert call["num_generations"] == (2 if call["step"] < 3 else 8)
        assert_whole_groups(call["idx"], call["num_generations"])
        prompts += call["idx"][:: call["num_generations"]]
    if variant == "no-shuffle":
        assert prompts == list(range(15))  # 3 rounds x 4 prompts, then 3 x 1: in dataset order, none skipped
    else:
        assert len(prompts) == len(set(prompts)) == 15


def test_generation_kwargs_temperature_conflicts_with_the_curriculum(tmp_path):
    with pytest.raises(CurriculumError, match=r"generation_kwargs\.temperature = 0\.5: would override"):
        make_trainer(tmp_path, TWO_STAGES, generation_kwargs={"temperature": 0.5})


@BOTH_TRAINERS
def test_evaluation_uses_the_stage_in_force_and_training_keeps_its_round_temperature(tmp_path, tiny_model_dir, cls):
    """
    Rounds span 2 steps; stage 1 (T 2.0) starts at step 1, inside the round sampled at T 0.5. Evaluation at step 1
    samples and scores at 2.0, while the rest of the training round is still scored at 0.5 (its sampling temperature).
    """
    stages = [Stage(num_generations=2, temperature=0.5, until_step=1), Stage(num_generations=2, temperature=2.0)]
    trainer, recorder = make_trainer(tmp_path, stages, model=tiny_model_dir, cls=cls, max_steps=3,
                                     steps_per_generation=2, eval_strategy="steps", eval_steps=1,
                                     per_device_eval_batch_size=8,
                                     num_generations_eval=2, beta=0.1, eval_dataset=indexed_dataset(8))  # fmt: skip
    sampled = _spy_generation(trainer, phases=True)
    # each computation at the temperature its phase last sampled at
    scored = check_logps(trainer, lambda: [t for p, t in sampled if p == _phase(trainer)][-1])
    trainer.train()
    scored = [check[:3] for check in scored]  # (step, phase, temperature)
    assert [t for p, t in sampled if p == "train"] == [0.5, 2.0]  # rounds at steps 0 and 2
    assert {t for p, t in sampled if p == "eval"} == {2.0}  # evaluations at steps 1, 2, 3: stage 1 is in force
    assert (1, "train", 0.5) in scored and (1, "eval", 2.0) in scored  # step 1: both temperatures, each in its place


@BOTH_TRAINERS
def test_second_train_call_starts_the_curriculum_over(tmp_path, cls):
    trainer, recorder = make_trainer(tmp_path, TWO_STAGES, cls=cls, max_steps=6)
    trainer.train()
    first = list(trainer._curriculum.switches)
    recorder.calls.clear()
    trainer.train()
    assert trainer._curriculum.switches == first  # one switch, at step 3; no spurious "stage 1 -> stage 0"
    assert [c["num_generations"] for c in recorder.calls] == [2, 2, 2, 4, 4, 4]


def test_split_batches_and_a_too_small_dataset_fail_at_construction(tmp_path):
    with pytest.raises(CurriculumError, match=r"accelerator_config.split_batches = True"):
        make_trainer(tmp_path, TWO_STAGES, accelerator_config={"split_batches": True})
    with pytest.raises(CurriculumError, match=r"train_dataset = '3 prompts': is too small: a round of 8 completions "
                                              r"at num_generations 2 \(TRL's data loader\) takes 4 prompts"):
        make_trainer(tmp_path, TWO_STAGES, dataset=indexed_dataset(3))
    with pytest.raises(CurriculumError, match=r"'5 prompts': is too small: a round of 16 completions at stage 0 takes 8"):
        make_trainer(tmp_path, TWO_STAGES, dataset=indexed_dataset(5), per_device_train_batch_size=16,
                     num_generations=4)  # fmt: skip


def test_rows_of_a_group_are_independent_copies(tmp_path):
    """A reward function mutating one row's field must not change the other rows of its group (as with TRL's loader)."""
    seen = []

    def mutating_reward(prompts, completions, idx, tags, **kwargs):
        seen.append([list(t) for t in tags])
        tags[0].append("mutated")  # rows 0 and 1 are the same prompt (G = 2)
        seen[-1].append(list(tags[1]))
        return [0.0] * len(completions)

    dataset = indexed_dataset().add_column("tags", [["t"]] * 48)
    trainer, _ = make_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)], dataset=dataset, max_steps=2,
                              recorder=RoundRecorder(reward_fn=mutating_reward))  # fmt: skip
    trainer.train()
    assert len(seen) == 2 and all(entry[1] == ["t"] and entry[-1] == ["t"] for entry in seen)


def test_second_train_call_after_a_mixed_round_builds_trls_loader_at_a_real_g(tmp_path, wanted_by_index):
    """A round of mixed group sizes runs TRL at `num_generations = 1`; TRL's own G is back once the round is over."""
    wanted_by_index(lambda index: (2, 4)[index % 2])
    stages = per_prompt_stages((2, 4), defer=False)
    # 6 prompts: a round takes 2 to 4 of them; TRL's loader at G 1 would need 8 (one per completion) and yield nothing.
    trainer, recorder = make_trainer(tmp_path, stages, dataset=indexed_dataset(6), max_steps=3)
    loader_g = []
    original = trainer.get_train_dataloader
    trainer.get_train_dataloader = lambda: (loader_g.append(trainer.num_generations), original())[1]
    trainer.train()
    assert {len(set(c["sizes"])) for c in recorder.calls} == {2}  # mixed rounds
    first = [(c["idx"], c["sizes"]) for c in recorder.calls]
    recorder.calls.clear()
    trainer.train()  # trained nothing before the fix: TRL's loader at G 1 yields no batch ("stopping at step 0")
    assert [(c["idx"], c["sizes"]) for c in recorder.calls] == first
    assert loader_g == [2, 2] == [trainer.num_generations] * 2


def zero_std_kinds(prompts, completions, idx, **kwargs):
    """
    By prompt index mod 3: 0.3 for every row (float32 rounds the mean of eight: TRL's std test calls it non-zero); one
    finite reward, the others None (zero advantage); 1 for the group's first row and 0 for the others.
    """
    rewards = []
    for j, i in enumerate(idx):
        first = j == 0 or idx[j - 1] != i
        rewards.append((0.3, 0.7 if first else None, 1.0 if first else 0.0)[i % 3])
    return rewards


@pytest.mark.parametrize("per_prompt", [True, False], ids=["mixed_sizes", "one_g"])
def test_trl_and_the_curriculum_log_one_zero_std_share(tmp_path, wanted_by_index, per_prompt):
    """
    `curriculum/zero_std_fraction`: the round's completions in groups without a learning signal (all equal, or one
    finite reward); TRL's `frac_reward_zero_std` stays TRL's (rows whose group std is 0: a group of one finite reward
    has a NaN std, not 0), for groups of one G and, computed TRL's way for the real groups, of mixed sizes.
    """
    wanted_by_index(lambda index: (8, 4, 2)[index % 3])
    stages = per_prompt_stages((2, 4, 8), defer=False) if per_prompt else [Stage(num_generations=8, temperature=1.0)]
    trainer, recorder = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=zero_std_kinds), max_steps=3,
                                     per_device_train_batch_size=16, shuffle_dataset=False)  # fmt: skip
    trainer.train()
    for h, call in zip(train_history(trainer), recorder.calls, strict=True):
        starts = [sum(call["sizes"][:k]) for k in range(len(call["sizes"]))]
        zero = sum(size for start, size in zip(starts, call["sizes"]) if call["idx"][start] % 3 != 2)
        rewards = torch.tensor([math.nan if r is None else r for r in zero_std_kinds(None, None, call["idx"])])
        stds = [nanstd(rewards[start : start + size]) for start, size in zip(starts, call["sizes"])]
        trl_zero = sum(size for std, size in zip(stds, call["sizes"]) if torch.isclose(std, torch.zeros(())))
        assert h["curriculum/zero_std_fraction"] == zero / 16, (call["sizes"], h)
        assert h["frac_reward_zero_std"] == trl_zero / 16 < zero / 16, (call["sizes"], h)
    if per_prompt:
        assert {len(set(call["sizes"])) for call in recorder.calls} == {3}  # groups of 8, 4 and 2 in every round


def _exits(n):
    raise SystemExit(0)


def _raises(n):
    raise KeyError("answer")


@pytest.mark.parametrize("bad, rule", [
    (lambda n: [0.0] * (n - 1), "returned 7 rewards for 8 completions at step 1"),
    (_raises, "raised KeyError: 'answer'"),
    (lambda n: ["1"] * n, "returned a str for completion 0 of 8 at step 1"),
    (lambda n: 1.0, "returned a float at step 1"),
    (lambda n: [math.nan] * n, "returned NaN for all 8 completions at step 1"),
    (lambda n: {"accuracy": [0.0] * n}, "returned a dict at step 1"),
    (_exits, "called sys.exit(0)"),
], ids=["short", "raises", "strings", "float", "all_nan", "dict", "exits"])
def test_a_reward_function_breaking_its_contract_stops_training_at_that_call(tmp_path, bad, rule):
    """Issue 44: a reward function that is right on the preflight's rows and then raises, exits or returns the wrong
    length, type or NaN everywhere stops the run at that call (not a TRL traceback, a silent exit 0 or a run trained on
    `nan`), naming the function, the step and the rule."""

    def reward(prompts, completions, idx, trainer_state, **kwargs):
        return bad(len(idx)) if trainer_state.global_step == 1 else [float(j % 2) for j in range(len(idx))]

    recorder = RoundRecorder(lambda **kwargs: reward(trainer_state=recorder.trainer.state, **kwargs))
    trainer, _ = make_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)], recorder=recorder, max_steps=4)
    with pytest.raises(CurriculumError) as error:
        trainer.train()
    (problem,) = error.value.problems
    assert problem.key == "reward function recorder" and rule in problem.rule, problem
    assert "step 1" in problem.rule and trainer.state.global_step == 1


@pytest.mark.parametrize("bad", [math.inf, -math.inf, 1e39])  # 1e39: beyond float32, TRL's reward dtype: inf
@pytest.mark.parametrize("dynamic", [False, True])
def test_an_infinite_reward_stops_training_naming_the_function_and_the_value(tmp_path, bad, dynamic):
    """
    A reward of inf trained to the end with loss 0, grad_norm 0 and reward inf (dynamic sampling even counted its
    groups as informative): the run stops at the round that scores it, naming the function, the value and the row.
    """
    from grpo_curriculum import DynamicSampling

    def reward(prompts, completions, idx, trainer_state, **kwargs):
        return [bad if trainer_state.global_step == 1 and j == 5 else float(j % 2) for j in range(len(idx))]

    recorder = RoundRecorder(lambda **kwargs: reward(trainer_state=recorder.trainer.state, **kwargs))
    stages = [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling() if dynamic else None)]
    trainer, _ = make_trainer(tmp_path, stages, recorder=recorder, max_steps=4)
    with pytest.raises(CurriculumError) as error:
        trainer.train()
    (problem,) = error.value.problems
    shown = "inf" if bad > 0 else "-inf"
    assert problem.key == "reward function recorder" and problem.value == (bad if math.isinf(bad) else math.inf)
    assert problem.rule.startswith(f"returned {shown} for completion 5 of the 8 scored at step 1 (1 infinite): a "
                                   "reward must be a finite number")
    assert "float32" in problem.fix and "None" in problem.fix
    assert trainer.state.global_step == 1  # stopped before the step that would train on it
    assert len([h for h in trainer.state.log_history if "loss" in h]) == 1
