"""`CurriculumRLOOTrainer` in real TRL `RLOOTrainer` loops: TRL's own training without a switch, whole groups and
log-probs at the round's temperature after one, an exact resume, and the stages it refuses."""

from __future__ import annotations

import functools

import pytest
import torch
from trl import RLOOTrainer

from grpo_curriculum import Adaptive, CurriculumError, CurriculumRLOOTrainer, DynamicSampling, Stage
from grpo_curriculum.core.comparison import Comparison
from grpo_curriculum.demo.tasks import echo_reward

from .conftest import RoundRecorder, assert_whole_groups, indexed_dataset, per_prompt_stages
from .test_trainer import _spy_generation, check_logps, make_trainer, train_history

CLOCK = {"step_time"}  # wall-clock seconds: the one logged value two runs cannot share


def rloo_trainer(tmp_path, stages, cls=CurriculumRLOOTrainer, **kwargs):
    return make_trainer(tmp_path, stages, cls=cls, **kwargs)


def spy_rounds(trainer) -> list[dict]:
    """Each training round's output as TRL's `_generate_and_score_completions` returns it (advantages, log-probs)."""
    seen, original = [], trainer._generate_and_score_completions

    def generate_and_score(inputs):
        output = original(inputs)
        if trainer.model.training:
            seen.append({key: value.detach().clone() for key, value in output.items() if torch.is_tensor(value)})
        return output

    trainer._generate_and_score_completions = generate_and_score
    return seen


@pytest.mark.parametrize("model", ["tiny_model_dir", "tiny_gpt2_dir"], ids=["llama", "gpt2"])
def test_one_stage_curriculum_trains_like_plain_rloo(tmp_path, model, request):
    """
    One stage at RLOO's own G and temperature: the same prompts, completions, rewards, advantages, losses and grad
    norms as plain `RLOOTrainer`, and every TRL log key bit for bit (the curriculum only adds `curriculum/...` keys).
    `beta > 0` puts RLOO's KL penalty in the rewards; two passes over 20 prompts drop each pass's tail as TRL does.
    Without a curriculum, `CurriculumRLOOTrainer` is plain `RLOOTrainer`: the same, and no `curriculum/...` key.
    """
    overrides = dict(num_generations=4, temperature=0.9, gradient_accumulation_steps=2, max_steps=6, seed=3, beta=0.05,
                     model=request.getfixturevalue(model), dataset=indexed_dataset(num_prompts=20))  # fmt: skip
    runs = {}
    for name, cls, stages in [("plain", RLOOTrainer, None), ("no-curriculum", CurriculumRLOOTrainer, None),
                              ("curriculum", CurriculumRLOOTrainer, [Stage(num_generations=4, temperature=0.9)])]:
        trainer, recorder = rloo_trainer(tmp_path / name, stages, cls=cls, recorder=RoundRecorder(echo_reward),
                                         **overrides)  # fmt: skip
        outputs = spy_rounds(trainer)
        trainer.train()
        runs[name] = ([(c["idx"], c["completions"]) for c in recorder.calls], outputs, train_history(trainer))
    (plain_rounds, plain_outputs, plain_lines), (rounds, outputs, lines) = runs["plain"], runs["curriculum"]
    assert rounds == plain_rounds and len(rounds) == 6  # rounds of 16 completions, 4 prompts: 5 a pass
    assert len({i for idx, _ in rounds for i in idx}) == 20  # both passes, every prompt
    for plain, ours in zip(plain_outputs, outputs, strict=True):
        assert plain.keys() == ours.keys() and all(torch.equal(plain[k], ours[k]) for k in plain)
    assert any(output["advantages"].abs().sum() > 0 for output in outputs)  # the runs learn something
    assert len(lines) == len(plain_lines) == 6
    for plain, ours in zip(plain_lines, lines, strict=True):
        assert CLOCK <= set(plain) and CLOCK <= set(ours)
        assert {k: v for k, v in ours.items() if not k.startswith("curriculum/") and k not in CLOCK} == {
            k: v for k, v in plain.items() if k not in CLOCK}  # loss, grad_norm, reward, kl, ...: == (not approx)
        assert ours["curriculum/num_generations"] == 4 and ours["curriculum/temperature"] == 0.9
    assert any(line["grad_norm"] > 0 for line in lines)
    bare_rounds, bare_outputs, bare_lines = runs["no-curriculum"]
    assert bare_rounds == plain_rounds
    for plain, bare in zip(plain_outputs, bare_outputs, strict=True):
        assert plain.keys() == bare.keys() and all(torch.equal(plain[k], bare[k]) for k in plain)
    assert [{k: v for k, v in line.items() if k not in CLOCK} for line in bare_lines] == [
        {k: v for k, v in line.items() if k not in CLOCK} for line in plain_lines]  # fmt: skip


def by_row(prompts, completions, idx, **kwargs):
    """Distinct rewards within a group: the prompt's index plus the row's place in the round, scaled."""
    return [i + 0.25 * j for j, i in enumerate(idx)]


def test_after_a_switch_rounds_hold_whole_groups_with_leave_one_out_advantages(tmp_path):
    """Each round holds whole contiguous groups of one prompt at its stage's G, and the advantages RLOO trains on are
    each row's reward minus the mean of the other rewards of its group (`beta = 0`: no KL in the rewards)."""
    stages = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=8, temperature=1.3,
                                                                               until_step=4),
              Stage(num_generations=4, temperature=1.0)]  # fmt: skip
    trainer, recorder = rloo_trainer(tmp_path, stages, recorder=RoundRecorder(by_row), max_steps=6,
                                     beta=0.0)  # fmt: skip
    outputs = spy_rounds(trainer)
    trainer.train()
    assert [(c["step"], c["num_generations"], c["temperature"]) for c in recorder.calls] == [
        (0, 2, 0.7), (1, 2, 0.7), (2, 8, 1.3), (3, 8, 1.3), (4, 4, 1.0), (5, 4, 1.0)]  # fmt: skip
    for call, output in zip(recorder.calls, outputs, strict=True):
        g = call["num_generations"]
        assert len(call["idx"]) == 8
        assert_whole_groups(call["idx"], g)
        rewards = torch.tensor(by_row(None, None, call["idx"])).view(-1, g)
        expected = rewards - (rewards.sum(dim=1, keepdim=True) - rewards) / (g - 1)
        torch.testing.assert_close(output["advantages"], expected.view(-1), rtol=0, atol=1e-6)
    history = train_history(trainer)
    assert [h["curriculum/num_generations"] for h in history] == [2, 2, 8, 8, 4, 4]
    assert [h["curriculum/stage"] for h in history] == [0, 0, 1, 1, 2, 2]


def test_the_curriculum_sees_rewards_clipped_as_rloo_trains_on_them(tmp_path):
    """With `reward_clip_range`, RLOO clamps the rewards before its baseline: groups whose rewards all clip to the
    bound have zero std, for the curriculum's signals as for TRL's `frac_reward_zero_std`."""
    def above_the_clip(prompts, completions, idx, **kwargs):
        return [2.0 + i + 0.25 * j for j, i in enumerate(idx)]  # distinct, and all clipped to 1

    trainer, _ = rloo_trainer(tmp_path, [Stage(num_generations=4, temperature=1.0)], max_steps=2, beta=0.0,
                              recorder=RoundRecorder(above_the_clip), reward_clip_range=(0.0, 1.0))  # fmt: skip
    trainer.train()
    lines = train_history(trainer)
    assert [(line["frac_reward_zero_std"], line["curriculum/zero_std_fraction"]) for line in lines] == [(1.0, 1.0)] * 2
    assert all(line["reward"] > 1 for line in lines)  # TRL logs the rewards before clipping


def test_logprobs_and_the_kl_penalty_at_the_round_temperature(tmp_path, tiny_gpt2_dir):
    """The policy's and the reference model's log-probs (RLOO's KL penalty) are computed at the temperature each
    round was sampled at, before and after a switch (checked against `log_softmax(logits / T)`, and not the other
    stage's T)."""
    stages = [Stage(num_generations=2, temperature=0.5, until_step=2), Stage(num_generations=4, temperature=2.0)]
    trainer, _ = rloo_trainer(tmp_path, stages, model=tiny_gpt2_dir, beta=0.1, max_steps=4)
    sampled_at = _spy_generation(trainer)
    checked = check_logps(trainer, lambda: sampled_at[-1], distinct_from=lambda t: 2.5 - t)
    trainer.train()
    assert sampled_at == [0.5, 0.5, 2.0, 2.0]
    assert {(step, t, ref) for step, _, t, ref in checked} == {
        (step, t, ref) for step, t in [(0, 0.5), (1, 0.5), (2, 2.0), (3, 2.0)] for ref in (False, True)}  # fmt: skip


def mostly_settled(prompts, completions, idx, **kwargs):
    """1 for three prompts in four (their groups have zero std); for the others, the completion's length."""
    return [float(len(c)) if i % 4 == 0 else 1.0 for c, i in zip(completions, idx, strict=True)]


def test_resume_continues_the_schedule_and_the_adaptive_policy_exactly(tmp_path):
    """A fixed stage, then an adaptive one (mostly zero-std groups raise G after `patience` rounds): resumed from the
    checkpoint inside the adaptive stage, the run trains the same rounds (G, temperature, prompts, completions) with
    the same losses and grad norms as the run that never stopped, and raises G at the same steps."""
    stages = [Stage(num_generations=2, temperature=0.7, until_step=2),
              Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4, 8), policy="hysteresis", patience=2,
                                                       cooldown=2, smoothing=1.0))]  # fmt: skip
    overrides = dict(max_steps=8, save_strategy="steps", save_steps=1, shuffle_dataset=True, learning_rate=1e-1)
    full, full_recorder = rloo_trainer(tmp_path / "full", stages, recorder=RoundRecorder(mostly_settled), **overrides)
    full.train()
    resumed, recorder = rloo_trainer(tmp_path / "resumed", stages, recorder=RoundRecorder(mostly_settled),
                                     **overrides)  # fmt: skip
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"))

    def rounds(calls):
        return [(c["step"], c["num_generations"], c["temperature"], c["idx"], c["completions"]) for c in calls]

    expected = rounds(full_recorder.calls)
    assert [r[1] for r in expected] == [2, 2, 2, 2, 2, 2, 4, 4]  # the adaptive stage raised G after the resume point
    assert rounds(recorder.calls) == expected[4:]
    assert resumed._curriculum.switches == full._curriculum.switches
    # The resumed run's log holds the checkpoint's lines, then its own: all of them the full run's.
    assert [{k: v for k, v in line.items() if k not in CLOCK} for line in train_history(resumed)] == [
        {k: v for k, v in line.items() if k not in CLOCK} for line in train_history(full)]  # fmt: skip
    assert any(line["grad_norm"] > 0 for line in train_history(full)[4:])


@pytest.mark.parametrize(("stage", "key", "rule"), [
    (per_prompt_stages()[0], "stages[0].adaptive.policy", "a per-prompt round holds groups of several sizes"),
    (Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4, 8), policy="top_up")),
     "stages[0].adaptive.policy", "a top-up round is merged from several generation passes"),
    (Stage(num_generations=4, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=3)),
     "stages[0].dynamic_sampling", "merged from several generation passes"),
    (Stage(num_generations=4, temperature=1.0, comparison=Comparison(mode="extremes")),
     "stages[0].comparison.mode", "RLOO's advantages also carry its KL penalty"),
], ids=["per_prompt", "top_up", "dynamic_sampling", "comparison"])  # fmt: skip
def test_stages_rloo_cannot_train_are_refused_at_construction(tmp_path, stage, key, rule, monkeypatch):
    """One error naming the stage key, the rule and the fix, before TRL's `__init__` loads anything."""
    @functools.wraps(RLOOTrainer.__init__)  # the same signature, for the trainer to find the callback in
    def loading(*args, **kwargs):
        pytest.fail("RLOOTrainer.__init__ ran")

    monkeypatch.setattr(RLOOTrainer, "__init__", loading)
    with pytest.raises(CurriculumError) as error:
        rloo_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0, until_step=2), stage])
    message = str(error.value)
    assert key.replace("[0]", "[1]") in message and rule in message, message
    assert "CurriculumGRPOTrainer" in message and "CurriculumRLOOTrainer" in message


def test_vllm_is_refused_and_the_callback_on_plain_rloo_refuses_to_train(tmp_path):
    with pytest.raises(CurriculumError, match=r"(?s)use_vllm.*set use_vllm to false, or train this curriculum with "
                                              r"CurriculumGRPOTrainer"):  # fmt: skip
        rloo_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)], use_vllm=True)
    trainer, recorder = rloo_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)], cls=RLOOTrainer,
                                     beta=0.0)  # (plain RLOOTrainer cannot rebuild an in-memory model as reference)
    with pytest.raises(RuntimeError, match="CurriculumRLOOTrainer"):
        trainer.train()
    assert recorder.calls == [] and trainer.state.global_step == 0


def test_another_trl_release_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    import trl

    from grpo_curriculum.training._trl import UnsupportedTRLError

    monkeypatch.setattr(trl, "__version__", "1.15.2")
    with pytest.raises(UnsupportedTRLError, match=r"CurriculumRLOOTrainer needs TRL 1\.16.*the installed TRL is "
                                                  r"1\.15\.2.*CurriculumGRPOTrainer"):  # fmt: skip
        rloo_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)])
