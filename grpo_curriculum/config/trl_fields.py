"""
The fields of TRL's `GRPOConfig`, `ModelConfig` and `ScriptArguments` (name, type, default, choices), which a recipe's
top-level keys are checked against, without importing TRL.

Importing TRL's config classes takes seconds (they pull in torch and transformers), so the package ships a snapshot,
`trl_fields.json`, generated from the installed TRL and keyed by the versions of TRL and transformers (`GRPOConfig`
inherits `transformers.TrainingArguments`). [`trl_fields`] uses it when both installed versions match, read with
`importlib.metadata` (no import), and introspects the live classes otherwise. A test regenerates the snapshot from the
installed TRL and compares it with the shipped file, so an upgrade fails loudly until it is regenerated:

```bash
python -m grpo_curriculum.config.trl_fields          # rewrite grpo_curriculum/trl_fields.json from the installed TRL
python -m grpo_curriculum.config.trl_fields --check  # exit 1 when the shipped file differs
```

Types are written in a small vocabulary that [`~core.rules.Rule`] reads: a list of alternatives, each one of
`"bool"`, `"int"`, `"float"`, `"str"`, `"null"`, `"dict"`, `"list"`, `"list[str]"`, `"list[float]"`, `"any"` (not
checked here; TRL checks it when the config is built) or `{"choice": [...]}` (an enum's values, a `Literal`, or the
field's `choices` metadata).
"""

from __future__ import annotations

import enum
import functools
import importlib.metadata
import json
import sys
import types
import typing
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("trl_fields.json")
CLASSES = {"GRPOConfig": "training", "ModelConfig": "model", "ScriptArguments": "script"}
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
    if origin is list and args and args[0] in (str, float):
        return [f"list[{_SIMPLE[args[0]]}]"]
    return [_SIMPLE.get(origin or tp, "any")]


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


def describe_trl() -> dict:
    """
    Introspect the installed TRL's config classes.

    Returns:
        `dict`: `{"trl": version, "transformers": version, "fields": {name: {"owner", "type", "default"}}}`, the
        fields in TRL's order (a name in several classes belongs to the last, as [`CLASSES`] lists them).
    """
    import dataclasses

    import trl

    fields = {}
    for name in CLASSES:
        cls = getattr(trl, name)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            alternatives = _alternatives(hints.get(f.name, typing.Any))
            choices = f.metadata.get("choices")
            if choices is not None:
                alternatives = [{"choice": list(choices)}] + ["null"] * ("null" in alternatives)
            extra = ACCEPTED_BEYOND_ANNOTATION.get(f.name, [])
            alternatives = extra + [kind for kind in alternatives if kind not in extra]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            default = None if default is dataclasses.MISSING else _jsonable(default)
            fields[f.name] = {"owner": name, "type": alternatives, "default": default}
    return {"trl": _version("trl"), "transformers": _version("transformers"), "fields": fields}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def trl_fields() -> dict[str, dict]:
    """
    The fields of TRL's config classes: `{name: {"owner": class name, "type": [alternatives], "default": value}}`.

    Read from the shipped snapshot when the installed TRL and transformers are the versions it was generated from,
    else from the live classes (which imports TRL: seconds instead of milliseconds).
    """
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    if (snapshot["trl"], snapshot["transformers"]) == (_version("trl"), _version("transformers")):
        return snapshot["fields"]
    return describe_trl()["fields"]


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
    lines = [f"{json.dumps(name)}: {json.dumps(spec, sort_keys=True)}" for name, spec in snapshot["fields"].items()]
    head = f'{{"trl": {json.dumps(snapshot["trl"])}, "transformers": {json.dumps(snapshot["transformers"])}, '
    return head + '"fields": {\n' + ",\n".join(lines) + "\n}}\n"


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
                           f" (TRL {_version('trl')}, transformers {_version('transformers')})")


if __name__ == "__main__":
    raise SystemExit(main())
