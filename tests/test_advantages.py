"""
`training/advantages.py`, the one module that computes a round's advantages: bit-equal to TRL's own trainers where
every group has one size (checked against a real `GRPOTrainer` / `RLOOTrainer` pass on random rewards, NaN rows and
several reward functions), each group of its own size otherwise, and rows masked out of the loss out of every
statistic (table tests).
"""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOTrainer, RLOOConfig, RLOOTrainer

from grpo_curriculum.demo.tasks import build_tokenizer
from grpo_curriculum.training.advantages import grpo_advantages, rloo_advantages, weighted_rewards

from .conftest import build_gpt2_model, grpo_args, indexed_dataset

ROWS = 16
NAN = float("nan")


def constant(prompts, completions, **kwargs):
    return [0.0] * len(prompts)


def random_rewards(seed: int, functions: int = 3) -> torch.Tensor:
    """`(ROWS, functions)` rewards as reward functions give them: ties (0, 0.5, 1), some noise, a row every function
    left unscored, and single unscored values."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (ROWS, functions), generator=generator).float() / 2
    noisy = torch.rand(ROWS, functions, generator=generator) < 0.5
    rewards = torch.where(noisy, rewards + torch.randn(ROWS, functions, generator=generator), rewards)
    rewards[torch.rand(ROWS, functions, generator=generator) < 0.15] = NAN
    rewards[seed % ROWS] = NAN  # an unscorable row
    return rewards


def trl_pass(trainer, rewards_per_func) -> dict:
    """TRL's own `_generate_and_score_completions` on one batch, its rewards replaced by `rewards_per_func`."""
    trainer._calculate_rewards = lambda *args: rewards_per_func.clone()
    trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer._generate_and_score_completions(batch)


@pytest.fixture(scope="module")
def grpo_trainer(tmp_path_factory):
    args = grpo_args(tmp_path_factory.mktemp("grpo"), per_device_train_batch_size=ROWS, num_generations=4)
    return GRPOTrainer(model=build_gpt2_model(), processing_class=build_tokenizer(), args=args,
                       reward_funcs=[constant] * 3, train_dataset=indexed_dataset())  # fmt: skip


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_grpo_advantages_of_groups_of_one_size_are_trls_bit_for_bit(grpo_trainer, size, aggregation, scale_rewards):
    """Random rewards of three weighted reward functions (NaN values and an unscorable row), groups of 2, 4 or 8: the
    advantages and the zero-std share are exactly those of TRL's `GRPOTrainer` pass (`torch.equal`, not close)."""
    trainer = grpo_trainer
    trainer.num_generations, trainer.scale_rewards, trainer.multi_objective_aggregation = size, scale_rewards, aggregation
    trainer.reward_weights = torch.tensor([1.0, 0.5, -0.3])
    for seed in range(4):
        rewards = random_rewards(seed + 10 * size)
        output = trl_pass(trainer, rewards)
        ours, zero_std = grpo_advantages(rewards, [size] * (ROWS // size), trainer.reward_weights, scale_rewards,
                                         aggregation)  # fmt: skip
        assert torch.equal(ours, output["advantages"]), (seed, ours - output["advantages"])
        assert zero_std == trainer._metrics["train"]["frac_reward_zero_std"][-1]


@pytest.fixture(scope="module")
def rloo_trainer(tmp_path_factory, tiny_gpt2_dir):
    args = grpo_args(tmp_path_factory.mktemp("rloo"), RLOOConfig, per_device_train_batch_size=ROWS, num_generations=4,
                     beta=0.05)  # fmt: skip
    trainer = RLOOTrainer(model=tiny_gpt2_dir, processing_class=build_tokenizer(), args=args,
                          reward_funcs=[constant] * 3, train_dataset=indexed_dataset())  # fmt: skip
    trainer.recorded, original = [], trainer._get_per_token_logps_and_entropies

    def record(*args, **kwargs):  # the policy's log-probabilities, then (beta > 0) the reference model's
        result = original(*args, **kwargs)
        trainer.recorded.append(result[0])
        return result

    trainer._get_per_token_logps_and_entropies = record
    return trainer


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize(("beta", "normalize", "clip"), [(0.0, False, None), (0.0, True, (-0.4, 0.8)),
                                                         (0.05, False, None), (0.05, True, (-1.0, 1.0))])  # fmt: skip
def test_rloo_advantages_of_groups_of_one_size_are_trls_bit_for_bit(rloo_trainer, size, beta, normalize, clip):
    """The same for `RLOOTrainer`: weighted, clipped rewards with the KL penalty (beta > 0, from the pass's own
    log-probabilities), leave-one-out baselines, `normalize_advantages`, and the zero-std share of groups."""
    trainer = rloo_trainer
    trainer.num_generations, trainer.beta, trainer.normalize_advantages = size, beta, normalize
    trainer.reward_clip_range, trainer.reward_weights = clip, torch.tensor([1.0, 0.5, -0.3])
    for seed in range(3):
        rewards = random_rewards(seed + 10 * size)
        trainer.recorded.clear()
        output = trl_pass(trainer, rewards)
        kl = None
        if beta:
            policy, reference = trainer.recorded
            kl = ((policy - reference) * output["completion_mask"]).sum(-1)
        ours, zero_std = rloo_advantages(rewards, [size] * (ROWS // size), trainer.reward_weights, clip, beta, kl,
                                         normalize)  # fmt: skip
        assert torch.equal(ours, output["advantages"]), (seed, ours - output["advantages"])
        assert zero_std == trainer._metrics["train"]["frac_reward_zero_std"][-1]


# One informative group and three all-equal ones that dynamic sampling's `on_limit: mask` trains with loss mask 0.
FILL_UP = torch.tensor([[0.0], [1.0], [0.0], [1.0]] + [[0.0]] * 12)
FILL_UP_MASK = [False] * 4 + [True] * 12
ALONE = 0.5 / (math.sqrt(1 / 3) + 1e-4)  # [0, 1, 0, 1]: mean 0.5, std sqrt(1/3) (Bessel-corrected)


@pytest.mark.parametrize(("scale_rewards", "aggregation", "unmasked"), [
    ("group", "sum_then_normalize", ALONE),
    ("batch", "sum_then_normalize", 1.4634),  # the batch std over all 16 rows
    ("none", "sum_then_normalize", 0.5),
    ("group", "normalize_then_sum", 1.9361),  # the batch mean and std over all 16 rows
    ("batch", "normalize_then_sum", 1.9361),
])  # fmt: skip
def test_masked_rows_have_no_say_in_the_advantages(scale_rewards, aggregation, unmasked):
    """The masked fill-up rows get 0 and leave the informative rows' advantages exactly as for those rows alone
    (±0.8659 with any scaling), where counting them would give ±1.4634 (`batch`) or ±1.9361 (`normalize_then_sum`)."""
    weights = torch.ones(1)
    masked, share = grpo_advantages(FILL_UP, [4] * 4, weights, scale_rewards, aggregation, masked=FILL_UP_MASK)
    alone, alone_share = grpo_advantages(FILL_UP[:4], [4], weights, scale_rewards, aggregation)
    expected = 0.5 if scale_rewards == "none" and aggregation == "sum_then_normalize" else ALONE
    assert masked[4:].tolist() == [0.0] * 12 and torch.equal(masked[:4], alone)
    assert masked[:4].tolist() == pytest.approx([-expected, expected] * 2, abs=1e-4)
    assert alone_share == 0.0 and share == 12 / 16  # the fill-up rows are the batch's zero-std rows
    unmasked_advantages = grpo_advantages(FILL_UP, [4] * 4, weights, scale_rewards, aggregation)[0]
    assert unmasked_advantages[1].item() == pytest.approx(unmasked, abs=1e-4)  # what the mask changes


@pytest.mark.parametrize("normalize", [False, True])
def test_masked_rows_have_no_say_in_rloo_advantages(normalize):
    """RLOO: masked rows get 0 and are out of `normalize_advantages`' mean and std; masked groups count as zero-std."""
    rewards = torch.tensor([[0.0], [1.0], [0.0], [1.0], [3.0], [3.0], [2.0], [0.5]])
    mask = [False] * 4 + [True] * 2 + [False] * 2
    masked, share = rloo_advantages(rewards, [4, 2, 2], torch.ones(1), normalize=normalize, masked=mask)
    alone, _ = rloo_advantages(rewards[[0, 1, 2, 3, 6, 7]], [4, 2], torch.ones(1), normalize=normalize)
    assert masked[4:6].tolist() == [0.0, 0.0] and torch.equal(masked[[0, 1, 2, 3, 6, 7]], alone)
    assert share == pytest.approx(1 / 3)


def test_groups_of_mixed_sizes_each_get_their_own_statistics():
    """Groups of 3, 1, 2 and 4 rows (NaN rows included): each group's advantages are those of the group alone (a
    group's statistics never see another group's rows, nor the NaN places of the layout); a group of one row gets 0."""
    torch.manual_seed(0)
    rewards = torch.randn(10, 2)
    rewards[2] = NAN
    rewards[8, 1] = NAN
    sizes, weights = [3, 1, 2, 4], torch.tensor([1.0, 2.0])
    for scale in ("group", "none"):
        whole = grpo_advantages(rewards, sizes, weights, scale)[0]
        start = 0
        for size in sizes:
            alone = grpo_advantages(rewards[start : start + size], [size], weights, scale)[0]
            torch.testing.assert_close(whole[start : start + size], alone if size > 1 else torch.zeros(1))
            start += size
    loo = rloo_advantages(rewards[:, :1], sizes, torch.ones(1))[0]
    # Row 0's group holds rows 0-2, row 2 unscorable: its baseline is row 1 alone; row 3 is a group of one.
    assert loo[0].item() == pytest.approx((rewards[0, 0] - rewards[1, 0]).item()) and loo[2] == 0 and loo[3] == 0


def test_weighted_rewards_are_trls_sum_and_refuse_nothing():
    """TRL's weighted sum: NaN values skipped, NaN where every function left the row unscored; clamped for RLOO."""
    rewards = torch.tensor([[1.0, NAN], [NAN, NAN], [2.0, 4.0]])
    got = weighted_rewards(rewards, torch.tensor([1.0, 0.5]))
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == 4.0
    assert weighted_rewards(rewards, torch.tensor([1.0, 0.5]), clip=(0.0, 3.0))[2] == 3.0
    with pytest.raises(ValueError, match="add up to 5, not the 3 rewards"):
        grpo_advantages(rewards, [3, 2], torch.ones(2))
