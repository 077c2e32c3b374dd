"""
A round's advantages, the one place the package computes them: GRPO's ([`grpo_advantages`]) and RLOO's
([`rloo_advantages`]), for rounds of one group size or of many (per-prompt G, top-up, dynamic sampling), with rows
masked out of the loss or not, and the one place rewards are weighted ([`weighted_rewards`]).

Every formula is TRL 1.16's (`GRPOTrainer._generate_and_score_completions`,
`RLOOTrainer._generate_and_score_completions`), op for op: the rewards are laid out as `(groups, G)` and reduced with
`torch.nanmean` and TRL's own `nanstd` along the group dimension, with NaN in the places a group smaller than the
largest lacks, which the NaN-aware reductions leave out as they leave out TRL's unscorable rows. A round whose groups
share one size has no such places: its layout is TRL's `view(-1, G)` and its advantages are TRL's, bit for bit
(`tests/test_advantages.py` checks them against real `GRPOTrainer` and `RLOOTrainer` passes). Rows `masked` (dynamic
sampling's fill-up groups, out of the loss) are out of every statistic and get advantage 0. No scatter-adds
(`index_add_` is run-to-run nondeterministic on CUDA).
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd

EPSILON = 1e-4  # TRL's, added to every std it divides by


def weighted_rewards(rewards_per_func, reward_weights, clip=None, unscorable=None):
    """
    Each row's reward as TRL's trainers combine the reward functions: `(rewards_per_func x weights).nansum(1)`, NaN
    for the `unscorable` rows (default: those every function left unscored, returning `None`), then clamped to `clip`
    (RLOO's `reward_clip_range`). The same computation gives the logged `reward`, GRPO's summed reward (and its
    `normalize_then_sum` sum of normalised rewards) and RLOO's grouped one.
    """
    rewards = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1) if unscorable is None else unscorable] = torch.nan
    if clip:
        rewards = rewards.clamp(min=clip[0], max=clip[1])
    return rewards


def grpo_advantages(rewards_per_func, group_sizes: list[int], reward_weights, scale_rewards: str = "group",
                    multi_objective_aggregation: str = "sum_then_normalize", masked=None) -> tuple:
    """
    The advantages `GRPOTrainer` computes for a round, each group of its own size, and its `frac_reward_zero_std`.
    `scale_rewards` ("group", "batch", "none") and `multi_objective_aggregation` ("sum_then_normalize",
    "normalize_then_sum") mean what they mean in TRL; unscorable rows get advantage 0.

    Args:
        rewards_per_func (`torch.Tensor`): `(rows, reward functions)`, every process, in row order.
        group_sizes (`list[int]`): Each group's rows, in row order (they add up to the rows).
        reward_weights (`torch.Tensor`): One weight a reward function (`GRPOTrainer.reward_weights`).
        scale_rewards, multi_objective_aggregation (`str`): As in [`~trl.GRPOConfig`].
        masked (`list[bool]`, *optional*): Rows out of the loss: advantage 0, and no part in any mean or std.

    Returns:
        `tuple[torch.Tensor, float]`: Each row's advantage; the share of rows whose reward std (the one the row is
        scaled by: its group's, or the round's for "batch" and `normalize_then_sum`) is `torch.isclose` to 0, masked
        rows (all-equal fill-up groups) counted as such.
    """
    _check_sizes(group_sizes, len(rewards_per_func))
    kept, sizes = _kept(masked, group_sizes, len(rewards_per_func))
    if not sizes:  # every row masked (a batch of fill-up groups only)
        return torch.zeros(len(rewards_per_func), device=rewards_per_func.device), 1.0
    advantages, std = _grpo(rewards_per_func[kept], sizes, reward_weights, scale_rewards, multi_objective_aggregation)
    zero_std = torch.ones(len(rewards_per_func), dtype=torch.bool, device=advantages.device)
    zero_std[kept] = torch.isclose(std, torch.zeros_like(std))
    return _scatter(advantages, kept), zero_std.float().mean().item()


def rloo_advantages(rewards_per_func, group_sizes: list[int], reward_weights, clip=None, beta: float = 0.0,
                    sequence_kl=None, normalize: bool = False, masked=None) -> tuple:
    """
    The leave-one-out advantages `RLOOTrainer` computes for a round, each group of its own size `n`, and its
    `frac_reward_zero_std`. A row's reward is weighted and clamped to `clip` ([`weighted_rewards`]), minus `beta` x its
    sequence KL when `beta > 0`; its advantage is that reward minus the mean of its group's other scorable rewards,
    `r - (sum - r) / (n_scorable - 1)` (an unscorable row, NaN, is out of its group's sum and count, and gets 0; so do
    the rows of a group with one scorable row). A group of one row gets 0, as TRL gives `num_generations = 1`. With
    `normalize` (`normalize_advantages`) the advantages are standardised over the round.

    Args:
        rewards_per_func (`torch.Tensor`): `(rows, reward functions)`, every process, in row order.
        group_sizes (`list[int]`): Each group's rows, in row order (they add up to the rows).
        reward_weights (`torch.Tensor`), clip (`tuple`, *optional*), beta (`float`), normalize (`bool`): RLOO's.
        sequence_kl (`torch.Tensor`, *optional*): Each row's `(policy - reference log-probs) x completion_mask`,
            summed; needed when `beta > 0`.
        masked (`list[bool]`, *optional*): Rows out of the loss: advantage 0, and no part in any mean or std.

    Returns:
        `tuple[torch.Tensor, float]`: Each row's advantage; the share of groups whose reward std is `torch.isclose`
        to 0 (a group of one row: std 0), groups of masked rows counted as such.
    """
    _check_sizes(group_sizes, len(rewards_per_func))
    rewards = weighted_rewards(rewards_per_func, reward_weights, clip)
    if beta != 0.0:
        rewards = rewards - beta * sequence_kl.to(rewards.device)
    kept, sizes = _kept(masked, group_sizes, len(rewards))
    if not sizes:  # every row masked
        return torch.zeros_like(rewards), 1.0
    rewards = rewards[kept]
    grouped = _grouped(rewards, sizes)
    if max(sizes, default=0) > 1:
        std = nanstd(grouped, dim=1)
        counts = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
        baselines = (torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (counts - 1)
        advantages = rewards - _ungrouped(baselines, sizes)
    else:
        std, advantages = torch.zeros(len(sizes), device=rewards.device), torch.zeros_like(rewards)
    single = _per_row(torch.tensor(sizes, device=rewards.device) == 1, sizes)
    if single.any():  # in a round of mixed sizes: TRL's `num_generations = 1`
        advantages = torch.where(single, torch.zeros_like(advantages), advantages)
        std = torch.where(torch.tensor(sizes, device=std.device) == 1, torch.zeros_like(std), std)
    if normalize:
        advantages = (advantages - torch.nanmean(advantages)) / (nanstd(advantages) + EPSILON)
    # The groups wholly masked (after the others: the share does not depend on the order) count as zero-std ones.
    masked_groups = sum(1 for size in group_sizes if size) - len(sizes)
    zero_std = torch.cat([torch.isclose(std, torch.zeros_like(std)), std.new_ones(masked_groups, dtype=torch.bool)])
    return _scatter(torch.nan_to_num(advantages, nan=0.0), kept), zero_std.float().mean().item()


def _grpo(rewards_per_func, sizes, reward_weights, scale_rewards, multi_objective_aggregation):
    """`GRPOTrainer`'s advantages and the std each row is scaled by, for unmasked rows in groups of `sizes`."""
    if multi_objective_aggregation == "sum_then_normalize":
        rewards = weighted_rewards(rewards_per_func, reward_weights)
        grouped = _grouped(rewards, sizes)
        mean = _per_row(torch.nanmean(grouped, dim=1), sizes)
        if scale_rewards in ("group", "none"):
            std = _per_row(nanstd(grouped, dim=1), sizes) if max(sizes) > 1 else torch.zeros_like(rewards)
        elif scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        else:
            raise ValueError(f"Invalid value for scale_rewards: {scale_rewards}. Must be one of 'batch', 'group', or "
                             f"'none'.")  # fmt: skip
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + EPSILON)
    elif multi_objective_aggregation == "normalize_then_sum":
        grouped = _grouped(rewards_per_func, sizes)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if max(sizes) > 1 else torch.zeros_like(mean_k)
        reward_k = _ungrouped((grouped - mean_k) / (std_k + EPSILON), sizes)
        rewards = weighted_rewards(reward_k, reward_weights, unscorable=torch.isnan(rewards_per_func).all(dim=1))
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + EPSILON)
    else:
        raise ValueError(f"Invalid multi_objective_aggregation: {multi_objective_aggregation}. Must be "
                         f"'sum_then_normalize' or 'normalize_then_sum'.")  # fmt: skip
    return torch.nan_to_num(advantages, nan=0.0), std


def _check_sizes(group_sizes: list[int], rows: int) -> None:
    if sum(group_sizes) != rows:
        raise ValueError(f"group sizes {group_sizes} add up to {sum(group_sizes)}, not the {rows} rewards")


def _kept(masked, group_sizes: list[int], rows: int) -> tuple:
    """The rows not masked (a bool tensor, or a full slice) and the sizes of the groups they form (empty ones out)."""
    if masked is None or not any(masked):
        return slice(None), [size for size in group_sizes if size]
    if len(masked) != rows:
        raise ValueError(f"{len(masked)} mask flags for {rows} rows")
    kept, sizes, start = [not flag for flag in masked], [], 0
    for size in group_sizes:
        sizes.append(sum(kept[start : start + size]))
        start += size
    return torch.tensor(kept), [size for size in sizes if size]


def _scatter(values, kept):
    """Rows `kept` of a round hold `values`; the others 0."""
    if isinstance(kept, slice):
        return values
    out = torch.zeros(len(kept), dtype=values.dtype, device=values.device)
    out[kept.to(values.device)] = values
    return out


def _grouped(values, sizes: list[int]):
    """`values` (rows first) laid out `(groups, largest group, ...)`, NaN where a group has fewer rows: TRL's
    `view(-1, G)` when every group has G rows."""
    group, position = _places(sizes, values.device)
    grouped = torch.full((len(sizes), max(sizes), *values.shape[1:]), torch.nan, dtype=values.dtype,
                         device=values.device)  # fmt: skip
    grouped[group, position] = values
    return grouped


def _ungrouped(grouped, sizes: list[int]):
    """The rows of a `(groups, largest group, ...)` layout ([`_grouped`]), in row order."""
    return grouped[_places(sizes, grouped.device)]


def _per_row(values, sizes: list[int]):
    """One value a group, repeated for each of its rows (TRL's `repeat_interleave(num_generations)`)."""
    return values.repeat_interleave(torch.tensor(sizes, device=values.device), dim=0)


def _places(sizes: list[int], device) -> tuple:
    """Each row's group and its position in the group, for groups of `sizes` rows in row order."""
    group = torch.repeat_interleave(torch.arange(len(sizes), device=device), torch.tensor(sizes, device=device))
    starts = torch.tensor([0, *sizes[:-1]], device=device).cumsum(0)
    return group, torch.arange(len(group), device=device) - starts[group]
