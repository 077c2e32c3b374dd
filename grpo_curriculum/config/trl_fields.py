"""
The fields of TRL's `GRPOConfig` (or, for a recipe's `trainer: rloo`, `RLOOConfig`; for `trainer: async_grpo`,
`AsyncGRPOConfig` from `trl.experimental.async_grpo`), `ModelConfig` and
`ScriptArguments` (name, type, default, choices), which a recipe's top-level keys are checked against, without
importing TRL.

Importing TRL's config classes takes seconds (they pull in torch and transformers), so the package ships a snapshot,
`trl_fields.json`, generated from the installed TRL and keyed by the versions of TRL and transformers (`GRPOConfig`
inherits `transformers.TrainingArguments`). [`trl_fields`] uses it when both installed versions match, read with
`importlib.metadata` (no import), and introspects the live classes otherwise. A test regenerates the snapshot from the
installed TRL and compares it with the shipped file, so an upgrade fails loudly until it is regenerated. It holds one
field set a trainer ([`TRAINERS`]): `"fields"` for `GRPOConfig`, `"rloo_fields"` for `RLOOConfig` (whose defaults
differ, e.g. `num_generations` 2 and `beta` 0.05, and which lacks GRPO's loss options and has `normalize_advantages`
and `reward_clip_range`), `"async_grpo_fields"` for `AsyncGRPOConfig` (no generation batch, no reference model; the
rollout queue's `max_staleness`, `weight_sync_steps`, `vllm_server_base_url`, ...):

```bash
python -m grpo_curriculum.config.trl_fields          # rewrite grpo_curriculum/trl_fields.json from the installed TRL
python -m grpo_curriculum.config.trl_fields --check  # exit 1 when the shipped file differs
```

Types are written in a small vocabulary that [`~core.rules.Rule`] reads: a list of alternatives, each one of
`"bool"`, `"int"`, `"float"`, `"str"`, `"null"`, `"dict"`, `"list"`, `"list[str]"`, `"list[float]"` (a list or a
tuple of them: `reward_clip_range`), `"any"` (not checked here; TRL checks it when the config is built) or
`{"choice": [...]}` (an enum's values, a `Literal`, the field's `choices` metadata, or for a `str` field whose values
the code that reads it lists, those: see [`derived_choices`]). `lr_scheduler_kwargs` also has `"keywords"`: scheduler
-> the keyword names its function takes from it (see [`scheduler_keywords`]), and a field typed `str | list[E]` (an
enum `E`: `debug`) `"words"`, the values of `E` its list (or its string, one of them) may hold.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib.metadata
import inspect
import json
import sys
import types
import typing
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("trl_fields.json")
TRAINERS = {"grpo": "GRPOConfig", "rloo": "RLOOConfig", "async_grpo": "AsyncGRPOConfig"}
"""A recipe's `trainer` -> the TRL config class its training keys are fields of (`grpo`, the default, first)."""
CONFIG_MODULES = {"AsyncGRPOConfig": "trl.experimental.async_grpo"}
"""Where a config class of [`TRAINERS`] lives when it is not in `trl` itself (TRL 1.16's asynchronous trainer)."""
SHARED = {"ModelConfig": "model", "ScriptArguments": "script"}
CLASSES = {**dict.fromkeys(TRAINERS.values(), "training"), **SHARED}
"""TRL's config classes a recipe's keys belong to, and the [`Recipe`] attribute each one's values go to."""

_SIMPLE = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null", dict: "dict", list: "list"}


def _alternatives(tp) -> list:
    """An annotation in the snapshot's vocabulary (see the module docstring)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):  # `IntervalStrategy | str`
            args = tuple(a for a in args if a is not str)
        found = [alt for a in args for alt in _alternatives(a)]
        return [alt for i, alt in enumerate(found) if alt not in found[:i]]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return [{"choice": list(args)}]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return [{"choice": [member.value for member in tp]}]
    if origin in (list, tuple) and args and args[0] in (str, float) and all(a in (args[0], ...) for a in args):
        return [f"list[{_SIMPLE[args[0]]}]"]  # (a tuple: YAML and TRL's parser give a list)
    return [_SIMPLE.get(origin or tp, "any")]


def _enum_items(tp) -> list | None:
    """The values of `E` for an annotation holding `list[E]`, `E` an enum (else `None`)."""
    for arg in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,):
        items = typing.get_args(arg) if typing.get_origin(arg) is list else ()
        if items and isinstance(items[0], type) and issubclass(items[0], enum.Enum):
            return [member.value for member in items[0]]
    return None


def _jsonable(value):
    """`value` as the snapshot stores it (an enum as its value, a tuple as a list), or `None` if JSON cannot."""
    value = value.value if isinstance(value, enum.Enum) else value
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return None


ACCEPTED_BEYOND_ANNOTATION = {"fsdp": ["bool", "list[str]"]}
"""Types transformers accepts for a field beyond its annotation: `fsdp` is annotated `str | None`, yet
`TrainingArguments` takes `true` (transformers 5's form: FSDP on, configured by `fsdp_config`) and a list of
`FSDPOption` values as well as the deprecated string (`_process_fsdp_args`)."""


DISPATCHED = ("loss_type", "importance_sampling_level", "scale_rewards", "multi_objective_aggregation")
"""`str` fields the trainer dispatches on (`if self.loss_type == "grpo": ... elif ...`), read by no enum: any other
value fails mid-training, so their values are the string constants the source of `GRPOTrainer`, `GRPOConfig` and
their base classes compares them with."""


def compared_constants(source: str, names) -> dict[str, list[str]]:
    """
    The string constants `source` compares `self.<name>`, `args.<name>` or `self.args.<name>` with (`==`, `!=`, `in`,
    `not in` a list, tuple or set of them), for each of `names`, in the order they first appear.
    """
    found = {name: [] for name in names}
    nodes = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Compare)]
    for node in sorted(nodes, key=lambda node: (node.lineno, node.col_offset)):
        sides = [node.left, *node.comparators]
        named = [side.attr for side in sides if isinstance(side, ast.Attribute) and side.attr in found and (
            isinstance(side.value, ast.Name) and side.value.id in ("self", "args") or
            isinstance(side.value, ast.Attribute) and side.value.attr == "args")]  # fmt: skip
        constants = [c.value for side in sides for c in (side.elts if isinstance(side, (ast.List, ast.Tuple, ast.Set))
                                                          else [side])
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        for name in named:
            found[name] += [c for c in constants if c not in found[name]]
    return found


def _cache_implementations() -> list[str]:
    """The `cache_implementation` names `GenerationConfig.validate` takes: `ALL_CACHE_IMPLEMENTATIONS` and the names
    it adds to them there (transformers 5: `"paged"`, continuous batching)."""
    from transformers.generation import configuration_utils

    names = list(getattr(configuration_utils, "ALL_CACHE_IMPLEMENTATIONS", ()))
    source = _source(configuration_utils.GenerationConfig.validate)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Name) and \
                node.left.id == "ALL_CACHE_IMPLEMENTATIONS" and isinstance(node.right, ast.Tuple):
            names += [c.value for c in node.right.elts if isinstance(c, ast.Constant) and c.value not in names]
    return names


def _source(target) -> str:
    import textwrap

    return textwrap.dedent(inspect.getsource(target))


def derived_choices() -> dict[str, list]:
    """
    The values of `str` fields whose type does not list them, from the installed libraries: [`DISPATCHED`] from the
    source of `GRPOTrainer` and `GRPOConfig` (and their base classes'), `torch_compile_backend` from accelerate's
    `DynamoBackend` (which `TorchDynamoPlugin` reads it as, upper-cased), `cache_implementation` from transformers'
    `GenerationConfig`.
    """
    import trl
    from accelerate.utils import DynamoBackend

    modules = dict.fromkeys(cls.__module__ for cls in (*trl.GRPOTrainer.__mro__, *trl.GRPOConfig.__mro__))
    sources = [_source(sys.modules[name]) for name in modules if name.split(".")[0] in ("trl", "transformers")]
    found = compared_constants("\n".join(sources), DISPATCHED)
    choices = {name: values for name, values in found.items() if values}
    choices["torch_compile_backend"] = [backend.value.lower() for backend in DynamoBackend]
    caches = _cache_implementations()
    return {**choices, **({"cache_implementation": caches} if caches else {})}


def scheduler_keywords() -> dict[str, list[str] | None]:
    """
    Scheduler type -> the `lr_scheduler_kwargs` names its function (transformers' `TYPE_TO_SCHEDULER_FUNCTION`) takes,
    besides the ones `get_scheduler` passes itself; `None` for a scheduler `get_scheduler` passes none of them to
    (`constant`, `constant_with_warmup`). A function taking `**kwargs` on to a class (`ReduceLROnPlateau`, `GreedyLR`)
    takes that class's. A scheduler whose names cannot be read is left out (its keywords are not checked).
    """
    from transformers import optimization

    passed = {"self", "optimizer", "num_warmup_steps", "num_training_steps"}
    ignores = set()  # types `get_scheduler` calls without `scheduler_specific_kwargs` (`if name == X: return f(...)`)
    for node in ast.walk(ast.parse(_source(optimization.get_scheduler))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and \
                isinstance(node.test.comparators[0], ast.Attribute) and isinstance(node.body[0], ast.Return) and \
                isinstance(node.body[0].value, ast.Call) and all(k.arg for k in node.body[0].value.keywords):
            ignores.add(optimization.SchedulerType[node.test.comparators[0].attr].value)
    keywords = {}
    for kind, function in optimization.TYPE_TO_SCHEDULER_FUNCTION.items():
        name = getattr(kind, "value", kind)
        target = function
        for _ in range(2):  # a function passing **kwargs on: the class (or function) it calls with them
            parameters = inspect.signature(target).parameters.values()
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
                break
            calls = [node.func.id for node in ast.walk(ast.parse(_source(target))) if isinstance(node, ast.Call) and
                     isinstance(node.func, ast.Name) and any(k.arg is None for k in node.keywords)]
            target = getattr(inspect.getmodule(target), calls[0], None) if len(calls) == 1 else None
            if target is None:
                break
        if target is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            continue
        keywords[name] = None if name in ignores else [p.name for p in parameters if p.name not in passed]
    return keywords


def config_class(name: str):
    """
    TRL's config class `name` (one of [`TRAINERS`]' or [`SHARED`]'), imported from `trl` or its
    [`CONFIG_MODULES`] entry (without TRL's notice that `trl.experimental` is experimental), or `None` when the
    installed TRL has none (TRL 1.14 has no `trl.experimental.async_grpo`).
    """
    import importlib
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*trl.experimental")
            module = importlib.import_module(CONFIG_MODULES.get(name, "trl"))
    except ImportError:
        return None
    return getattr(module, name, None)


def fields_key(trainer: str) -> str:
    """The snapshot's key of a trainer's field set: `"fields"` for `grpo`, `"rloo_fields"` for `rloo`."""
    return "fields" if trainer == "grpo" else f"{trainer}_fields"


def describe_trl() -> dict:
    """
    Introspect the installed TRL's config classes.

    Returns:
        `dict`: `{"trl": version, "transformers": version, "fields": {name: {"owner", "type", "default"}},
        "rloo_fields": {...}}`, one field set a trainer of [`TRAINERS`] that the installed TRL has: its config class,
        `ModelConfig` and `ScriptArguments`, in TRL's order (a name in several classes belongs to the trainer's config
        class if it has it, else to the last: `AsyncGRPOConfig.dtype`, not `ModelConfig.dtype`, which the recipe
        parser leaves out for that trainer).
    """
    derived, keywords = derived_choices(), scheduler_keywords()
    snapshot = {"trl": installed_version("trl"), "transformers": installed_version("transformers")}
    for trainer, config in TRAINERS.items():
        if config_class(config) is not None:
            snapshot[fields_key(trainer)] = _describe_classes([config, *SHARED], derived, keywords)
    return snapshot


def _describe_classes(names: list[str], derived: dict, keywords: dict) -> dict:
    """The fields of TRL's config classes `names`, the trainer's first (see [`describe_trl`])."""
    import dataclasses

    fields = {}
    for name in names:
        cls = config_class(name)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init or fields.get(f.name, {}).get("owner") == names[0]:
                continue
            alternatives = _alternatives(hints.get(f.name, typing.Any))
            choices = f.metadata.get("choices")
            if choices is not None:
                alternatives = [{"choice": list(choices)}] + ["null"] * ("null" in alternatives)
            if f.name in derived and "str" in alternatives:
                alternatives = [{"choice": derived[f.name]} if alt == "str" else alt for alt in alternatives]
            extra = ACCEPTED_BEYOND_ANNOTATION.get(f.name, [])
            alternatives = extra + [kind for kind in alternatives if kind not in extra]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            default = None if default is dataclasses.MISSING else _jsonable(default)
            fields[f.name] = {"owner": name, "type": alternatives, "default": default}
            words = _enum_items(hints.get(f.name))
            if words:  # `debug: str | list[DebugOption]`: a list of them, or one of them
                fields[f.name]["words"] = words
    if "lr_scheduler_kwargs" in fields:
        fields["lr_scheduler_kwargs"]["keywords"] = keywords
    return fields


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _snapshot() -> dict:
    """The shipped snapshot when the installed TRL and transformers are the versions it was generated from, else
    the live classes' (which imports TRL: seconds instead of milliseconds)."""
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    if (snapshot["trl"], snapshot["transformers"]) == (installed_version("trl"), installed_version("transformers")):
        return snapshot
    return describe_trl()


def trl_fields(trainer: str = "grpo") -> dict[str, dict]:
    """
    The fields a recipe of `trainer` ([`TRAINERS`]) may set: `{name: {"owner": class name, "type": [alternatives],
    "default": value}}`, those of its TRL config class (`GRPOConfig`, `RLOOConfig`, `AsyncGRPOConfig`), `ModelConfig`
    and `ScriptArguments`. A TRL without the trainer's class (an old release, which `trainer: rloo` and
    `trainer: async_grpo` are refused on) gives `GRPOConfig`'s.
    """
    snapshot = _snapshot()
    return snapshot.get(fields_key(trainer), snapshot["fields"])


def has_fields(trainer: str) -> bool:
    """Whether the installed TRL has `trainer`'s config class (else [`trl_fields`] gives `GRPOConfig`'s)."""
    return fields_key(trainer) in _snapshot()


trl_fields.cache_clear = _snapshot.cache_clear  # (read the snapshot, or the live classes, again)


# transformers 5.23 renamed `TrainingArguments.gradient_checkpointing[_kwargs]` to `activation_checkpointing[_kwargs]`
# (the old names stay, deprecated): on an older transformers (4.57 to 5.22) a recipe's new name reads as the old one.
RENAMED_FIELDS = {"activation_checkpointing": "gradient_checkpointing",
                  "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}  # fmt: skip


def field_name(key: str, fields: dict) -> str:
    """`key` as the installed transformers names that field (`fields`: [`trl_fields`]'s)."""
    old = RENAMED_FIELDS.get(key)
    return old if key not in fields and old in fields else key


def render(snapshot: dict) -> str:
    """The snapshot as written to `trl_fields.json`: one field a line, so a TRL upgrade reads as a short diff."""
    sections = []
    for key in [fields_key(trainer) for trainer in TRAINERS if fields_key(trainer) in snapshot]:
        lines = [f"{json.dumps(name)}: {json.dumps(spec, sort_keys=True)}" for name, spec in snapshot[key].items()]
        sections.append(f'{json.dumps(key)}: {{\n' + ",\n".join(lines) + "\n}")
    head = f'{{"trl": {json.dumps(snapshot["trl"])}, "transformers": {json.dumps(snapshot["transformers"])}, '
    return head + ", ".join(sections) + "}\n"


def write_generated(path: Path, text: str, check: bool, stale: str, wrote: str = "") -> int:
    """Write a generated file, or with `check` print whether `path` holds `text` and exit 1 when it does not (`stale`:
    what the message tells the user to run)."""
    if check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"{path}: {'up to date' if same else stale}")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}{wrote}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Write `trl_fields.json` from the installed TRL, or with `--check` exit 1 when the shipped one differs."""
    argv = sys.argv[1:] if argv is None else argv
    return write_generated(SNAPSHOT, render(describe_trl()), argv == ["--check"],
                           f"differs from the installed TRL: run python -m {__name__}",
                           f" (TRL {installed_version('trl')}, transformers {installed_version('transformers')})")


if __name__ == "__main__":
    raise SystemExit(main())
