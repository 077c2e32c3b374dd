"""
A recipe's `trainer`: `grpo` (the default: `CurriculumGRPOTrainer` with `GRPOConfig`) or `rloo`
(`CurriculumRLOOTrainer` with `RLOOConfig`, TRL 1.16 only). The trainer decides which TRL config class the recipe's
training keys are checked against ([`~config.trl_fields.trl_fields`]) and built with ([`~config.arguments`]), and, for
`rloo`, which curriculum stages are refused ([`~core.rloo.rloo_problems`]): all of it before any model loads, in
`check` and `train` alike. Pure standard library, so `check` stays import-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..compat import RLOO_TRL, rloo_trl_problem
from ..core.curriculum import STAGE_KEYS
from ..core.errors import CurriculumError, Problem
from ..core.rloo import rloo_problems
from ..core.rules import Rule
from ..core.schedule import Stage, stage_problems
from .trl_fields import TRAINERS, _version, trl_fields

TRAINER = Rule("choice", choices=tuple(TRAINERS), why="grpo: TRL's GRPOTrainer and GRPOConfig; rloo: RLOOTrainer and "
               "RLOOConfig; TRL's AsyncGRPOTrainer has no recipe yet",
               fix="e.g. `trainer: rloo`, or remove it (grpo); for TRL's AsyncGRPOTrainer, "
                   "`grpo_curriculum.training.async_grpo.CurriculumAsyncGRPOTrainer` in Python (docs/async.md)")


def recipe_trainer(data: Mapping) -> str:
    """The trainer `data` (a recipe mapping) names, `grpo` when it names none or an invalid one (said elsewhere)."""
    trainer = data.get("trainer")
    return trainer if trainer is not None and TRAINER.broken(trainer) is None else "grpo"


def other_trainer_problems(unknown: Mapping, trainer: str, given) -> tuple[list[Problem], dict]:
    """
    The keys of `unknown` (not fields of `trainer`'s config) that another trainer's config has, one problem each
    naming the key, both trainers and the fix; and the keys left (unknown to every trainer). `given`: the recipe's
    `trainer` value (`None`: not given).
    """
    problems, rest = [], {}
    config = TRAINERS[trainer]
    whose = (f"this recipe's `trainer: {trainer}`" if given == trainer else f"`trainer: {trainer}`, the default" if
             given is None else f"checked as `trainer: {trainer}`, the default, since `trainer` is invalid")
    for key, value in unknown.items():
        others = [name for name in TRAINERS if name != trainer and key in trl_fields(name)]
        if not others:
            rest[key] = value
            continue
        problems.append(Problem(key, value, f"is a field of {TRAINERS[others[0]]}, not of {config} ({whose})",
                                f"remove it, or use `trainer: {others[0]}`"))
    return problems, rest


def trainer_problems(trainer: str, curriculum, schedule) -> list[Problem]:
    """
    What `trainer` refuses in a recipe: for `rloo`, a TRL other than 1.16 and the curriculum's stages that
    `CurriculumRLOOTrainer` refuses. `schedule` is the validated curriculum, or `None` when some
    stage is invalid: then each stage that is valid on its own is checked (`curriculum`: the recipe's mapping).
    """
    if trainer != "rloo":
        return []
    wanted = ".".join(map(str, RLOO_TRL))
    why = rloo_trl_problem(_version("trl"))
    problems = [Problem("trainer", trainer, why, f"install it (`pip install 'trl=={wanted}.*'`), or use "
                        "`trainer: grpo`")] if why else []
    if schedule is not None:
        return problems + rloo_problems(schedule.stages, at="curriculum.stages")
    stages = curriculum.get("stages") if isinstance(curriculum, Mapping) else None
    for i, stage in enumerate(stages if isinstance(stages, list) else []):
        one = _stage(stage)
        at = f"curriculum.stages[{i}]"
        problems += [Problem(p.key.replace("curriculum.stages[0]", at, 1), p.value, p.rule, p.fix)
                     for p in ([] if one is None else rloo_problems([one], at="curriculum.stages"))]
    return problems


def _stage(stage):
    """A stage mapping as a [`~core.schedule.Stage`], or `None` when it is not a valid one (said elsewhere)."""
    if not isinstance(stage, Mapping) or set(stage) - set(STAGE_KEYS) or stage_problems(stage, key=""):
        return None
    try:
        return Stage(**stage)
    except (CurriculumError, TypeError, ValueError):
        return None
