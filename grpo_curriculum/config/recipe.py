"""
Recipes: one YAML file describing a TRL GRPO run and its curriculum.

A recipe is the flat config `trl grpo --config recipe.yaml` reads (top-level `GRPOConfig` fields, `ModelConfig`
fields such as `model_name_or_path`, `ScriptArguments` fields such as `dataset_name`), plus:

- `reward_funcs`: import paths of the reward functions, `package.module:function` or `package.module.function`;
- `num_processes`: the world size the recipe was written for (what `grpo-curriculum check` assumes by default);
- `dataset_num_prompts`: how many prompts a built-in dataset (`builtin:echo`, `builtin:count`) holds;
- `dataset_prompt_column`: the dataset column holding the prompt, renamed to `prompt` (e.g. `question` for GSM8K);
- `warm_start_steps`: supervised steps given to the built-in model (`builtin:tiny`) before RL (default 0);
- `trainer`: `grpo` (the default), `rloo` (TRL's `RLOOTrainer` and `RLOOConfig`) or `async_grpo` (TRL's asynchronous
  `AsyncGRPOTrainer` and `AsyncGRPOConfig`, generating from a vLLM server), whose config's fields the recipe's TRL
  keys are then checked against ([`~config.trainers`]);
- `curriculum`: a mapping with `stages:`, a list of [`Stage`] fields (and, with `trainer: async_grpo`,
  `dynamic_sampling: true`: the asynchronous trainer's DAPO switch).

```yaml
model_name_or_path: builtin:tiny
dataset_name: builtin:echo
reward_funcs: [grpo_curriculum.demo.tasks:echo_reward]
per_device_train_batch_size: 16
curriculum:
  stages:
    - {num_generations: 2, temperature: 0.8, until_fraction: 0.5}
    - {num_generations: 8, temperature: 1.0}
```

Validation reports every problem at once, as a [`CurriculumError`] whose problems name their key path (e.g.
`curriculum.stages[1].temperature`), the value, the rule and a fix. TRL's keys are checked against the fields of its
config dataclasses, read from a snapshot shipped with the package ([`~config.trl_fields`]), so validating a recipe
imports neither TRL nor torch; the curriculum's keys against the rule tables of [`~core.rules`]. `grpo-curriculum
train` then builds TRL's configs from the validated recipe with TRL's own parser ([`~config.arguments`]).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..core.curriculum import load_curriculum, parse_curriculum, rekey
from ..core.errors import MISSING, CurriculumError, Problem, plural, raise_if_any
from ..core.loading import find_recipe, read_yaml
from ..core.geometry import BatchGeometry, generation_kwargs_problems, split_batches_problem
from ..core.rules import COUNT, MAX_STEPS, NUM_GENERATIONS, STEPS, Rule, check, integer, is_int, suggest, unknown_keys
from ..core.schedule import Stage, StageSchedule, stage_problems
from .builtins import BUILTIN, DATASET_NAMES, MODEL_NAMES, TINY_MODEL
from .trl_fields import CLASSES, TRAINERS, field_name, has_fields, trl_fields
from .trainers import ASYNC, TRAINER, async_recipe_problems, other_trainer_problems, recipe_trainer, trainer_problems
from .engines import engine_problems
from .trl_ranges import ranged_rule, related_problems

__all__ = ["Recipe", "geometry_of", "import_reward", "load_curriculum", "load_recipe", "parse_recipe", "run_geometry",
           "starting_num_generations", "training_geometry"]

RECIPE_RULES = {  # the recipe's own keys besides `reward_funcs` and `curriculum` (TRL's: see `trl_rule`)
    "num_processes": dataclasses.replace(COUNT, fix="e.g. `num_processes: 2` (the world size the recipe is for)"),
    "dataset_num_prompts": dataclasses.replace(COUNT, fix="e.g. `dataset_num_prompts: 256`"),
    "warm_start_steps": integer(0, MAX_STEPS, fix="e.g. `warm_start_steps: 20`"),
    "dataset_prompt_column": Rule("str", low=1, why="a column name", fix="e.g. `dataset_prompt_column: question`"),
    "trainer": TRAINER,
}
RECIPE_KEYS = ("reward_funcs", *RECIPE_RULES, "curriculum")
# Paths in a recipe, `~` expanded once, up front (transformers expands `output_dir` when it writes; the folder checks
# and the lock must look at the same folder); nothing else is expanded anywhere, environment variables included.
PATH_KEYS = ("output_dir", "logging_dir", "resume_from_checkpoint", "deepspeed", "model_name_or_path", "dataset_name")
UNSUPPORTED = {
    "reward_model_name_or_path": "wrap the reward model in a reward function and list it in `reward_funcs`",
    "datasets": "name one dataset with `dataset_name` (and `dataset_config`, `dataset_train_split`)",
}
TRL_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward")


@dataclass
class Recipe:
    """
    A validated recipe.

    Args:
        path (`str` or `None`): The file it was read from.
        model_name_or_path (`str`): Model id, local path, `builtin:tiny`, or `builtin:smollm2` (fetched without the
            Hub, see [`~models.fetch_model`]).
        dataset_name (`str`): Dataset id, local path, or `builtin:echo` / `builtin:count` / `builtin:arithmetic`.
        dataset_config (`str` or `None`): Dataset configuration name (`name` of `datasets.load_dataset`).
        dataset_train_split (`str`): Split to train on.
        dataset_num_prompts (`int` or `None`): Size of a built-in dataset.
        reward_funcs (`list[str]`): Import paths of the reward functions (see [`import_reward`]).
        num_processes (`int` or `None`): World size the recipe was written for.
        warm_start_steps (`int`): Supervised warm-start steps for the built-in model.
        training (`dict`): `GRPOConfig` (or `RLOOConfig`, see `trainer`) keyword arguments. When the recipe does not
            set `num_generations` or `temperature`, they are the first stage's, so that `GRPOConfig` accepts the
            geometry the run starts in.
        model (`dict`): Other `ModelConfig` keyword arguments given (e.g. `dtype`).
        curriculum ([`StageSchedule`]): The stages; without a `curriculum:` mapping, one stage at the recipe's
            `num_generations` and `temperature` (TRL's defaults when unset).
        raw (`dict`): The mapping that was validated (file contents with the overrides applied).
        script (`dict`): Other `ScriptArguments` given (`dataset_test_split`, `dataset_streaming`, ...).
        trainer (`str`): `"grpo"` (`CurriculumGRPOTrainer`, `GRPOConfig`), `"rloo"` (`CurriculumRLOOTrainer`,
            `RLOOConfig`) or `"async_grpo"` (`CurriculumAsyncGRPOTrainer`, `AsyncGRPOConfig`).
    """

    path: str | None
    model_name_or_path: str
    dataset_name: str
    dataset_config: str | None
    dataset_train_split: str
    dataset_num_prompts: int | None
    reward_funcs: list[str]
    num_processes: int | None
    training: dict
    model: dict
    curriculum: StageSchedule
    raw: dict
    script: dict = field(default_factory=dict)
    warm_start_steps: int = 0
    dataset_prompt_column: str = "prompt"
    trainer: str = "grpo"


# --- TRL's fields ------------------------------------------------------------------------------------------------

_TYPES = {"bool": Rule("bool"), "int": Rule("int"), "float": Rule("number", finite=False), "str": Rule("str"),
          "null": Rule("null"), "dict": Rule("mapping"), "list": Rule("list"), "any": Rule("any"),
          "list[str]": Rule("list", item=Rule("str")), "list[float]": Rule("list", item=Rule("number", finite=False))}


def _trl_option(name: str, kind) -> Rule:
    """One alternative of a TRL field's type, with its range ([`~config.trl_ranges`]) for a number."""
    if not isinstance(kind, str):
        return Rule("choice", choices=tuple(kind["choice"]))
    return ranged_rule(name, _TYPES[kind]) if kind in ("int", "float") else _TYPES[kind]


def trl_rule(name: str, spec: dict) -> Rule:
    """The rule of a TRL field from its snapshot entry: its type and range, with TRL's default as the example fix."""
    options = tuple(_trl_option(name, t) for t in spec["type"])
    if name == "resume_from_checkpoint":  # `Trainer.train` also takes `true`: the newest complete checkpoint
        options += (Rule("choice", choices=(True,)),)
    rule, default = Rule("any_of", options=options, why=f"{spec['owner']}.{name}"), spec["default"]
    if default is None or rule.broken(default):
        return rule
    return dataclasses.replace(rule, fix=f"e.g. `{name}: {default!r}` (TRL's default)")


# --- parts of a recipe -------------------------------------------------------------------------------------------


_IDENT = r"[A-Za-z_]\w*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})*"


def _reward_problems(value) -> list[Problem]:
    example = "e.g. `reward_funcs: [grpo_curriculum.demo.tasks:echo_reward]`"
    if not isinstance(value, list) or not value:
        if value is None:
            return [Problem("reward_funcs", MISSING, "is required", example)]
        return [Problem("reward_funcs", value, "must be a non-empty list of import paths", example)]
    problems = []
    for i, path in enumerate(value):
        if isinstance(path, str) and (re.fullmatch(rf"{_DOTTED}:{_DOTTED}", path) or
                                      (re.fullmatch(_DOTTED, path) and "." in path)):
            continue
        fix = f"use `trl.rewards:{path}`" if path in TRL_REWARDS else "write `package.module:function`"
        problems.append(Problem(f"reward_funcs[{i}]", path, "must be an import path `package.module:function` or "
                                "`package.module.function`", fix))
    return problems


def _builtin_problems(key: str, name, known) -> list[Problem]:
    if not isinstance(name, str) or not name.startswith(BUILTIN) or name[len(BUILTIN):] in known:
        return []
    close = suggest(name[len(BUILTIN):], known)
    return [Problem(key, name, f"is not a built-in ({', '.join(BUILTIN + k for k in known)})",
                    f"did you mean `{BUILTIN}{close}`?" if close else None)]


def _split_batches_problems(value) -> list[Problem]:
    """`accelerator_config` (a mapping, or the path of a JSON file) must not turn on accelerate's `split_batches`."""
    key, config = "accelerator_config", value
    if isinstance(value, str) and os.path.isfile(value) and os.path.getsize(value) <= 1 << 16:
        key = f"accelerator_config ({value})"
        try:
            with open(value, encoding="utf-8") as file:
                config = json.load(file)
        except (OSError, ValueError):
            return []  # unreadable: TRL says so when it builds the config
    if not isinstance(config, Mapping) or config.get("split_batches") in (None, False):
        return []
    return [split_batches_problem(key, config["split_batches"])]


# --- public API --------------------------------------------------------------------------------------------------


def parse_recipe(data: dict, path: str | None = None, overrides: dict | None = None) -> Recipe:
    """
    Validate a recipe mapping (as read from YAML).

    Args:
        data (`dict`): The recipe's top-level mapping.
        path (`str`, *optional*): Where it was read from, for messages.
        overrides (`dict`, *optional*): Flat `key -> value` pairs applied over `data` (command-line flags); dashes in
            keys read as underscores.

    Returns:
        [`Recipe`]: The validated recipe.

    Raises:
        [`CurriculumError`]: listing every problem found, each with its key path, value, rule and fix.
    """
    return _parse(data, path, overrides, [])


def _parse(data, path, overrides, problems: list[Problem]) -> Recipe:
    context = f"recipe {path}" if path else "recipe"
    if not isinstance(data, Mapping):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise CurriculumError([Problem(path or "recipe", data, f"must be a YAML mapping of `key: value` settings, not "
                                       f"{kind}", "write one setting per line, e.g. `model_name_or_path: ...`")],
                              context)
    data = {**data, **{str(k).replace("-", "_"): v for k, v in (overrides or {}).items()}}
    trainer = recipe_trainer(data)  # (an invalid one: said with the recipe's own keys, checked as grpo meanwhile)
    fields = trl_fields(trainer)
    data = {field_name(key, fields) if isinstance(key, str) else key: value for key, value in data.items()}
    data.update({key: os.path.expanduser(data[key]) for key in PATH_KEYS if isinstance(data.get(key), str)})
    parts = {part: {} for part in CLASSES.values()}
    unknown = {}
    refused = set()  # TRL keys whose value breaks its own rule: left out of the rules between fields
    for key, value in data.items():
        if key in UNSUPPORTED:
            problems.append(Problem(key, value, "is not supported in grpo-curriculum recipes", UNSUPPORTED[key]))
        elif key in fields:
            found = trl_rule(key, fields[key]).problems(key, value)
            problems += found
            refused.update([key] if found else [])
            parts[CLASSES[fields[key]["owner"]]][key] = value
        elif key not in RECIPE_KEYS:
            unknown[key] = value
    if not has_fields(trainer):  # an old TRL without the trainer's config: its keys cannot be told (it says so)
        unknown = {}
    found, unknown = other_trainer_problems(unknown, trainer, data.get("trainer"))
    problems += found
    problems += unknown_keys(unknown, [*fields, *RECIPE_KEYS], None, f"a recipe key (a field of {TRAINERS[trainer]}, "
                             f"ModelConfig or ScriptArguments, or one of {list(RECIPE_KEYS)})",
                             "remove it, or check its spelling against TRL's docs")
    training, model, script = parts["training"], parts["model"], parts["script"]
    valid = {k: v for k, v in training.items() if k not in refused}
    defaults = {k: spec["default"] for k, spec in fields.items()}
    problems += related_problems(valid, fields) + engine_problems(valid, defaults)

    model_name, dataset_name = model.pop("model_name_or_path", None), script.pop("dataset_name", None)
    for key, value in (("model_name_or_path", model_name), ("dataset_name", dataset_name)):
        if value is None or value == "":
            problems.append(Problem(key, MISSING if value is None else value, "is required", f"add `{key}: ...`"))
    problems += _builtin_problems("model_name_or_path", model_name, MODEL_NAMES)
    problems += _builtin_problems("dataset_name", dataset_name, DATASET_NAMES)
    problems += check(RECIPE_RULES, {k: v for k, v in data.items() if v is not None})  # null: not given
    num_prompts, warm_start = data.get("dataset_num_prompts"), data.get("warm_start_steps") or 0
    if num_prompts is not None and isinstance(dataset_name, str) and not dataset_name.startswith(BUILTIN):
        problems.append(Problem("dataset_num_prompts", num_prompts, "only applies to built-in datasets "
                                f"({', '.join(BUILTIN + k for k in DATASET_NAMES)})", "remove it"))
    aux = training.get("router_aux_loss_coef")
    if aux is not None and "router_aux_loss_coef" not in refused and isinstance(model_name, str) and \
            model_name.startswith(BUILTIN):  # transformers refuses it for a model without experts
        problems.append(Problem("router_aux_loss_coef", aux, "only applies to "
                                f"mixture-of-experts models, which {model_name} is not", "remove it"))
    if is_int(warm_start) and warm_start > 0 and model_name != TINY_MODEL:
        problems.append(Problem("warm_start_steps", warm_start, "only applies to the built-in model `builtin:tiny`",
                                "remove it"))
    problems += _reward_problems(data.get("reward_funcs"))
    weights, funcs = training.get("reward_weights"), data.get("reward_funcs")
    if isinstance(weights, list) and isinstance(funcs, list) and funcs and "reward_weights" not in refused and \
            len(weights) != len(funcs):  # GRPOTrainer refuses it when it is built, after the model loads
        problems.append(Problem("reward_weights", weights, f"has {plural(len(weights), 'weight')} for "
                                f"{plural(len(funcs), 'reward function')}: one weight each, in the order of "
                                "`reward_funcs`", f"e.g. `reward_weights: {[1.0] * len(funcs)}`"))
    if isinstance(weights, list) and "reward_weights" not in refused:
        problems += [Problem(f"reward_weights[{i}]", w, "must be a finite number (NaN or inf makes every reward NaN "
                             "or inf: the run trains on nothing)", "e.g. `1.0` (0.0 leaves that reward out)")
                     for i, w in enumerate(weights) if isinstance(w, float) and not math.isfinite(w)]
    if trainer == ASYNC:  # (AsyncGRPOConfig sets `split_batches` itself: its rollout queue's loader)
        problems += async_recipe_problems(model_name, training, model, data.get("curriculum"))
    else:
        problems += _split_batches_problems(training.get("accelerator_config"))
    problems += generation_kwargs_problems(training.get("generation_kwargs"))

    staged = "curriculum" in data and not (trainer == ASYNC and isinstance(data["curriculum"], Mapping)
                                           and "stages" not in data["curriculum"])  # (its switch alone)
    if "curriculum" in data:
        schedule, found = parse_curriculum(data["curriculum"], recipe=True, stages_optional=trainer == ASYNC)
        if trainer == ASYNC:  # one word on it: the asynchronous trainer does not use it (whatever its value)
            found = [p for p in found if p.key != "curriculum.uncertain_prompts"]
        problems += found
        top_g = training.get("num_generations")
        if is_int(top_g) and staged:  # GRPOConfig checks it before the curriculum overrides it
            problems += NUM_GENERATIONS.problems("num_generations", top_g)
    if not staged:  # a plain GRPO run: one stage at the recipe's G and temperature
        values = {k: training.get(k, fields[k]["default"]) for k in ("num_generations", "temperature")}
        found = stage_problems(values, key="")
        problems += found
        schedule = None if found else StageSchedule([Stage(**values)])
    processes = data.get("num_processes")
    problems += trainer_problems(trainer, data.get("curriculum"), schedule, training, refused,
                                 processes if is_int(processes) and processes > 0 else None)
    max_steps = training.get("max_steps")
    steps = is_int(max_steps) and max_steps > 0 and "max_steps" not in refused  # (refused: its range said so)
    steps_problems = STEPS.problems("max_steps", max_steps) if steps else []
    problems += steps_problems
    if schedule is not None:
        training.setdefault("num_generations", schedule.stages[0].num_generations)
        training.setdefault("temperature", schedule.stages[0].temperature)
        if steps and not steps_problems:
            try:
                schedule.resolve(max_steps)
            except CurriculumError as error:
                problems += rekey(error.problems, "curriculum")
    raise_if_any(problems, context)
    return Recipe(
        path=path, model_name_or_path=model_name, dataset_name=dataset_name,
        dataset_config=script.pop("dataset_config", None),
        dataset_train_split=script.pop("dataset_train_split", "train"),
        dataset_num_prompts=num_prompts, reward_funcs=list(data["reward_funcs"]),
        num_processes=data.get("num_processes"), training=training, model=model, curriculum=schedule, raw=data,
        script=script, warm_start_steps=warm_start,
        dataset_prompt_column=data.get("dataset_prompt_column") or "prompt", trainer=trainer,
    )


def load_recipe(path: str, overrides: dict | None = None) -> Recipe:
    """
    Read and validate a recipe file.

    Args:
        path (`str`): The recipe YAML file, or the name of a recipe shipped in the package (e.g. `adaptive-demo`).
        overrides (`dict`, *optional*): Flat `key -> value` pairs applied over the file (command-line flags).

    Returns:
        [`Recipe`]: The validated recipe.

    Raises:
        [`CurriculumError`]: for a missing, empty or unparsable file (naming the line), or listing every problem.
    """
    path = find_recipe(path)
    data, problems = read_yaml(path)
    return _parse(data, path, overrides, problems)


def training_geometry(training: Mapping, num_processes: int | None = None, trainer: str = "grpo") -> BatchGeometry:
    """
    The batch geometry of `GRPOConfig(**training)` (`RLOOConfig` for `trainer: rloo`) on `num_processes` processes (1
    when `None`), with TRL's defaults for the fields not given. The eval fields are set only when evaluation runs
    (`eval_strategy` other than `"no"`).

    Raises:
        [`CurriculumError`]: listing every invalid geometry value.
    """
    fields = trl_fields(trainer)
    value = {name: training.get(name, fields[name]["default"]) for name in (
        "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size",
        "eval_strategy", "per_device_eval_batch_size", "num_generations", "num_generations_eval")}
    evaluates = value["eval_strategy"] != "no"
    return BatchGeometry.from_values(
        num_processes=1 if num_processes is None else num_processes,
        per_device_train_batch_size=value["per_device_train_batch_size"],
        gradient_accumulation_steps=value["gradient_accumulation_steps"],
        steps_per_generation=value["steps_per_generation"], generation_batch_size=value["generation_batch_size"],
        per_device_eval_batch_size=value["per_device_eval_batch_size"] if evaluates else None,
        num_generations_eval=(value["num_generations_eval"] or value["num_generations"]) if evaluates else None,
    )


def geometry_of(recipe: Recipe, num_processes: int | None = None) -> BatchGeometry:
    """
    The batch geometry of a recipe, on `num_processes` processes (default: the recipe's `num_processes`, else 1).

    Raises:
        [`CurriculumError`]: listing every invalid geometry value.
    """
    return training_geometry(recipe.training, recipe.num_processes if num_processes is None else num_processes,
                             recipe.trainer)


def starting_num_generations(recipe: Recipe, geometry: BatchGeometry) -> int:
    """
    The `num_generations` a run of `recipe` on `geometry` gives `GRPOConfig`: the first stage's G; for a per-prompt
    first stage, the recipe's top-level `num_generations` if the generation batch takes it, else the largest candidate,
    or valid G, that it does (TRL checks it when the config is built and its data loader reads prompts by it). A
    top-level `num_generations` is otherwise not used: the curriculum sets G. `geometry` is `None` for
    `trainer: async_grpo` (no generation batch): a per-prompt first stage starts at the recipe's `num_generations`
    (the stage's when not given) when it is one of the candidates, else at the largest candidate.
    """
    first = recipe.curriculum.stages[0]
    if first.adaptive is None or not first.adaptive.per_prompt:
        return first.num_generations
    given = recipe.training.get("num_generations")
    if geometry is None:  # the asynchronous trainer: no generation batch to fill, each group at its own G
        return given if given in first.adaptive.num_generations else max(first.adaptive.num_generations)
    valid = geometry.valid_num_generations()
    fitting = [g for g in first.adaptive.num_generations if g in valid] or valid
    return given if given in valid else fitting[-1]


def run_geometry(recipe: Recipe, num_processes: int | None = None) -> BatchGeometry:
    """
    The batch geometry of a run of `recipe` (see [`geometry_of`]), its eval G being `num_generations_eval`, else the
    G `GRPOConfig` gets ([`starting_num_generations`]), as in TRL.
    """
    n = recipe.num_processes if num_processes is None else num_processes
    start = starting_num_generations(recipe, training_geometry(recipe.training, n, recipe.trainer))
    return training_geometry({**recipe.training, "num_generations": start}, n, recipe.trainer)


def import_reward(path: str, key: str = "reward_funcs") -> Callable:
    """
    Import a reward function from `package.module:function` or `package.module.function` (the current directory is
    importable, as with `trl grpo`).

    Raises:
        [`CurriculumError`]: when the module or the function cannot be found, or the module fails to import (a syntax
        error, an exception).
    """
    module_name, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = importlib.import_module(module_name)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as error:
        raise CurriculumError([Problem(key, path, f"cannot be imported ({error})",
                                       "check the module is installed or in the current directory")]) from None
    except (Exception, SystemExit) as error:  # the module itself fails: a syntax error, an exception, a sys.exit
        what = f"{type(error).__name__}: {error}"
        if isinstance(error, SystemExit):  # (it ended `check` with its status and no word)
            what = f"it calls sys.exit({error.code!r}) while it is imported"
        elif isinstance(error, SyntaxError):
            what = f"{type(error).__name__}: {error.msg} ({error.filename}, line {error.lineno})"
        raise CurriculumError([Problem(key, path, f"cannot be imported: its module fails ({what})",
                                       f"fix {module_name}, or list another reward function")]) from None
    if not callable(target):
        raise CurriculumError([Problem(key, path, "is not callable", "name a function")])
    return target
