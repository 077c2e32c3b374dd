"""The comparison curriculum in real TRL training loops: exactly which advantages are zeroed, and `mode: all` is TRL."""

from __future__ import annotations

import pytest
import torch

from grpo_curriculum import Stage
from grpo_curriculum.core.comparison import comparison_keep
from grpo_curriculum.demo.tasks import echo_reward

from .conftest import RoundRecorder, indexed_dataset
from .test_trainer import make_trainer, plain_and_curriculum


def graded_reward(completions, **kwargs):
    """Several distinct rewards a group (a function of the text), so that best, worst and middle differ."""
    return [float(sum(map(ord, c)) % 5) for c in completions]


def capture_rounds(trainer):
    """Each training round's rewards (from the reward function) and the advantages the trainer trains on."""
    rounds, original = [], trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        rounds.append(output["advantages"].detach().clone())
        return output

    trainer._generate_and_score_completions = spy
    return rounds


def trl_group_advantages(rewards, size, scale="group"):
    grouped = torch.tensor(rewards, dtype=torch.float32).view(-1, size)
    mean = grouped.mean(1, keepdim=True)
    advantages = grouped - mean
    if scale == "group":
        advantages = advantages / (grouped.std(1, keepdim=True) + 1e-4)
    elif scale == "batch":
        advantages = advantages / (torch.tensor(rewards).std() + 1e-4)
    return advantages.flatten()


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_extremes_zero_exactly_the_middle_completions(tmp_path, scale):
    stages = [Stage(num_generations=4, temperature=1.0, comparison={"mode": "extremes"})]
    recorder = RoundRecorder(reward_fn=graded_reward)
    trainer, recorder = make_trainer(tmp_path, stages, recorder=recorder, num_generations=4, max_steps=4,
                                     scale_rewards=scale)  # fmt: skip
    advantages = capture_rounds(trainer)
    trainer.train()
    assert len(advantages) == len(recorder.calls) == 4
    zeroed, shares = 0, []
    for call, trained in zip(recorder.calls, advantages):
        rewards = graded_reward(call["completions"])
        keep = comparison_keep(rewards, [4] * 2, "extremes")
        expected = trl_group_advantages(rewards, 4, scale) * torch.tensor(keep, dtype=torch.float32)
        torch.testing.assert_close(trained, expected, atol=1e-5, rtol=1e-5)
        zeroed += keep.count(False)
        shares.append(sum(keep) / len(keep))
    assert zeroed > 0  # the rewards had middles to drop
    logged = [h["curriculum/comparison_kept"] for h in trainer.state.log_history if "curriculum/comparison_kept" in h]
    assert logged == pytest.approx(shares)


def test_margin_ramps_per_round_and_is_logged(tmp_path):
    stages = [Stage(num_generations=4, temperature=1.0, comparison={"mode": "margin", "margin": 1.2,
                                                                    "margin_end": 0.0})]  # fmt: skip
    trainer, recorder = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=graded_reward),
                                     num_generations=4, max_steps=4)  # fmt: skip
    advantages = capture_rounds(trainer)
    trainer.train()
    margins = [h["curriculum/comparison_margin"] for h in trainer.state.log_history
               if "curriculum/comparison_margin" in h]  # fmt: skip
    assert margins == pytest.approx([1.2, 0.9, 0.6, 0.3])
    for call, trained, margin in zip(recorder.calls, advantages, margins):
        rewards = graded_reward(call["completions"])
        keep = torch.tensor(comparison_keep(rewards, [4, 4], "margin", margin), dtype=torch.float32)
        torch.testing.assert_close(trained, trl_group_advantages(rewards, 4) * keep, atol=1e-5, rtol=1e-5)


def test_mode_all_trains_like_plain_grpo(tmp_path):
    overrides = dict(gradient_accumulation_steps=2, num_generations=4, temperature=0.9, max_steps=6, seed=3)
    dataset = indexed_dataset(num_prompts=20).map(lambda row: {"target": row["prompt"].split(" : ")[1][:-2]})
    stages = [Stage(num_generations=4, temperature=0.9, comparison={"mode": "all"})]
    plain, ours = plain_and_curriculum(tmp_path, stages, dataset, **overrides)
    assert ours == plain


def test_extremes_then_all_switches_at_the_stage_end(tmp_path):
    stages = [Stage(num_generations=4, temperature=1.0, until_step=2, comparison={"mode": "extremes"}),
              Stage(num_generations=4, temperature=1.0)]
    trainer, _ = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=echo_reward), num_generations=4,
                              max_steps=4, dataset=indexed_dataset().map(
                                  lambda row: {"target": row["prompt"].split(" : ")[1][:-2]}))  # fmt: skip
    trainer.train()
    kept = ["curriculum/comparison_kept" in h for h in trainer.state.log_history if "loss" in h]
    assert kept == [True, True, False, False]
    assert [s["step"] for s in trainer._curriculum.switches] == [3]
    assert trainer._curriculum.switches[0]["reason"] == (
        "stage 1 starts; comparisons: best and worst of each group -> all completions")


def test_a_round_regenerated_after_a_mid_round_resume_keeps_its_margin(tmp_path):
    """The margin is a function of the step the round started at: a round resumed from a checkpoint taken inside it
    (steps_per_generation 4 over accumulation 2: a round spans 2 optimizer steps) gets the margin it started with."""
    stages = [Stage(num_generations=4, temperature=1.0, comparison={"mode": "margin", "margin": 1.0,
                                                                    "margin_end": 0.0})]  # fmt: skip
    overrides = dict(max_steps=8, save_strategy="steps", save_steps=1, num_generations=4, per_device_train_batch_size=4,
                     gradient_accumulation_steps=2, steps_per_generation=4)  # fmt: skip

    def margins(trainer, after=0):
        return [h["curriculum/comparison_margin"] for h in trainer.state.log_history
                if "curriculum/comparison_margin" in h and h["step"] > after]  # fmt: skip

    full, _ = make_trainer(tmp_path / "full", stages, recorder=RoundRecorder(reward_fn=graded_reward), **overrides)
    full.train()
    assert margins(full) == pytest.approx([1.0, 0.75, 0.5, 0.25])  # rounds start at steps 0, 2, 4, 6 of 8
    resumed, _ = make_trainer(tmp_path / "resumed", stages, recorder=RoundRecorder(reward_fn=graded_reward),
                              **overrides)  # fmt: skip
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))  # inside the round of steps 3-4
    # logged at step 4: the regenerated round of steps 3-4 (at its start's margin), then the next rounds
    assert margins(resumed, after=3) == pytest.approx([0.75, 0.5, 0.25])


@pytest.mark.parametrize("kind", ["per_prompt", "top_up"])
def test_comparisons_follow_each_real_group_in_rounds_of_mixed_sizes(tmp_path, kind, wanted_by_index):
    """Per-prompt rounds (groups of 2, 4 and 8) and top-up rounds (merged increments): the kept rows are each real
    group's best and worst, the others get 0, and the kept ones keep the advantage of their whole group."""
    from grpo_curriculum import Adaptive
    from grpo_curriculum.training.advantages import grpo_advantages

    if kind == "per_prompt":
        wanted_by_index(lambda index: (2, 4, 8)[index % 3])
        adaptive = Adaptive(num_generations=(2, 4, 8), policy="per_prompt", defer=False)
    else:
        adaptive = Adaptive(num_generations=(2, 4, 8), policy="top_up")
    stages = [Stage(temperature=1.0, adaptive=adaptive, comparison={"mode": "extremes"})]
    trainer, _ = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=graded_reward), max_steps=4,
                              per_device_train_batch_size=16)  # fmt: skip
    checked, original = [], trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        round_ = trainer._round
        rewards, sizes = round_.group_rewards(round_.trained_groups)
        keep = torch.tensor(comparison_keep(rewards, sizes, "extremes"), dtype=torch.float32)
        whole = grpo_advantages(torch.tensor(rewards).unsqueeze(1), sizes, torch.ones(1), "group")[0]
        torch.testing.assert_close(output["advantages"].float(), whole * keep, atol=1e-5, rtol=1e-5)
        checked.append((sorted(set(sizes)), int(keep.sum()), len(keep)))
        return output

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert len(checked) == 4
    assert any(len(sizes) > 1 for sizes, _, _ in checked)  # groups of several sizes were compared
    assert any(kept < rows for _, kept, rows in checked)  # and middles dropped


def test_a_comparison_changed_since_the_checkpoint_is_refused_on_resume(tmp_path):
    """A stage's comparison changed on resume was applied silently (issue 35, item 13)."""
    from grpo_curriculum.training.files import CurriculumStateError

    overrides = dict(max_steps=2, save_strategy="steps", save_steps=1, num_generations=4, per_device_train_batch_size=4)
    margin = [Stage(num_generations=4, temperature=1.0, comparison={"mode": "margin", "margin": 1.0})]
    trainer, _ = make_trainer(tmp_path / "run", margin, recorder=RoundRecorder(reward_fn=graded_reward), **overrides)
    trainer.train()
    extremes = [Stage(num_generations=4, temperature=1.0, comparison={"mode": "extremes"})]
    resumed, _ = make_trainer(tmp_path / "again", extremes, recorder=RoundRecorder(reward_fn=graded_reward),
                              **{**overrides, "max_steps": 4})  # fmt: skip
    with pytest.raises(CurriculumStateError, match=r"the curriculum's comparisons changed since the checkpoint "
                       r"\(stage 0: comparisons: margin 1 group stds saved, comparisons: best and worst of each "
                       r"group now\)"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    same, _ = make_trainer(tmp_path / "same", margin, recorder=RoundRecorder(reward_fn=graded_reward),
                           **{**overrides, "max_steps": 4})  # fmt: skip
    same.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))  # the same comparison resumes


@pytest.mark.parametrize("kind", ["plain", "extremes", "extremes_top_up", "extremes_per_prompt", "margin_dynamic"])
def test_the_completion_log_shows_the_advantages_trained_on(tmp_path, kind, wanted_by_index):
    """TRL's completion log (`log_completions`: the printed sample, the tracker tables and the parquet files, all from
    `_logs["advantages"]`) shows each row's advantage as the model trained on it: after a comparison zeroed some (the
    log showed them before, issue 52), in rounds of one pass, of mixed group sizes and of several increments."""
    import pandas

    from grpo_curriculum import Adaptive, DynamicSampling

    extremes = {"mode": "extremes"}
    stages = {
        "plain": [Stage(num_generations=4, temperature=1.0)],
        "extremes": [Stage(num_generations=4, temperature=1.0, comparison=extremes)],
        "extremes_top_up": [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4, 8), policy="top_up"),
                                  comparison=extremes)],
        "extremes_per_prompt": [Stage(temperature=1.0, comparison=extremes, adaptive=Adaptive(
            num_generations=(2, 4, 8), policy="per_prompt", defer=False))],
        "margin_dynamic": [Stage(num_generations=4, temperature=1.0, comparison={"mode": "margin", "margin": 0.8},
                                 dynamic_sampling=DynamicSampling(max_rounds=3))],
    }[kind]
    if kind == "extremes_per_prompt":
        wanted_by_index(lambda index: (2, 4, 8)[index % 3])
    def half_settled(completions, idx, **kwargs):  # the even prompts' groups all 1: dynamic sampling draws more
        return [1.0 if i % 2 == 0 else r for i, r in zip(idx, graded_reward(completions))]

    reward = half_settled if kind == "margin_dynamic" else graded_reward
    trainer, recorder = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=reward), max_steps=3,
                                     num_generations=4, per_device_train_batch_size=16, log_completions=True,
                                     num_completions_to_print=1)  # fmt: skip
    trained = capture_rounds(trainer)
    trainer.train()
    assert len(trained) == 3
    if kind in ("extremes_top_up", "margin_dynamic"):
        assert len(recorder.calls) > 3  # rounds of several increments
    for step, advantages in enumerate(trained, start=1):
        logged = pandas.read_parquet(tmp_path / "completions" / f"completions_{step:05d}.parquet")["advantage"]
        assert logged.tolist() == advantages.tolist()
    if kind != "plain":
        assert any((advantages == 0).any() for advantages in trained)  # the comparison zeroed some
