"""
The *arithmetic* task for pretrained chat models: "What is 12 + 7? Answer with just the number." as a conversation,
rewarded 1.0 when the last number of the answer is right.

Prompts mix six levels of difficulty, from one-digit sums to two-digit products ([`LEVELS`]). Every problem belongs
to exactly one split, decided by a hash of its text ([`split_of`]), so training and held-out prompts never overlap
whatever the seeds. Pure Python: no torch, no tokenizer; `datasets` is imported when a dataset is built.

Measured once on `SmolLM2-135M-Instruct` (`builtin:smollm2`; 12 random problems a level, 8 samples each at
temperature 0.7, 14 new tokens): success about 0.26 on `add1`, 0.33 on `mul1`, 0.14 on `add2`, 0.04-0.05 on `sub2`
and `mul21` (`mul2` not measured); on the easy levels most prompts are mixed (some samples right, some wrong), the
regime where GRPO's groups carry signal, and the hard ones are mostly all-wrong.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass

from ..rewards import last_number_reward

INSTRUCTION = "Answer with just the number."
EVAL_SHARE = 8  # one problem in EVAL_SHARE is held out (by hash of its text)


@dataclass(frozen=True)
class Level:
    """
    One difficulty level: every `a op b` with `a` in `first` and `b` in `second` (both inclusive ranges); with
    `op == "-"` only `a >= b` (answers are never negative).
    """

    name: str
    op: str
    first: tuple[int, int]
    second: tuple[int, int]
    description: str

    def problems(self) -> list[tuple[int, int]]:
        pairs = itertools.product(range(self.first[0], self.first[1] + 1), range(self.second[0], self.second[1] + 1))
        return [(a, b) for a, b in pairs if self.op != "-" or a >= b]


LEVELS: dict[str, Level] = {
    level.name: level
    for level in (
        Level("add1", "+", (1, 9), (1, 9), "one-digit sums"),
        Level("mul1", "*", (2, 9), (2, 9), "one-digit products"),
        Level("add2", "+", (10, 99), (10, 99), "two-digit sums"),
        Level("sub2", "-", (10, 99), (10, 99), "two-digit differences (non-negative)"),
        Level("mul21", "*", (10, 99), (2, 9), "two-digit times one-digit products"),
        Level("mul2", "*", (10, 99), (10, 99), "two-digit products"),
    )
}
"""The difficulty levels, easiest first."""


def question(a: int, op: str, b: int) -> str:
    """The text of a problem, e.g. `"12 + 7"`."""
    return f"{a} {op} {b}"


def solve(a: int, op: str, b: int) -> int:
    """The exact answer of `a op b`."""
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def split_of(a: int, op: str, b: int) -> str:
    """`"eval"` for one problem in [`EVAL_SHARE`] (by SHA-1 of its text, stable across runs and machines), else
    `"train"`."""
    digest = hashlib.sha1(question(a, op, b).encode()).digest()
    return "eval" if int.from_bytes(digest[:4], "big") % EVAL_SHARE == 0 else "train"


def messages(a: int, op: str, b: int) -> list[dict]:
    """The conversational prompt of a problem: one user turn (the chat template adds the system prompt, if any)."""
    return [{"role": "user", "content": f"What is {question(a, op, b)}? {INSTRUCTION}"}]


def arithmetic_dataset(num_prompts: int = 256, seed: int = 0, split: str = "train",
                       levels: tuple[str, ...] | None = None):  # fmt: skip
    """
    The *arithmetic* task: conversational prompts asking for the result of a sum, difference or product, with mixed
    difficulty ([`LEVELS`]), scored by [`arithmetic_reward`].

    Each level gets an equal share of the prompts (the first levels one more when `num_prompts` does not divide
    evenly); within a level, problems are drawn without replacement from the split's problems, starting over (in a
    new order) only when the level's share exceeds them. The rows are then shuffled.

    Args:
        num_prompts (`int`, *optional*, defaults to `256`):
            Number of rows.
        seed (`int`, *optional*, defaults to `0`):
            Seed of the draw; the same seed gives the same rows.
        split (`str`, *optional*, defaults to `"train"`):
            `"train"` or `"eval"`: disjoint sets of problems (see [`split_of`]), whatever the seeds.
        levels (`tuple[str, ...]`, *optional*):
            Levels to draw from (default: all of them, in equal shares).

    Returns:
        [`~datasets.Dataset`]: Columns `prompt` (a list with one user message), `answer` (the exact result, as a
        string), `level` (its [`LEVELS`] key) and `question` (e.g. `"12 + 7"`).

    Example:
    ```python
    >>> arithmetic_dataset(2, seed=0, levels=("add1",))[0]["prompt"]
    [{'role': 'user', 'content': 'What is 5 + 6? Answer with just the number.'}]
    ```
    """
    from datasets import Dataset

    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    names = tuple(LEVELS) if levels is None else tuple(levels)
    unknown = [name for name in names if name not in LEVELS]
    if unknown or not names:
        raise ValueError(f"unknown levels {unknown or names!r}; use some of {list(LEVELS)}")
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be a positive integer, got {num_prompts!r}")
    rng = random.Random(f"arithmetic-{seed}-{split}")
    rows = []
    for i, name in enumerate(names):
        level = LEVELS[name]
        share = num_prompts // len(names) + (i < num_prompts % len(names))
        pool = [(a, b) for a, b in level.problems() if split_of(a, level.op, b) == split]
        drawn: list[tuple[int, int]] = []
        while len(drawn) < share:
            drawn += rng.sample(pool, min(len(pool), share - len(drawn)))
        for a, b in drawn:
            rows.append({"prompt": messages(a, level.op, b), "answer": str(solve(a, level.op, b)), "level": name,
                         "question": question(a, level.op, b)})  # fmt: skip
    rng.shuffle(rows)
    return Dataset.from_list(rows)


def arithmetic_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """
    1.0 when the last number in the completion equals `answer` exactly, else 0.0 (no number: 0.0).

    Args:
        completions (`list[str]` or `list[list[dict]]`): Completions, plain or conversational (the last message's
            `content` is read).
        answer (`list[str]`): The exact results (the dataset's `answer` column).

    Returns:
        `list[float]`: One reward per completion.
    """
    return last_number_reward(completions, answer)
