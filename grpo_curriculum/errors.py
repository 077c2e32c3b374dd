"""Errors raised for bad curriculum input: every problem at once, each with its key, value, rule and fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """
    One thing wrong with a curriculum, a recipe or a batch geometry.

    Args:
        key (`str`):
            Where the bad value lives, as a key path (e.g. `curriculum.stages[1].temperature`).
        value (`object`):
            The offending value, quoted as the user wrote it.
        rule (`str`):
            The rule the value breaks, stated positively (e.g. "must be a positive finite number").
        fix (`str`, *optional*):
            What to change to make it valid.
    """

    key: str
    value: object
    rule: str
    fix: str | None = None

    def __str__(self) -> str:
        text = f"{self.key} = {self.value!r}: {self.rule}"
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
        head = f"{len(self.problems)} problem{'s' if len(self.problems) > 1 else ''} in the curriculum"
        if self.context:
            head += f" ({self.context})"
        return head + ":\n" + "\n".join(f"  - {problem}" for problem in self.problems)


def raise_if_any(problems: list[Problem], context: str | None = None) -> None:
    """Raise a [`CurriculumError`] carrying `problems` when there is at least one."""
    if problems:
        raise CurriculumError(problems, context)
