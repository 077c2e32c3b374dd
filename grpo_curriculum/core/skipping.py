"""
Skipping settled prompts in a stage of one G (`Stage(num_generations=8, skip=True)`, a `skip:` block in YAML).

A stage that skips keeps its G and its temperature (a ramp included); what changes is which prompts its rounds
sample: a prompt whose last visits were all successes (solved) or all failures (never succeeded) is skipped for the
rest of the pass with GRESO's probability (by default 95% after one such visit: `explore` 0.05), and comes back at a
later pass with the keep probability (never below 1%), so a prompt that becomes learnable is found again. Under
`rule="pooled"` (the default) a prompt that has ever succeeded is never skipped for failing, and one that has failed
every visit only as far as a prior with a point mass at 0, fitted to every prompt's counts, says it is impossible.
A skipped prompt leaves the pass: the pass is shorter and the next one starts sooner; the pass's end is never filled
with the prompts it skipped (when the prompts left cannot fill a round, the next pass starts, as TRL drops a pass's
tail), unless a whole pass cannot fill one round.
With `pilot`, the groups of unseen and settled prompts are smaller (first visits and re-checks cost less).

The rule is the per-prompt allocator's ([`~core.allocation.PerPromptAllocator`]): a skipping stage runs as a
per-prompt stage whose candidates are the stage's G (and the pilot) ([`Skip.adaptive`]), so it trains, checkpoints
and resumes wherever per-prompt stages do (both trainers, vLLM, several processes, the asynchronous trainer). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .adaptive import KNOBS
from .errors import Problem, raise_if_any
from .rules import check, settings_from_mapping

if TYPE_CHECKING:
    from .adaptive import Adaptive

SKIP_DEFAULT_TARGET = 0.05  # the study's `skip_target` (issue 37's fixed-kind check)
SKIP_DEFAULT_EXPLORE = 0.05  # issue 50's third round: chosen on the tuning seeds of four mixes (0.5, GRESO's, before)
SKIP_SETTING_RULES = {"rule": KNOBS["skip"], "explore": KNOBS["skip_explore"],
                      "target": replace(KNOBS["skip_target"], why="the share of zero-std groups the skipping aims at"),
                      "pilot": replace(KNOBS["pilot"], why="completions an unseen or settled prompt's group holds",
                                       fix="e.g. `pilot: 2`, below the stage's G, or omit it")}
"""A skip setting's rules: the per-prompt knobs it sets (`adaptive.skip`, `skip_target`, `skip_explore`, `pilot`)."""


@dataclass(frozen=True)
class Skip:
    """
    How a stage of one G skips settled prompts.

    Args:
        rule (`str`, *optional*, defaults to `"pooled"`):
            `"pooled"`: a prompt that has ever succeeded is never skipped for failing, and one that has failed every
            visit is skipped only as far as the data says it is impossible (a prior with a point mass at 0 fitted to
            every prompt's counts: where failing prompts start to succeed, they stop being skipped). The study's
            choice on its tuning seeds (issue 50): never below the best static G on the tuning seeds of the
            hard-tail mixes, where `"evidence"` was. `"evidence"`: the same without the point mass (a prompt that
            failed every visit is skipped with GRESO's probability); `"solved"`: only all-success streaks are skipped, never
            a failing prompt; `"greso"`: GRESO's streaks of either kind.
        target (`float`, *optional*, defaults to `0.05`):
            The share of the round's groups whose rewards are all equal that the skip probabilities are driven towards
            (GRESO's target): the lower, the more settled prompts are skipped.
        explore (`float`, *optional*, defaults to `0.05`):
            GRESO's exploration probability at the start: the chance that a prompt settled in one visit is sampled
            again on its next pass (after `z` such visits, its `z`-th power; under `"pooled"`, for a failing prompt,
            only as far as it is probably impossible); it then moves by 0.01 a round against the share of groups
            whose rewards were all equal (up when it falls below `target / 2`), within [0.05, 0.95]. The study's
            choice on its tuning seeds (issue 50, third round): from 0.05 it gained more than from GRESO's 0.5 on
            the three settled mixes and was level on 32 seeds of the hard-tail mix. `0.5`: GRESO's start (the
            default before).
        pilot (`int`, *optional*):
            A smaller G for the groups of unseen and settled prompts: a prompt's first visit, and every visit while its
            last group's rewards were all equal, holds `pilot` completions; it returns to the stage's G with its first
            informative group. The budget is the same, so a round holds more prompts while many are new or settled.
            It must be below the stage's G, and the two must fill the generation batch together. `None`: every group
            holds the stage's G.
    """

    rule: str = "pooled"
    target: float = SKIP_DEFAULT_TARGET
    explore: float = SKIP_DEFAULT_EXPLORE
    pilot: int | None = None

    def __post_init__(self):
        given = {"rule": self.rule, "target": self.target, "explore": self.explore, "pilot": self.pilot}
        raise_if_any(check(SKIP_SETTING_RULES, {k: v for k, v in given.items() if k != "pilot" or v is not None},
                           "skip"))  # fmt: skip
        object.__setattr__(self, "target", float(self.target))
        object.__setattr__(self, "explore", float(self.explore))
        if self.pilot is not None:
            object.__setattr__(self, "pilot", int(self.pilot))

    @classmethod
    def from_value(cls, value, key: str = "skip") -> tuple[Skip | None, list[Problem]]:
        """
        Build from a stage's `skip` value: `True` (the defaults), a rule name (`"evidence"`), a mapping (`{rule:
        greso, target: 0.1}`) or an instance. `False` and `None`: no skipping.

        Returns:
            `tuple[Skip | None, list[Problem]]`: The setting (`None` for no skipping) and every problem.
        """
        if value is None or value is False:
            return None, []
        if value is True:
            return cls(), []
        if isinstance(value, str):
            value = {"rule": value}
        return settings_from_mapping(cls, value, key, "a skip setting", "`skip: evidence` or `skip: {rule: "
                                     "evidence, target: 0.05}`", lambda given, at: check(SKIP_SETTING_RULES, {
                                         k: v for k, v in given.items() if k != "pilot" or v is not None}, at))

    def adaptive(self, num_generations: int) -> Adaptive:
        """The per-prompt policy a stage of G `num_generations` runs to skip this way (its only candidate: G)."""
        from .adaptive import Adaptive

        g = int(num_generations)
        return Adaptive(num_generations=(g,) if self.pilot is None else (self.pilot, g), policy="per_prompt",
                        defer=True, skip=self.rule, skip_target=self.target, skip_explore=self.explore, lookahead=0,
                        pilot=self.pilot)  # fmt: skip

    def describe(self) -> str:
        """In words, e.g. `"skips settled prompts (evidence, target 0.05)"`."""
        explore = "" if self.explore == SKIP_DEFAULT_EXPLORE else f", explore {self.explore:g}"
        pilot = "" if self.pilot is None else f", pilot groups of {self.pilot}"
        return f"skips settled prompts ({self.rule}, target {self.target:g}{explore}{pilot})"
