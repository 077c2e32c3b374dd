"""
`sweep --arms`: arms named on the command line, the adaptive modes next to static G.

- `gN`: static G N for the whole run (at `--temperatures`' value paired with it, else the recipe's first stage's);
- `per_prompt`: each prompt gets its own G from the candidates every round (`policy: per_prompt`);
- `top_up`: every prompt a pilot group, then increments where the rewards are all equal (`policy: top_up`);
- `dynamic`, `dynamic-gN`: DAPO's dynamic sampling at G N (`dynamic_sampling`);
- `skip`, `skip-gN`: G N skipping settled prompts (`skip: true`: the default rule, `evidence`);
- `recipe`: the recipe's own schedule (what `--curriculum` adds).

An adaptive arm is one stage for the whole run. Where the recipe has a stage of that kind, the arm is that stage (its
options, temperature and candidates; its end removed); otherwise it is built from the candidates: the recipe's first
adaptive stage's `num_generations` list, else the static arms' G values of this sweep (two or more), else every valid
G of the batch geometry. `dynamic` takes the recipe's dynamic-sampling stage, else its first stage's G, with
[`DynamicSampling`]'s default `max_rounds` (2, the study's choice), written out; `skip` the recipe's skipping stage,
else its first stage's G with `skip: true`. Pure logic: no torch.
"""

from __future__ import annotations

import re

from ...core.errors import Problem, raise_if_any
from ...core.sampling import DynamicSampling
from .table import Arm

ARM_NAMES = ("gN (static G N), per_prompt, top_up, dynamic (or dynamic-gN, at G N), skip (or skip-gN, G N skipping "
             "settled prompts), recipe")
_STATIC = re.compile(r"g([0-9]{1,9})")
_DYNAMIC = re.compile(r"dynamic(?:-g([0-9]{1,9}))?")
_SKIP = re.compile(r"skip(?:-g([0-9]{1,9}))?")
_ENDS = ("until_step", "until_fraction", "name")
DEFAULT_MAX_ROUNDS = DynamicSampling().max_rounds  # written into a built `dynamic` arm (its label names it)


def _stages(recipe) -> list[dict]:
    raw = recipe.raw.get("curriculum") or {}
    return [dict(stage) for stage in raw.get("stages") or [] if isinstance(stage, dict)]


def _kind(stage: dict) -> str | None:
    """`per_prompt`, `top_up`, `dynamic` or `skip` for a raw stage of that kind, else `None`."""
    adaptive = stage.get("adaptive")
    if isinstance(adaptive, dict) and adaptive.get("policy") in ("per_prompt", "top_up"):
        return adaptive["policy"]
    if stage.get("skip") not in (None, False):
        return "skip"
    return "dynamic" if stage.get("dynamic_sampling") is not None else None


def candidates(recipe, static: list[int]) -> tuple[list[int], str]:
    """The G candidates of the adaptive arms built from scratch, and where they come from (see the module)."""
    for stage in recipe.curriculum.stages:
        if stage.adaptive is not None:
            return sorted(stage.adaptive.num_generations), "the recipe's first adaptive stage's"
    if len(set(static)) >= 2:
        return sorted(set(static)), "the static arms'"
    from ...config.recipe import run_geometry

    return list(run_geometry(recipe).valid_num_generations()), "every valid G of the batch geometry"


def _parse_arm(name: str) -> tuple[str, int | None] | None:
    """`(kind, G)` of one `--arms` name, or `None` when it names no arm."""
    static = _STATIC.fullmatch(name)
    if static:
        return "static", int(static.group(1))
    for kind, pattern in (("dynamic", _DYNAMIC), ("skip", _SKIP)):
        found = pattern.fullmatch(name)
        if found:
            return kind, int(found.group(1)) if found.group(1) else None
    return (name, None) if name in ("per_prompt", "top_up", "recipe") else None


def parse_arms(names: list[str]) -> list[tuple[str, int | None]]:
    """
    `(kind, G)` for each name of `--arms`: `("static", 4)` for `g4`, `("dynamic", 8)` for `dynamic-g8`, `("dynamic",
    None)`, `("skip", 4)` for `skip-g4`, `("skip", None)`, `("per_prompt", None)`, `("top_up", None)`, `("recipe",
    None)`.

    Raises:
        [`CurriculumError`]: for a name that is no arm, or one arm given twice (under one spelling or two: `g2 g02`).
    """
    problems, parsed, spellings = [], [], {}
    for name in names:
        arm = _parse_arm(name)
        if arm is None:
            fix = "e.g. `--arms g4 g8 per_prompt top_up dynamic`"
            if name.replace("-", "_") in ("per_prompt", "top_up"):
                fix = f"write it `{name.replace('-', '_')}`"
            problems.append(Problem("--arms", name, f"is not an arm: one of {ARM_NAMES}", fix))
            continue
        parsed.append(arm)
        spellings.setdefault(arm, []).append(name)
    for given in spellings.values():
        if len(given) > 1:
            rule = ("is listed more than once" if len(set(given)) == 1 else
                    f"and {' and '.join(sorted(set(given) - {given[0]}))} name one arm, listed {len(given)} times")
            problems.append(Problem("--arms", given[0], rule, "list each arm once"))
    raise_if_any(problems, "sweep")
    return parsed


def build_arms(recipe, num_generations, temperatures=None, curriculum: bool = False) -> list[Arm]:
    """
    The sweep's arms: one static arm a G (`g4`, or `g4-t0.7` with temperatures), at the temperature paired with it
    (one value: every arm's; as many as G values: in order; none: the recipe's first stage's), then the recipe's own
    schedule (`recipe`) with `curriculum`.

    Raises:
        [`CurriculumError`]: for a G listed twice, or a number of temperatures that pairs with neither.
    """
    problems = []
    if len(set(num_generations)) != len(num_generations):
        twice = sorted({g for g in num_generations if list(num_generations).count(g) > 1})
        problems.append(Problem("--num-generations", list(num_generations), f"lists G {twice[0]} more than once",
                                "list each G once (pair several temperatures with one G in separate sweeps)"))
    if temperatures and len(temperatures) not in (1, len(num_generations)):
        problems.append(Problem("--temperatures", list(temperatures), f"gives {len(temperatures)} values for "
                                f"{len(num_generations)} G values", "give one temperature for every arm, or one per "
                                "G, in the order of --num-generations"))  # fmt: skip
    raise_if_any(problems, "sweep")
    temperatures = list(temperatures or [None])
    paired = temperatures * len(num_generations) if len(temperatures) == 1 else temperatures
    arms = []
    for g, t in zip(num_generations, paired):
        temperature = recipe.curriculum.stages[0].temperature if t is None else t
        name = f"g{g}" + (f"-t{t:g}" if t is not None else "")
        arms.append(Arm(name, [{"num_generations": g, "temperature": temperature}], g, temperature))
    if curriculum:
        raw = recipe.raw.get("curriculum") or {}
        stages = raw.get("stages") or [{"num_generations": recipe.training["num_generations"],
                                        "temperature": recipe.training["temperature"]}]
        arms.append(Arm("recipe", list(stages)))
    return arms


def named_arms(recipe, names: list[str], temperatures=None) -> list[Arm]:
    """
    The arms of `--arms NAME ...`, in the order given (see the module). `temperatures` pair with the static arms as
    with `--num-generations` (one for all, or one per static arm in order).

    Raises:
        [`CurriculumError`]: for an unknown or repeated name, unpaired temperatures, or a G in a name that is not an
        integer of at least 2 (the validation of every arm against the geometry comes after, as for any arm).
    """
    parsed = parse_arms(names)
    static = [g for kind, g in parsed if kind == "static"]
    problems = [Problem("--arms", f"g{g}" if kind == "static" else f"{kind}-g{g}", "needs G >= 2: GRPO compares "
                        "at least two completions of a prompt", "e.g. `g4`") for kind, g in parsed
                if g is not None and g < 2]  # fmt: skip
    if temperatures and not static:
        problems.append(Problem("--temperatures", list(temperatures), "pairs with static arms (gN), and --arms "
                                "names none", "leave --temperatures out: the adaptive arms take the recipe's "
                                "temperature"))  # fmt: skip
    raise_if_any(problems, "sweep")
    by_g = {arm.num_generations: arm for arm in build_arms(recipe, static, temperatures)} if static else {}
    stages = _stages(recipe)
    temperature = recipe.curriculum.stages[0].temperature
    values, _ = candidates(recipe, static)
    arms = []
    for name, (kind, g) in zip(names, parsed):
        if kind == "static":
            arms.append(by_g[g])
            continue
        if kind == "recipe":
            arms.append(build_arms(recipe, [], None, curriculum=True)[-1])
            continue
        own = next((stage for stage in stages if _kind(stage) == kind), None)
        if own is not None and (kind not in ("dynamic", "skip") or g is None or own.get("num_generations") == g):
            stage = {key: value for key, value in own.items() if key not in _ENDS}
        elif kind == "skip":
            g = g if g is not None else recipe.curriculum.stages[0].num_generations
            stage = {"num_generations": g, "temperature": temperature, "skip": True}
        elif kind == "dynamic":
            g = g if g is not None else recipe.curriculum.stages[0].num_generations
            stage = {"num_generations": g, "temperature": temperature,
                     "dynamic_sampling": {"max_rounds": DEFAULT_MAX_ROUNDS}}  # fmt: skip
        else:
            stage = {"temperature": temperature, "adaptive": {"policy": kind, "num_generations": list(values)}}
        arms.append(Arm(name, [stage], None, stage.get("temperature", temperature)))
    return arms
