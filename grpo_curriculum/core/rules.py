"""
The one validator: what a single value must be, checked the same way for every key of a recipe, a stage, an adaptive
stage, a batch geometry and the command line.

A [`Rule`] is data (a kind, bounds, choices, an item rule), so the rules of a whole section read as one table, and the
message of a broken rule is derived from it ("must be an integer >= 2", "must be a number in (0, 1]", "must be one of
['linear', 'cosine']"). Integers are `numbers.Integral` minus `bool` everywhere (`numpy.int64(4)` is an integer, `True`
is not), and every count the curriculum does arithmetic with has an upper bound, checked before any arithmetic.

Pure standard library: `grpo-curriculum check` imports this without torch, numpy or TRL.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import Problem

MAX_COUNT = 2**20
"""Largest count of completions, prompts, processes, per-device batches or micro-steps the curriculum accepts (a
generation round of 1,048,576 completions is far beyond any run; the bound keeps every check instantaneous)."""

MAX_STEPS = 2**31 - 1
"""Largest number of optimizer steps or rounds the curriculum accepts."""


def is_int(value) -> bool:
    """Whether `value` is an integer: `numbers.Integral` (`int`, `numpy.int64`, ...) but not `bool`."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """Whether `value` is a real number (`int`, `float`, `numpy.float64`, ...) but not `bool`; it may be NaN or inf."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def suggest(name, known) -> str | None:
    """
    The entry of `known` that `name` most likely means (dashes read as underscores, case ignored), or `None`.

    Args:
        name (`object`): What was written; only strings get a suggestion.
        known (`Iterable[str]`): The valid names.
    """
    if not isinstance(name, str) or len(name) > 200:
        return None
    known = list(known)
    normalized = name.strip().replace("-", "_")
    if normalized in known:
        return normalized
    close = difflib.get_close_matches(normalized.lower(), known, n=1, cutoff=0.6)
    return close[0] if close else None


_TYPE_NAMES = {"bool": "true or false", "str": "a string", "mapping": "a mapping", "null": "null", "any": "anything"}
_PLURALS = {"int": "integers", "number": "numbers", "str": "strings", "bool": "booleans"}


@dataclass(frozen=True)
class Rule:
    """
    What one value must be.

    Args:
        kind (`str`):
            `"int"`, `"number"` (real; finite unless `finite=False`), `"bool"`, `"str"`, `"choice"`, `"list"`,
            `"mapping"`, `"null"`, `"any"`, or `"any_of"` (one of `options`).
        low (`float`, *optional*):
            Lower bound of an `"int"` or `"number"`; for a `"str"` or `"list"`, the least length.
        high (`float`, *optional*):
            Upper bound of an `"int"` or `"number"`; for a `"list"`, the largest length.
        open_low (`bool`, *optional*, defaults to `False`): `low` itself is excluded.
        open_high (`bool`, *optional*, defaults to `False`): `high` itself is excluded.
        finite (`bool`, *optional*, defaults to `True`): A `"number"` must be finite.
        choices (`tuple`, *optional*): The values a `"choice"` may take.
        item ([`Rule`], *optional*): The rule of every item of a `"list"`.
        options (`tuple[Rule, ...]`, *optional*): The alternatives of an `"any_of"`.
        why (`str`, *optional*): Why the rule holds, appended to the message in parentheses.
        fix (`str`, *optional*): What to write instead, for the [`Problem`].
        high_is_rule (`bool`, *optional*, defaults to `False`): An `"int"`'s `high` is a rule of the value (a seed's
            `2**32 - 1`), stated as a range, rather than a bound on the input.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    finite: bool = True
    choices: tuple = ()
    item: Rule | None = None
    options: tuple = ()
    why: str | None = None
    fix: str | None = None
    high_is_rule: bool = False

    def _fits_kind(self, value) -> bool:
        if self.kind == "int":
            return is_int(value)
        if self.kind == "number":
            return is_number(value) and (not self.finite or math.isfinite(value))
        if self.kind == "choice":  # `0 == False`, but 0 is not the choice `False`
            return isinstance(value, (str, numbers.Number)) and any(
                value == c and isinstance(value, bool) == isinstance(c, bool) for c in self.choices)
        kinds = {"bool": bool, "str": str, "list": (list, tuple), "mapping": Mapping, "null": type(None)}
        return self.kind == "any" or isinstance(value, kinds[self.kind])

    def _above_low(self, size) -> bool:
        return self.low is None or (size > self.low if self.open_low else size >= self.low)

    def _below_high(self, size) -> bool:
        return self.high is None or (size < self.high if self.open_high else size <= self.high)

    def broken(self, value) -> str | None:
        """
        The message of the rule `value` breaks ("must be ..."), or `None` when `value` satisfies the rule. An integer
        above `high` breaks the upper bound only, and the message says so.
        """
        if self.kind == "any_of":
            if any(option.broken(value) is None for option in self.options):
                return None
            # A value of the kind of exactly one bounded (or finite) option breaks its range (NaN is a number, too).
            bounded = lambda option: option.low is not None or option.high is not None or (  # noqa: E731
                option.kind == "number" and option.finite)
            same = [option for option in self.options if bounded(option) and (
                is_int(value) if option.kind == "int" else is_number(value) if option.kind == "number" else False)]
            if len(same) == 1:
                broken = same[0].broken(value)
                return broken + (f" ({self.why})" if self.why and not same[0].why else "")
            return self.describe()
        if not self._fits_kind(value):
            return self.describe()
        size = len(value) if self.kind in ("str", "list") else value
        if self.kind in ("int", "number", "str", "list") and not self._above_low(size):
            return self.describe()
        if self.kind == "number" and not self._below_high(size):
            return self.describe()
        if self.kind == "int" and not self._below_high(size):  # a bound on the input, not a rule of GRPO
            return self.describe() if self.high_is_rule else f"must be at most {self.high} (a bound on the input)"
        if self.kind == "list" and not self._below_high(size):
            return f"must hold at most {self.high} values"
        if self.kind == "list" and self.item is not None and any(self.item.broken(v) for v in value):
            return self.describe()
        return None

    def noun(self) -> str:
        """What the rule accepts, as a noun phrase ("an integer", "a list of strings", ...)."""
        if self.kind == "any_of":
            return " or ".join(dict.fromkeys(option.noun() for option in self.options))
        if self.kind == "int":
            return "an integer"
        if self.kind == "number":
            return "a number"
        if self.kind == "choice":
            more = f", ... ({len(self.choices)} in all)" if len(self.choices) > 12 else ""
            return f"one of [{', '.join(map(repr, self.choices[:12]))}{more}]"
        if self.kind == "list":
            return f"a list of {_PLURALS.get(self.item.kind, 'values') if self.item else 'values'}"
        return _TYPE_NAMES[self.kind]

    def describe(self) -> str:
        """The rule as a sentence: "must be an integer >= 2 (GRPO needs ...)"."""
        text = self.noun()
        if self.kind == "int" and self.low is not None and self.high_is_rule:
            text = f"an integer in [{self.low}, {self.high}]"
        elif self.kind == "int" and self.low is not None:
            text = "a positive integer" if self.low == 1 else f"an integer >= {self.low}"
        elif self.kind == "number" and self.low == 0 and self.open_low and self.high is None:
            text = "a positive finite number"
        elif self.kind == "number" and self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            text = f"a number in {left}{self.low:g}, {self.high:g}{right}"
        elif self.kind == "number" and self.low is not None:
            text = f"{'a finite' if self.finite else 'a'} number {'>' if self.open_low else '>='} {self.low:g}"
            text += "" if self.finite else " (inf allowed)"
        elif self.kind == "number" and self.finite:
            text = "a finite number"
        elif self.kind == "list" and self.low:
            text = f"a non-empty {text[2:]}"
        elif self.kind == "str" and self.low:
            text = "a non-empty string"
        return f"must be {text}" + (f" ({self.why})" if self.why else "")

    def problems(self, key: str, value) -> list[Problem]:
        """`[Problem(key, value, message, fix)]` when `value` breaks the rule, else `[]`."""
        broken = self.broken(value)
        if broken is None:
            return []
        choices = self.choices or tuple(c for option in self.options for c in option.choices)
        close = suggest(value, [str(c) for c in choices]) if choices else None
        fix = f"did you mean `{close}`?" if close else self.fix
        return [Problem(key, value, broken, fix if fix or not choices else f"use one of {list(choices)}")]


def check(rules: Mapping[str, Rule], values: Mapping, key: str | None = None) -> list[Problem]:
    """
    Every problem of `values` against a table of rules, in the table's order; names absent from `values` are skipped.

    Args:
        rules (`Mapping[str, Rule]`): Name -> rule.
        values (`Mapping`): Name -> value.
        key (`str`, *optional*): Key path of the section, prefixed to each name (`f"{key}.{name}"`).
    """
    prefix = f"{key}." if key else ""
    return [problem for name, rule in rules.items() if name in values
            for problem in rule.problems(prefix + name, values[name])]


def unknown_keys(values: Mapping, known, key: str | None, what: str, otherwise: str) -> list[Problem]:
    """
    A problem for every key of `values` not in `known`, with a "did you mean" when one is close.

    Args:
        values (`Mapping`): The mapping as written.
        known (`Iterable[str]`): The valid keys.
        key (`str`, *optional*): Key path of the mapping.
        what (`str`): What a valid key is, e.g. `"a stage field"`.
        otherwise (`str`): The fix when nothing is close (or past the 100th unknown key), e.g. `"remove it"`.
    """
    known, prefix = list(known), f"{key}." if key else ""
    unknown = [(name, value) for name, value in values.items() if name not in known]
    return [Problem(f"{prefix}{name}", value, f"is not {what}",  # a did-you-mean costs ~0.3 ms: the first 100 get one
                    f"did you mean `{close}`?" if i < 100 and (close := suggest(name, known)) else otherwise)
            for i, (name, value) in enumerate(unknown)]


def integer(low: int, high: int, why: str | None = None, fix: str | None = None) -> Rule:
    """An integer in `[low, high]`."""
    return Rule("int", low=low, high=high, why=why, fix=fix)


def fraction(low_open: bool, high_open: bool, why: str | None = None, fix: str | None = None) -> Rule:
    """A number in the unit interval, with each end open or closed."""
    return Rule("number", low=0, high=1, open_low=low_open, open_high=high_open, why=why, fix=fix)


POSITIVE = Rule("number", low=0, open_low=True)
"""A positive finite number."""

MIN_TEMPERATURE = 0.01
TEMPERATURE = Rule("number", low=MIN_TEMPERATURE, why="below it sampling is greedy in effect, and logits / "
                   "temperature can overflow at the first step", fix="use a value such as 0.7 or 1.0")
"""A sampling temperature."""

COUNT = integer(1, MAX_COUNT)
"""A positive count of completions, prompts, processes or micro-steps."""
UNCERTAIN_PROMPTS_DEFAULT = 1000
UNCERTAIN_PROMPTS = integer(0, MAX_COUNT, why="prompts listed in uncertain_prompts.jsonl",
                            fix=f"e.g. `uncertain_prompts: {UNCERTAIN_PROMPTS_DEFAULT}` (0: no report)")

STEPS = integer(1, MAX_STEPS)
"""A positive number of optimizer steps."""

NUM_GENERATIONS = integer(2, MAX_COUNT, why="GRPO needs at least 2 completions per prompt to compute advantages",
                          fix="use 2, 4, 8, ... (a divisor of the generation batch)")
"""A group size G."""


def settings_from_mapping(cls, values, key: str, what: str, example: str, problems_of):
    """
    `(cls(**values), [])` for a settings dataclass given in YAML / dict form (an instance of `cls` is returned as is),
    or `(None, problems)`: not a mapping, an unknown key (with a "did you mean"), or what `problems_of(values, key)`
    finds. `what` names one setting ("a comparison setting"), `example` a valid mapping for the fix.
    """
    from dataclasses import fields

    if isinstance(values, cls):
        return values, []
    if not isinstance(values, Mapping):
        return None, [Problem(key, values, f"must be a mapping of {what.removeprefix('a ')}s", f"e.g. {example}")]
    names = [f.name for f in fields(cls)]
    problems = unknown_keys(values, names, key, what, f"use only {names}") + problems_of(values, key)
    return (None, problems) if problems else (cls(**values), [])
