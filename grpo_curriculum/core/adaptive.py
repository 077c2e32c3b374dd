"""
The `adaptive:` block of a stage: [`Adaptive`], the bounds and the policy that choose a round's `num_generations` (G)
and temperature, and its validation (every problem at once, each with its fix). The policies that decide are
in [`grpo_curriculum.core.policies`], the per-prompt allocation in [`grpo_curriculum.core.allocation`], a top-up
round's plan in [`grpo_curriculum.core.sampling`].

Pure: the standard library only (no torch, no numpy), since `grpo-curriculum check` validates recipes with it. The
block's word lists are defined here, once: [`POLICIES`], the per-prompt information weights [`WEIGHTS`] and skip rules
[`SKIP_RULES`] (the allocation imports them).
"""

from __future__ import annotations

import dataclasses
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
    is_number,
    unknown_keys,
)

if TYPE_CHECKING:
    from .sampling import TopUp

POLICIES = ("hysteresis", "success_rate", "per_prompt", "top_up")
HISTORY_POLICIES = POLICIES[:3]
"""The policies that decide from the rounds before: every policy but `top_up`, which decides within the round."""
WEIGHTS = {"hard": (1, 3), "knapsack": (1, 2), "variance": (1, 1), "uniform": (0, 0)}
"""Per prompt: a group's information weight `w(p) = p^i (1-p)^j` by name, `(i, j)`: `p (1-p)^3` (the default),
`p (1-p)^2` (Knapsack RL's), `p (1-p)` or 1 ([`grpo_curriculum.core.allocation.expected_value`])."""
SKIP_RULES = ("evidence", "pooled", "solved", "greso")
"""Per prompt, with `defer`: how settled prompts are skipped ([`grpo_curriculum.core.allocation`]: `"evidence"`, issue
42's; `"pooled"` and `"solved"`, issue 50's; `"greso"`, issue 37's)."""
ONLY = {  # knobs that only mean something with some policies, or with temperature bounds
    "raise_above": ("hysteresis",),
    **dict.fromkeys(("margin", "window"), ("success_rate",)),
    "target": ("success_rate",),
    "success_threshold": ("success_rate", "per_prompt"),
    **dict.fromkeys(("defer", "decay", "mean_generations", "lookahead", "weight", "skip_target", "skip",
                     "skip_explore"), ("per_prompt",)),
    **dict.fromkeys(("lower_below", "patience", "cooldown", "smoothing"), HISTORY_POLICIES),
    "pilot": ("top_up", "per_prompt"),
    "prompts": ("top_up",),
    **dict.fromkeys(("temperature_step", "collapse_below", "diverse_above"), "temperature: [low, high]"),
}
MAX_CANDIDATES = 64
"""Most candidate G values an adaptive stage may hold."""

CANDIDATES = Rule("list", low=1, high=MAX_CANDIDATES, why="the candidate G values",
                  fix="e.g. `num_generations: [4, 8, 16]`")
POLICY = Rule("choice", choices=POLICIES)
KNOBS = {  # the rule of every knob
    "raise_above": fraction(False, False), "lower_below": fraction(False, False), "patience": integer(1, MAX_STEPS),
    "cooldown": integer(0, MAX_STEPS), "smoothing": fraction(True, False), "target": fraction(True, True),
    "margin": fraction(False, True), "window": integer(1, MAX_STEPS), "success_threshold": Rule("number"),
    "temperature_step": POSITIVE, "collapse_below": fraction(False, False), "diverse_above": fraction(False, False),
    "defer": Rule("bool"), "decay": fraction(False, True),
    "mean_generations": integer(1, MAX_COUNT),  # or None
    "lookahead": integer(0, MAX_COUNT), "weight": Rule("choice", choices=tuple(WEIGHTS)),
    "skip_target": fraction(False, True), "skip": Rule("choice", choices=SKIP_RULES),
    "skip_explore": fraction(False, False, why="the chance, at the start, that a prompt settled in one visit is "
                             "sampled again"),
    "pilot": dataclasses.replace(NUM_GENERATIONS, why="completions a prompt's first group holds (top-up: every "
                                 "prompt's; per prompt: an unseen or settled prompt's)",
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


def condition(needs) -> str:
    """What a knob of [`ONLY`] needs, in words: `` `policy: per_prompt` ``, or `` `temperature: [low, high]` ``."""
    if isinstance(needs, tuple):
        return " or ".join(f"`policy: {policy}`" for policy in needs)
    return f"`{needs}`"


def _adaptive_problems(values: Mapping, key: str, given=()) -> list[Problem]:
    problems = []
    g = values.get("num_generations")
    if "num_generations" not in values:
        problems.append(Problem(f"{key}.num_generations", MISSING, "is required", CANDIDATES.fix))
    elif CANDIDATES.broken(g):
        problems += CANDIDATES.problems(f"{key}.num_generations", g)
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
    problems += POLICY.problems(f"{key}.policy", values.get("policy"))
    defaults = {f.name: f.default for f in fields(Adaptive)}
    for name, rule in KNOBS.items():  # (a knob's fix: its default)
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
    if values.get("policy") == "per_prompt" and values.get("pilot") is not None and not problems:
        g, pilot = list(values["num_generations"]), values["pilot"]
        if pilot not in g[:-1]:
            problems.append(Problem(f"{key}.pilot", pilot, f"must be one of the candidates {g} below the largest "
                                    "(a per-prompt pilot group holds a candidate G)",
                                    f"use `pilot: {g[0]}`" if len(g) > 1 else "add a smaller candidate, or drop "
                                    "`pilot`"))
        if not values["defer"]:
            problems.append(Problem(f"{key}.pilot", pilot, "needs `defer: true` (pilot groups are where deferred "
                                    "prompts come back)", "set `defer: true`, or drop `pilot`"))
    if values.get("policy") == "top_up":
        names = ("num_generations", "pilot")
        problems += _top_up_problems(values, key, not any(p.key.startswith(f"{key}.{n}") for p in problems
                                                          for n in names))
    for name in given:
        if name in ONLY and not _applies(ONLY[name], values):
            needs = condition(ONLY[name])
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
            skips the ones of least value for the pass; the pass's end is not filled with deferred prompts),
            `"pooled"` (issue 50: `"evidence"`, and a prompt that has failed every visit is deferred only as far as a
            prior with a point mass at 0, fitted to every prompt's counts, says it is impossible) or `"greso"` (issue
            37's rule: GRESO's streaks alone). See [`grpo_curriculum.core.allocation`].
        skip_explore (`float`, *optional*, defaults to `0.5`):
            Per prompt, with `defer`: GRESO's exploration probability at the start, of each kind (the chance that a
            prompt whose one visit was all successes, or all failures, is sampled again on its next pass; `z` such
            visits: its `z`-th power). It then moves by 0.01 a round towards `skip_target`, within [0.05, 0.95].
        pilot (`int`, *optional*):
            Top-up: completions every prompt of a round gets first, and the size of each later increment of a group;
            it must divide every candidate. `None`: the smallest candidate. A group then holds `pilot`, `2 * pilot`,
            ..., up to the largest candidate. Per prompt, with `defer` (issue 50): a candidate below the largest; a
            prompt is sampled at `pilot` while it is unseen or settled (its last group's rewards all equal) and at the
            largest candidate once its last group was informative, so first visits and re-checks cost `pilot`.
            `None`: the knapsack chooses every G.
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
    skip_explore: float = 0.5
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
