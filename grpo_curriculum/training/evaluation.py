"""
What the CLI asks of a built trainer besides training, through one public module: the reward of greedy completions
on held-out rows ([`greedy_rewards`], `sweep`'s held-out curve) and generation at full completion length
([`full_length_completions`], `sweep --plan-memory`'s probe). How is the seam's business (`_trl/evaluation.py`: the
`_trl/` modules are the ones that know GRPOTrainer internals); nothing outside `training/` imports them.
"""

from __future__ import annotations

from ._trl.evaluation import full_length_completions, greedy_rewards

__all__ = ["full_length_completions", "greedy_rewards"]
