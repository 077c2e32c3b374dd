"""
Advantages of a round whose groups differ in size (per-prompt G).

TRL groups a round's rewards with `rewards.view(-1, num_generations)` and, in vLLM server mode, sends
`all_prompts[::num_generations]` with `n=num_generations`. A round whose prompts have different G runs with
`num_generations = 1` (every row its own prompt as far as TRL's grouping goes); its advantages are then recomputed
per real group here ([`group_advantages`]) and the server requests regrouped
([`grpo_curriculum.training._trl.install_variable_group_requests`]).
"""

from __future__ import annotations

import torch


def _group_index(group_sizes: list[int], device):
    """Each row's group number, for groups of `group_sizes` rows in row order."""
    return torch.repeat_interleave(torch.arange(len(group_sizes), device=device),
                                   torch.tensor(group_sizes, device=device))


def _segment_nanmean(values, group, num_groups: int):
    mask = ~torch.isnan(values)
    shape = (num_groups, *values.shape[1:])
    sums = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(0, group, values.nan_to_num(0.0))
    counts = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(0, group, mask.to(values.dtype))
    return sums / counts, counts


def _segment_nanstd(values, group, num_groups: int):
    """TRL's `nanstd` (NaN-aware, Bessel-corrected; NaN for fewer than 2 values) of each group."""
    mean, counts = _segment_nanmean(values, group, num_groups)
    squares = ((values - mean[group]) ** 2).nan_to_num(0.0)
    total = torch.zeros_like(mean).index_add_(0, group, squares)
    variance = torch.where(counts > 1, total / (counts - 1), torch.full_like(total, float("nan")))
    return torch.sqrt(variance)


def group_advantages(rewards_per_func, group_sizes: list[int], reward_weights, scale_rewards: str = "group",
                     multi_objective_aggregation: str = "sum_then_normalize"):
    """
    The advantages `GRPOTrainer._generate_and_score_completions` computes, with each group of its own size: a group's
    mean and std are over its own rewards; `scale_rewards` ("group", "batch", "none") and `multi_objective_aggregation`
    ("sum_then_normalize", "normalize_then_sum") mean what they mean in TRL; rows every reward function left unscored
    get advantage 0.

    Args:
        rewards_per_func (`torch.Tensor`): `(rows, reward functions)`, gathered from every process, in row order.
        group_sizes (`list[int]`): Each group's size, in row order (they add up to the rows).
        reward_weights (`torch.Tensor`): One weight a reward function (`GRPOTrainer.reward_weights`).
        scale_rewards, multi_objective_aggregation (`str`): As in [`~trl.GRPOConfig`].

    Returns:
        `torch.Tensor`: The advantage of each row.
    """
    return _advantages_and_std(rewards_per_func, group_sizes, reward_weights, scale_rewards,
                               multi_objective_aggregation)[0]  # fmt: skip


def frac_reward_zero_std(rewards_per_func, group_sizes: list[int], reward_weights, scale_rewards: str = "group",
                         multi_objective_aggregation: str = "sum_then_normalize") -> float:
    """
    TRL's `frac_reward_zero_std` of a round with each group of its own size: the share of rows whose reward std (the
    std [`group_advantages`] scales by: the group's for `scale_rewards` "group" and "none", the round's for "batch" and
    for `normalize_then_sum`) is `torch.isclose` to 0, as `GRPOTrainer._generate_and_score_completions` logs it.
    """
    std = _advantages_and_std(rewards_per_func, group_sizes, reward_weights, scale_rewards,
                              multi_objective_aggregation)[1]  # fmt: skip
    return torch.isclose(std, torch.zeros_like(std)).float().mean().item()


def _advantages_and_std(rewards_per_func, group_sizes, reward_weights, scale_rewards, multi_objective_aggregation):
    """Each row's advantage and the reward std TRL computes for it (for scaling, and to log the zero-std share)."""
    device = rewards_per_func.device
    num_groups = len(group_sizes)
    group = _group_index(group_sizes, device)
    weights = reward_weights.to(device).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if multi_objective_aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = _segment_nanmean(rewards, group, num_groups)[0][group]
        if scale_rewards in ("group", "none"):
            std = _segment_nanstd(rewards, group, num_groups)[group]
        elif scale_rewards == "batch":
            std = _batch_std(rewards)
        else:
            raise ValueError(f"Invalid value for scale_rewards: {scale_rewards}.")
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    elif multi_objective_aggregation == "normalize_then_sum":
        mean = _segment_nanmean(rewards_per_func, group, num_groups)[0][group]
        std_k = _segment_nanstd(rewards_per_func, group, num_groups)[group]
        rewards = (((rewards_per_func - mean) / (std_k + 1e-4)) * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = _batch_std(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    else:
        raise ValueError(f"Invalid multi_objective_aggregation: {multi_objective_aggregation}.")
    return torch.nan_to_num(advantages, nan=0.0), std


def _batch_std(rewards):
    """TRL's `nanstd` over the whole round (0 for a single row), broadcast to every row."""
    if rewards.numel() < 2:
        return torch.zeros_like(rewards)
    return _segment_nanstd(rewards, torch.zeros_like(rewards, dtype=torch.long), 1)[0].expand_as(rewards)


def leave_one_out_advantages(rewards, group_sizes: list[int], normalize: bool = False):
    """
    The advantages `RLOOTrainer._generate_and_score_completions` computes, with each group of its own size `n`: a
    row's reward minus the mean of its group's other scorable rewards, `r - (sum - r) / (n_scorable - 1)` (NaN-aware:
    an unscorable row, NaN, is out of its group's sum and count; a group with one scorable row gives NaN). A group of
    one row gets advantage 0, as TRL gives `num_generations = 1`. With `normalize` (RLOO's `normalize_advantages`) the
    advantages are standardised over the whole round, `(a - nanmean) / (nanstd + 1e-4)`; NaN advantages are then 0.

    Args:
        rewards (`torch.Tensor`): One reward a row, as RLOO groups them: weighted, clipped, its KL penalty already
            subtracted when `beta > 0`, NaN where every reward function left the row unscored; every process, in row
            order.
        group_sizes (`list[int]`): Each group's size, in row order (they add up to the rows).
        normalize (`bool`): RLOO's `normalize_advantages`.

    Returns:
        `tuple[torch.Tensor, torch.Tensor]`: Each row's advantage, and each group's reward std (TRL's `nanstd`; 0 for
        a group of one row), from which RLOO logs `frac_reward_zero_std` (the share of groups whose std is 0).
    """
    device = rewards.device
    num_groups = len(group_sizes)
    if sum(group_sizes) != rewards.numel():
        raise ValueError(f"group sizes {group_sizes} add up to {sum(group_sizes)}, not the {rewards.numel()} rewards")
    sizes = torch.tensor(group_sizes, device=device)
    group = _group_index(group_sizes, device)
    scorable = (~torch.isnan(rewards)).to(rewards.dtype)
    sums = torch.zeros(num_groups, dtype=rewards.dtype, device=device).index_add_(0, group, rewards.nan_to_num(0.0))
    counts = torch.zeros(num_groups, dtype=rewards.dtype, device=device).index_add_(0, group, scorable)
    advantages = rewards - (sums[group] - rewards) / (counts[group] - 1)
    single = (sizes == 1)[group]
    advantages = torch.where(single, torch.zeros_like(advantages), advantages)
    if normalize:
        advantages = (advantages - torch.nanmean(advantages)) / (_batch_std(advantages)[:1] + 1e-4)
    std = _segment_nanstd(rewards, group, num_groups)
    std = torch.where(sizes == 1, torch.zeros_like(std), std)
    return torch.nan_to_num(advantages, nan=0.0), std
