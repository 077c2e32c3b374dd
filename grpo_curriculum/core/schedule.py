"""
Stage schedules: which `num_generations` (G) and `temperature` apply at a given optimizer step.

Pure logic: no torch, no TRL. A schedule is written with explicit time units (`until_step` or `until_fraction` of the
run) and resolved late, once the run's total number of optimizer steps is known ([`StageSchedule.resolve`]). The
resolved schedule is a pure function of the global step, so every process computes the same setting and a resumed
run picks up where it stopped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .comparison import reach_problems
from .errors import MISSING, Problem, raise_if_any
from .rules import NUM_GENERATIONS, STEPS, TEMPERATURE, Rule, check, fraction, is_int, is_number

if TYPE_CHECKING:
    from .adaptive import Adaptive
    from .comparison import Comparison
    from .sampling import DynamicSampling, TopUp
    from .skipping import Skip

RAMPS = ("linear", "cosine")
STAGE_RULES = {  # every field's own rule; the rules between fields are in `stage_problems`
    "num_generations": NUM_GENERATIONS,
    "temperature": TEMPERATURE,
    "temperature_end": TEMPERATURE,
    "temperature_ramp": Rule("choice", choices=RAMPS, fix="use `linear` or `cosine`"),
    "until_step": dataclasses.replace(STEPS, why="an optimizer step", fix="e.g. `until_step: 100`"),
    "until_fraction": fraction(True, False, why="a fraction of the run's optimizer steps",
                               fix="e.g. `until_fraction: 0.5` for the first half of the run"),
}


def _adaptive_of(value, key: str):
    """The stage's [`Adaptive`] (from an instance or a mapping) and the problems found building it."""
    from .adaptive import Adaptive

    if value is None:
        return None, []
    if isinstance(value, Adaptive):
        return value, []
    return Adaptive.from_mapping(value, key=key)


def _comparison_of(value, key: str):
    """The stage's [`Comparison`] (from an instance or a mapping) and the problems found building it."""
    from .comparison import Comparison

    if value is None:
        return None, []
    return Comparison.from_mapping(value, key=key)


def _dynamic_sampling_of(value, key: str):
    """The stage's [`DynamicSampling`] (from an instance or a mapping) and the problems found building it."""
    from .sampling import DynamicSampling

    if value is None:
        return None, []
    return DynamicSampling.from_mapping(value, key=key)


def _skip_of(value, key: str):
    """The stage's [`Skip`] (from `True`, a rule name, a mapping or an instance; `None` for none) and the problems."""
    from .skipping import Skip

    return Skip.from_value(value, key=key)


def _smallest_group(adaptive, g) -> tuple[int, str] | None:
    """The smallest group a stage trains and which it is, in words (`None` while its G is not valid)."""
    if adaptive is None:
        return (g, "the stage's G") if is_int(g) and g >= 2 else None
    if adaptive.top_up is not None:
        return adaptive.top_up.pilot, "the top-up pilot, the smallest group a round trains"
    return min(adaptive.num_generations), "the stage's smallest adaptive candidate"


def stage_problems(values: Mapping, key: str = "stage") -> list[Problem]:
    """
    Every problem with one stage's fields, given as a mapping (as read from YAML or passed to [`Stage`]).

    Args:
        values (`Mapping`):
            The stage's fields; `None` counts as not given (except for `temperature_ramp`).
        key (`str`, *optional*, defaults to `"stage"`):
            Key path of the stage, used to name each problem (e.g. `curriculum.stages[1]`); `""` for none.

    Returns:
        `list[Problem]`: Empty when the stage is valid.
    """
    at = f"{key}.".lstrip(".")
    adaptive, problems = _adaptive_of(values.get("adaptive"), f"{at}adaptive")
    _, found = _dynamic_sampling_of(values.get("dynamic_sampling"), f"{at}dynamic_sampling")
    problems += found
    comparison, found = _comparison_of(values.get("comparison"), f"{at}comparison")
    problems += found
    skip, found = _skip_of(values.get("skip"), f"{at}skip")
    problems += found
    if skip is not None and values.get("adaptive") is not None:
        problems.append(Problem(f"{at}skip", values["skip"], "cannot be combined with `adaptive`: an adaptive stage "
                                "skips (or not) with its own knobs", "drop `skip` and set `adaptive.defer: true` "
                                "with `adaptive.skip` (a per-prompt stage), or drop `adaptive`"))  # fmt: skip
    if skip is not None and values.get("dynamic_sampling") is not None:
        problems.append(Problem(f"{at}skip", values["skip"], "cannot be combined with `dynamic_sampling`: dynamic "
                                "sampling refills a round with new prompts until enough groups are informative, "
                                "skipping leaves settled prompts out before they are sampled",
                                "keep one of the two"))  # fmt: skip
    given = {name: v for name, v in values.items() if v is not None or name == "temperature_ramp"}
    if "num_generations" not in given and "adaptive" not in values:  # an adaptive stage starts at its smallest G
        problems.append(Problem(f"{at}num_generations", MISSING, "is required", "add e.g. `num_generations: 4`"))
    if "temperature" not in given and (adaptive is None or adaptive.temperature is None):  # else: its lower bound
        problems.append(Problem(f"{at}temperature", MISSING, "is required", "add e.g. `temperature: 0.9`"))
    problems += check(STAGE_RULES, given, key or None)
    g, t, t_end = given.get("num_generations"), given.get("temperature"), given.get("temperature_end")
    top_up = adaptive.top_up if adaptive is not None else None
    if top_up is not None and is_int(g) and g != top_up.pilot:
        problems.append(Problem(f"{at}num_generations", g, f"does not apply to a top-up stage: every group starts "
                                f"at the pilot ({top_up.pilot}) and grows up to {top_up.largest}",
                                "remove `num_generations` (set `adaptive.pilot` to change the pilot)"))
    elif top_up is None and adaptive is not None and is_int(g) and g not in adaptive.num_generations:
        problems.append(Problem(f"{at}num_generations", g, "must be one of the adaptive candidates "
                                f"{list(adaptive.num_generations)}",
                                "start the stage at a candidate, or omit `num_generations` to start at the smallest"))
    smallest = _smallest_group(adaptive, g)
    if skip is not None and skip.pilot is not None and is_int(g):
        if skip.pilot >= g:
            problems.append(Problem(f"{at}skip.pilot", skip.pilot, f"must be below the stage's G ({g}): the groups "
                                    "of unseen and settled prompts are the smaller ones",
                                    f"e.g. `pilot: {g // 2}`, or drop `pilot`" if g >= 4 else "drop `pilot`"))
        smallest = (skip.pilot, "the skip pilot group, the smallest group a round trains")
    if smallest is not None:
        problems += reach_problems(comparison, *smallest, key=f"{at}comparison")
    bounds = adaptive.temperature if adaptive is not None else None
    if bounds is not None and is_number(t) and not bounds[0] <= t <= bounds[1]:
        problems.append(Problem(f"{at}temperature", t, f"must lie within the adaptive bounds {list(bounds)}",
                                "start inside the bounds, or omit `temperature` to start at the lower bound"))
    if values.get("adaptive") is not None and values.get("dynamic_sampling") is not None:
        problems.append(Problem(f"{at}dynamic_sampling", values["dynamic_sampling"], "cannot be combined with "
                                "`adaptive`: dynamic sampling refills rounds at the stage's one G (an adaptive stage "
                                "changes G; a top-up stage already spends its rounds on the groups whose rewards are "
                                "all equal)", "give the stage one `num_generations` and drop `adaptive`, or drop "
                                "`dynamic_sampling`"))
    raw = values.get("adaptive")  # (a top-up block that did not build is still a top-up stage: it may ramp)
    policy = raw.get("policy") if isinstance(raw, Mapping) else getattr(raw, "policy", None)
    if raw is not None and t_end is not None and top_up is None and policy != "top_up":
        problems.append(Problem(f"{at}temperature_end", t_end, "cannot be combined with `adaptive`: the policy sets "
                                "the temperature", "remove `temperature_end`"))
    if given.get("temperature_ramp") in RAMPS and t_end is None:
        problems.append(Problem(f"{at}temperature_ramp", given["temperature_ramp"], "only applies with "
                                "`temperature_end` (the temperature at the end of the stage)",
                                "add `temperature_end`, or drop `temperature_ramp`"))
    if "until_step" in given and "until_fraction" in given:
        problems.append(Problem(f"{at}until_step", given["until_step"], "cannot be combined with `until_fraction` "
                                f"({given['until_fraction']!r}): a stage ends in one unit", "keep either `until_step` "
                                "(optimizer steps) or `until_fraction` (fraction of the run)"))
    return problems


@dataclass(frozen=True)
class Stage:
    """
    One stage of a curriculum: fixed `num_generations` and a temperature, until a point in the run.

    Args:
        num_generations (`int`):
            Completions sampled per prompt (G), at least 2. The generation batch stays fixed, so a stage with a larger G
            sees fewer prompts per generation round.
        temperature (`float`):
            Sampling temperature at the start of the stage (positive). The training log-probabilities are computed at
            the same temperature.
        until_step (`int`, *optional*):
            Optimizer step at which the stage ends. The stage applies to every generation round that starts before
            this step. Mutually exclusive with `until_fraction`.
        until_fraction (`float`, *optional*):
            End of the stage as a fraction in (0, 1] of the run's total optimizer steps, rounded to the nearest step.
            Mutually exclusive with `until_step`. Only the last stage may omit both (it then runs to the end).
        temperature_end (`float`, *optional*):
            Temperature reached at the end of the stage. When set, the temperature ramps from `temperature` to
            `temperature_end`; it is evaluated at the start of each generation round and held for that round.
        temperature_ramp (`str`, *optional*, defaults to `"linear"`):
            Shape of the ramp, `"linear"` or `"cosine"`.
        name (`str`, *optional*):
            A label for logs and plots.
        adaptive ([`Adaptive`] or `dict`, *optional*):
            Bounds and policy that make the stage adaptive: G (among the candidates) and the temperature (within the
            bounds) then follow the reward-variance signals of past rounds, from the stage's `num_generations` and
            `temperature` (default: the smallest candidate and the lower bound). With `policy="top_up"` each round is
            sampled in increments instead ([`grpo_curriculum.core.sampling`]), at the stage's temperature (which may
            ramp to `temperature_end`).
        dynamic_sampling ([`DynamicSampling`] or `dict`, *optional*):
            DAPO's dynamic sampling at the stage's G: groups whose rewards are all equal are dropped and more rounds
            are generated to fill the training batch, at most `max_rounds` a batch. Not with `adaptive`.
        comparison ([`~core.comparison.Comparison`] or `dict`, *optional*):
            Which completions of a group keep a non-zero advantage: `{mode: all}` (TRL's, the default), `{mode:
            extremes}` (the best and the worst) or `{mode: margin, margin: m, margin_end: m2}` (those at least m group
            stds from the mean, ramping to m2); see [`grpo_curriculum.core.comparison`]. Any kind of stage.
        skip ([`~core.skipping.Skip`], `bool`, `str` or `dict`, *optional*):
            Skip settled prompts (all successes, or all failures) for the rest of a pass, at the stage's one G:
            `True` or `"pooled"` (the default rule: a prompt that ever succeeded is never skipped for failing, one
            that never did only as far as the data says it is impossible), `"evidence"`, `"solved"`, `"greso"`, or
            `{rule: ..., target: ..., pilot: ...}` ([`grpo_curriculum.core.skipping`]). The stage then runs as a
            per-prompt stage whose only candidate is its G (with a pilot: the pilot and G). Not with `adaptive` or
            `dynamic_sampling`.
    """

    num_generations: int | None = None
    temperature: float | None = None
    until_step: int | None = None
    until_fraction: float | None = None
    temperature_end: float | None = None
    temperature_ramp: str = "linear"
    name: str | None = None
    adaptive: Adaptive | None = None
    dynamic_sampling: DynamicSampling | None = None
    comparison: Comparison | None = None
    skip: Skip | None = None

    def __post_init__(self):
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if values["temperature_ramp"] == "linear":  # the default: don't complain that it lacks `temperature_end`
            values.pop("temperature_ramp")
        for name in ("adaptive", "dynamic_sampling", "comparison", "skip"):
            if values[name] is None:
                values.pop(name)
        raise_if_any(stage_problems(values, key="Stage"))
        skip = _skip_of(self.skip, "Stage.skip")[0]
        object.__setattr__(self, "skip", skip)
        adaptive = _adaptive_of(self.adaptive, "Stage.adaptive")[0] if skip is None else skip.adaptive(
            self.num_generations)  # a skipping stage runs as a per-prompt stage of one candidate, its G
        dynamic, _ = _dynamic_sampling_of(self.dynamic_sampling, "Stage.dynamic_sampling")
        object.__setattr__(self, "dynamic_sampling", dynamic)
        object.__setattr__(self, "comparison", _comparison_of(self.comparison, "Stage.comparison")[0])
        g = self.num_generations
        if g is None:  # an adaptive stage starts at its smallest candidate; a top-up stage's groups at the pilot
            g = adaptive.top_up.pilot if adaptive.top_up is not None else adaptive.num_generations[0]
        t = adaptive.temperature[0] if self.temperature is None else self.temperature
        # Plain Python numbers (`numpy.int64(4)` is an integer too), so that checkpoints and logs serialise them.
        object.__setattr__(self, "adaptive", adaptive)
        object.__setattr__(self, "num_generations", int(g))
        object.__setattr__(self, "temperature", float(t))
        for name, cast in (("until_step", int), ("until_fraction", float), ("temperature_end", float)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, cast(getattr(self, name)))

    @property
    def num_generations_values(self) -> tuple[int, ...]:
        """Every G this stage can use: its own, or its adaptive candidates."""
        return self.adaptive.num_generations if self.adaptive is not None else (self.num_generations,)

    @property
    def top_up(self) -> TopUp | None:
        """The plan of this stage's top-up rounds (`adaptive.policy == "top_up"`), else `None`."""
        return self.adaptive.top_up if self.adaptive is not None else None

    @property
    def has_end(self) -> bool:
        return self.until_step is not None or self.until_fraction is not None

    def end_step(self, total_steps: int) -> int | None:
        """The optimizer step this stage ends at, for a run of `total_steps` optimizer steps."""
        if self.until_step is not None:
            return self.until_step
        if self.until_fraction is not None:
            return math.floor(self.until_fraction * total_steps + 0.5)
        return None

    def temperature_at(self, progress: float) -> float:
        """Temperature at `progress` in [0, 1] through the stage."""
        if self.temperature_end is None:
            return float(self.temperature)
        progress = min(max(progress, 0.0), 1.0)
        if self.temperature_ramp == "cosine":
            progress = (1 - math.cos(math.pi * progress)) / 2
        return float(self.temperature + (self.temperature_end - self.temperature) * progress)

    @property
    def end_description(self) -> str:
        if self.until_step is not None:
            return f"until step {self.until_step}"
        if self.until_fraction is not None:
            return f"until {self.until_fraction:g} of the run"
        return "until the end"


def stage_signature(stages) -> list[dict]:
    """What a checkpoint's curriculum state depends on in each stage: a fixed G, or an adaptive policy and its
    candidates (a resume with another signature cannot continue the state)."""
    return [{"num_generations": stage.num_generations} if stage.adaptive is None else
            {"policy": stage.adaptive.policy, "num_generations": list(stage.adaptive.num_generations)}
            for stage in stages]  # fmt: skip


@dataclass(frozen=True)
class Setting:
    """
    What applies to one generation round: the stage index, G and the temperature. `num_generations` is `None` in a
    per-prompt stage (each prompt of the round gets its own G, see [`grpo_curriculum.core.allocation`]) and in a
    top-up stage, whose round `top_up` plans ([`grpo_curriculum.core.sampling.TopUp`]). `dynamic_sampling` is set in
    a stage that drops and refills groups whose rewards are all equal. Both may be given as mappings (as a checkpoint
    stores them).
    """

    stage: int
    num_generations: int | None
    temperature: float
    top_up: TopUp | None = None
    dynamic_sampling: DynamicSampling | None = None

    def __post_init__(self):
        from .sampling import DynamicSampling, TopUp

        for name, kind in (("top_up", TopUp), ("dynamic_sampling", DynamicSampling)):
            if isinstance(getattr(self, name), Mapping):
                object.__setattr__(self, name, kind(**getattr(self, name)))


class StageSchedule:
    """
    An ordered list of [`Stage`]s, validated at construction.

    Args:
        stages (`Iterable[Stage]`):
            The stages, in order. Every stage but the last must end (`until_step` or `until_fraction`); ends must
            increase. The last stage may omit its end and then runs to the end of training.

    Example:
    ```python
    >>> from grpo_curriculum import Stage, StageSchedule
    >>> schedule = StageSchedule([Stage(num_generations=4, temperature=0.7, until_fraction=0.5),
    ...                           Stage(num_generations=8, temperature=0.9)])
    >>> schedule.resolve(total_steps=100).setting_at(50)
    Setting(stage=1, num_generations=8, temperature=0.9)
    ```
    """

    def __init__(self, stages: Iterable[Stage]):
        self.stages = tuple(stages)
        raise_if_any(self.problems(), context="StageSchedule")

    def problems(self, key: str = "stages") -> list[Problem]:
        problems = []
        if not self.stages:
            return [Problem(key, [], "must hold at least one stage", "add a stage with `num_generations` and `temperature`")]
        for i, stage in enumerate(self.stages):
            if not isinstance(stage, Stage):
                problems.append(Problem(f"{key}[{i}]", stage, "must be a Stage", "build it with `Stage(...)`"))
        if problems:
            return problems
        for i, stage in enumerate(self.stages[:-1]):
            if not stage.has_end:
                problems.append(
                    Problem(
                        f"{key}[{i}]",
                        f"Stage({stage.num_generations=}, ...)".replace("stage.", ""),
                        "only the last stage may omit its end",
                        "add `until_step` or `until_fraction` to this stage",
                    )
                )
        # Ends in the same unit can be compared now; mixed units are compared once resolved.
        for unit in ("until_step", "until_fraction"):
            previous = None
            for i, stage in enumerate(self.stages):
                value = getattr(stage, unit)
                if value is None:
                    continue
                if previous is not None and value <= previous[1]:
                    problems.append(
                        Problem(
                            f"{key}[{i}].{unit}",
                            value,
                            f"stage ends must increase, but stage {previous[0]} already ends at {previous[1]!r}",
                            f"use a {unit} greater than {previous[1]!r}, or reorder the stages",
                        )
                    )
                previous = (i, value)
        return problems

    def __len__(self) -> int:
        return len(self.stages)

    def __repr__(self) -> str:
        return f"StageSchedule({list(self.stages)!r})"

    @property
    def num_generations_values(self) -> list[int]:
        """Every G the schedule can reach, ascending."""
        return sorted({g for stage in self.stages for g in stage.num_generations_values})

    def prompts_needed(self, num_generations: int, batch: int) -> tuple[str, int]:
        """
        The most prompts a generation round of `batch` completions takes from one pass over the train dataset, and
        what needs them: TRL's data loader, which reads prompts by `num_generations` (the G `GRPOConfig` has), or a
        stage at its smallest G (a per-prompt stage's smallest candidate), the first of them on a tie.
        """
        needs = [(f"num_generations {num_generations} (TRL's data loader)", batch // num_generations)]
        needs += [(f"stage {i}", -(-batch // min(stage.num_generations_values)))
                  for i, stage in enumerate(self.stages)]
        return max(needs, key=lambda need: need[1])

    def dataset_size_problems(self, num_generations: int, batch: int, size: int) -> list[Problem]:
        """A train dataset of `size` prompts too small for a generation round of `batch` completions to find its
        prompts in one pass over it ([`prompts_needed`]): the trainer's check, which the preflight makes too."""
        what, prompts = self.prompts_needed(num_generations, batch)
        if size >= prompts:
            return []
        return [Problem("train_dataset", f"{size} prompts", f"is too small: a round of {batch} completions at {what} "
                        f"takes {prompts} prompts from one pass over it",
                        "use a larger dataset, a smaller generation batch, or a larger num_generations")]

    def geometry_problems(self, geometry, key: str = "stages") -> list[Problem]:
        """
        Every G the schedule can reach checked against a [`BatchGeometry`]: each stage's G, or each adaptive candidate
        (a per-prompt stage's candidates need only fill the generation batch together).

        Returns:
            `list[Problem]`: Empty when every round the schedule can build fits the geometry.
        """
        problems = []
        for i, stage in enumerate(self.stages):
            if stage.top_up is not None:
                problems += geometry.top_up_problems(stage.top_up, key=f"{key}[{i}].adaptive")
            elif stage.adaptive is None:
                problems += geometry.problems(stage.num_generations, key=f"{key}[{i}].num_generations")
            elif stage.adaptive.per_prompt:
                problems += geometry.per_prompt_problems(stage.adaptive.num_generations,
                                                         key=f"{key}[{i}].adaptive.num_generations")
            else:
                for j, g in enumerate(stage.adaptive.num_generations):
                    problems += geometry.problems(g, key=f"{key}[{i}].adaptive.num_generations[{j}]")
        return problems

    def resolve(self, total_steps: int) -> ResolvedSchedule:
        """
        Fix the stage boundaries for a run of `total_steps` optimizer steps.

        Raises:
            [`CurriculumError`]: if ends do not increase once resolved, or a stage ends after the run.
        """
        raise_if_any(STEPS.problems("max_steps", total_steps))
        ends, problems = [], []
        previous_end = 0
        for i, stage in enumerate(self.stages):
            end = stage.end_step(total_steps)
            last = i == len(self.stages) - 1
            key = f"stages[{i}]." + ("until_step" if stage.until_step is not None else "until_fraction")
            if end is None:
                end = total_steps
            elif end > total_steps:
                problems.append(
                    Problem(
                        key,
                        stage.until_step if stage.until_step is not None else stage.until_fraction,
                        f"resolves to step {end}, after the run's last optimizer step ({total_steps})",
                        f"end the stage at step <= {total_steps}, raise `max_steps`, or omit the end on the last stage",
                    )
                )
            elif end <= previous_end:
                problems.append(
                    Problem(
                        key,
                        stage.until_step if stage.until_step is not None else stage.until_fraction,
                        f"resolves to step {end}, which is not after the previous stage's end (step {previous_end}) "
                        f"in a run of {total_steps} steps, so the stage would never run",
                        "space the stage ends further apart, or remove the stage",
                    )
                )
            elif last and end < total_steps:
                problems.append(
                    Problem(
                        key,
                        stage.until_step if stage.until_step is not None else stage.until_fraction,
                        f"the last stage ends at step {end}, before the run ends (step {total_steps}), leaving the rest "
                        "of the run without a stage",
                        "omit the last stage's end (it then runs to the end), or set `until_fraction: 1.0`",
                    )
                )
            ends.append(end)
            previous_end = max(previous_end, end)
        raise_if_any(problems, context=f"stage ends for a run of {total_steps} optimizer steps")
        return ResolvedSchedule(self.stages, tuple(ends), total_steps)


@dataclass(frozen=True)
class ResolvedSchedule:
    """A [`StageSchedule`] with its stage ends fixed in optimizer steps: a pure function from step to [`Setting`]."""

    stages: tuple[Stage, ...]
    ends: tuple[int, ...]
    total_steps: int

    def stage_index_at(self, step: int) -> int:
        """Index of the stage in force for a round starting at optimizer step `step` (the last stage past the end)."""
        for i, end in enumerate(self.ends):
            if step < end:
                return i
        return len(self.stages) - 1

    def start_of(self, index: int) -> int:
        """The optimizer step after which stage `index` starts (it holds the rounds that start from then on)."""
        return 0 if index == 0 else self.ends[index - 1]

    def step_range(self, index: int) -> tuple[int, int]:
        """
        The first and last optimizer steps of stage `index`, numbered from 1 as in the Trainer's log lines
        (`until_step: 20` ends a stage with step 20; the next one starts with step 21).
        """
        return self.start_of(index) + 1, self.ends[index]

    def steps_text(self, index: int) -> str:
        """Stage `index`'s steps in words: `"steps 21-40"`, `"step 21"`, or `"no step (the run ends first)"`."""
        first, last = self.step_range(index)
        if first > last:
            return "no step (the run ends first)"
        return f"step {first}" if first == last else f"steps {first}-{last}"

    def setting_at(self, step: int) -> Setting:
        """The [`Setting`] for a generation round that starts at optimizer step `step`."""
        index = self.stage_index_at(step)
        stage = self.stages[index]
        start, end = self.start_of(index), self.ends[index]
        progress = (step - start) / (end - start) if end > start else 1.0
        top_up = stage.top_up
        g = None if top_up is not None else stage.num_generations
        return Setting(index, g, stage.temperature_at(progress), top_up, stage.dynamic_sampling)

    def comparison_at(self, step: int) -> tuple[str, float | None]:
        """The comparison mode and margin of a generation round that starts at optimizer step `step` (`("all",
        None)` in a stage without `comparison`), a pure function of the step like the temperature's ramp."""
        index = self.stage_index_at(step)
        comparison = self.stages[index].comparison
        if comparison is None:
            return "all", None
        start, end = self.start_of(index), self.ends[index]
        return comparison.mode, comparison.margin_at((step - start) / (end - start) if end > start else 1.0)

    def describe(self) -> list[str]:
        """
        One line a stage: its steps (numbered from 1, as in the log lines), G and temperature, e.g. `"stage 1 compare:
        steps 21-40, G 8, temperature 1"`; an adaptive stage names its policy, candidates and bounds, and a per-prompt
        stage reads "G per prompt".
        """
        lines = []
        for i, stage in enumerate(self.stages):
            temperature = f"temperature {stage.temperature:g}"
            if stage.temperature_end is not None:
                temperature += f" -> {stage.temperature_end:g} ({stage.temperature_ramp})"
            adaptive = stage.adaptive
            if adaptive is None:
                g = f"G {stage.num_generations}"
                if stage.dynamic_sampling is not None:
                    g += f" with {stage.dynamic_sampling.describe()}"
            elif stage.top_up is not None:
                g = f"G by top-up: {stage.top_up.describe()}"
            elif adaptive.per_prompt:
                g = f"G per prompt from {list(adaptive.num_generations)}"
            else:
                g = f"G adaptive ({adaptive.policy}) in {list(adaptive.num_generations)} from {stage.num_generations}"
            if adaptive is not None and adaptive.temperature is not None:
                low, high = adaptive.temperature
                temperature = f"temperature adaptive in [{low:g}, {high:g}] from {stage.temperature:g}"
            label = f" {stage.name}" if stage.name else ""
            compare = f", {stage.comparison.describe()}" if stage.comparison is not None else ""
            lines.append(f"stage {i}{label}: {self.steps_text(i)}, {g}, {temperature}{compare}")
        return lines
