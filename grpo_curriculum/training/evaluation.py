"""
What the CLI asks of a built trainer besides training, through one public module: the reward of greedy completions
on held-out rows ([`greedy_rewards`], `sweep`'s held-out curve) and generation at full completion length
([`full_length_completions`], `sweep --plan-memory`'s probe). How is the seam's business (`_trl.py`, the one module
that knows GRPOTrainer internals); nothing outside `training/` imports it.
"""

from __future__ import annotations

from ._trl import full_length_completions, greedy_rewards

__all__ = ["full_length_completions", "greedy_rewards"]
