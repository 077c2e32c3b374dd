"""
What a value read back must be: a small schema language over [`~core.rules.Rule`] tables, for the files the package
reads back and checks (checkpoint states, trainer states, sweep results, run logs). A schema is a `Rule` (one value),
an [`Array`] (a numpy array), a `dict` (a mapping: each key, `name?` optional), a `tuple` (a list of exactly those
values), or a [`Nullable`], [`Each`] or [`ByField`]; [`problems_of`] lists every problem of a value, each with its key
path, and [`state_error`] makes them one [`CurriculumStateError`] naming the file and the fix.

A state's numpy arrays are kept in an `.npz` archive beside its JSON: [`split_arrays`] replaces each by a reference,
[`join_arrays`] puts them back, and [`validated`] reads the archive (through the bounded reader) and checks the whole.
No torch; numpy only when arrays are checked or read.
"""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass

from ..core.errors import MISSING, Problem, shorten_text
from ..core.rules import MAX_COUNT, Rule
from .files import MAX_FILE_BYTES, CurriculumStateError, read_file


@dataclass(frozen=True)
class Array:
    """
    A one-dimensional numpy array of `"int"` or `"number"` values, every one finite and in `[low, high]`.

    Args:
        kind (`str`): `"int"` (integer dtype) or `"number"` (integer or float dtype).
        low (`float`, *optional*): Least value.
        high (`float`, *optional*): Largest value.
        length (`int`, *optional*): The exact length.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    length: int | None = None

    def problems(self, key: str, value) -> list[Problem]:
        import numpy as np

        noun = "integers" if self.kind == "int" else "numbers"
        if not (isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in
                ("iu" if self.kind == "int" else "iuf")):  # fmt: skip
            array = isinstance(value, np.ndarray)
            what = f"an array of dtype {value.dtype} and shape {value.shape}" if array else value
            return [Problem(key, what, f"must be a one-dimensional array of {noun}")]
        if self.length is not None and len(value) != self.length:
            return [Problem(key, f"{len(value)} values", f"must hold {self.length} values")]
        values = value.astype(np.float64)
        bad = ~np.isfinite(values)
        bad |= values < (-math.inf if self.low is None else self.low)
        bad |= values > (math.inf if self.high is None else self.high)
        if not bad.any():
            return []
        where = int(bad.argmax())
        bounds = f" in [{self.low:g}, {self.high:g}]" if self.low is not None and self.high is not None else (
            f" >= {self.low:g}" if self.low is not None else "")
        return [Problem(f"{key}[{where}]", value[where].item(),
                        f"must be a finite number{bounds} ({int(bad.sum())} of {len(value)} values are not)")]


@dataclass(frozen=True)
class Nullable:
    """`null`, or what `schema` accepts."""

    schema: object


@dataclass(frozen=True)
class Each:
    """A list of at most `high` values, each accepted by `item`."""

    item: object
    high: int = MAX_COUNT


@dataclass(frozen=True)
class ByField:
    """A mapping checked with `schemas[value[field]]` (e.g. an adaptive policy's state, by policy name)."""

    field: str
    schemas: dict


def problems_of(schema, value, key: str = "") -> list[Problem]:
    """
    Every problem of `value` against `schema` (the first 20), each with its key path.

    A schema is a [`~core.rules.Rule`] (one value), an [`Array`], a `dict` (a mapping that must hold each
    key, a key ending in `?` may be absent; other keys are ignored), a `tuple` (a list of exactly those values), or a
    [`Nullable`], [`Each`] or [`ByField`].
    """
    found: list[Problem] = []
    _walk(schema, value, key, found)
    return found[:20]


def _walk(schema, value, key: str, found: list) -> None:
    if len(found) >= 20:
        return
    if isinstance(schema, (Rule, Array)):
        found += schema.problems(key, value)
    elif isinstance(schema, Nullable):
        if value is not None:
            _walk(schema.schema, value, key, found)
    elif isinstance(schema, ByField):
        if not isinstance(value, dict):
            found.append(Problem(key, value, "must be a mapping"))
        elif not isinstance(value.get(schema.field), str) or value[schema.field] not in schema.schemas:
            found.append(Problem(f"{key}.{schema.field}", value.get(schema.field, MISSING),
                                 f"must be one of {sorted(schema.schemas)}"))
        else:
            _walk(schema.schemas[value[schema.field]], value, key, found)
    elif isinstance(schema, (Each, tuple)):
        items = schema if isinstance(schema, tuple) else None
        if not isinstance(value, list):
            found.append(Problem(key, value, "must be a list"))
        elif items is not None and len(value) != len(items):
            found.append(Problem(key, value, f"must be a list of {len(items)} values"))
        elif items is None and len(value) > schema.high:
            found.append(Problem(key, f"{len(value)} values", f"must hold at most {schema.high} values"))
        else:
            for i, item in enumerate(value):
                _walk(items[i] if items is not None else schema.item, item, f"{key}[{i}]", found)
    elif isinstance(schema, dict):
        if not isinstance(value, dict):
            found.append(Problem(key or "top level", value, "must be a mapping"))
            return
        for name, sub in schema.items():
            name, optional = name.removesuffix("?"), name.endswith("?")
            path = f"{key}.{name}" if key else name
            if name in value:
                _walk(sub, value[name], path, found)
            elif not optional:
                found.append(Problem(path, MISSING, "is missing"))
    else:
        raise TypeError(f"not a schema: {schema!r}")


def state_error(path: str | os.PathLike, problems: list[Problem], fix: str,
                what: str = "values that cannot be used (the file is damaged or was edited)") -> CurriculumStateError:
    """One [`CurriculumStateError`] for the `problems` of the file `path`: `"{path} holds {what}:"`, then each."""
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return CurriculumStateError(f"{os.fspath(path)} holds {what}:\n{lines}\nFix: {fix}.")


def validated(path: str, state: dict, arrays_path: str, schema, invariants, fix: str) -> dict:
    """
    `state` (read from `path`) with its arrays joined in from `arrays_path`, checked against `schema` and then
    `invariants(state)` (a list of problems).

    Raises:
        [`CurriculumStateError`]: naming `path` and every problem found, or the archive that cannot be read, and `fix`
        (what to do).
    """
    try:
        if _has_arrays(state):
            state = join_arrays(state, _read_arrays(arrays_path, fix))
        problems = problems_of(schema, state) or invariants(state)
    except RecursionError:
        problems = [Problem(path, MISSING, "nests values too deeply")]
    if problems:
        raise state_error(path, problems, fix)
    return state


def _read_arrays(path: str, fix: str) -> dict:
    """The arrays of a state's `.npz` archive, by name (a truncated, oversized or foreign archive: one error)."""
    import io
    import zlib

    import numpy as np

    data = read_file(path, fix)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
            if unpacked > MAX_FILE_BYTES:
                raise CurriculumStateError(f"{path} unpacks to {unpacked} bytes, more than the {MAX_FILE_BYTES} read. "
                                           f"Fix: {fix}.")  # fmt: skip
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        if isinstance(error, CurriculumStateError):
            raise
        raise CurriculumStateError(f"{path} cannot be read ({shorten_text(str(error), 200)}): the file is damaged. "
                                   f"Fix: {fix}.") from None


def _has_arrays(state) -> bool:
    if isinstance(state, dict):
        return set(state) == {"__array__"} or any(_has_arrays(v) for v in state.values())
    return False


def split_arrays(state, path: str = "") -> tuple[object, dict]:
    """`state` with every numpy array replaced by a reference `{"__array__": name}`, and the arrays by name."""
    if type(state).__module__ == "numpy" and hasattr(state, "shape"):
        return {"__array__": path}, {path: state}
    if isinstance(state, dict):
        out, arrays = {}, {}
        for key, value in state.items():
            out[key], found = split_arrays(value, f"{path}.{key}" if path else str(key))
            arrays.update(found)
        return out, arrays
    return state, {}


def join_arrays(state, arrays: dict):
    """Undo [`split_arrays`] (a reference to an array the archive lacks stays as it is, for the schema to name)."""
    if isinstance(state, dict):
        if set(state) == {"__array__"}:
            name = state["__array__"]
            return arrays[name] if isinstance(name, str) and name in arrays else state
        return {key: join_arrays(value, arrays) for key, value in state.items()}
    return state
