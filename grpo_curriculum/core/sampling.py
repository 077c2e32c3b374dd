"""
Sampling in increments: a round that looks at its first rewards before it spends the rest of its completions.

Two modes of a stage, each composable with the stage's temperature (and its `temperature_end` ramp):

- **Top-up** (a fixed budget a round; `Adaptive(policy="top_up", num_generations=(4, 8, 16))`): a round of exactly the
  generation batch is sampled in increments. Every prompt of the round first gets a pilot group of `pilot` completions;
  the rest of the budget then goes, `pilot` completions at a time, to the groups whose rewards are still all equal,
  and once none are, to the lowest-variance ones, up to the largest candidate ([`top_up_increment`]). A group's
  advantage uses every completion it holds. See [`TopUp`] for the prompts a round holds.
- **Dynamic sampling** (DAPO; a fixed signal for a variable cost; `Stage(..., dynamic_sampling=DynamicSampling())`):
  rounds at the stage's G are generated, groups whose rewards are all equal are dropped, and generation goes on until
  the training batch holds only informative groups or `max_rounds` rounds were generated ([`DynamicSampling`]).

Pure logic: the standard library only. The trainer gathers the rewards of every process before it calls
[`top_up_increment`], so every process takes the same decision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

from .errors import Problem, list_text, plural, raise_if_any
from .rules import COUNT, MAX_COUNT, NUM_GENERATIONS, Rule, check, integer, settings_from_mapping
from .signals import finite_or_none, is_zero_std, mean_std

MAX_ROUNDS = 1024
"""Most generation rounds dynamic sampling may draw for one training batch (no limit, verl's `0`, is refused: a round of
too few informative prompts would never end)."""
ON_LIMIT_NAMES = ("mask", "error", "fill")
"""What dynamic sampling does with a training batch still short of informative groups after `max_rounds` rounds."""

DYNAMIC_SAMPLING_RULES = {
    "max_rounds": integer(1, MAX_ROUNDS, why="generation rounds drawn at most to fill one training batch; 0, no "
                          "limit, is refused: a round of too few informative prompts would never end",
                          fix=f"e.g. `max_rounds: 2` (the default; verl/DAPO's `max_num_gen_batches`; 1: drop "
                              f"nothing, as plain GRPO; at most {MAX_ROUNDS}, where verl's `0` would draw forever)"),
    "on_limit": Rule("choice", choices=ON_LIMIT_NAMES,
                     fix="e.g. `on_limit: mask` (the default), `error` (verl's), or `fill`"),
}
TOP_UP_RULES = {
    "pilot": dataclasses.replace(NUM_GENERATIONS, why="the completions every prompt of a round gets first; GRPO "
                                 "needs at least 2 per group", fix="e.g. `pilot: 4` (default: the smallest G)"),
    "largest": dataclasses.replace(NUM_GENERATIONS, why="the largest group a top-up may grow"),
    "prompts": dataclasses.replace(COUNT, why="prompts a top-up round holds",
                                   fix="e.g. `prompts: 8`, or omit it (the default rule, see `TopUp.prompts_for`)"),
}


@dataclass(frozen=True)
class DynamicSampling:
    """
    DAPO's dynamic sampling for a stage of fixed G: generate rounds of the stage's G, drop the groups whose rewards are
    all equal (zero advantage whatever `scale_rewards`), and keep generating until the training batch holds only
    informative groups, or `max_rounds` rounds were generated. Every dropped group is counted and logged.

    Args:
        max_rounds (`int`, *optional*, defaults to `2`):
            Generation rounds drawn at most for one training batch (verl/DAPO's `max_num_gen_batches`); each round
            costs one generation batch of completions; at most [`MAX_ROUNDS`]. `0` (no limit, verl's
            `max_num_gen_batches: 0`) is refused: a dataset with too few informative prompts would never end a round.
            `1`: nothing is drawn again, dropped or masked (`on_limit` has no effect), plain GRPO. The default 2 is the
            study's choice (docs/dynamic_sampling.md; 4 before). Each further round drawn logs a line with the count,
            so a round that keeps drawing is visible.
        on_limit (`str`, *optional*, defaults to `"mask"`):
            A batch still short of informative groups after `max_rounds` rounds:
            - `"mask"`: trains on its informative groups only. It is filled up to the batch with all-equal groups
              (TRL's batch has a fixed size) whose tokens are left out of the loss (loss mask 0, as TRL masks tool
              output): no gradient, and no weight in a token-normalised loss (`dapo`, TRL's default, `bnpo`, `cispo`,
              `vespo`: `num_items_in_batch` counts the informative tokens only), nor in the KL, entropy or clipping
              metrics. The sequence-mean losses (`grpo`, `sapo`, `luspo`) and `dr_grpo` still divide by the batch's
              rows, as TRL does for its own zero-std groups.
            - `"error"`: stops training with an error naming the round (verl's behaviour past
              `max_num_gen_batches`).
            - `"fill"`: trains on the all-equal fill-up groups as TRL trains its own zero-std groups (advantage 0;
              their tokens count in the loss normalisation, which dilutes `dapo`, `bnpo` and `cispo`).

    Example:
    ```python
    >>> from grpo_curriculum import DynamicSampling, Stage
    >>> Stage(num_generations=4, temperature=1.0, dynamic_sampling=DynamicSampling()).dynamic_sampling
    DynamicSampling(max_rounds=2, on_limit='mask')
    ```
    """

    max_rounds: int = 2
    on_limit: str = "mask"

    def __post_init__(self):
        raise_if_any(self.problems(key="DynamicSampling"), context="DynamicSampling")
        object.__setattr__(self, "max_rounds", int(self.max_rounds))  # `numpy.int64(4)` is an integer too

    def problems(self, key: str = "dynamic_sampling") -> list[Problem]:
        """Every problem with the fields, each named `f"{key}.<field>"`; empty when valid."""
        return check(DYNAMIC_SAMPLING_RULES, {f.name: getattr(self, f.name) for f in fields(self)}, key)

    @classmethod
    def from_mapping(cls, values, key: str = "dynamic_sampling") -> tuple[DynamicSampling | None, list[Problem]]:
        """
        Build from the YAML / dict form, e.g. `{max_rounds: 2}` (an instance is returned as is).

        Returns:
            `tuple[DynamicSampling | None, list[Problem]]`: The settings and no problems, or `None` and every problem.
        """
        return settings_from_mapping(cls, values, key, "a dynamic-sampling setting",
                                     "`dynamic_sampling: {max_rounds: 2}`",
                                     lambda given, at: check(DYNAMIC_SAMPLING_RULES, given, at))

    def at_limit(self, rounds: int) -> bool:
        """Whether `rounds` generation rounds are all a training batch may draw."""
        return rounds >= self.max_rounds

    def drawing_line(self, step: int, stage: int, drawn: int, completions: int, informative: int, needed: int) -> str:
        """
        The line logged each time a training batch draws one more generation round (a stalled batch stays visible):
        what `drawn` rounds (`completions` in all) found, and the round drawn next.
        """
        return (f"step {step}: dynamic sampling (stage {stage}) found {plural(informative, 'informative group')} of "
                f"the {needed} a training batch needs in {plural(drawn, 'generation round')} ({completions} "
                f"completions): drawing round {drawn + 1} of at most {self.max_rounds}")

    def describe(self) -> str:
        """The mode in words, e.g. `"dynamic sampling, at most 4 generation rounds a training batch"`."""
        rounds = f"{self.max_rounds} generation round" + ("s" if self.max_rounds != 1 else "")
        limit = "" if self.on_limit == "mask" else f" (on_limit {self.on_limit})"
        return f"dynamic sampling, at most {rounds} a training batch{limit}"


TOP_UP_PROMPTS_RULES = {"pilot_half": "generation_batch_size // (2 * pilot)",
                        "largest_half": "generation_batch_size // max(2 * pilot, largest // 2)"}
"""Every default rule a top-up round's size has had ([`TopUp.PROMPTS_RULE`]: today's), in words; each clamped to at
least `ceil(generation_batch_size / largest)` and at most `generation_batch_size // pilot` prompts. Checkpoints record
which one a run used."""


def top_up_prompts_divisor(rule: str, pilot: int, largest: int) -> int:
    """What the default rule `rule` divides the generation batch by, before its clamps: two rules with the same
    divisor for a `(pilot, largest)` give the same rounds at every generation batch."""
    return {"pilot_half": 2 * pilot, "largest_half": max(2 * pilot, largest // 2)}[rule]


def top_up_prompts_by_rule(rule: str, pilot: int, largest: int, batch: int) -> int:
    """The prompts a top-up round of `batch` completions holds under the default rule `rule` (a key of
    [`TOP_UP_PROMPTS_RULES`]), clamped ([`TopUp.prompts_for`])."""
    divisor = top_up_prompts_divisor(rule, pilot, largest)
    return min(max(batch // divisor, -(-batch // largest)), max(batch // pilot, 1))


@dataclass(frozen=True)
class TopUp:
    """
    The plan of a top-up round: how many prompts it holds and how its groups grow. Built by
    [`~grpo_curriculum.Adaptive.top_up`] from a `policy="top_up"` stage; the trainer resolves the prompts against the
    round's budget (its generation batch) with [`TopUp.prompts_for`].

    A group starts with `pilot` completions and grows `pilot` at a time (so it holds `pilot`, `2 * pilot`, ...,
    `largest` completions); every increment of the round follows [`top_up_increment`], until the round holds exactly
    its budget.

    Args:
        pilot (`int`):
            Completions every prompt of the round gets first, and the size of each later increment of a group (>= 2).
        largest (`int`):
            The largest group, a multiple of `pilot`.
        prompts (`int`, *optional*):
            Prompts a round holds; `None`: the default rule of [`TopUp.prompts_for`].
    """

    pilot: int
    largest: int
    prompts: int | None = None

    PROMPTS_RULE: ClassVar[str] = "largest_half"
    """The identity of [`prompts_for`]'s default rule, recorded in checkpoints (`"pilot_half"`: the earlier rule,
    `budget // (2 * pilot)`); change it with the rule."""

    def __post_init__(self):
        raise_if_any(self.problems(key="TopUp"), context="TopUp")
        for f in fields(self):  # plain Python integers
            if getattr(self, f.name) is not None:
                object.__setattr__(self, f.name, int(getattr(self, f.name)))

    def problems(self, key: str = "top_up") -> list[Problem]:
        """Every problem with the fields, each named `f"{key}.<field>"`; empty when valid."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        problems = check(TOP_UP_RULES, {k: v for k, v in values.items() if v is not None}, key)
        if not problems and self.largest % self.pilot:
            fit = self.largest // self.pilot * self.pilot or self.pilot
            problems.append(Problem(f"{key}.largest", self.largest, f"must be a multiple of the pilot ({self.pilot}): "
                                    "a group grows by the pilot", f"use largest {fit}"))
        return problems

    @property
    def sizes(self) -> tuple[int, ...]:
        """Every size a group can reach: `pilot`, `2 * pilot`, ..., `largest`."""
        return tuple(range(self.pilot, self.largest + 1, self.pilot))

    @property
    def max_increments(self) -> int:
        """
        Increments (generation calls after the pilots) a round takes at most: `2 * (largest / pilot - 1)`. While some
        group's rewards are all equal, every such group grows each increment, so that phase ends within
        `largest / pilot - 1` increments; the lowest-variance phase that follows grows every group it can each
        increment, and ends as soon: a group never returns to all-equal rewards.
        """
        return 2 * (self.largest // self.pilot - 1)

    def describe(self) -> str:
        """The plan in words, e.g. `"pilot 4 a prompt, then 4 more at a time up to 16 (groups of 4, 8, 12 or 16)"`."""
        sizes = list_text(self.sizes, last=" or ")
        text = f"pilot {self.pilot} a prompt"
        if self.largest > self.pilot:
            text += f", then {self.pilot} more at a time up to {self.largest} (groups of {sizes})"
        text += f", {self.prompts} prompts a round" if self.prompts is not None else ""
        return text

    def prompts_for(self, budget: int) -> int:
        """
        Prompts a round of `budget` completions holds: `prompts` when given; else enough prompts that half of them
        could reach the largest group, `budget // max(2 * pilot, largest // 2)` (half of them at `largest` would take
        the whole budget; their pilots use at most half of it), but never fewer than `ceil(budget / largest)` (fewer
        prompts could not take the whole budget even at the largest size), nor more than `budget // pilot` (every
        prompt gets its pilot). For example 16 prompts for a budget of 128 with pilot 2 and largest 16 (mean group 8);
        8 prompts for a budget of 64 with pilot 4 and largest 16.

        The rule was chosen by the study (docs/study.md): with candidates 2-16 at a generation batch of 128 it raised
        the informative share over a static G of the same mean group on every task of its tuning seeds, where the
        earlier rule, `budget // (2 * pilot)` (32 prompts there, mean group 4), did not on `prefix_levels`. Set
        `prompts: <budget // (2 * pilot)>` for the earlier rounds.

        Args:
            budget (`int`): Completions the round holds (the generation batch).
        """
        if self.prompts is not None:
            return self.prompts
        return top_up_prompts_by_rule(self.PROMPTS_RULE, self.pilot, self.largest, budget)


def top_up_increment(groups_rewards: Sequence[Sequence[float]], sizes: Sequence[int], pilot: int, largest: int,
                     budget_left: int) -> list[int]:
    """
    The completions each group of a top-up round gets in the next increment, each 0 or `pilot`, from the rewards of
    the completions it holds so far.

    A group can grow while `size + pilot <= largest`. If any group that can grow has rewards that are all equal
    ([`~grpo_curriculum.core.signals.is_zero_std`]), or no finite reward at all, only those groups grow: they hold no
    learning signal yet. Otherwise the groups that can grow do, lowest reward variance first. In both cases ties go to
    the lower group index, and groups are served in that order while `budget_left` holds another `pilot`: the total is
    at most `budget_left`. Missing rewards (`None`, NaN, infinities) are left out of every statistic.

    Args:
        groups_rewards (`Sequence[Sequence[float]]`):
            Each group's rewards so far (gathered from every process, in group order).
        sizes (`Sequence[int]`):
            Each group's size so far (its number of rewards).
        pilot (`int`):
            The increment of one group.
        largest (`int`):
            The largest size a group may reach.
        budget_left (`int`):
            Completions the round may still add.

    Returns:
        `list[int]`: One entry a group, each 0 or `pilot`; all zeros when nothing can be added.

    Example:
    ```python
    >>> top_up_increment([[1, 1], [0, 1], [0, 0]], [2, 2, 2], pilot=2, largest=8, budget_left=2)
    [2, 0, 0]
    >>> top_up_increment([[1, 0, 0, 0], [0, 1]], [4, 2], pilot=2, largest=8, budget_left=4)
    [2, 2]
    ```
    """
    if len(groups_rewards) != len(sizes):
        raise ValueError(f"{len(groups_rewards)} groups of rewards, but {len(sizes)} sizes")
    for i, (rewards, size) in enumerate(zip(groups_rewards, sizes)):
        if len(rewards) != size:
            raise ValueError(f"group {i} holds {len(rewards)} rewards, but its size is {size}")
    if not 1 <= pilot <= MAX_COUNT or budget_left < 0:
        raise ValueError(f"pilot must be a positive count and budget_left >= 0, got {pilot} and {budget_left}")
    growable = [i for i, size in enumerate(sizes) if size + pilot <= largest]
    finite = {i: [v for v in map(finite_or_none, groups_rewards[i]) if v is not None] for i in growable}
    flat = [i for i in growable if not finite[i] or is_zero_std(finite[i])]
    order = flat or sorted(growable, key=lambda i: (mean_std(finite[i])[2], i))
    added = [0] * len(sizes)
    for i in order[: budget_left // pilot]:
        added[i] = pilot
    return added
