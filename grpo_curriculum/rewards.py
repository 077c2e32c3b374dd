"""Reward functions for the example recipes (pure Python, no model)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _text(completion) -> str:
    """The text of a completion: a string, or the last message of a conversational completion."""
    if isinstance(completion, list):
        return str(completion[-1].get("content", "")) if completion else ""
    return str(completion)


def last_number(text: str) -> float | None:
    """
    The last number in `text` (commas as thousands separators are ignored), or `None`.

    Example:
    ```python
    >>> last_number("so she pays 1,200 + 35 = 1,235 dollars.")
    1235.0
    ```
    """
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def gsm8k_accuracy_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """
    1.0 when the last number in the completion equals the GSM8K reference answer (the number after `####` in the
    dataset's `answer` column), else 0.0.

    Args:
        completions (`list[str]` or `list[list[dict]]`): Completions, plain or conversational.
        answer (`list[str]`): GSM8K `answer` column, e.g. `"... #### 72"`.

    Returns:
        `list[float]`: One reward per completion.
    """
    return last_number_reward(completions, [str(reference).split("####")[-1] for reference in answer])


def last_number_reward(completions: list, expected: list[str]) -> list[float]:
    """1.0 per completion whose last number equals the last number of its `expected` text, else 0.0 (none: 0.0)."""
    rewards = []
    for completion, reference in zip(completions, expected, strict=True):
        want, got = last_number(str(reference)), last_number(_text(completion))
        rewards.append(float(want is not None and got is not None and abs(got - want) < 1e-6))
    return rewards
