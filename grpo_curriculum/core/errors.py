"""Errors raised for bad curriculum input: every problem at once, each with its key, value, rule and fix."""

from __future__ import annotations

import reprlib
from dataclasses import dataclass


class _ShortRepr(reprlib.Repr):
    """`reprlib.Repr` that also shortens huge integers, whose plain `repr` may even fail (reprlib cuts the rest)."""

    def __init__(self):
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = 60
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 8
        self.maxdict, self.maxlevel = 6, 3

    def repr_int(self, x, level):
        if x.bit_length() > 200:  # over 60 digits; ints over 4300 digits cannot even be printed
            return f"<integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


_SHORT = _ShortRepr()


def shorten_text(text: str, limit: int = 100) -> str:
    """`text` cut in the middle to at most about `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...<{len(text) - limit} characters>...{text[-limit // 2 :]}"


def list_text(values, sep: str = ", ", last: str | None = None, limit: int = 12) -> str:
    """
    `values` written out, `sep` between them (`last` before the final one, e.g. `" or "`), at most `limit` of them: a
    longer list shows its first ones, `...`, its last one and how many it holds, so a message stays one short line.
    """
    items = [str(value) for value in values]
    if len(items) > limit:
        return f"{sep.join(items[: limit - 2])}{sep}...{last or sep}{items[-1]} ({len(items)} in all)"
    if last is None or len(items) < 2:
        return sep.join(items)
    return sep.join(items[:-1]) + last + items[-1]


def plural(n: int, word: str) -> str:
    """`n` and `word`, in the plural unless `n` is 1: `"1 prompt"`, `"2 prompts"`, `"3 processes"`, `"2 switches"`."""
    return f"{n} {word if n == 1 else word + ('es' if word.endswith(('s', 'ch')) else 's')}"


def shorten(value) -> str:
    """A `repr` of `value` short enough for a message, whatever its size or depth."""
    try:
        return _SHORT.repr(value)
    except Exception:  # a value whose own __repr__ fails
        return f"<{type(value).__name__}>"


class _Missing:
    """The value of a key that was not given (its problem prints no `= value`)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


@dataclass(frozen=True)
class Problem:
    """
    One thing wrong with a curriculum, a recipe or a batch geometry.

    Args:
        key (`str`):
            Where the bad value lives, as a key path (e.g. `curriculum.stages[1].temperature`).
        value (`object`):
            The offending value, quoted as the user wrote it (shortened in the message when long); [`MISSING`] when
            the key was not given or the problem is with a whole file.
        rule (`str`):
            The rule the value breaks, stated positively (e.g. "must be a positive finite number").
        fix (`str`, *optional*):
            What to change to make it valid.
    """

    key: str
    value: object
    rule: str
    fix: str | None = None

    def __repr__(self) -> str:
        return f"Problem(key={shorten(self.key)}, value={shorten(self.value)}, rule={self.rule!r}, fix={self.fix!r})"

    def __str__(self) -> str:
        key = shorten_text(str(self.key), 160)
        text = f"{key}: {self.rule}" if self.value is MISSING else f"{key} = {shorten(self.value)}: {self.rule}"
        if self.fix:
            text += f"\n    fix: {self.fix}"
        return text


class CurriculumError(ValueError):
    """
    Raised when a curriculum, a recipe or a batch geometry is invalid. Carries every problem found, not just the first.

    Args:
        problems (`list[Problem]`):
            Everything that is wrong.
        context (`str`, *optional*):
            One line saying what was being validated (e.g. the recipe path or the batch geometry).
    """

    def __init__(self, problems: list[Problem], context: str | None = None):
        if not problems:
            raise ValueError("CurriculumError needs at least one problem")
        self.problems = list(problems)
        self.context = context
        super().__init__(self.format())

    def format(self) -> str:
        head = plural(len(self.problems), "problem")
        if all(str(problem.key).startswith("curriculum") for problem in self.problems):
            head += " in the curriculum"  # else: a recipe's other keys, a flag, a file: the context says where
        if self.context:
            head += f" ({self.context})"
        return head + ":\n" + "\n".join(f"  - {problem}" for problem in self.problems)


class GeometryError(CurriculumError):
    """
    A well-formed recipe whose `num_generations` (a stage's, an adaptive candidate's or the eval one) does not fit the
    batch geometry it runs on: `grpo-curriculum check` and `train` exit with status 1 for it (2 for malformed input).
    """


def raise_if_any(problems: list[Problem], context: str | None = None) -> None:
    """Raise a [`CurriculumError`] carrying `problems` when there is at least one."""
    if problems:
        raise CurriculumError(problems, context)
