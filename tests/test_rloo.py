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

from .conftest import RoundRecorder, assert_whole_groups, group_runs, indexed_dataset, per_prompt_stages
from .test_trainer import _naive_logps, _spy_generation, check_logps, make_trainer, train_history

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


def leave_one_out_reference(rewards, sizes, normalize):
    """RLOO's advantages with each group of its own size, in plain python: `r - (sum - r) / (n - 1)` per group, then
    (`normalize`) standardised over the round with the Bessel-corrected std."""
    advantages, start = [], 0
    for n in sizes:
        group = rewards[start : start + n]
        advantages += [r - (sum(group) - r) / (n - 1) for r in group]
        start += n
    if normalize:
        mean = sum(advantages) / len(advantages)
        std = (sum((a - mean) ** 2 for a in advantages) / (len(advantages) - 1)) ** 0.5
        advantages = [(a - mean) / (std + 1e-4) for a in advantages]
    return advantages


def spy_rounds_with_kl(trainer) -> list[dict]:
    """Each training round: its group sizes, the advantages RLOO trains on, and each row's sequence KL (policy minus
    reference log-probabilities at the round's temperature, summed over the completion mask) computed naively."""
    seen, original = [], trainer._generate_and_score_completions

    def generate_and_score(inputs):
        output = original(inputs)
        if trainer.model.training:
            ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            keep, t = output["completion_ids"].size(1), trainer.temperature
            policy = _naive_logps(trainer.model, ids, mask, keep, t) * output["completion_mask"]
            kl = [0.0] * len(output["advantages"])
            if trainer.beta:
                reference = _naive_logps(trainer.ref_model, ids, mask, keep, t) * output["completion_mask"]
                kl = (policy - reference).sum(-1).tolist()
            seen.append({"sizes": list(trainer._round.sizes), "advantages": output["advantages"].tolist(), "kl": kl,
                         "logged": list(trainer._logs["advantages"])[-len(kl):], "round": trainer._round,
                         "old_logps": output["old_logps"].tolist(), "policy_logps": policy.sum(-1).tolist(),
                         "tokens": int(output["completion_mask"].sum()),
                         "prompts": trainer._tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True),
                         "prompt_widths": output["prompt_mask"].sum(1).tolist()})  # fmt: skip
        return output

    trainer._generate_and_score_completions = generate_and_score
    return seen


@pytest.mark.parametrize(("model", "beta", "normalize"), [("tiny_model_dir", 0.1, False), ("tiny_gpt2_dir", 0.1, True),
                                                          ("tiny_model_dir", 0.0, True)],
                         ids=["llama-kl", "gpt2-kl-normalized", "llama-normalized"])  # fmt: skip
def test_per_prompt_rounds_get_leave_one_out_advantages_over_each_groups_own_size(tmp_path, model, beta, normalize,
                                                                                   request, wanted_by_index):
    """
    A per-prompt stage on RLOO: each round holds whole contiguous groups of one prompt, of several sizes (each prompt
    wants 2, 4 or 8 by its index), and every row's advantage is RLOO's leave-one-out advantage over its own group's
    size, computed here in plain python from the rewards and a naive KL (`beta > 0`: `reward - beta x KL` first;
    `normalize_advantages` over the round). A leave-one-out over groups of one nominal G gives other advantages.
    """
    wanted_by_index(lambda index: (2, 4, 8)[index % 3])

    def by_row_or_settled(prompts, completions, idx, **kwargs):  # a prompt with index % 4 == 3: all rewards equal
        return [float(i) if i % 4 == 3 else i + 0.25 * j for j, i in enumerate(idx)]

    trainer, recorder = rloo_trainer(tmp_path, per_prompt_stages(defer=False), model=request.getfixturevalue(model),
                                     recorder=RoundRecorder(by_row_or_settled), beta=beta, max_steps=4,
                                     normalize_advantages=normalize, per_device_train_batch_size=16,
                                     shuffle_dataset=False)  # fmt: skip
    rounds = spy_rounds_with_kl(trainer)
    trainer.train()
    sizes = [r["sizes"] for r in rounds]
    assert sizes == [[2, 4, 8, 2], [4, 8, 2, 2], [8, 2, 4, 2], [2, 4, 8, 2]]
    assert [group_runs(call["idx"]) for call in recorder.calls] == sizes  # whole contiguous groups, one prompt each
    for call, round_ in zip(recorder.calls, rounds, strict=True):
        rewards = [r - beta * kl for r, kl in zip(by_row_or_settled(None, None, call["idx"]), round_["kl"])]
        expected = leave_one_out_reference(rewards, round_["sizes"], normalize)
        assert round_["advantages"] == pytest.approx(expected, abs=2e-4)
        assert round_["logged"] == round_["advantages"]  # TRL's completion log holds the advantages trained on
        naive = leave_one_out_reference(rewards, [4] * 4, normalize)  # `view(-1, G)` at the round's mean G
        assert max(abs(a - b) for a, b in zip(naive, expected)) > 0.1
    assert any(abs(a) > 0.1 for r in rounds for a in r["advantages"])
    history = train_history(trainer)
    assert [h["curriculum/num_generations"] for h in history] == [4.0] * 4  # 16 completions over 4 prompts
    if not beta:  # RLOO's metric: the share of groups (not rows) whose reward std is 0
        for h, call, round_ in zip(history, recorder.calls, rounds, strict=True):
            starts = [sum(round_["sizes"][:g]) for g in range(len(round_["sizes"]))]
            assert h["frac_reward_zero_std"] == sum(call["idx"][s] % 4 == 3 for s in starts) / len(starts)
        assert any(h["frac_reward_zero_std"] > 0 for h in history)
    assert all(h["grad_norm"] > 0 for h in history)


@pytest.mark.parametrize(("model", "normalize"), [("tiny_model_dir", False), ("tiny_gpt2_dir", True)],
                         ids=["llama", "gpt2-normalized"])  # fmt: skip
def test_top_up_rounds_merge_rloo_outputs_with_leave_one_out_advantages(tmp_path, model, normalize, request):
    """
    Top-up on RLOO: each round (a pilot of 2 a prompt, then more for the all-equal groups) is merged into whole
    contiguous groups of several sizes; `old_logps` (the policy's sequence log-probability RLOO's ratio divides by) and
    each row's KL describe the rows as trained on, their prompts padded to the round's widest (the second increment,
    all short prompts, was padded narrower: GPT-2's absolute positions give other log-probabilities); the advantages
    are RLOO's leave-one-out over each group's own size of `reward - beta x KL`, and TRL's `kl` metric is the mean
    per-token KL of the trained rows.
    """
    from .test_increments import KindReward, kind_rewards, mixed_length_dataset, top_up

    trainer, recorder = rloo_trainer(tmp_path, top_up(prompts=5), model=request.getfixturevalue(model),
                                     recorder=RoundRecorder(KindReward()), beta=0.1, normalize_advantages=normalize,
                                     max_steps=3, per_device_train_batch_size=16, dataset=mixed_length_dataset(),
                                     shuffle_dataset=False)  # fmt: skip
    rounds = spy_rounds_with_kl(trainer)
    dataset = trainer.train_dataset
    trainer.train()
    assert len(rounds) == 3
    for r in rounds:
        round_ = r["round"]
        assert len(round_.increments) == 2 and sum(round_.sizes) == 16 and len(set(round_.sizes)) > 1
        assert group_runs(r["prompts"]) == round_.sizes  # whole, contiguous, in group order
        assert r["prompts"] == [dataset[i]["prompt"] for i, n in zip(round_.prompts, round_.sizes) for _ in range(n)]
        assert len(set(r["prompt_widths"])) > 1  # short and long prompts in one round
        assert r["old_logps"] == pytest.approx(r["policy_logps"], abs=1e-4)
        rewards = [x for i, n in zip(round_.prompts, round_.sizes) for x in kind_rewards(i % 4, n)]
        rewards = [x - 0.1 * kl for x, kl in zip(rewards, r["kl"], strict=True)]
        assert r["advantages"] == pytest.approx(leave_one_out_reference(rewards, round_.sizes, normalize), abs=2e-4)
        assert r["logged"] == r["advantages"]
    history = train_history(trainer)
    for h, r in zip(history, rounds, strict=True):
        assert h["kl"] == pytest.approx(sum(r["kl"]) / r["tokens"], abs=1e-5)
        assert h["curriculum/increments"] == 2 and h["curriculum/generated"] == 16
    assert all(h["grad_norm"] > 0 for h in history)


def test_one_increment_top_up_on_rloo_trains_like_plain_rloo(tmp_path, tiny_gpt2_dir):
    """Pilot = largest = 4: every group is full after the pilot, the round is one pass, and the run is plain
    `RLOOTrainer`'s at G 4 (`beta > 0`): the same rounds, outputs and log lines bit for bit."""
    from .test_increments import top_up

    overrides = dict(num_generations=4, temperature=0.9, max_steps=3, seed=3, beta=0.05, model=tiny_gpt2_dir)
    runs = []
    for cls, stages in [(RLOOTrainer, None), (CurriculumRLOOTrainer, top_up((4,), pilot=4, prompts=2,
                                                                            temperature=0.9))]:  # fmt: skip
        trainer, recorder = rloo_trainer(tmp_path / cls.__name__, stages, cls=cls, recorder=RoundRecorder(by_row),
                                         **overrides)  # fmt: skip
        outputs = spy_rounds(trainer)
        trainer.train()
        lines = [{k: v for k, v in h.items() if not k.startswith("curriculum/") and k not in CLOCK}
                 for h in train_history(trainer)]  # fmt: skip
        runs.append(([(c["idx"], c["completions"]) for c in recorder.calls], outputs, lines))
    (plain_rounds, plain_outputs, plain_lines), (rounds, outputs, lines) = runs
    assert rounds == plain_rounds and len(rounds) == 3
    for plain, ours in zip(plain_outputs, outputs, strict=True):
        assert plain.keys() == ours.keys() and all(torch.equal(plain[k], ours[k]) for k in plain)
    assert lines == plain_lines


def test_dynamic_sampling_on_rloo_trains_the_informative_groups_of_several_passes(tmp_path, tiny_gpt2_dir):
    """
    Dynamic sampling on RLOO (GPT-2, `beta > 0`): generation batch 8 at G 2, half the prompts all-equal, so each round
    is two passes whose informative groups (odd prompts) are kept, whole and contiguous; the first pass's prompts are
    short, the second's long, so the kept rows' `old_logps` and KL are computed again at the merged padding; the
    advantages are RLOO's leave-one-out of `reward - beta x KL` over the kept groups.
    """
    from .test_increments import half_constant, mixed_length_dataset

    stages = [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=4,
                                                                                          on_limit="fill"))]  # fmt: skip
    trainer, recorder = rloo_trainer(tmp_path, stages, model=tiny_gpt2_dir, recorder=RoundRecorder(half_constant),
                                     beta=0.1, max_steps=2, dataset=mixed_length_dataset(lambda i: i // 4 % 2 == 1),
                                     shuffle_dataset=False)  # fmt: skip
    rounds = spy_rounds_with_kl(trainer)
    dataset = trainer.train_dataset
    trainer.train()
    for r, first in zip(rounds, (0, 8), strict=True):
        round_ = r["round"]
        assert round_.prompts == list(range(first, first + 8)) and round_.trained == [1, 3, 5, 7]
        assert r["prompts"] == [dataset[first + g]["prompt"] for g in (1, 3, 5, 7) for _ in range(2)]
        assert len(set(r["prompt_widths"])) > 1
        assert r["old_logps"] == pytest.approx(r["policy_logps"], abs=1e-4)
        rewards = [float(j) - 0.1 * kl for j, kl in zip([0, 1] * 4, r["kl"], strict=True)]  # odd prompts: by row
        assert r["advantages"] == pytest.approx(leave_one_out_reference(rewards, [2] * 4, False), abs=2e-4)
    history = train_history(trainer)
    assert [h["curriculum/dropped"] for h in history] == [4, 4]
    for h, r in zip(history, rounds, strict=True):
        assert h["kl"] == pytest.approx(sum(r["kl"]) / r["tokens"], abs=1e-5)


def test_dynamic_sampling_on_rloo_at_its_limit_fills_the_batch(tmp_path):
    """`on_limit="fill"`, every group all equal (`beta = 0`): after `max_rounds` passes the batch holds the first
    groups, trained as RLOO trains all-equal groups (advantage 0, every row in the loss)."""
    stages = [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=3,
                                                                                          on_limit="fill"))]  # fmt: skip
    trainer, recorder = rloo_trainer(tmp_path, stages, recorder=RoundRecorder(), max_steps=1, beta=0.0,
                                     shuffle_dataset=False)  # fmt: skip
    rounds = spy_rounds_with_kl(trainer)
    trainer.train()  # the recorder's reward is the prompt index: every group all equal
    assert [len(c["idx"]) for c in recorder.calls] == [8, 8, 8]
    assert rounds[0]["round"].trained == [0, 1, 2, 3] and rounds[0]["round"].masked is None
    assert rounds[0]["advantages"] == [0.0] * 8
    history = train_history(trainer)
    assert history[0]["curriculum/dropped"] == 8 and history[0]["frac_reward_zero_std"] == 1.0


def test_per_prompt_resume_on_rloo_is_exact(tmp_path):
    """
    A per-prompt RLOO run (two steps a round) resumed from a checkpoint between rounds trains the rounds of the run
    that never stopped (prompts, group sizes, completions) with the same log lines (losses, grad norms, rewards, KL)
    bit for bit. Resumed from one inside a round, it regenerates that round's prompts and group sizes (its completions
    are drawn again: the RNG is past the round's first sampling, as in TRL) and then the same prompts and sizes.
    """
    from .test_resume import DEFERRING, settled_or_mixed

    overrides = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4,
                     max_steps=16, save_strategy="steps", save_steps=1, shuffle_dataset=True, beta=0.05)  # fmt: skip
    make = lambda name: rloo_trainer(tmp_path / name, per_prompt_stages((2, 4, 8), **DEFERRING),  # noqa: E731
                                     recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(12),
                                     **overrides)  # fmt: skip
    full, full_recorder = make("full")
    full.train()
    expected = [(c["step"], tuple(c["sizes"]), tuple(c["idx"]), tuple(c["completions"])) for c in full_recorder.calls]
    assert any(len(set(sizes)) > 1 for _, sizes, _, _ in expected) and full._curriculum.deferred_total > 0
    clean = lambda trainer: [{k: v for k, v in line.items() if k not in CLOCK}  # noqa: E731
                             for line in train_history(trainer)]  # fmt: skip

    resumed, recorder = make("between-rounds")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-8"))
    got = [(c["step"], tuple(c["sizes"]), tuple(c["idx"]), tuple(c["completions"])) for c in recorder.calls]
    assert got == [r for r in expected if r[0] >= 8] and len(got) == 4
    assert resumed._curriculum.deferred_total == full._curriculum.deferred_total
    assert clean(resumed) == clean(full)

    resumed, recorder = make("inside-a-round")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-9"))
    got = [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in recorder.calls]
    assert got[0][0] == 9 and [r[1:] for r in got] == [r[1:3] for r in expected if r[0] >= 8]  # step 8's round again
    assert resumed._curriculum.deferred_total == full._curriculum.deferred_total


@pytest.mark.parametrize(("stage", "key", "rule"), [
    (Stage(num_generations=4, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=3)),
     "stages[0].dynamic_sampling.on_limit", "RLOOTrainer's loss has no such mask"),
    (Stage(num_generations=4, temperature=1.0, comparison=Comparison(mode="extremes")),
     "stages[0].comparison.mode", "RLOO's advantages also carry its KL penalty"),
], ids=["dynamic_sampling_mask", "comparison"])  # fmt: skip
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
    if "on_limit" in key:
        assert "set on_limit to fill" in message and "or error" in message


def test_dynamic_sampling_with_on_limit_fill_or_error_is_accepted(tmp_path):
    for on_limit in ("fill", "error"):
        stage = Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(on_limit=on_limit))
        rloo_trainer(tmp_path / on_limit, [stage], max_steps=1)


def test_dynamic_sampling_of_one_round_trains_like_plain_rloo_whatever_on_limit(tmp_path):
    """`max_rounds: 1` draws nothing again and masks nothing (plain RLOO), so `on_limit: mask` is accepted there and
    `error` never stops a round of all-equal groups."""
    for on_limit in ("mask", "error"):
        stage = Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(1, on_limit=on_limit))
        trainer, _ = rloo_trainer(tmp_path / on_limit, [stage], max_steps=2)
        trainer.train()
        assert trainer.state.global_step == 2 and trainer._round.masked is None and trainer._round.trained is None


def test_the_callback_on_plain_rloo_refuses_to_train(tmp_path):
    trainer, recorder = rloo_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)], cls=RLOOTrainer,
                                     beta=0.0)  # (plain RLOOTrainer cannot rebuild an in-memory model as reference)
    with pytest.raises(RuntimeError, match="CurriculumRLOOTrainer"):
        trainer.train()
    assert recorder.calls == [] and trainer.state.global_step == 0


def test_another_trl_release_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    import trl

    from grpo_curriculum.training._trl.settings import UnsupportedTRLError

    monkeypatch.setattr(trl, "__version__", "1.15.2")
    with pytest.raises(UnsupportedTRLError, match=r"CurriculumRLOOTrainer needs TRL 1\.16.*the installed TRL is "
                                                  r"1\.15\.2.*CurriculumGRPOTrainer"):  # fmt: skip
        rloo_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)])
