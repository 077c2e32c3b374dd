"""
A curriculum over comparison difficulty: which completions of a group get a non-zero advantage.

GRPO weighs every completion by its distance to its group's mean reward. Early on, when the policy is weak, the
distinctions between middling completions are mostly noise while the best and the worst of a group carry the clearest
signal. A stage's `comparison` sets how fine the comparisons are:

- `mode: all` (the default): TRL's advantages, untouched.
- `mode: extremes`: only the best and the worst completions of each group keep their advantage; every completion tied
  (within `1e-6`) with the group's highest or lowest finite reward keeps it, the others get 0. A group of two distinct
  rewards is unchanged; a group whose rewards are all equal has advantage 0 anyway.
- `mode: margin`: a completion keeps its advantage only where its reward differs from its group's mean by at least
  `margin` group standard deviations (the Bessel-corrected std TRL's `scale_rewards="group"` divides by: under that
  setting this is `|advantage| >= margin`, up to TRL's `1e-4`), so `margin: 0` is `all`. `margin_end` ramps it
  linearly to another value over the stage (coarse to fine: e.g. 1.0 -> 0).

The completions are ranked by the weighted sum of their rewards (what TRL normalises with the default
`multi_objective_aggregation="sum_then_normalize"`); unscored completions (every reward NaN) are left out and keep their
advantage 0. Zeroed completions stay in the batch: their tokens count in every `loss_type`'s normaliser and in the KL
term, as a zero-std group's do in TRL.

Pure logic: the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from .errors import MISSING, Problem, raise_if_any
from .rules import Rule, check, settings_from_mapping
from .signals import ZERO_STD_TOLERANCE, finite_or_none, mean_std

COMPARISON_MODES = ("all", "extremes", "margin")
MAX_MARGIN = 64.0
"""Largest margin, in group standard deviations (no completion of a group of at most 2^20 is that far from its mean)."""

_MARGIN = Rule("number", low=0, high=MAX_MARGIN, why="group standard deviations between a completion's reward and "
               "its group's mean; at most (G - 1) / sqrt(G) for the stage's smallest group G",
               fix="e.g. `margin: 1.0` (0: every completion, as `mode: all`)")
COMPARISON_RULES = {
    "mode": Rule("choice", choices=COMPARISON_MODES, fix="use `all`, `extremes` or `margin`"),
    "margin": _MARGIN,
    "margin_end": _MARGIN,
}


@dataclass(frozen=True)
class Comparison:
    """
    How fine a stage's comparisons are (see the module docstring).

    Args:
        mode (`str`, *optional*, defaults to `"all"`): `"all"`, `"extremes"` or `"margin"`.
        margin (`float`, *optional*): `mode="margin"` only (required there): the margin at the start of the stage, in
            group standard deviations, in [0, 64].
        margin_end (`float`, *optional*): `mode="margin"` only: the margin at the end of the stage; the margin then
            ramps linearly from `margin`, evaluated at the start of each generation round.

    Example:
    ```python
    >>> from grpo_curriculum.core.comparison import Comparison
    >>> Comparison(mode="margin", margin=1.0, margin_end=0.0).margin_at(0.5)
    0.5
    ```
    """

    mode: str = "all"
    margin: float | None = None
    margin_end: float | None = None

    def __post_init__(self):
        raise_if_any(comparison_problems({f.name: getattr(self, f.name) for f in fields(self)}, "Comparison"),
                     context="Comparison")
        for name in ("margin", "margin_end"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    @classmethod
    def from_mapping(cls, values, key: str = "comparison") -> tuple[Comparison | None, list[Problem]]:
        """Build from the YAML / dict form, e.g. `{mode: extremes}` (an instance is returned as is)."""
        return settings_from_mapping(cls, values, key, "a comparison setting",
                                     "`comparison: {mode: extremes}` or `{mode: margin, margin: 1.0}`",
                                     comparison_problems)

    def margin_at(self, progress: float) -> float | None:
        """The margin at `progress` in [0, 1] through the stage (`None` unless `mode="margin"`)."""
        if self.mode != "margin":
            return None
        if self.margin_end is None:
            return self.margin
        progress = min(max(progress, 0.0), 1.0)
        return self.margin + (self.margin_end - self.margin) * progress

    def describe(self) -> str:
        """In words: `"comparisons: best and worst of each group"`, `"comparisons: margin 1 -> 0 group stds"`."""
        if self.mode == "all":
            return "comparisons: all completions"
        if self.mode == "extremes":
            return "comparisons: best and worst of each group"
        end = f" -> {self.margin_end:g}" if self.margin_end is not None else ""
        return f"comparisons: margin {self.margin:g}{end} group stds"


def comparison_problems(values: Mapping, key: str = "comparison") -> list[Problem]:
    """Every problem with a comparison's fields (a mapping; `None` counts as not given)."""
    given = {name: value for name, value in values.items() if value is not None}
    problems = check(COMPARISON_RULES, given, key)
    mode = given.get("mode", "all")
    if mode == "margin" and "margin" not in given:
        problems.append(Problem(f"{key}.margin", MISSING, "is required with `mode: margin`", _MARGIN.fix))
    if mode in ("all", "extremes"):
        problems += [Problem(f"{key}.{name}", given[name], f"only applies with `mode: margin` (the mode is {mode!r})",
                             f"remove `{name}`, or set `mode: margin`")
                     for name in ("margin", "margin_end") if name in given]  # fmt: skip
    return problems


def largest_margin(num_generations: int) -> float:
    """
    The farthest any completion of a group of `num_generations` gets from its group's mean, in group standard
    deviations (Bessel-corrected, as [`comparison_keep`] measures): `(G - 1) / sqrt(G)`, reached by one completion apart
    from `G - 1` equal ones (0.707 at G 2, 1.5 at G 4). A larger margin keeps no completion: zero gradient.
    """
    return (num_generations - 1) / math.sqrt(num_generations)


def reach_problems(comparison: Comparison | None, num_generations: int, groups: str, key: str) -> list[Problem]:
    """
    A problem for each margin of `comparison` (`margin`, `margin_end`) no completion of a group of `num_generations`
    (the smallest group the stage trains, `groups` says which in words, e.g. `"the stage's G"`) can reach.
    """
    if comparison is None or comparison.mode != "margin":
        return []
    bound = largest_margin(num_generations)
    return [Problem(f"{key}.{name}", value, f"must be at most {bound:.4g}, (G - 1) / sqrt(G) at G {num_generations} "
                    f"({groups}): no completion of a group of {num_generations} is farther from its group's mean, so "
                    "a larger margin zeroes every advantage (no gradient)",
                    f"lower `{name}` to at most {math.floor(bound * 1000) / 1000:g}, or train larger groups "
                    f"(1.5 at G 4, 2.47 at G 8)")
            for name in ("margin", "margin_end")
            if (value := getattr(comparison, name)) is not None and value > bound * (1 + 1e-9)]


def comparison_keep(rewards: Sequence[float], group_sizes: Sequence[int], mode: str,
                    margin: float | None = None) -> list[bool]:
    """
    Which rows keep their advantage under a comparison mode.

    Args:
        rewards (`Sequence[float]`): Each row's (weighted) reward, groups contiguous in row order; NaN / `None`:
            unscored.
        group_sizes (`Sequence[int]`): Each group's size, in row order.
        mode (`str`): `"all"`, `"extremes"` or `"margin"`.
        margin (`float`, *optional*): `mode="margin"`: in group standard deviations (Bessel-corrected).

    Returns:
        `list[bool]`: One flag a row; an unscored row, or any row of a group with fewer than two distinct finite
        rewards, is `False` unless `mode="all"`.
    """
    if sum(group_sizes) != len(rewards):
        raise ValueError(f"group sizes {list(group_sizes)[:8]} add up to {sum(group_sizes)}, not {len(rewards)} rows")
    if mode == "all":
        return [True] * len(rewards)
    keep, start = [], 0
    for size in group_sizes:
        values = [finite_or_none(r) for r in rewards[start : start + size]]
        start += size
        finite = [v for v in values if v is not None]
        if not finite or max(finite) - min(finite) <= ZERO_STD_TOLERANCE:
            keep += [False] * size
        elif mode == "extremes":
            high, low = max(finite), min(finite)
            keep += [v is not None and (v >= high - ZERO_STD_TOLERANCE or v <= low + ZERO_STD_TOLERANCE)
                     for v in values]  # fmt: skip
        elif mode == "margin":
            n, mean, population_std = mean_std(finite)
            std = population_std * math.sqrt(n / (n - 1))
            keep += [v is not None and abs(v - mean) >= margin * std * (1 - 1e-12) for v in values]
        else:
            raise ValueError(f"unknown comparison mode {mode!r}: use one of {list(COMPARISON_MODES)}")
    return keep
