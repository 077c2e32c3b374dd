"""
The `curriculum:` mapping of a recipe: its validation into a [`StageSchedule`], and reading it from a YAML file (a
whole recipe or a file holding only the curriculum), as [`CurriculumCallback.from_yaml`] and `grpo-curriculum check`
do. Pure: imports neither torch nor TRL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .errors import MISSING, CurriculumError, Problem, raise_if_any
from .loading import find_recipe, read_yaml
from .rules import UNCERTAIN_PROMPTS, Rule, check, unknown_keys
from .schedule import Stage, StageSchedule, stage_problems

STAGE_KEYS = tuple(f.name for f in dataclasses.fields(Stage))
_EXAMPLE_STAGES = "`curriculum: {stages: [{num_generations: 4, temperature: 0.7, until_fraction: 0.5}, ...]}`"


def rekey(problems: list[Problem], prefix: str) -> list[Problem]:
    """`problems` with their keys under `prefix` (`stages[0].temperature` -> `curriculum.stages[0].temperature`)."""
    return [dataclasses.replace(p, key=f"{prefix}.{p.key}") for p in problems]


CURRICULUM_RULES = {  # the curriculum's settings besides `stages` (arguments of `CurriculumCallback`)
    "uncertain_prompts": UNCERTAIN_PROMPTS,
}


RECIPE_CURRICULUM_RULES = {  # a recipe's curriculum settings that are not `CurriculumCallback` arguments
    "dynamic_sampling": Rule("bool", why="the asynchronous trainer's DAPO switch: zero-variance groups dropped in its "
                             "rollout worker", fix="`dynamic_sampling: true` (with `trainer: async_grpo`), or remove it"),
}
"""Checked in a recipe only (`trainer: async_grpo`'s `CurriculumAsyncGRPOTrainer(dynamic_sampling=...)`;
[`~config.trainers`] refuses it under the other trainers); a curriculum file for `CurriculumCallback.from_yaml`
refuses it as an unknown key."""


def curriculum_options(value: Mapping) -> dict:
    """The `CurriculumCallback` arguments a (validated) `curriculum:` mapping sets besides its stages."""
    return {name: value[name] for name in CURRICULUM_RULES if name in value}


def parse_curriculum(value, key: str = "curriculum", recipe: bool = False,
                     stages_optional: bool = False) -> tuple[StageSchedule | None, list[Problem]]:  # fmt: skip
    """Validate a `curriculum:` mapping (`recipe`: a recipe's, which may also hold [`RECIPE_CURRICULUM_RULES`]);
    return the schedule (when every stage is valid) and every problem. With `stages_optional` (`trainer: async_grpo`,
    whose `dynamic_sampling` switch needs no stages) a mapping without `stages` gives no schedule and no problem for
    it."""
    if not isinstance(value, Mapping):
        return None, [Problem(key, value, "must be a mapping holding a `stages:` list", f"write {_EXAMPLE_STAGES}")]
    rules = {**CURRICULUM_RULES, **(RECIPE_CURRICULUM_RULES if recipe else {})}
    optional = " and ".join(f"`{name}`" for name in rules)
    problems = unknown_keys(value, ("stages", *rules), key, "a curriculum key (the curriculum holds `stages` and "
                            f"optionally {optional})", "remove it")  # fmt: skip
    problems += check(rules, value, key)
    stages = value.get("stages")
    if stages_optional and "stages" not in value:
        return None, problems
    if not isinstance(stages, list) or not stages:
        rule, shown = ("must be a non-empty list of stages", stages) if "stages" in value else ("is required", MISSING)
        return None, problems + [Problem(f"{key}.stages", shown, rule, f"write {_EXAMPLE_STAGES}")]
    valid = True
    for i, stage in enumerate(stages):
        where = f"{key}.stages[{i}]"
        if not isinstance(stage, Mapping):
            problems.append(Problem(where, stage, "must be a mapping of stage fields",
                                    "e.g. `- {num_generations: 4, temperature: 0.7, until_fraction: 0.5}`"))
            valid = False
            continue
        found = unknown_keys(stage, STAGE_KEYS, where, "a stage field", f"use only {list(STAGE_KEYS)}")
        found += stage_problems(stage, key=where)
        problems += found
        valid = valid and not found
    if not valid:
        return None, problems
    try:
        return StageSchedule([Stage(**stage) for stage in stages]), problems
    except CurriculumError as error:
        return None, problems + rekey(error.problems, key)


def is_curriculum_file(path: str) -> bool:
    """Whether `path` holds only a `curriculum:` mapping (what [`load_curriculum`] reads), not a whole recipe."""
    try:
        data, _ = read_yaml(find_recipe(path))
    except CurriculumError:
        return False  # loading it as a recipe says what is wrong
    return isinstance(data, Mapping) and list(data) == ["curriculum"]


def load_curriculum(path: str, with_options: bool = False) -> StageSchedule | tuple[StageSchedule, dict]:
    """
    Read only the `curriculum:` mapping of a file (a full recipe, or a file holding just the curriculum), or of a
    recipe shipped in the package, by name.

    Returns:
        [`StageSchedule`]: The validated stages; with `with_options`, also the mapping's other settings
        ([`curriculum_options`]).

    Raises:
        [`CurriculumError`]: listing every problem in the curriculum.
    """
    path = find_recipe(path)
    data, problems = read_yaml(path)
    if not isinstance(data, Mapping) or "curriculum" not in data:
        raise CurriculumError([Problem(f"{path}: curriculum", MISSING, "is required: the file has no top-level "
                                       "`curriculum:` mapping", f"add {_EXAMPLE_STAGES}")], f"recipe {path}")
    schedule, found = parse_curriculum(data["curriculum"])
    raise_if_any(problems + found, f"recipe {path}")
    return (schedule, curriculum_options(data["curriculum"])) if with_options else schedule
