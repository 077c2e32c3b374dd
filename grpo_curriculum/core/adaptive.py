"""
Adaptive G and temperature: choose a whole round's `num_generations` (G) and temperature from the reward-variance
signals ([`RoundStats`]) of the rounds before it.

Pure logic: the standard library only (no torch, no numpy). The trainer computes the round's statistics from rewards
gathered from every process, so every process feeds the same stream to its policy and takes the same decisions.
Decisions are deterministic (no randomness, order-independent sums), never leave the candidate G values, and G and the
temperature each change at most once every `cooldown` rounds; at most one of the two changes in a round.

A switch must pay for itself, so G does not follow a signal that oscillates around its threshold: each policy decides
on a band (hysteresis: `lower_below` < `raise_above`; success rate: `target` plus or minus `margin`), and a switch
that reverses the previous one (G up after G down, or down after up; the same for the temperature) must wait twice as
long as the reversal before it (`2 * cooldown` rounds after the previous change, then `4 * cooldown`, ...: at most
about `log2(rounds / cooldown)` reversals of each in a stage). Switch reasons give the deciding numbers at the
precision that tells them apart from the threshold.

Four policies:

- `hysteresis`: raise G when the smoothed share of zero-std groups stays high, lower it when it stays low.
- `success_rate`: model each prompt's success rate p and pick the smallest G whose groups are expected to be
  informative (probability `1 - p^G - (1-p)^G`, as in Knapsack RL), like GRESO's prediction of zero-variance prompts.
- `per_prompt`: no round-wide G: each prompt of a round gets its own G under the round's fixed budget (by default the
  next prompts of the stream, in order); with `defer=True`, prompts predicted to give zero-variance groups are
  deferred ([`grpo_curriculum.core.allocation`]).
- `top_up`: a round is sampled in increments, and the groups whose first rewards are all equal get more completions
  within the round ([`grpo_curriculum.core.sampling`]); the stage's temperature applies. It keeps no history.

Both optionally adapt the temperature within bounds (as POLARIS tunes it to keep rollouts diverse): raise it when the
completions of a group collapse to identical ones, lower it when completions are diverse but rewards stop improving.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .errors import MISSING, CurriculumError, Problem, raise_if_any
from .rules import (
    MAX_COUNT,
    MAX_STEPS,
    NUM_GENERATIONS,
    POSITIVE,
    TEMPERATURE,
    Rule,
    fraction,
    integer,
    is_int,
    is_number,
    unknown_keys,
)
from .signals import RoundStats
from .slots import PromptSlots

if TYPE_CHECKING:
    from .sampling import TopUp

POLICIES = ("hysteresis", "success_rate", "per_prompt", "top_up")
HISTORY_POLICIES = POLICIES[:3]
"""The policies that decide from the rounds before: every policy but `top_up`, which decides within the round."""
INFORMATION_WEIGHTS = ("hard", "knapsack", "variance", "uniform")
SKIP_RULES = ("evidence", "greso")
"""Per prompt, with `defer`: how settled prompts are skipped ([`grpo_curriculum.core.allocation`]: `"evidence"`, issue
42's; `"greso"`, issue 37's)."""
"""Per prompt: a group's information weight `w(p)`, `p (1-p)^3` (the default), `p (1-p)^2` (Knapsack RL's), `p (1-p)`
or 1 ([`grpo_curriculum.core.allocation`])."""
_ONLY = {  # knobs that only mean something with some policies, or with temperature bounds
    "raise_above": ("hysteresis",),
    **dict.fromkeys(("margin", "window"), ("success_rate",)),
    "target": ("success_rate",),
    "success_threshold": ("success_rate", "per_prompt"),
    **dict.fromkeys(("defer", "decay", "mean_generations", "lookahead", "weight", "skip_target", "skip"),
                    ("per_prompt",)),
    **dict.fromkeys(("lower_below", "patience", "cooldown", "smoothing"), HISTORY_POLICIES),
    **dict.fromkeys(("pilot", "prompts"), ("top_up",)),
    **dict.fromkeys(("temperature_step", "collapse_below", "diverse_above"), "temperature: [low, high]"),
}
MAX_CANDIDATES = 64
"""Most candidate G values an adaptive stage may hold."""

_CANDIDATES = Rule("list", low=1, high=MAX_CANDIDATES, why="the candidate G values",
                   fix="e.g. `num_generations: [4, 8, 16]`")
_POLICY = Rule("choice", choices=POLICIES)
_KNOBS = {  # the rule of every knob
    "raise_above": fraction(False, False), "lower_below": fraction(False, False), "patience": integer(1, MAX_STEPS),
    "cooldown": integer(0, MAX_STEPS), "smoothing": fraction(True, False), "target": fraction(True, True),
    "margin": fraction(False, True), "window": integer(1, MAX_STEPS), "success_threshold": Rule("number"),
    "temperature_step": POSITIVE, "collapse_below": fraction(False, False), "diverse_above": fraction(False, False),
    "defer": Rule("bool"), "decay": fraction(False, True),
    "mean_generations": integer(1, MAX_COUNT),  # or None
    "lookahead": integer(0, MAX_COUNT), "weight": Rule("choice", choices=INFORMATION_WEIGHTS),
    "skip_target": fraction(False, True), "skip": Rule("choice", choices=SKIP_RULES),
    "pilot": dataclasses.replace(NUM_GENERATIONS, why="completions every prompt of a top-up round gets first",
                                 fix="e.g. `pilot: 4`, or omit it (the smallest candidate)"),
    "prompts": integer(1, MAX_COUNT, why="prompts a top-up round holds",
                       fix="e.g. `prompts: 8`, or omit it (chosen from the generation batch)"),  # each: or None
}
_OPTIONAL = ("mean_generations", "pilot", "prompts")  # knobs whose default `None` means "chosen from the geometry"
_ONE_TOP_UP_RULE = ("removed: top-up has one rule (the groups whose rewards are all equal grow first, then the "
                    "lowest-variance ones)")
REMOVED = {  # knob -> value -> (rule, fix); `None`: any other value
    "rule": {"value": (f"{_ONE_TOP_UP_RULE}; `value` won on no task of the study (docs/study.md)", "drop `rule`"),
             "flat_first": (f"{_ONE_TOP_UP_RULE}, and `flat_first` is that rule",
                            "drop `rule`: `flat_first` is what top-up does"),
             None: (_ONE_TOP_UP_RULE, "drop `rule`")},
}
"""Knobs `Adaptive` had and no longer has: a recipe or an `Adaptive(...)` that still sets one gets one problem naming
why it is gone and what to do, with every other problem of the block."""


def _removed_problems(values: Mapping, key: str) -> list[Problem]:
    """A problem for each knob of [`REMOVED`] that `values` sets."""
    problems = []
    for name, by_value in REMOVED.items():
        if name in values:
            value = values[name]
            rule, fix = by_value.get(value, by_value[None]) if isinstance(value, str) else by_value[None]
            problems.append(Problem(f"{key}.{name}", value, rule, fix))
    return problems


def _applies(condition, values: Mapping) -> bool:
    if isinstance(condition, tuple):  # an unknown policy is reported on its own
        return values.get("policy") not in POLICIES or values["policy"] in condition
    return values.get("temperature") is not None


def _condition(condition) -> str:
    if isinstance(condition, tuple):
        return " or ".join(f"`policy: {policy}`" for policy in condition)
    return f"`{condition}`"


def _adaptive_problems(values: Mapping, key: str, given=()) -> list[Problem]:
    problems = []
    g = values.get("num_generations")
    if "num_generations" not in values:
        problems.append(Problem(f"{key}.num_generations", MISSING, "is required", _CANDIDATES.fix))
    elif _CANDIDATES.broken(g):
        problems += _CANDIDATES.problems(f"{key}.num_generations", g)
    else:
        bad = [p for i, v in enumerate(g) for p in NUM_GENERATIONS.problems(f"{key}.num_generations[{i}]", v)]
        problems += bad
        if not bad and list(g) != sorted(set(g)):
            problems.append(Problem(f"{key}.num_generations", g, "must be ascending without repeats",
                                    f"write `{sorted(set(g))}`"))
    t = values.get("temperature")
    if t is not None:
        if not isinstance(t, (list, tuple)) or len(t) != 2:
            problems.append(Problem(f"{key}.temperature", t, "must be `[low, high]` bounds, or null (not adapted)",
                                    "e.g. `temperature: [0.7, 1.2]`"))
        else:
            bad = [p for i, v in enumerate(t) for p in TEMPERATURE.problems(f"{key}.temperature[{i}]", v)]
            problems += bad
            if not bad and t[0] > t[1]:
                problems.append(Problem(f"{key}.temperature", t, "low must not exceed high", f"write `{sorted(t)}`"))
    problems += _POLICY.problems(f"{key}.policy", values.get("policy"))
    defaults = {f.name: f.default for f in fields(Adaptive)}
    for name, rule in _KNOBS.items():  # (a knob's fix: its default)
        if name in _OPTIONAL and values.get(name) is None:
            continue
        default = str(defaults[name]).lower() if isinstance(defaults[name], bool) else defaults[name]
        example = rule.fix or f"e.g. `{name}: {'null' if default is None else default}` (the default)"
        problems += [dataclasses.replace(p, fix=example) for p in rule.problems(f"{key}.{name}", values.get(name))]
    if not problems and values["lower_below"] >= values["raise_above"]:
        problems.append(Problem(f"{key}.lower_below", values["lower_below"],
                                f"must be below `raise_above` ({values['raise_above']!r}), or G would flap"))
    if not problems and values["policy"] == "success_rate" and values["margin"] >= values["target"]:
        problems.append(Problem(f"{key}.margin", values["margin"],
                                f"must be below `target` ({values['target']!r}): G rises below `target - margin`",
                                f"e.g. `margin: {min(0.05, values['target'] / 2):g}`"))
    if not problems and values["collapse_below"] > values["diverse_above"]:
        problems.append(Problem(f"{key}.collapse_below", values["collapse_below"],
                                f"must not exceed `diverse_above` ({values['diverse_above']!r})"))
    if values.get("policy") == "top_up":
        names = ("num_generations", "pilot")
        problems += _top_up_problems(values, key, not any(p.key.startswith(f"{key}.{n}") for p in problems
                                                          for n in names))
    for name in given:
        if name in _ONLY and not _applies(_ONLY[name], values):
            needs = _condition(_ONLY[name])
            problems.append(Problem(f"{key}.{name}", values[name], f"only applies with {needs}",
                                    f"drop `{name}`, or set {needs}"))
    return problems


def _top_up_problems(values: Mapping, key: str, checked: bool) -> list[Problem]:
    """A top-up stage: groups grow by the pilot up to the largest candidate (`checked`: the candidates and the pilot
    are valid, so this can be checked); its temperature is the stage's."""
    problems = []
    if values.get("temperature") is not None:
        problems.append(Problem(f"{key}.temperature", values["temperature"], "cannot be adapted in a top-up stage "
                                "(it decides within each round, from no history)",
                                "remove the bounds and set the stage's `temperature` (and `temperature_end` for a "
                                "ramp)"))
    if not checked:
        return problems
    g, given = list(values["num_generations"]), values.get("pilot") is not None
    pilot = values["pilot"] if given else g[0]
    off = [c for c in g if c % pilot]
    if off:
        common = [d for d in range(2, g[0] + 1) if all(c % d == 0 for c in g)]
        problems.append(Problem(f"{key}.pilot" if given else f"{key}.num_generations", pilot if given else g,
                                f"the pilot {pilot} must divide every candidate G {g} (a top-up group grows by the "
                                f"pilot from it to the largest candidate): {off} "
                                f"{'is not a multiple' if len(off) == 1 else 'are not multiples'}",
                                f"use `pilot: {common[-1]}`" if common else f"drop {off}"))
    return problems


@dataclass(frozen=True)
class Adaptive:
    """
    Bounds and policy of an adaptive stage: G and the temperature follow the reward-variance signals of past rounds.

    Args:
        num_generations (`tuple[int, ...]`):
            Candidate G values, each >= 2, ascending without repeats: an unsorted or repeated list is rejected (the
            fix names the sorted list), since the order is the order G moves in. Each must divide the generation
            batch (checked with the batch geometry, not here).
        temperature (`tuple[float, float]`, *optional*):
            `(low, high)` bounds of the temperature, positive, `low <= high`. `None`: the temperature is not adapted.
        policy (`str`, *optional*, defaults to `"hysteresis"`):
            `"hysteresis"` (thresholds on the zero-std fraction), `"success_rate"` (one G a round from a per-prompt
            success model) or `"per_prompt"` (a G per prompt under the round's budget, see
            [`grpo_curriculum.core.allocation`]). With `per_prompt` the candidates need not divide the generation batch:
            each must fit in it, and some combination of them must add up to it. `"top_up"`: a round sampled in
            increments, see `pilot` and [`grpo_curriculum.core.sampling.TopUp`]; the candidates must be multiples of
            the pilot, and only its knobs and the stage's temperature apply.
        raise_above (`float`, *optional*, defaults to `0.5`):
            Hysteresis: raise G while the smoothed zero-std fraction is above this.
        lower_below (`float`, *optional*, defaults to `0.1`):
            Hysteresis: lower G while the smoothed zero-std fraction is below this. Both policies: the level below
            which rewards count as noise when lowering the temperature.
        patience (`int`, *optional*, defaults to `3`):
            Consecutive observed rounds a condition must hold (hysteresis G; both policies, lowering the temperature).
        cooldown (`int`, *optional*, defaults to `5`):
            Least rounds between two G changes, and between two temperature changes (0 and 1: every round). A change
            that reverses the previous one of its knob waits `2**k * max(cooldown, 1)` rounds, `k` the reversals of
            that knob so far plus one.
        smoothing (`float`, *optional*, defaults to `0.3`): EMA weight of the newest round, in (0, 1].
        target (`float`, *optional*, defaults to `0.8`): Success rate: wanted expected fraction of informative groups.
        margin (`float`, *optional*, defaults to `0.05`):
            Success rate: half-width of the band around `target` where G holds: raise G only when the expected
            informative fraction falls below `target - margin`, lower it only to a candidate expected to reach
            `target + margin`.
        window (`int`, *optional*, defaults to `8`): Success rate: rounds whose prompts the estimate averages over.
        success_threshold (`float`, *optional*, defaults to `0.5`):
            Success rate and per prompt: a reward `>=` this is a success (pass it to [`round_stats`]).
        temperature_step (`float`, *optional*, defaults to `0.1`): Temperature change per decision.
        collapse_below (`float`, *optional*, defaults to `0.5`):
            Raise the temperature while the smoothed distinct-completion fraction is below this.
        diverse_above (`float`, *optional*, defaults to `0.9`):
            Smoothed distinct-completion fraction from which completions count as diverse.
        defer (`bool`, *optional*, defaults to `True`):
            Per prompt: defer prompts whose last visits gave zero-std groups (skipped for the rest of the pass over
            the dataset, counted, reconsidered at the next pass: a skipped prompt comes back with GRESO's adaptive
            keep probability). The study's choice since it has a task with settled prompts (issue 37,
            docs/study.md): with `skip_target` 0.05 it met two of the three fixed-kind rules (`False`, the default
            before: one) and was level with or above the reference on the tuning seeds of four of five tasks.
        decay (`float`, *optional*, defaults to `0.5`):
            Per prompt: weight of a prompt's earlier visits when a new one is counted, in [0, 1) (the policy changes,
            so old outcomes fade).
        mean_generations (`int`, *optional*):
            Per prompt: a round holds `generation batch / mean_generations` prompts, which share its budget (the
            nearest count the candidates can fill). `None`: the candidates' geometric mean (5.7 for `(2, 4, 8, 16)`:
            a generation batch of 64 holds 11 prompts).
        lookahead (`int`, *optional*, defaults to `0`):
            Per prompt: upcoming prompts the round compares beyond the ones it takes; those not taken are taken by the
            next round. `0`: each round takes the next prompts of the stream in order and chooses only their G (no
            prompt waits; Knapsack RL's geometry). Below the round's prompt count, or the round has no choice.
        weight (`str`, *optional*, defaults to `"hard"`):
            Per prompt: the information weight of a group, `"hard"` (`p (1-p)^3`: leaning further to rare-success
            prompts), `"knapsack"` (`p (1-p)^2`, Knapsack RL's), `"variance"` (`p (1-p)`) or `"uniform"` (1: expected
            informative groups). The default is the study's choice (docs/study.md): its only per-prompt variant whose
            rare-success prompts (exact success <= 0.2) got at least the arm's mean G on every task; `"knapsack"`, the
            default before, gave them less on one.
        skip_target (`float`, *optional*, defaults to `0.05`):
            Per prompt: the share of zero-std groups the deferral drives towards (GRESO), in [0, 1): the lower, the
            more settled prompts are skipped. The study's choice (issue 37; `0.25` before).
        skip (`str`, *optional*, defaults to `"greso"`):
            Per prompt, with `defer`: `"evidence"` (issue 42: a prompt that has ever succeeded is never deferred for
            failing, so impossible prompts are told from rare-success ones; the round compares twice its prompts and
            skips the ones of least value for the pass; the pass's end is not filled with deferred prompts) or
            `"greso"` (issue 37's rule: GRESO's streaks alone). See [`grpo_curriculum.core.allocation`].
        pilot (`int`, *optional*):
            Top-up: completions every prompt of a round gets first, and the size of each later increment of a group;
            it must divide every candidate. `None`: the smallest candidate. A group then holds `pilot`, `2 * pilot`,
            ..., up to the largest candidate.
        prompts (`int`, *optional*):
            Top-up: prompts a round holds. `None`: enough that half of them could reach the largest candidate,
            `generation_batch_size // max(2 * pilot, largest // 2)`, clamped to fill the batch at the largest candidate
            and to give every prompt its pilot ([`grpo_curriculum.core.sampling.TopUp.prompts_for`]).
    """

    num_generations: tuple[int, ...]
    temperature: tuple[float, float] | None = None
    policy: str = "hysteresis"
    raise_above: float = 0.5
    lower_below: float = 0.1
    patience: int = 3
    cooldown: int = 5
    smoothing: float = 0.3
    target: float = 0.8
    margin: float = 0.05
    window: int = 8
    success_threshold: float = 0.5
    temperature_step: float = 0.1
    collapse_below: float = 0.5
    diverse_above: float = 0.9
    defer: bool = True
    decay: float = 0.5
    mean_generations: int | None = None
    lookahead: int = 0
    weight: str = "hard"
    skip_target: float = 0.05
    skip: str = "greso"
    pilot: int | None = None
    prompts: int | None = None

    def __new__(cls, *args, **kwargs):
        # A removed knob (`rule`): one problem naming it, with every other problem of the arguments (not a TypeError)
        removed = _removed_problems(kwargs, "Adaptive")
        if removed:
            try:
                cls(*args, **{k: v for k, v in kwargs.items() if k not in REMOVED})
            except CurriculumError as error:
                removed += error.problems
            raise CurriculumError(removed, context="Adaptive")
        return super().__new__(cls)

    def __post_init__(self):
        if isinstance(self.num_generations, list):
            object.__setattr__(self, "num_generations", tuple(self.num_generations))
        if isinstance(self.temperature, (list, tuple)) and all(is_number(v) for v in self.temperature):
            object.__setattr__(self, "temperature", tuple(float(v) for v in self.temperature))
        raise_if_any(self.problems(key="Adaptive"), context="Adaptive")
        # Plain Python integers (`numpy.int64(4)` is an integer too), so that checkpoints serialise them.
        object.__setattr__(self, "num_generations", tuple(int(g) for g in self.num_generations))
        for name in ("patience", "cooldown", "window", "lookahead", "pilot", "prompts"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def problems(self, key: str = "adaptive") -> list[Problem]:
        """Every problem with the fields, each named `f"{key}.<field>"`; empty when valid (a knob set away from its
        default counts as given: it must apply to the policy)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        given = [f.name for f in fields(self) if f.default is not dataclasses.MISSING and values[f.name] != f.default]
        return _adaptive_problems(values, key, given=given)

    @classmethod
    def from_mapping(cls, values: Mapping, key: str = "adaptive") -> tuple[Adaptive | None, list[Problem]]:
        """
        Build from the YAML / dict form, e.g. `{num_generations: [4, 8, 16], temperature: [0.7, 1.2], patience: 3}`.

        Returns:
            `tuple[Adaptive | None, list[Problem]]`: The settings and no problems, or `None` and every problem at once
            (unknown keys with a did-you-mean, a removed knob of [`REMOVED`], bad values, knobs of another policy or
            without temperature bounds).
        """
        if not isinstance(values, Mapping):
            return None, [Problem(key, values, "must be a mapping", "e.g. `{num_generations: [4, 8, 16]}`")]
        names = [f.name for f in fields(cls)]
        problems = _removed_problems(values, key)
        problems += unknown_keys({k: v for k, v in values.items() if k not in REMOVED}, names, key,
                                 "an adaptive setting", f"use one of {names}")
        known = {name: values[name] for name in names if name in values}
        merged = {f.name: f.default for f in fields(cls) if f.default is not dataclasses.MISSING} | known
        problems += _adaptive_problems(merged, key, given=list(known))
        return (None, problems) if problems else (cls(**known), [])

    @property
    def per_prompt(self) -> bool:
        """Whether each prompt gets its own G (`policy="per_prompt"`)."""
        return self.policy == "per_prompt"

    @property
    def top_up(self) -> TopUp | None:
        """The plan of a top-up round (`policy="top_up"`), `None` for the other policies."""
        if self.policy != "top_up":
            return None
        from .sampling import TopUp

        pilot = self.num_generations[0] if self.pilot is None else self.pilot
        return TopUp(pilot=pilot, largest=self.num_generations[-1], prompts=self.prompts)

    def clamp(self, temperature: float) -> float:
        """`temperature` within the bounds (unchanged when the temperature is not adapted)."""
        if self.temperature is None:
            return temperature
        return min(max(temperature, self.temperature[0]), self.temperature[1])


@dataclass(frozen=True)
class Decision:
    """
    The setting of one generation round.

    Args:
        num_generations (`int`): G for the round (always one of the candidates).
        temperature (`float`): Sampling temperature for the round.
        reason (`str` or `None`): `None` when nothing changed; else one line with the numbers behind the change.
    """

    num_generations: int
    temperature: float
    reason: str | None = None


def _ema(old: float | None, new: float, weight: float) -> float:
    return new if old is None else weight * new + (1 - weight) * old


def _usable(value) -> bool:
    return value is not None and math.isfinite(value)


def compared(value: float, sign: str, bound: float, digits: int = 3) -> str:
    """
    `f"{value} {sign} {bound}"` with at least `digits` decimals, and as many more as it takes to tell the two apart,
    so that a reason never reads "0.80 < 0.8".

    Example:
    ```python
    >>> compared(0.7996, "<", 0.8)
    '0.7996 < 0.8000'
    ```
    """
    if value != bound:
        for places in range(digits, 18):
            a, b = f"{value:.{places}f}", f"{bound:.{places}f}"
            if a != b:
                return f"{a} {sign} {b}"
        return f"{value!r} {sign} {bound!r}"
    return f"{value:.{digits}f} {sign} {bound:.{digits}f}"


def _rounds(n: int) -> str:
    return f"{n} round" if n == 1 else f"{n} rounds"


class Policy:
    """
    Base of the adaptive policies. Call [`Policy.observe`] with each finished round's [`RoundStats`] and
    [`Policy.decide`] at the start of each round (it returns the same [`Decision`] until the next `observe`).

    Every signal is smoothed by an EMA (`smoothing`). The zero-std EMA restarts when G changes and the distinct EMA
    when the temperature changes, since each measures the knob just changed. Rounds without any finite reward advance
    the round count (for cooldowns) but nothing else.
    """

    name = ""
    _STATE = ("num_generations", "temperature", "round", "last_g_change", "last_t_change", "zero_std_ema",
              "distinct_ema", "reward_ema", "best_reward", "stale", "clamped_from", "g_direction", "g_reversals",
              "t_direction", "t_reversals")
    _ADDED = dict.fromkeys(_STATE[-4:], 0)  # state added later: a checkpoint without it starts them afresh

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        if not isinstance(adaptive, Adaptive):
            raise TypeError(f"adaptive must be an Adaptive, got {type(adaptive).__name__}")
        problems = []
        if num_generations not in adaptive.num_generations or not is_int(num_generations):
            problems.append(Problem("num_generations", num_generations,
                                    f"must be one of the adaptive candidates {list(adaptive.num_generations)}",
                                    "start at a candidate, or add it to `adaptive.num_generations`"))
        problems += POSITIVE.problems("temperature", temperature)
        raise_if_any(problems, context=f"{self.name} policy")
        self.adaptive = adaptive
        self.num_generations = int(num_generations)
        self.temperature = float(adaptive.clamp(float(temperature)))
        self.clamped_from = float(temperature) if self.temperature != temperature else None
        self.round = 0
        self.last_g_change = self.last_t_change = None
        self.zero_std_ema = self.distinct_ema = self.reward_ema = self.best_reward = None
        self.stale = 0
        # +1 / -1: the direction of the last G (temperature) change, 0 before the first; changes that reversed one
        self.g_direction = self.g_reversals = self.t_direction = self.t_reversals = 0
        self._decision: Decision | None = None

    # --- to override ---------------------------------------------------------------------------------------------

    def _observe(self, stats: RoundStats) -> None:
        pass

    def _propose(self) -> tuple[int, str] | None:
        """A new candidate G and the reason, or `None` (called only when the G cooldown allows a change)."""
        return None

    def bind(self, **context) -> None:
        """Take what the trainer knows of the run (`budget`, `slots`, `seed`); policies that keep per-prompt state
        need it."""

    def _g_changed(self) -> None:
        pass

    # --- public ----------------------------------------------------------------------------------------------------

    def observe(self, stats: RoundStats) -> None:
        """Take in a finished round's statistics (all-NaN rounds only count as a round)."""
        self.round += 1
        self._decision = None
        if stats.num_groups == 0 or not _usable(stats.zero_std_fraction):
            return
        a = self.adaptive
        self.zero_std_ema = _ema(self.zero_std_ema, stats.zero_std_fraction, a.smoothing)
        if _usable(stats.distinct_fraction):
            self.distinct_ema = _ema(self.distinct_ema, stats.distinct_fraction, a.smoothing)
        if _usable(stats.mean_reward):
            self.reward_ema = _ema(self.reward_ema, stats.mean_reward, a.smoothing)
            if self.best_reward is None or self.reward_ema > self.best_reward:
                self.best_reward, self.stale = self.reward_ema, 0
            else:
                self.stale += 1
        self._observe(stats)

    def decide(self) -> Decision:
        """The [`Decision`] for the round about to start (round number `self.round`, counting from 0)."""
        if self._decision is not None:
            return self._decision
        a, g, t, reasons = self.adaptive, self.num_generations, self.temperature, []
        if self.clamped_from is not None:
            low, high = a.temperature
            reasons.append(f"temperature {self.clamped_from:g} clamped to bounds [{low:g}, {high:g}]")
            self.clamped_from = None
        g_ready = self.last_g_change is None or self.round - self.last_g_change >= a.cooldown
        t_ready = self.last_t_change is None or self.round - self.last_t_change >= a.cooldown
        proposal = self._propose() if g_ready else None
        if proposal is not None:
            note = self._reversal("g", 1 if proposal[0] > g else -1)
            proposal = None if note is None else (proposal[0], proposal[1] + note)
        bounds, d, z = a.temperature, self.distinct_ema, self.zero_std_ema
        collapsed = bounds is not None and d is not None and d < a.collapse_below
        noise = (bounds is not None and d is not None and d >= a.diverse_above and z is not None
                 and z < a.lower_below and self.stale >= a.patience)
        if collapsed and t < bounds[1]:
            held = proposal is not None and proposal[0] > g
            proposal = None if held else proposal  # diversity first: raise T before raising G
            note = self._reversal("t", 1) if t_ready else None
            if note is not None:
                new = min(bounds[1], round(t + a.temperature_step, 6))
                reasons.append(f"distinct fraction {compared(d, '<', a.collapse_below)} (completions collapse): "
                               f"temperature {t:g} -> {new:g}" + (", before raising G" if held else "") + note)
                self._set_temperature(new, 1)
                proposal = None  # one change a round
        if proposal is not None:
            direction = 1 if proposal[0] > g else -1
            self.g_reversals += direction == -self.g_direction
            self.g_direction = direction
            self.num_generations, self.last_g_change, self.zero_std_ema = proposal[0], self.round, None
            self._g_changed()
            reasons.append(proposal[1])
        elif noise and t_ready and t > bounds[0]:  # (`collapsed` and `noise` exclude each other)
            note = self._reversal("t", -1)
            if note is not None:
                new = max(bounds[0], round(t - a.temperature_step, 6))
                reasons.append(f"distinct fraction {compared(d, '>=', a.diverse_above)} but zero-std fraction "
                               f"{compared(z, '<', a.lower_below)} and mean reward not improved for "
                               f"{_rounds(self.stale)}: temperature {t:g} -> {new:g}{note}")
                self._set_temperature(new, -1)
        self._decision = Decision(self.num_generations, self.temperature, "; ".join(reasons) or None)
        return self._decision

    def reversal_wait(self, knob: str = "g") -> int:
        """
        Least rounds after the last change of `knob` (`"g"` or `"t"`, the temperature) before it may move back:
        `2**(reversals + 1) * max(cooldown, 1)`, `reversals` the earlier changes of that knob that reversed one.
        """
        return 2 ** (getattr(self, f"{knob}_reversals") + 1) * max(self.adaptive.cooldown, 1)

    def _reversal(self, knob: str, direction: int) -> str | None:
        """Whether `knob` may move in `direction` now: `""` (not a reversal), a note for the reason (a reversal that
        waited long enough), or `None` (a reversal that must wait longer)."""
        if direction != -getattr(self, f"{knob}_direction"):
            return ""
        wait, held = self.reversal_wait(knob), self.round - getattr(self, f"last_{knob}_change")
        if held < wait:
            return None  # a reversal must pay for itself: it waits until the signal has held long enough
        name = "G" if knob == "g" else "temperature"
        return (f"; reverses the previous {name} change after {held} rounds (a reversal waits {wait},"
                f" the next {2 * wait})")

    def _set_temperature(self, value: float, direction: int) -> None:
        self.t_reversals += direction == -self.t_direction
        self.t_direction = direction
        self.temperature, self.last_t_change, self.distinct_ema, self.stale = value, self.round, None, 0

    def metrics(self) -> dict[str, float]:
        """Current G, temperature and smoothed signals, for logging (a signal not measured yet is left out)."""
        values = {"num_generations": self.num_generations, "temperature": self.temperature,
                  "zero_std_ema": self.zero_std_ema, "distinct_ema": self.distinct_ema, "reward_ema": self.reward_ema}
        return {k: float(v) for k, v in values.items() if v is not None}

    def state_dict(self) -> dict:
        """A JSON-serialisable snapshot; [`Policy.load_state_dict`] on a fresh policy continues identically."""
        state = {"policy": self.name, "version": 1, **copy.deepcopy({k: getattr(self, k) for k in self._STATE})}
        d = self._decision
        state["decision"] = None if d is None else [d.num_generations, d.temperature, d.reason]
        return state

    def load_state_dict(self, state: dict) -> None:
        if state.get("policy") != self.name or state.get("version") != 1:
            raise ValueError(f"state is for policy {state.get('policy')!r} (version {state.get('version')!r}), "
                             f"not {self.name!r} (version 1)")
        if state["num_generations"] not in self.adaptive.num_generations:
            raise ValueError(f"saved num_generations {state['num_generations']} is not one of the candidates "
                             f"{list(self.adaptive.num_generations)}")
        for k in self._STATE:
            setattr(self, k, copy.deepcopy(state.get(k, self._ADDED[k]) if k in self._ADDED else state[k]))
        self._decision = None if state["decision"] is None else Decision(*state["decision"])


class HysteresisPolicy(Policy):
    """
    Move G one candidate up when the smoothed zero-std fraction stayed above `raise_above` for `patience` observed
    rounds, one candidate down when it stayed below `lower_below` for `patience` rounds; counters restart on a change.
    """

    name = "hysteresis"
    _STATE = Policy._STATE + ("above", "below")

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        super().__init__(adaptive, num_generations, temperature)
        self.above = self.below = 0

    def _observe(self, stats: RoundStats) -> None:
        self.above = self.above + 1 if self.zero_std_ema > self.adaptive.raise_above else 0
        self.below = self.below + 1 if self.zero_std_ema < self.adaptive.lower_below else 0

    def _propose(self) -> tuple[int, str] | None:
        a, g, z = self.adaptive, self.num_generations, self.zero_std_ema
        i = a.num_generations.index(g)
        if self.above >= a.patience and i + 1 < len(a.num_generations):
            new = a.num_generations[i + 1]
            above = compared(z, ">", a.raise_above)
            return new, f"zero-std fraction {above} for {_rounds(self.above)}: G {g} -> {new}"
        if self.below >= a.patience and i > 0:
            new = a.num_generations[i - 1]
            below = compared(z, "<", a.lower_below)
            return new, f"zero-std fraction {below} for {_rounds(self.below)}: G {g} -> {new}"
        return None

    def _g_changed(self) -> None:
        self.above = self.below = 0


class SuccessRatePolicy(Policy):
    """
    Estimate each prompt's success rate p as `(successes + 1) / (trials + 2)` (a Beta(1, 1) prior, accumulated over
    every time the prompt was seen; per group when prompt keys are absent), average the probability that a group of G
    is informative, `1 - p^G - (1-p)^G`, over the prompts of the last `window` rounds. When it falls below
    `target - margin`, raise G to the smallest candidate reaching `target` (the largest when none does); lower G only
    to a candidate reaching `target + margin`; in between, G holds.

    The counts live in two arrays over prompt slots ([`PromptSlots`]; [`Policy.bind`] sets them, hashed buckets
    otherwise): 8 bytes a prompt, whatever the dataset's size.
    """

    name = "success_rate"
    _STATE = Policy._STATE + ("window",)

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        super().__init__(adaptive, num_generations, temperature)
        self.slots = None
        self.successes = self.trials = None  # numpy arrays over slots, made by `bind`
        self._window: deque[list] = deque(maxlen=adaptive.window)  # per round: prompt slots, or [successes, trials]

    def bind(self, slots: PromptSlots | None = None, **context) -> None:
        import numpy as np

        self.slots = slots or PromptSlots()
        self.successes = np.zeros(self.slots.num_slots, dtype=np.float32)
        self.trials = np.zeros(self.slots.num_slots, dtype=np.float32)

    @property
    def window(self) -> list[list]:
        return [list(entry) for entry in self._window]

    @window.setter
    def window(self, rounds: list[list]) -> None:
        self._window = deque((list(r) for r in rounds), maxlen=self.adaptive.window)

    def _observe(self, stats: RoundStats) -> None:
        if self.slots is None:
            self.bind()
        entries = []
        for i, (success, n) in enumerate(zip(stats.group_success, stats.group_counts)):
            if n == 0 or not _usable(success):
                continue
            s = round(success * n)
            if stats.prompt_keys is None:
                entries.append([s, n])
            else:
                slot = self.slots.slot_of(stats.prompt_keys[i])
                self.successes[slot] += s
                self.trials[slot] += n
                entries.append(slot)
        self._window.append(entries)

    def expected_informative(self, num_generations: int) -> float | None:
        """Mean `1 - p^G - (1-p)^G` over the window's prompts (each prompt once), or `None` before any observation."""
        slots = sorted({e for r in self._window for e in r if not isinstance(e, list)})
        pairs = [(float(self.successes[i]), float(self.trials[i])) for i in slots]
        pairs += [tuple(e) for r in self._window for e in r if isinstance(e, list)]
        if not pairs:
            return None
        ps = [(s + 1) / (n + 2) for s, n in pairs]
        return math.fsum(1 - p**num_generations - (1 - p) ** num_generations for p in ps) / len(ps)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.slots is not None:
            touched = self.trials.nonzero()[0].astype("uint32")
            state["counts"] = {"slots": touched, "successes": self.successes[touched], "trials": self.trials[touched]}
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "counts" in state:
            if self.slots is None:
                self.bind()
            counts = state["counts"]
            self.successes[counts["slots"]], self.trials[counts["slots"]] = counts["successes"], counts["trials"]

    def _propose(self) -> tuple[int, str] | None:
        a, g = self.adaptive, self.num_generations
        f = {c: self.expected_informative(c) for c in a.num_generations}
        if f[g] is None:
            return None
        if f[g] < a.target - a.margin:
            up = next((c for c in a.num_generations if c > g and f[c] >= a.target), None)
            new = a.num_generations[-1] if up is None else up
            if new == g:
                return None
            now = (f"expected informative fraction {compared(f[g], '<', a.target - a.margin)} (target {a.target:g} - "
                   f"margin {a.margin:g}) at G {g}")
            then = (f"G {new} reaches the target ({compared(f[new], '>=', a.target)})" if up else
                    f"no candidate reaches the target (G {new} gives {f[new]:.3f})")
            return new, f"{now}; {then}: G {g} -> {new}"
        down = next((c for c in a.num_generations if c < g and f[c] >= a.target + a.margin), None)
        if down is None:
            return None
        return down, (f"expected informative fraction {compared(f[down], '>=', a.target + a.margin)} (target "
                      f"{a.target:g} + margin {a.margin:g}) at G {down}: G {g} -> {down}")

    def metrics(self) -> dict[str, float]:
        values = super().metrics()
        for c in self.adaptive.num_generations:
            f = self.expected_informative(c)
            if f is not None:
                values[f"expected_informative_g{c}"] = f
                if c == self.num_generations:
                    values["expected_informative"] = f
        return values


class PerPromptPolicy(Policy):
    """
    A G per prompt: the allocator ([`grpo_curriculum.core.allocation.PerPromptAllocator`]) chooses each round from
    per-prompt statistics that [`Policy.observe`] updates with every round's groups, and GRESO's skip probabilities
    follow the round's zero-std groups. There is no round-wide G to propose; the temperature adapts within its bounds
    as with the other policies. Logs `skip_p_easy` and `skip_p_hard`.

    Call [`PerPromptPolicy.bind`] once the round's budget and the prompts' slots are known (the trainer does).
    """

    name = "per_prompt"

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        super().__init__(adaptive, num_generations, temperature)
        self.allocator, self.slots = None, None

    def bind(self, budget: int, slots: PromptSlots, seed: int, **context) -> None:
        """
        Args:
            budget (`int`): Completions per round (the generation batch).
            slots ([`PromptSlots`]): Where each prompt's statistics live.
            seed (`int`): Seed of the deferral draws.
        """
        from .allocation import PerPromptAllocator, PromptStats

        a = self.adaptive
        mean = a.mean_generations or math.prod(a.num_generations) ** (1 / len(a.num_generations))
        stats = PromptStats(slots.num_slots, a.num_generations, decay=a.decay, smoothing=a.smoothing)
        prompts = max(round(budget / mean), 1)
        self.allocator = PerPromptAllocator(a.num_generations, budget, prompts, stats, weight=a.weight,
                                            lookahead=a.lookahead, defer=a.defer, skip_target=a.skip_target,
                                            seed=seed, skip=a.skip)  # fmt: skip
        self.slots = slots

    def slot_of(self, key: str) -> int:
        """The statistics slot of a prompt key ([`round_stats`]'s `prompt_keys`)."""
        return self.slots.slot_of(key)

    @property
    def round_prompts(self) -> int:
        """The prompts a round holds at the candidates' mean G (the groups a round's statistics update counts)."""
        return self.allocator.prompts

    def plan(self, waiting, fresh, epoch: int, defer: bool = True):
        """A round's [`RoundPlan`] from the slots of the prompts `waiting` and `fresh` in the pass `epoch`
        ([`PerPromptAllocator.plan`]), or `None` when they cannot fill one."""
        return self.allocator.plan(waiting, fresh, epoch=epoch, defer=defer)

    def skip_probabilities(self) -> dict[str, float]:
        """GRESO's current skip probabilities (`skip_p_easy`, `skip_p_hard`)."""
        return self.allocator.skip_probabilities()

    @property
    def fills_pass_end(self) -> bool:
        """Whether a round the deferral leaves short at the pass's end is filled with the prompts it deferred. Not at
        one candidate with deferral (a stage of one G that skips, [`~core.skipping.Skip`]): the next pass starts
        instead, unless a whole pass cannot fill a round."""
        return len(self.adaptive.num_generations) > 1 or not self.adaptive.defer

    def _observe(self, stats: RoundStats) -> None:
        if stats.prompt_keys is None:
            raise ValueError("the per-prompt policy needs the round's prompt keys")
        successes = [0.0 if n == 0 else round(s * n) for s, n in zip(stats.group_success, stats.group_counts)]
        self.allocator.stats.observe([self.slot_of(k) for k in stats.prompt_keys], successes, stats.group_counts,
                                     stats.group_zero_std)  # fmt: skip
        groups = [(s, n) for s, n, zero in zip(successes, stats.group_counts, stats.group_zero_std) if n and zero]
        total = sum(1 for n in stats.group_counts if n)
        if total:
            easy = sum(1 for s, n in groups if s >= n / 2)
            self.allocator.adapt(easy / total, (len(groups) - easy) / total)

    def metrics(self) -> dict[str, float]:
        values = super().metrics()
        values.pop("num_generations")
        return {**values, **self.skip_probabilities()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "stats": self.allocator.stats.state_dict(),
                "explore": dict(self.allocator.explore)}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.allocator.stats.load_state_dict(state["stats"])
        self.allocator.explore = {kind: float(state["explore"][kind]) for kind in ("easy", "hard")}


def make_policy(adaptive: Adaptive, num_generations: int, temperature: float) -> Policy:
    """
    The policy named by `adaptive.policy`, starting at G `num_generations` (one of the candidates) and `temperature`
    (clamped to the bounds; the first decision then says so).
    """
    policies = {"hysteresis": HysteresisPolicy, "success_rate": SuccessRatePolicy, "per_prompt": PerPromptPolicy}
    if adaptive.policy not in policies:
        raise ValueError(f"policy {adaptive.policy!r} decides within each round and keeps no policy state")
    return policies[adaptive.policy](adaptive, num_generations, temperature)
