"""
A recipe's `trainer`: `grpo` (the default: `CurriculumGRPOTrainer` with `GRPOConfig`), `rloo`
(`CurriculumRLOOTrainer` with `RLOOConfig`, TRL 1.16 only) or `async_grpo` (`CurriculumAsyncGRPOTrainer` with
`trl.experimental.async_grpo.AsyncGRPOConfig`, TRL 1.16 only; docs/async.md). The trainer decides which TRL config
class the recipe's training keys are checked against ([`~config.trl_fields.trl_fields`]) and built with
([`~config.arguments`]), and which curriculum stages are refused ([`~core.rloo.rloo_problems`] for `rloo`,
[`~core.asynchronous.async_problems`] for `async_grpo`, the one place that says what the asynchronous curriculum
supports): all of it before any model loads, in `check` and `train` alike. Pure standard library, so `check` stays
import-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..compat import ASYNC_TRL, RLOO_TRL, async_trl_problem, rloo_trl_problem
from ..core.asynchronous import async_problems
from ..core.curriculum import STAGE_KEYS
from ..core.errors import MISSING, CurriculumError, Problem
from ..core.rloo import rloo_problems
from ..core.rules import Rule, is_int
from ..core.schedule import Stage, stage_problems
from .builtins import BUILTIN, TINY_MODEL
from .trl_fields import CONFIG_MODULES, TRAINERS, installed_version, has_fields, trl_fields

TRAINER = Rule("choice", choices=tuple(TRAINERS), why="grpo: TRL's GRPOTrainer and GRPOConfig; rloo: RLOOTrainer and "
               "RLOOConfig; async_grpo: TRL's asynchronous AsyncGRPOTrainer and AsyncGRPOConfig (a vLLM server "
               "generates)", fix="e.g. `trainer: rloo`, or remove it (grpo)")
ASYNC = "async_grpo"
_TRAINER_CLASSES = {"grpo": "CurriculumGRPOTrainer", "rloo": "CurriculumRLOOTrainer", ASYNC: "CurriculumAsyncGRPOTrainer"}


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


def trainer_problems(trainer: str, curriculum, schedule, training: Mapping | None = None,
                     refused=(), num_processes: int | None = None) -> list[Problem]:
    """
    What `trainer` refuses in a recipe: for `rloo` and `async_grpo`, a TRL other than 1.16 and the curriculum's
    stages their trainer refuses; for `grpo` and `rloo`, the curriculum's `dynamic_sampling` switch (the asynchronous
    trainer's). `schedule` is the validated curriculum, or `None` when some stage is invalid: then each stage that is
    valid on its own is checked (`curriculum`: the recipe's mapping, or `None` when it has none). `training`: the
    recipe's TRL keys (`max_steps` and the batch sizes, for `async_grpo`), `refused` those whose value their own rule
    refused (said); `num_processes`: the recipe's world size (a per-prompt round's completions depend on it).
    """
    switch = curriculum.get("dynamic_sampling") if isinstance(curriculum, Mapping) else None
    if trainer != ASYNC:
        problems = [] if switch is None else [Problem(
            "curriculum.dynamic_sampling", switch, f"is the asynchronous trainer's switch (`trainer: {ASYNC}`: "
            f"zero-variance groups dropped in its rollout worker); {_TRAINER_CLASSES[trainer]} drops and refills "
            "them per stage", "remove it, and give each stage that should drop them a `dynamic_sampling:` mapping "
            f"(e.g. `dynamic_sampling: {{max_rounds: 4}}`), or use `trainer: {ASYNC}`")]  # fmt: skip
        if trainer == "grpo":
            return problems
        return problems + _release_problems(trainer, RLOO_TRL, rloo_trl_problem) + _stages_problems(
            curriculum, schedule, lambda stages: rloo_problems(stages, at="curriculum.stages"))
    training = training or {}
    max_steps = training.get("max_steps", trl_fields(ASYNC)["max_steps"]["default"])
    unstaged = curriculum is None or isinstance(curriculum, Mapping) and "stages" not in curriculum
    stages = None if unstaged else schedule.stages if schedule is not None else []
    problems = _release_problems(trainer, ASYNC_TRL, async_trl_problem) or _import_problems(trainer)
    sizes = [training.get(key, trl_fields(ASYNC)[key]["default"])
             for key in ("per_device_train_batch_size", "gradient_accumulation_steps")]  # fmt: skip
    batch = (*sizes, num_processes or 1) if all(is_int(v) and v > 0 for v in sizes) else None
    for problem in async_problems(stages, max_steps=max_steps if is_int(max_steps) else None,
                                  dynamic_sampling=switch is True, batch=batch,
                                  deepspeed=bool(training.get("deepspeed")), at="curriculum.stages"):
        if problem.key == "max_steps" and ("max_steps" in refused or max_steps == 0):
            continue  # its own rule said it (0: transformers' -1 in effect)
        if problem.key == "max_steps" and "max_steps" not in training:
            problem = Problem(problem.key, MISSING, problem.rule.replace("must be set (> 0)", "is required"),
                              problem.fix)  # (not given: AsyncGRPOConfig's default, -1, trains by epochs)
        problems.append(_in_recipe_words(problem))
    if schedule is None and not unstaged:  # the stages valid on their own (`max_steps` was said above)
        problems += _stages_problems(curriculum, None, lambda stages: [_in_recipe_words(p) for p in async_problems(
            stages, max_steps=1, at="curriculum.stages")])
    return problems


def _in_recipe_words(problem: Problem) -> Problem:
    """An [`~core.asynchronous.async_problems`] problem whose fix names the trainer's Python argument, with the
    recipe key that sets it instead (`dynamic_sampling=True`: `curriculum.dynamic_sampling: true`)."""
    fix = (problem.fix or "").replace("pass `dynamic_sampling=True` to the trainer",
                                      "set `curriculum.dynamic_sampling: true` (the trainer's switch)")
    return Problem(problem.key, problem.value, problem.rule, fix or None)


def _import_problems(trainer: str) -> list[Problem]:
    """The `trainer` problem when the installed TRL is the right release but its config class does not import (TRL
    1.16's `trl.experimental.async_grpo` needs transformers 5: on 4.57 it fails at import)."""
    if has_fields(trainer):
        return []
    module = CONFIG_MODULES.get(TRAINERS[trainer], "trl")
    return [Problem("trainer", trainer, f"needs `{module}.{TRAINERS[trainer]}`, which does not import with the "
                    f"installed packages (transformers {installed_version('transformers')})",
                    "install transformers 5 (TRL 1.16's asynchronous trainer needs it), or use `trainer: grpo`")]


def _release_problems(trainer: str, release: tuple[int, int], why) -> list[Problem]:
    """The `trainer` problem when the installed TRL is not `release` (`why`: compat's reason, or `None`)."""
    wanted = ".".join(map(str, release))
    reason = why(installed_version("trl"))
    return [Problem("trainer", trainer, reason, f"install it (`pip install 'trl=={wanted}.*'`), or use "
                    "`trainer: grpo`")] if reason else []


def _stages_problems(curriculum, schedule, refused) -> list[Problem]:
    """`refused(stages)` of the whole schedule, or when it is `None`, of each stage that is valid on its own."""
    if schedule is not None:
        return refused(schedule.stages)
    stages = curriculum.get("stages") if isinstance(curriculum, Mapping) else None
    problems = []
    for i, stage in enumerate(stages if isinstance(stages, list) else []):
        one = parsed_stage(stage)
        at = f"curriculum.stages[{i}]"
        problems += [Problem(p.key.replace("curriculum.stages[0]", at, 1), p.value, p.rule, p.fix)
                     for p in ([] if one is None else refused([one]))]
    return problems


def async_recipe_problems(model_name, training: Mapping, model: Mapping, curriculum) -> list[Problem]:
    """
    What `trainer: async_grpo` refuses in a recipe besides its curriculum, each something TRL's `AsyncGRPOTrainer`
    raises (or ignores) only once the model has loaded (`async_grpo_trainer.py`, TRL 1.16): said before.

    Args:
        model_name: The recipe's `model_name_or_path`.
        training (`Mapping`): Its `AsyncGRPOConfig` keys.
        model (`Mapping`): Its other `ModelConfig` keys.
        curriculum: Its `curriculum:` mapping (or `None`).
    """
    problems = []
    if isinstance(model_name, str) and model_name == TINY_MODEL:
        problems.append(Problem(
            "model_name_or_path", model_name, f"is built in memory, and `trainer: {ASYNC}` needs a model folder or "
            "Hub id: AsyncGRPOTrainer loads the model by name, and the vLLM server (`trl vllm-serve --model`) must "
            "serve the same one", f"give the path or Hub id of the model your vLLM server serves (or "
            f"`{BUILTIN}smollm2`)"))  # fmt: skip
    strategy = training.get("eval_strategy", "no")
    if strategy != "no":
        problems.append(Problem("eval_strategy", strategy, "is not supported by AsyncGRPOTrainer: it takes no eval "
                                "dataset (transformers' Trainer refuses an eval strategy without one)",
                                "remove it (or `eval_strategy: no`)"))
    if training.get("use_liger_kernel") is True:
        problems.append(Problem("use_liger_kernel", True, "is not supported by AsyncGRPOTrainer (it raises "
                                "NotImplementedError once the model has loaded)", "remove it"))
    if training.get("max_inflight_tasks") == 0:
        problems.append(Problem("max_inflight_tasks", 0, "would start no generation: the rollout worker sends at most "
                                "this many requests at once, so training would wait forever for samples",
                                "remove it (-1, TRL's default: max_staleness x samples a step), or set a positive "
                                "number"))
    config = training.get("accelerator_config")
    for key in ("split_batches", "dispatch_batches"):
        if isinstance(config, Mapping) and config.get(key) is False:
            problems.append(Problem(f"accelerator_config.{key}", False, "is always true with AsyncGRPOConfig (it sets "
                                    "it for its rollout queue's data loader, whatever is given)", "remove it"))
    if model.get("attn_implementation") is not None:
        problems.append(Problem("attn_implementation", model["attn_implementation"], "is not used by "
                                "AsyncGRPOTrainer: it loads the model with its own prefix-tree attention",
                                "remove it"))
    for key in ("load_in_4bit", "load_in_8bit"):
        if model.get(key) is True:
            problems.append(Problem(key, True, "is not supported by AsyncGRPOTrainer (it takes no quantization "
                                    "config)", f"remove `{key}`"))
    targets = model.get("lora_target_modules")
    if model.get("use_peft") is True and isinstance(targets, list) and "lm_head" in targets:
        problems.append(Problem("lora_target_modules", targets, "must not hold `lm_head` with AsyncGRPOTrainer: its "
                                "log-probabilities read the head's base weight, so an adapter there is ignored (TRL "
                                "raises once the model has loaded)", "remove `lm_head` from it"))
    if isinstance(curriculum, Mapping) and curriculum.get("uncertain_prompts") is not None:
        problems.append(Problem("curriculum.uncertain_prompts", curriculum["uncertain_prompts"], "is not used by "
                                "the asynchronous trainer (the per-prompt report of CurriculumCallback, which it has "
                                "not)", "remove it"))
    return problems


def parsed_stage(stage):
    """A stage mapping as a [`~core.schedule.Stage`], or `None` when it is not a valid one (said elsewhere)."""
    if not isinstance(stage, Mapping) or set(stage) - set(STAGE_KEYS) or stage_problems(stage, key=""):
        return None
    try:
        return Stage(**stage)
    except (CurriculumError, TypeError, ValueError):
        return None
