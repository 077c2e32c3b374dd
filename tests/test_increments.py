"""
Rounds sampled in increments, in real TRL training loops: top-up rounds (a pilot for every prompt, then more
completions for the groups whose rewards are still all equal) and DAPO's dynamic sampling (new prompts until the batch
holds enough informative groups). Each increment is one TRL generation and scoring pass; the round TRL trains on is
their merge, each group whole and contiguous, its advantages over all its completions.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from trl import GRPOTrainer

from grpo_curriculum import (Adaptive, CurriculumCallback, CurriculumGRPOTrainer, CurriculumRLOOTrainer, DynamicSampling,
                             Stage)
from grpo_curriculum.demo.tasks import build_tokenizer, echo_dataset
from grpo_curriculum.training.advantages import grpo_advantages

from .conftest import RoundRecorder, group_runs, grpo_args, indexed_dataset
from .fake_vllm import decode_fake_completion, fake_vllm_colocate, fake_vllm_server  # noqa: F401 - fixtures
from .test_trainer import make_trainer, train_history


def top_up(candidates=(2, 4, 8), pilot=2, prompts=None, temperature=1.0):
    """One top-up stage."""
    adaptive = Adaptive(num_generations=candidates, policy="top_up", pilot=pilot, prompts=prompts)
    return [Stage(temperature=temperature, adaptive=adaptive)]


def dynamic(g=2, max_rounds=4, temperature=1.0):
    """One stage of G `g` with dynamic sampling."""
    return [Stage(num_generations=g, temperature=temperature, dynamic_sampling=DynamicSampling(max_rounds=max_rounds))]


def record_outputs(trainer):
    """Spy on each round TRL trains on: the round, its prompt texts in row order and its output."""
    rounds, original = [], trainer._generate_and_score_completions
    tokenizer = build_tokenizer()

    def spy(inputs):
        output = original(inputs)
        prompts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
        rounds.append({"round": trainer._round, "prompts": prompts, "output": output})
        return output

    trainer._generate_and_score_completions = spy
    return rounds


class KindReward:
    """
    Counts every row it scores (per prompt). A prompt's kind is its index % 4: 0 always 1, 1 always 0, 2 a fair coin
    that alternates 1, 0, 1, ... over the prompt's rows in the order they are scored, 3 a late one: 0, 0, then 1, 0,
    1, ... (all equal in its pilot, informative once topped up).
    """

    __name__ = "kind"

    def __init__(self):
        self.scored = Counter()

    def __call__(self, prompts, completions, idx, **kwargs):
        rewards = []
        for i in idx:
            self.scored[i] += 1
            rewards.append(kind_rewards(i % 4, self.scored[i])[-1])
        return rewards


def kind_rewards(kind: int, size: int) -> list[float]:
    """The first `size` rewards of a prompt of `kind` (see [`KindReward`])."""
    return [[1.0, 0.0, float(j % 2 == 0), float(j >= 2 and j % 2 == 0)][kind] for j in range(size)]


def closed_form(kinds: list[int], sizes: list[int], scale_rewards: str = "group") -> list[float]:
    """The advantages of a round of groups of `kinds` and `sizes`: each row's reward less its group's mean, over the
    group's std, the round's std or 1 (`scale_rewards`); standard deviations Bessel-corrected, as TRL's."""

    def std(values):
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))

    groups = [kind_rewards(kind, size) for kind, size in zip(kinds, sizes, strict=True)]
    batch = std([r for group in groups for r in group])
    advantages = []
    for group in groups:
        scale = {"group": std(group) + 1e-4, "batch": batch + 1e-4, "none": 1.0}[scale_rewards]
        advantages += [(r - sum(group) / len(group)) / scale for r in group]
    return advantages


def test_top_up_scores_each_row_once_keeps_groups_whole_and_contiguous(tmp_path):
    reward = KindReward()
    recorder = RoundRecorder(reward_fn=reward)
    stages = top_up(prompts=5)
    trainer, recorder = make_trainer(tmp_path, stages, recorder=recorder, max_steps=3,
                                         per_device_train_batch_size=16, shuffle_dataset=False)  # fmt: skip
    rounds = record_outputs(trainer)
    dataset = trainer.train_dataset
    trainer.train()
    assert len(rounds) == 3
    calls = iter(recorder.calls)
    scored = Counter()
    for r in rounds:
        round_ = r["round"]
        # The pilot: 2 each (10 rows); then 6 more: the all-equal groups (every kind but the coin) first, by index.
        assert len(round_.prompts) == 5 and sum(round_.sizes) == 16
        rows = [next(calls) for _ in round_.increments]
        assert [len(call["idx"]) for call in rows] == [sum(added) for added in round_.increments]
        for call in rows:
            scored.update(call["idx"])
        kinds = [i % 4 for i in round_.prompts]
        zero = [g for g, kind in enumerate(kinds) if kind != 2]
        expected = [2] * 5
        for g in zero[:3]:
            expected[g] += 2
        assert round_.sizes == expected
        # Groups whole and contiguous in the trained batch, in group order, each group's rows its prompt's.
        assert group_runs(r["prompts"]) == round_.sizes
        assert r["prompts"] == [dataset[i]["prompt"] for i, size in zip(round_.prompts, round_.sizes) for _ in
                                range(size)]  # fmt: skip
        assert r["output"]["advantages"].tolist() == pytest.approx(closed_form(kinds, round_.sizes), abs=1e-5)
    assert scored == reward.scored  # every row scored once: what the reward function counted, row by row
    assert sum(reward.scored.values()) == 3 * 16
    # TRL's completion log and reward metrics describe the last round as trained on, in its row order.
    last = rounds[-1]
    assert list(trainer._logs["prompt"]) == last["prompts"]
    assert list(trainer._logs["advantages"]) == pytest.approx(last["output"]["advantages"].tolist())
    assert list(trainer._logs["rewards"]["recorder"]) == last["round"].group_rewards()[0]
    history = train_history(trainer)
    rewards = last["round"].group_rewards()[0]
    assert history[-1]["reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert [h["curriculum/generated"] for h in history] == [16] * 3
    assert [h["curriculum/increments"] for h in history] == [2] * 3


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_top_up_advantages_in_closed_form_for_every_kind_of_prompt(tmp_path, scale_rewards):
    """
    Always 1 and always 0: advantage 0 however many rows; a coin and a late success: (r - mean) / std over all the
    group's rows, those of its pilot and of the increments after it (`scale_rewards` "batch": the round's std; "none":
    no scaling).
    """
    trainer, _ = make_trainer(tmp_path, top_up(prompts=4), recorder=RoundRecorder(reward_fn=KindReward()), max_steps=2,
                              per_device_train_batch_size=16, shuffle_dataset=False,
                              scale_rewards=scale_rewards)  # fmt: skip
    rounds = record_outputs(trainer)
    trainer.train()
    for r in rounds:
        round_ = r["round"]
        kinds = [i % 4 for i in round_.prompts]
        assert kinds == [0, 1, 2, 3]
        # The pilot (8); the all-equal groups grow (14: the late one now informative); then the first one (16).
        assert round_.sizes == [6, 4, 2, 4] and round_.rewards[3] == [0.0, 0.0, 1.0, 0.0]
        expected = closed_form(kinds, round_.sizes, scale_rewards)
        assert r["output"]["advantages"].tolist() == pytest.approx(expected, abs=1e-5)


def by_position(prompts, completions, **kwargs):
    """Every row of a call its own reward: no group is ever all equal."""
    return [float(j) for j in range(len(completions))]


def run_records(trainer, recorder):
    trainer.train()
    steps = [(h["reward"], h["loss"], h["frac_reward_zero_std"]) for h in train_history(trainer)]
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    return [c["idx"] for c in recorder.calls], [c["completions"] for c in recorder.calls], steps, weights


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_dynamic_sampling_with_nothing_to_drop_trains_like_plain_grpo(tmp_path, loss_type):
    overrides = dict(num_generations=4, temperature=0.9, max_steps=4, seed=3, gradient_accumulation_steps=2,
                     loss_type=loss_type)  # fmt: skip
    expected = run_records(*make_trainer(tmp_path / "plain", None, recorder=RoundRecorder(reward_fn=by_position),
                                         cls=GRPOTrainer, **overrides))  # fmt: skip
    stages = dynamic(g=4, temperature=0.9)
    ours, recorder = make_trainer(tmp_path / "ours", stages, recorder=RoundRecorder(reward_fn=by_position),
                                      **overrides)  # fmt: skip
    got = run_records(ours, recorder)
    assert got[:3] == expected[:3]
    for a, b in zip(got[3], expected[3], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    history = train_history(ours)
    assert [h["curriculum/dropped"] for h in history] == [0] * 4
    assert [h["curriculum/informative_share"] for h in history] == [1.0] * 4


def test_one_increment_top_up_trains_like_the_round_it_equals(tmp_path):
    """Pilot = largest = 4: every group full after the pilot; the same run as plain GRPO at G 4."""
    overrides = dict(num_generations=4, temperature=0.9, max_steps=4, seed=3, per_device_train_batch_size=8)
    expected = run_records(*make_trainer(tmp_path / "plain", None, recorder=RoundRecorder(reward_fn=by_position),
                                         cls=GRPOTrainer, **overrides))  # fmt: skip
    stages = top_up(candidates=(4,), pilot=4, prompts=2, temperature=0.9)
    ours, recorder = make_trainer(tmp_path / "ours", stages, recorder=RoundRecorder(reward_fn=by_position),
                                      **overrides)  # fmt: skip
    got = run_records(ours, recorder)
    assert got[:3] == expected[:3]
    for a, b in zip(got[3], expected[3], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def half_constant(prompts, completions, idx, **kwargs):
    """Even prompts always 1 (all equal); odd prompts by row position (informative)."""
    return [1.0 if i % 2 == 0 else float(j) for j, i in enumerate(idx)]


def test_dynamic_sampling_drops_all_equal_groups_and_refills(tmp_path):
    stages = dynamic(g=2, max_rounds=4)
    trainer, recorder = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=half_constant),
                                         max_steps=2, shuffle_dataset=False)  # fmt: skip
    rounds = record_outputs(trainer)
    dataset = trainer.train_dataset
    trainer.train()
    # Generation batch 8 at G 2: 4 prompts a pass, 2 of them informative; the second pass fills the batch.
    assert [len(c["idx"]) for c in recorder.calls] == [8, 8, 8, 8]
    for r, first in zip(rounds, (0, 8)):
        round_ = r["round"]
        assert round_.prompts == list(range(first, first + 8))
        assert round_.trained == [1, 3, 5, 7]
        assert r["prompts"] == [dataset[first + g]["prompt"] for g in (1, 3, 5, 7) for _ in range(2)]
        assert r["output"]["advantages"].abs().min() > 0.5
    history = train_history(trainer)
    assert [h["curriculum/generated"] for h in history] == [16, 16]
    assert [h["curriculum/dropped"] for h in history] == [4, 4]
    assert [h["curriculum/increments"] for h in history] == [2, 2]
    assert [h["frac_reward_zero_std"] for h in history] == [0.0, 0.0]
    assert [h["curriculum/informative_share"] for h in history] == [1.0, 1.0]


@pytest.mark.parametrize("on_limit", ["mask", "fill"])
def test_dynamic_sampling_at_its_cap_fills_the_batch_with_dropped_groups(tmp_path, on_limit):
    """`max_rounds` 3, every group all equal: the batch holds the first groups, advantage 0; `mask` (the default):
    their tokens out of the loss (TRL's loss mask `tool_mask` 0, `num_items_in_batch` 0); `fill`: in it."""
    stages = [Stage(num_generations=2, temperature=1.0,
                    dynamic_sampling=DynamicSampling(max_rounds=3, on_limit=on_limit))]  # fmt: skip
    trainer, recorder = make_trainer(tmp_path, stages, recorder=RoundRecorder(), max_steps=1,
                                         shuffle_dataset=False)  # fmt: skip
    rounds = record_outputs(trainer)
    trainer.train()  # the recorder's reward is the prompt index: every group all equal
    assert [len(c["idx"]) for c in recorder.calls] == [8, 8, 8]
    assert rounds[0]["round"].trained == [0, 1, 2, 3]
    output = rounds[0]["output"]
    assert output["advantages"].abs().max() == 0
    if on_limit == "mask":
        assert rounds[0]["round"].masked == [0, 1, 2, 3]
        assert output["tool_mask"].sum() == 0 and output["num_items_in_batch"] == 0
    else:
        assert rounds[0]["round"].masked is None and "tool_mask" not in output
        assert output["num_items_in_batch"] == output["completion_mask"].sum() > 0
    history = train_history(trainer)
    assert history[0]["curriculum/dropped"] == 8 and history[0]["curriculum/generated"] == 24
    assert history[0]["frac_reward_zero_std"] == 1.0 and history[0]["curriculum/informative_share"] == 0.0


def one_of_four_informative(prompts, completions, idx, **kwargs):
    """Prompts with index % 4 == 1 by row position (informative); the others always 1."""
    return [float(j) if i % 4 == 1 else 1.0 for j, i in enumerate(idx)]


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "cispo"])
def test_dynamic_sampling_at_its_limit_trains_the_informative_groups_undiluted(tmp_path, loss_type):
    """
    `max_rounds` 2, one informative group a pass: 2 of the 4 groups a batch needs. With `on_limit="mask"` (the
    default) the token-normalised loss is the loss of the informative groups alone (the fill-up groups' tokens out of
    the loss and of `num_items_in_batch`); with `"fill"` their tokens dilute it.
    """
    losses = {}
    for on_limit in ("mask", "fill"):
        stages = [Stage(num_generations=2, temperature=1.0,
                        dynamic_sampling=DynamicSampling(max_rounds=2, on_limit=on_limit))]  # fmt: skip
        trainer, _ = make_trainer(tmp_path / on_limit, stages, recorder=RoundRecorder(one_of_four_informative),
                                  max_steps=1, shuffle_dataset=False, loss_type=loss_type)  # fmt: skip
        rounds = record_outputs(trainer)
        trainer.train()
        (r,) = rounds
        assert r["round"].trained == [0, 1, 2, 5] and r["round"].dropped == 4  # groups 1 and 5 informative
        output = r["output"]
        informative = torch.tensor([g in (1, 5) for g in r["round"].trained for _ in range(2)])
        alone = {key: value[informative] for key, value in output.items()
                 if isinstance(value, torch.Tensor) and value.dim() and key != "tool_mask"}  # fmt: skip
        alone["num_items_in_batch"] = alone["completion_mask"].sum()
        trainer.model.train()
        losses[on_limit] = (loss_gradient(trainer, output), loss_gradient(trainer, alone))
        if on_limit == "mask":
            assert output["num_items_in_batch"] == alone["num_items_in_batch"]
    torch.testing.assert_close(*losses["mask"], rtol=1e-5, atol=1e-7)
    merged, alone = losses["fill"]  # diluted by the fill-up groups' tokens: the same direction, smaller
    assert torch.nn.functional.cosine_similarity(merged, alone, dim=0) > 0.999
    assert merged.norm() < 0.9 * alone.norm()


@pytest.mark.parametrize(("scale_rewards", "aggregation"), [
    ("group", "sum_then_normalize"), ("batch", "sum_then_normalize"), ("group", "normalize_then_sum")])  # fmt: skip
def test_masked_fill_up_groups_leave_the_informative_advantages_alone(tmp_path, scale_rewards, aggregation):
    """
    `on_limit: mask`: the fill-up groups (advantage 0, out of the loss) are out of every statistic of the trained
    groups' advantages too: with the round's std (`scale_rewards: batch`) or `normalize_then_sum`'s round mean and std,
    the informative rows' advantages are exactly those of the informative groups alone (issue 45: the fill-up rows
    scaled them up).
    """
    stages = [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=2))]
    trainer, _ = make_trainer(tmp_path, stages, recorder=RoundRecorder(one_of_four_informative), max_steps=1,
                              shuffle_dataset=False, scale_rewards=scale_rewards,
                              multi_objective_aggregation=aggregation)  # fmt: skip
    rounds = record_outputs(trainer)
    trainer.train()
    (r,) = rounds
    round_, advantages = r["round"], r["output"]["advantages"]
    assert round_.trained == [0, 1, 2, 5] and round_.masked == [0, 2]  # groups 1 and 5 informative
    rewards, sizes = round_.group_rewards([1, 5])
    alone = grpo_advantages(torch.tensor(rewards).unsqueeze(1), sizes, torch.ones(1), scale_rewards, aggregation)[0]
    assert torch.equal(advantages[[2, 3, 6, 7]], alone) and alone.abs().min() > 0.5
    assert advantages[[0, 1, 4, 5]].tolist() == [0.0] * 4


def loss_gradient(trainer, inputs):
    """The gradient of TRL's loss on `inputs` at the trainer's current weights, flattened."""
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, inputs).backward()
    gradient = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    trainer.model.zero_grad()
    return gradient


def test_dynamic_sampling_on_limit_error_stops_with_a_clear_message(tmp_path):
    """verl's behaviour past `max_num_gen_batches`: an error naming the rounds, the groups found and the fixes."""
    stages = [Stage(num_generations=2, temperature=1.0,
                    dynamic_sampling=DynamicSampling(max_rounds=2, on_limit="error"))]  # fmt: skip
    trainer, _ = make_trainer(tmp_path, stages, recorder=RoundRecorder(one_of_four_informative), max_steps=1,
                              shuffle_dataset=False)  # fmt: skip
    with pytest.raises(RuntimeError) as error:
        trainer.train()
    message = str(error.value)
    assert "max_rounds 2" in message and "found 2 informative groups of the 4" in message
    assert "at most 1024" in message and "on_limit: mask" in message


def test_dynamic_sampling_draws_until_the_batch_is_informative_and_logs_each_round_drawn(tmp_path, caplog):
    """
    One informative group a pass, 4 needed, `max_rounds` 8: 4 passes, each further one logged with what the rounds
    before found (a batch that keeps drawing is visible; `max_rounds: 0`, which drew forever silently, is refused).
    """
    stages = [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=8))]
    trainer, recorder = make_trainer(tmp_path, stages, recorder=RoundRecorder(one_of_four_informative), max_steps=1,
                                     shuffle_dataset=False)  # fmt: skip
    rounds = record_outputs(trainer)
    with caplog.at_level("INFO", logger="grpo_curriculum"):
        trainer.train()
    (r,) = rounds
    assert len(recorder.calls) == 4 and r["round"].trained == [1, 5, 9, 13] and r["round"].masked is None
    assert r["output"]["advantages"].abs().min() > 0.5
    drawing = [line for line in caplog.messages if "drawing round" in line]
    assert drawing == [f"step 0: dynamic sampling (stage 0) found {n} informative group{'s' * (n != 1)} of the 4 a "
                       f"training batch needs in {n} generation round{'s' * (n != 1)} ({8 * n} completions): drawing "
                       f"round {n + 1} of at most 8" for n in (1, 2, 3)]


def two_of_four_constant(prompts, completions, idx, **kwargs):
    """Prompts 0 and 3 of every 4 always 1; prompts 1 and 2 by row position (informative)."""
    return [1.0 if i % 4 in (0, 3) else float(j) for j, i in enumerate(idx)]


def mixed_length_dataset(long=lambda index: index % 4 == 2):
    """48 echo prompts, those where `long(index)` of 4 words, the others of 2: an increment of short prompts only is
    padded narrower than the round it is merged into."""
    from datasets import concatenate_datasets

    short, longer = echo_dataset(48, seed=0, length=2), echo_dataset(48, seed=1, length=4)
    rows = concatenate_datasets([short, longer]).select([i + 48 * long(i) for i in range(48)])
    return rows.add_column("idx", list(range(48)))


LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_trains_on_merged_rounds(tmp_path, tiny_model_dir, loss_type):
    stages = top_up(prompts=5)
    trainer, _ = make_trainer(tmp_path, stages, recorder=RoundRecorder(reward_fn=KindReward()), max_steps=2,
                                  per_device_train_batch_size=16, loss_type=loss_type, beta=0.1,
                                  model=tiny_model_dir, dataset=mixed_length_dataset(),
                                  shuffle_dataset=False)  # fmt: skip
    trainer.train()
    assert all(math.isfinite(h["loss"]) for h in train_history(trainer))


@pytest.mark.parametrize("sampling", ["top_up", "dynamic_sampling"])
def test_merged_rounds_with_several_iterations_and_steps_per_generation(tmp_path, tiny_gpt2_dir, sampling):
    """num_iterations 2, steps_per_generation 2, a model with absolute positions (GPT-2): the old and reference
    log-probs describe the rows as trained on (their prompts padded to the round's widest), not as each increment
    padded them."""
    stage = (top_up(prompts=5) if sampling == "top_up" else
             dynamic(g=2, max_rounds=3))  # fmt: skip
    reward = KindReward() if sampling == "top_up" else two_of_four_constant
    # Top-up: the coins long, so the second increment (the all-equal groups) is all short; dynamic sampling: the
    # second pass long, the first short.
    long = (lambda i: i % 4 == 2) if sampling == "top_up" else (lambda i: i // 4 % 2 == 1)
    trainer, _ = make_trainer(tmp_path, stage, recorder=RoundRecorder(reward_fn=reward), max_steps=4,
                                  per_device_train_batch_size=8 if sampling == "top_up" else 4, num_iterations=2,
                                  steps_per_generation=2, beta=0.1, dataset=mixed_length_dataset(long),
                                  model=tiny_gpt2_dir, shuffle_dataset=False)  # fmt: skip
    rounds = record_outputs(trainer)
    weights = {}

    def snapshot(inputs):  # the policy's weights when the round is sampled
        weights["policy"] = [p.detach().clone() for p in trainer.model.parameters()]
        return spied(inputs)

    spied, trainer._generate_and_score_completions = trainer._generate_and_score_completions, snapshot
    trainer.train()
    assert len(rounds) == 1 and len(rounds[0]["round"].increments) > 1
    output = rounds[-1]["output"]
    assert output["old_per_token_logps"] is not None and output["ref_per_token_logps"] is not None
    with torch.no_grad():
        for p, saved in zip(trainer.model.parameters(), weights["policy"], strict=True):
            p.copy_(saved)
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, output["completion_ids"].size(1),
                                                           batch_size=4)[0]  # fmt: skip
        width = output["completion_ids"].size(1)
        ref = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, mask, width, batch_size=4)[0]
    keep = output["completion_mask"].bool()
    torch.testing.assert_close(logps[keep], output["old_per_token_logps"][keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref[keep], output["ref_per_token_logps"][keep], atol=1e-5, rtol=1e-5)
    assert len(set(output["prompt_mask"].sum(1).tolist())) > 1  # prompts of several widths in one round
    # Padded as TRL pads one pass: to the widest trained prompt (on the left) and completion, no wider.
    assert output["prompt_mask"][:, 0].any() and output["completion_mask"][:, -1].any()
    assert bool((output["prompt_mask"].cumsum(1) > 0).eq(output["prompt_mask"].bool()).all())  # left-padded


@pytest.mark.parametrize("cls", [CurriculumGRPOTrainer, CurriculumRLOOTrainer], ids=["grpo", "rloo"])
@pytest.mark.parametrize("mode", ["server", "colocate"])
def test_vllm_is_asked_once_per_increment(tmp_path, mode, request, cls):
    """Server mode: one request an increment, `n` = the pilot, the prompts of the groups it grows in group order;
    colocate mode: one `generate` call an increment, every row of it. Completions come back to their own groups."""
    from .test_vllm import make_vllm_trainer, prompt_ids_of

    engine = request.getfixturevalue(f"fake_vllm_{mode}")
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, top_up(prompts=5), mode, cls=cls, max_steps=2,
                                                   per_device_train_batch_size=16, shuffle_dataset=False)  # fmt: skip
    rounds = record_outputs(trainer)
    trainer.train()  # every reward is the prompt's index: every group all equal, the first three grow
    calls = iter(recorder.calls)
    engine_calls = iter(engine.generation_requests if mode == "server" else engine.generate_calls)
    for r in rounds:
        round_ = r["round"]
        assert round_.increments == [[2] * 5, [2, 2, 2, 0, 0]]
        for added in round_.increments:
            groups = [round_.prompts[g] for g, a in enumerate(added) if a]
            call, asked = next(calls), next(engine_calls)
            assert call["idx"] == [i for i in groups for _ in range(2)]
            if mode == "server":
                assert (asked.n, asked.temperature) == (2, 1.0) and asked.prompts == prompt_ids_of(dataset, groups)
            else:
                assert asked.sampling_params.n == 1 and asked.prompts == prompt_ids_of(dataset, call["idx"])
            for i, text in zip(call["idx"], call["completions"], strict=True):
                assert decode_fake_completion(text).words == tuple(dataset[i]["target"].split())
        assert group_runs(r["prompts"]) == round_.sizes == [4, 4, 4, 2, 2]
    assert next(engine_calls, None) is None


def settled_or_mixed(prompts, completions, idx, **kwargs):
    """Prompts with index % 3 == 0 always score 1, == 1 always 0, the others by row parity in the call."""
    return [1.0 if i % 3 == 0 else 0.0 if i % 3 == 1 else float(j % 2) for j, i in enumerate(idx)]


@pytest.mark.parametrize(("stages", "cls"), [(top_up(prompts=4), CurriculumGRPOTrainer),
                                             (dynamic(g=2, max_rounds=3), CurriculumGRPOTrainer),
                                             (top_up(prompts=4), CurriculumRLOOTrainer)],
                         ids=["top_up", "dynamic", "rloo-top_up"])  # fmt: skip
def test_resume_inside_a_round_replays_it(tmp_path, stages, cls):
    """
    A checkpoint inside a round (TRL regenerates the round at the resume): the round's prompts and pilot are replayed
    from where the stream stood at its start; with rewards that depend on the prompts only, its later increments,
    every later round and the logged counts are those of the run that never stopped (but `curriculum/generated`: the
    replayed round is generated again).
    """
    overrides = dict(save_strategy="steps", save_steps=1, shuffle_dataset=True, per_device_train_batch_size=4,
                     gradient_accumulation_steps=2, steps_per_generation=4, max_steps=8)  # fmt: skip
    make = lambda name: make_trainer(tmp_path / name, stages, recorder=RoundRecorder(settled_or_mixed),  # noqa: E731
                                     dataset=indexed_dataset(24), cls=cls, **overrides)  # fmt: skip
    full, full_recorder = make("full")
    full.train()  # rounds at steps 0, 2, 4, 6: checkpoint-3 is inside the round started at step 2
    expected = [(c["step"], tuple(c["idx"])) for c in full_recorder.calls]
    assert len(expected) > 4  # rounds of several increments

    resumed, recorder = make("resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    got = [(c["step"], tuple(c["idx"])) for c in recorder.calls]
    first = next(i for i, (step, _) in enumerate(expected) if step == 2)
    assert [idx for _, idx in got] == [idx for _, idx in expected[first:]]
    keys = ("curriculum/generated", "curriculum/increments", "curriculum/dropped", "curriculum/informative_share")
    logged = lambda trainer: [tuple(h[k] for k in ("step", *keys)) for h in trainer.state.log_history  # noqa: E731
                              if "loss" in h]  # fmt: skip
    # The round of steps 3-4, generated again at step 4 after the resume: its completions count as generated there
    # (the run that never stopped logged them at step 3).
    expected = [list(line) for line in logged(full)]
    expected[3][1] = expected[2][1]
    assert [list(line) for line in logged(resumed)] == expected and expected[3][1] > 0


class FourKinds:
    """
    By index % 4: prompts of kinds 0 and 1 always score 0, of kind 2 always 1; of kind 3, 0 on the first two rows of
    each round (its pilot) and then 1, 0, 1, ...: all equal in its pilot, informative once topped up.
    """

    def __init__(self):
        self.trainer, self.rows = None, Counter()

    def __call__(self, prompts, completions, idx, **kwargs):
        rewards = []
        for i in idx:
            key = (self.trainer._curriculum.rounds, i)
            self.rows[key] += 1
            rewards.append([0.0, 0.0, 1.0, float(self.rows[key] > 2 and self.rows[key] % 2 == 1)][i % 4])
        return rewards


def test_top_up_grows_every_all_equal_group_in_real_rounds(tmp_path):
    """
    Eight prompts, four a round (one of each kind), all four pilots all-equal every round: every group grows, each to
    4 (the budget of 16 ends there); no history moves the budget between prompts.
    """
    reward = FourKinds()
    trainer, _ = make_trainer(tmp_path, top_up(candidates=(2, 4, 8), prompts=4),
                              recorder=RoundRecorder(reward), dataset=indexed_dataset(8), shuffle_dataset=False,
                              per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4,
                              max_steps=10)  # fmt: skip
    reward.trainer, rounds, original = trainer, [], trainer._curriculum_round_end

    def spy(round_):
        rounds.append({i % 4: size for i, size in zip(round_.prompts, round_.sizes, strict=True)})
        return original(round_)

    trainer._curriculum_round_end = spy
    trainer.train()
    assert len(rounds) == 5 and all(sum(sizes.values()) == 16 for sizes in rounds)
    assert rounds[1:] == [{0: 4, 1: 4, 2: 4, 3: 4}] * 4


def test_a_top_up_round_that_cannot_fill_fails_before_any_step(tmp_path):
    """2 prompts of at most 4 completions cannot hold a generation batch of 16: one clear error at construction."""
    from grpo_curriculum import CurriculumError

    with pytest.raises(CurriculumError) as error:
        make_trainer(tmp_path, top_up(candidates=(2, 4), prompts=2), per_device_train_batch_size=16)
    message = str(error.value)
    assert "prompts" in message and "cannot fill" in message and "use `prompts: 4` or more" in message


# --- merged rounds against an independent rebuild (a model whose log-probs depend on the padding) -------------------


def record_passes(monkeypatch, trainer):
    """Spy on every TRL generation and scoring pass of a training round (each increment's output, as TRL built it)."""
    passes, original = [], GRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        output = original(self, inputs)
        if self is trainer and self.model.training:
            passes.append(output)
        return output

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", spy)
    return passes


def raw_rows(passes) -> list[dict]:
    """Each row of the passes, unpadded, in pass order: its prompt and completion tokens and vLLM's log-probs."""
    rows = []
    for output in passes:
        for i in range(len(output["prompt_ids"])):
            n = int(output["completion_mask"][i].sum())
            rows.append({"prompt": output["prompt_ids"][i][output["prompt_mask"][i].bool()].tolist(),
                         "completion": output["completion_ids"][i][:n].tolist(),
                         "sampling": output["sampling_per_token_logps"][i][:n]})  # fmt: skip
    return rows


def rebuild(trainer, rows: list[dict], rewards: list[float], sizes: list[int]) -> dict:
    """
    The batch TRL would build for `rows` in one pass, written out here (not with the merge's code): prompts padded on
    the left and completions on the right to the widest row, the policy's and the reference model's log-probs, the
    vLLM importance-sampling ratio by TRL's formula, advantages over each group's rewards (Bessel std + 1e-4).
    """
    pad = trainer.processing_class.pad_token_id
    prompt_width = max(len(r["prompt"]) for r in rows)
    completion_width = max(len(r["completion"]) for r in rows)
    batch = {
        "prompt_ids": torch.tensor([[pad] * (prompt_width - len(r["prompt"])) + r["prompt"] for r in rows]),
        "prompt_mask": torch.tensor([[0] * (prompt_width - len(r["prompt"])) + [1] * len(r["prompt"]) for r in rows]),
        "completion_ids": torch.tensor([r["completion"] + [pad] * (completion_width - len(r["completion"]))
                                        for r in rows]),  # fmt: skip
        "completion_mask": torch.tensor([[1] * len(r["completion"]) + [0] * (completion_width - len(r["completion"]))
                                         for r in rows]),  # fmt: skip
        "sampling_per_token_logps": torch.stack([torch.cat([r["sampling"],
                                                            torch.zeros(completion_width - len(r["sampling"]))])
                                                 for r in rows]),  # fmt: skip
    }
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        for key, model in (("old_per_token_logps", trainer.model), ("ref_per_token_logps", trainer.ref_model)):
            batch[key] = trainer._get_per_token_logps_and_entropies(model, ids, mask, completion_width,
                                                                    batch_size=len(rows))[0]  # fmt: skip
    diff = torch.nan_to_num((batch["old_per_token_logps"] - batch["sampling_per_token_logps"])
                            * batch["completion_mask"], nan=0.0)  # fmt: skip
    mode, low, high = (trainer.args.vllm_importance_sampling_mode, trainer.args.vllm_importance_sampling_clip_min,
                       trainer.args.vllm_importance_sampling_clip_max)  # fmt: skip
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        ratio = torch.clamp(ratio, min=low, max=high)
    else:
        ratio = ratio.masked_fill((ratio < (-math.inf if low is None else low)) | (ratio > high), 0.0)
    batch["importance_sampling_ratio"] = ratio
    advantages, start = [], 0
    for size in sizes:
        group = rewards[start : start + size]
        mean = sum(group) / size
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (size - 1))
        advantages += [(r - mean) / (std + 1e-4) for r in group]
        start += size
    batch["advantages"] = torch.tensor(advantages)
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    return batch


def make_gpt2_vllm_trainer(tmp_path, model, stages, reward, dataset, **overrides):
    """A curriculum trainer of the tiny GPT-2 (`model`: its folder) on the fake vLLM server (TRL's importance-sampling
    correction on)."""
    from .fake_vllm import FakeVLLMServer

    recorder = RoundRecorder(reward_fn=reward)
    vllm = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": FakeVLLMServer.base_url,
            "max_completion_length": 8, "beta": 0.1, "shuffle_dataset": False}
    args = grpo_args(tmp_path, **{**vllm, **overrides})
    trainer = CurriculumGRPOTrainer(model=model, processing_class=build_tokenizer(), reward_funcs=recorder, args=args,
                                    train_dataset=dataset, callbacks=[CurriculumCallback(stages)])  # fmt: skip
    recorder.trainer = trainer
    return trainer


SAMPLINGS = {  # stages, reward, which prompts are long (the second increment's rows then padded narrower), batch
    "top_up": (top_up(prompts=5), KindReward, lambda i: i % 4 == 2, 16),
    "dynamic_sampling": (dynamic(g=2, max_rounds=3), lambda: two_of_four_constant, lambda i: i // 4 % 2 == 1, 8),
    # The all-equal groups (dropped) long, the informative ones short.
    "dynamic_sampling_drops_long": (dynamic(g=2, max_rounds=3), lambda: two_of_four_constant,
                                    lambda i: i % 4 in (0, 3), 8),
}


def merged_and_rebuilt(tmp_path, monkeypatch, model, sampling, **overrides):
    """One merged round of the tiny GPT-2 (vLLM server, importance sampling on): the trainer at the weights the round
    was sampled with, the round, the batch it trained on, and the batch TRL would have built for the same rows."""
    stages, reward, long, batch = SAMPLINGS[sampling]
    trainer = make_gpt2_vllm_trainer(tmp_path, model, stages, reward(), mixed_length_dataset(long), max_steps=1,
                                     per_device_train_batch_size=batch, **overrides)  # fmt: skip
    passes, rounds = record_passes(monkeypatch, trainer), record_outputs(trainer)
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    with torch.no_grad():
        for p, saved in zip(trainer.model.parameters(), weights, strict=True):
            p.copy_(saved)
    (r,) = rounds
    round_ = r["round"]
    assert len(passes) == len(round_.increments) > 1
    rows = raw_rows(passes)
    rows = [rows[i] for i in round_.order()]
    rewards = round_.group_rewards(round_.trained_groups)[0]
    if sampling != "dynamic_sampling_drops_long":
        assert len({len(row["prompt"]) for row in rows}) > 1  # prompts of several lengths
    return trainer, round_, r["output"], rebuild(trainer, rows, rewards, round_.trained_sizes), passes


def assert_same_batch(merged, expected):
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(merged[key], expected[key]), key
    keep = expected["completion_mask"].bool()
    for key in ("old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps"):
        torch.testing.assert_close(merged[key][keep], expected[key][keep], atol=1e-6, rtol=1e-6, msg=key)
    ratio = merged["importance_sampling_ratio"]
    torch.testing.assert_close(ratio if ratio.size(1) == 1 else ratio[keep],
                               expected["importance_sampling_ratio"] if ratio.size(1) == 1 else
                               expected["importance_sampling_ratio"][keep], atol=1e-6, rtol=1e-6)  # fmt: skip
    torch.testing.assert_close(merged["advantages"], expected["advantages"], atol=1e-5, rtol=1e-5)
    assert int(merged["num_items_in_batch"]) == int(expected["num_items_in_batch"])


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_on_a_merged_round_equals_an_independent_rebuild(tmp_path, monkeypatch, fake_vllm_server,
                                                                         tiny_gpt2_dir, loss_type):  # fmt: skip
    """
    A top-up round of the tiny GPT-2 whose second increment is all short prompts: the batch it trains on (ids, masks,
    old and reference log-probs, the vLLM importance-sampling ratio, advantages, `num_items_in_batch`) and its loss
    are those of the batch TRL would build for the same rows in one pass, written out independently.
    """
    overrides = {"vllm_importance_sampling_mode": "token_truncate", "loss_type": loss_type}
    if loss_type == "luspo":
        overrides["importance_sampling_level"] = "sequence"
    trainer, _, merged, expected, passes = merged_and_rebuilt(tmp_path, monkeypatch, tiny_gpt2_dir, "top_up",
                                                                   **overrides)  # fmt: skip
    assert any(out["prompt_ids"].size(1) != merged["prompt_ids"].size(1) for out in passes)  # an increment repadded
    assert_same_batch(merged, expected)
    trainer.model.train()
    with torch.no_grad():
        loss, rebuilt_loss = trainer.compute_loss(trainer.model, merged), trainer.compute_loss(trainer.model, expected)
    torch.testing.assert_close(loss, rebuilt_loss, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ["sequence_mask", "token_mask"])
@pytest.mark.parametrize("sampling", ["top_up", "dynamic_sampling"])
def test_merged_round_logs_trls_sampling_metrics_over_its_trained_rows(tmp_path, monkeypatch, fake_vllm_server,
                                                                       tiny_gpt2_dir, sampling, mode):  # fmt: skip
    """The importance-sampling ratio is TRL's for the rows as trained on, and the `sampling/*` metrics of the log line
    are TRL's, computed over those rows (dynamic sampling: not over the groups it dropped)."""
    trainer, round_, merged, expected, _ = merged_and_rebuilt(tmp_path, monkeypatch, tiny_gpt2_dir, sampling,
                                                              vllm_importance_sampling_mode=mode,
                                                              vllm_importance_sampling_clip_max=1e6)  # fmt: skip
    assert_same_batch(merged, expected)
    if sampling == "dynamic_sampling":
        assert round_.dropped > 0
    keep = expected["completion_mask"].bool()
    delta = (expected["old_per_token_logps"] - expected["sampling_per_token_logps"]).abs()[keep]
    ratio = expected["importance_sampling_ratio"]
    ratio = ratio.flatten() if mode.startswith("sequence") else ratio[keep]
    (logged,) = train_history(trainer)
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx(delta.mean().item(), rel=1e-5)
    assert logged["sampling/sampling_logp_difference/max"] == pytest.approx(delta.max().item(), rel=1e-5)
    assert logged["sampling/importance_sampling_ratio/min"] == pytest.approx(ratio.min().item(), rel=1e-5)
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(ratio.mean().item(), rel=1e-5)
    assert logged["sampling/importance_sampling_ratio/max"] == pytest.approx(ratio.max().item(), rel=1e-5)


@pytest.mark.parametrize("sampling", ["top_up", "dynamic_sampling"])
def test_merged_round_logs_trls_completion_metrics_over_its_trained_rows(tmp_path, monkeypatch, fake_vllm_server,
                                                                         tiny_gpt2_dir, sampling):  # fmt: skip
    """
    `completions/*` and `num_tokens` are TRL's, computed from the trained rows: completions of 2-word prompts end
    after 6 tokens, those of 4-word prompts after 8. Top-up: the second increment holds short rows only (the passes'
    `max_terminated_length` 8 and 6, whose `min` was logged: "terminated" contains "min"); dynamic sampling, cut at 7:
    the second pass holds long rows only, all cut (no terminated completion: TRL's placeholder 0 turned the merged
    terminated lengths into 0), and half the sampled groups are not trained (the lengths describe the trained ones).
    """
    trainer, round_, merged, expected, _ = merged_and_rebuilt(tmp_path, monkeypatch, tiny_gpt2_dir, sampling,
                                                              max_completion_length=8 if sampling == "top_up" else 7)
    assert_same_batch(merged, expected)
    lengths = expected["completion_mask"].sum(1).float()
    last = expected["completion_ids"][torch.arange(len(lengths)), lengths.long() - 1]
    truncated = last != trainer.processing_class.eos_token_id
    assert truncated.any() == (sampling == "dynamic_sampling") and not truncated.all()
    terminated = lengths[~truncated]
    (logged,) = train_history(trainer)
    assert logged["completions/mean_length"] == pytest.approx(lengths.mean().item())
    assert (logged["completions/min_length"], logged["completions/max_length"]) == (lengths.min(), lengths.max())
    assert logged["completions/clipped_ratio"] == pytest.approx(truncated.float().mean().item())
    assert logged["completions/mean_terminated_length"] == pytest.approx(terminated.mean().item())
    assert logged["completions/min_terminated_length"] == terminated.min() == 6
    assert logged["completions/max_terminated_length"] == terminated.max() == (8 if sampling == "top_up" else 6)
    assert logged["num_tokens"] == expected["prompt_mask"].sum() + expected["completion_mask"].sum()
    assert trainer.state.num_input_tokens_seen == logged["num_tokens"]
    assert logged["reward"] == pytest.approx(sum(round_.group_rewards(round_.trained_groups)[0]) / len(lengths))


def none_for_every_fourth(prompts, completions, idx, **kwargs):
    """Prompts with index % 4 == 0 unscored (None: an all-NaN group); the others by row position (informative)."""
    return [None if i % 4 == 0 else float(j) for j, i in enumerate(idx)]


def test_informative_share_counts_an_unscored_trained_group_as_not_informative(tmp_path):
    """`max_rounds` 1: the round trains its 4 groups, one unscored (all NaN): 3 of 4 informative, not 3 of 3."""
    stages = [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=1))]
    trainer, _ = make_trainer(tmp_path, stages, recorder=RoundRecorder(none_for_every_fourth), max_steps=1,
                              shuffle_dataset=False)  # fmt: skip
    trainer.train()
    (h,) = train_history(trainer)
    assert h["curriculum/informative_share"] == 0.75


def test_a_log_metric_value_of_a_merged_round_is_trls_mean_of_its_calls(tmp_path):
    """A reward function's `log_metric` values over a top-up round's two passes (10 and 6 rows): TRL's total / count
    of the values logged, 8, whatever the name says ("max_...": not a maximum, 10; nor a mean by rows, 8.5)."""
    kind = KindReward()

    def reward(prompts, completions, idx, log_metric, **kwargs):
        log_metric("max_rows_scored", float(len(idx)))
        return kind(prompts, completions, idx)

    trainer, _ = make_trainer(tmp_path, top_up(prompts=5), recorder=RoundRecorder(reward_fn=reward), max_steps=1,
                              per_device_train_batch_size=16, shuffle_dataset=False)  # fmt: skip
    trainer.train()
    (h,) = train_history(trainer)
    assert h["max_rows_scored"] == 8.0


def test_a_merged_round_is_padded_to_its_trained_rows(tmp_path, monkeypatch, fake_vllm_server, tiny_gpt2_dir):
    """Dynamic sampling drops the long prompts' groups: the batch is padded to its trained (short) rows, as TRL pads
    them in one pass, not to the widest row sampled; old log-probs and the ratio are those of that padding."""
    trainer, round_, merged, expected, passes = merged_and_rebuilt(tmp_path, monkeypatch, tiny_gpt2_dir,
                                                                   "dynamic_sampling_drops_long")  # fmt: skip
    assert round_.dropped > 0
    assert all(out["prompt_ids"].size(1) > merged["prompt_ids"].size(1) for out in passes)
    assert_same_batch(merged, expected)
