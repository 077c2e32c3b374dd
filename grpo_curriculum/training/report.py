"""
The uncertain-prompt report: per-prompt reward mean and variance over the run, the highest-variance prompts written
to `uncertain_prompts.jsonl` (the prompts worth a human look: the seeds' active-learning idea).

Compact: 24 bytes a prompt slot in numpy arrays, no texts (a map-style dataset's texts are read when the report is
written; an iterable dataset's are kept for the prompts likely to be in it only), and a checkpoint holds the touched
slots alone.

Any finite reward is taken, however large: the mean and the standard deviation are float64 and merged in scaled form,
so neither overflows (each stays within the rewards' range), up to the largest float64 (about 1.8e308).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence

import numpy as np

from ..core.signals import group_sizes_of, split_groups
from ..core.slots import PromptSlots
from .files import atomic_write

ARRAYS = ("count", "seen", "mean", "std")


class PromptReport:
    """
    Per-prompt reward mean, standard deviation and times seen, merged round by round (Chan et al.'s parallel update,
    scaled so that no intermediate overflows); missing rewards (`None`, NaN, infinite) are skipped.

    Args:
        slots ([`PromptSlots`]): Where each prompt's statistics live.
        size (`int`, *optional*, defaults to `1000`): Prompts in the written report (highest variance first); 0
            writes none.

    Example:
    ```python
    >>> report = PromptReport(PromptSlots(4, indexed=True))
    >>> report.update(["1", "3"], [1.0, 0.0, 1.0, 1.0], num_generations=2)
    >>> [row["prompt_key"] for row in report.rows()]
    ['1', '3']
    ```
    """

    def __init__(self, slots: PromptSlots, size: int = 1000):
        self.slots, self.size = slots, size
        self.count = np.zeros(slots.num_slots, dtype=np.uint32)  # finite rewards
        self.seen = np.zeros(slots.num_slots, dtype=np.uint32)  # groups (visits)
        self.mean = np.zeros(slots.num_slots, dtype=np.float64)
        self.std = np.zeros(slots.num_slots, dtype=np.float64)  # population standard deviation of the finite rewards
        self.texts: dict[int, object] = {}  # iterable datasets: texts of the prompts likely in the report

    def __len__(self) -> int:
        return int(np.count_nonzero(self.seen))

    def update(self, prompt_keys: Sequence, rewards: Sequence, num_generations, texts: Sequence | None = None) -> None:
        """
        Merge one round.

        Args:
            prompt_keys (`Sequence`): One key per group.
            rewards (`Sequence[float | None]`): Flat rewards in group order, as for [`round_stats`].
            num_generations (`int` or `Sequence[int]`): The round's G, or each group's G.
            texts (`Sequence`, *optional*): One prompt (text or messages) per group, kept for the report's
                candidates (give them when they cannot be read back from the dataset by index).
        """
        values = np.array([np.nan if r is None else r for r in rewards], dtype=np.float64)
        sizes = group_sizes_of(num_generations, len(values), prompt_keys)
        for i, (key, group) in enumerate(zip(prompt_keys, split_groups(values, sizes))):
            group = group[np.isfinite(group)]
            slot = self.slots.slot_of(key)
            self.seen[slot] += 1
            if texts is not None and slot not in self.texts:
                self.texts[slot] = texts[i]
            if not len(group):
                continue
            mean, std = _mean_std(group)
            self.mean[slot], self.std[slot] = _merge(int(self.count[slot]), float(self.mean[slot]),
                                                     float(self.std[slot]), len(group), mean, std)  # fmt: skip
            self.count[slot] += len(group)
        if len(self.texts) > 4 * max(self.size, 1):
            keep = set(self.top().tolist())
            self.texts = {slot: text for slot, text in self.texts.items() if slot in keep}

    def top(self) -> np.ndarray:
        """The slots of the report: the `size` seen prompts of highest variance (ties: lowest slot first)."""
        seen = np.flatnonzero(self.seen)
        scored = self.count[seen] > 0
        std = np.where(scored, self.std[seen], -1.0)  # unscored last
        order = np.lexsort((seen, -std))
        return seen[order[: self.size]]

    def rows(self, texts: dict | None = None) -> list[dict]:
        """
        Returns:
            `list[dict]`: The report: one row a prompt, `{"prompt_key", "prompt", "mean", "variance", "std",
            "times_seen", "completions"}`, highest variance first. `std` is the population standard deviation of the
            prompt's finite rewards over the run and `variance` its square (`None` where that exceeds the float64
            range: rewards beyond about 1e154); `completions` counts those rewards; `mean`, `variance` and `std` are
            `None` for a prompt without any (those come last). `prompt` is from `texts` (slot -> text) or the kept
            texts, else `None`.
        """
        texts = {**self.texts, **(texts or {})}
        rows = []
        for slot in self.top().tolist():
            count = int(self.count[slot])
            rows.append({
                "prompt_key": self.slots.key_of(slot),
                "prompt": texts.get(slot),
                "mean": float(self.mean[slot]) if count else None,
                "variance": _square(float(self.std[slot])) if count else None,
                "std": float(self.std[slot]) if count else None,
                "times_seen": int(self.seen[slot]),
                "completions": count,
            })  # fmt: skip
        return rows

    def write_jsonl(self, path: str | os.PathLike, texts: dict | None = None) -> None:
        """Write [`rows`] as JSON lines, atomically ([`~grpo_curriculum.training.files.atomic_write`])."""
        rows = self.rows(texts)
        atomic_write(path, lambda f: f.writelines(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"
                                                  for row in rows))

    def state_dict(self) -> dict:
        """The touched slots only, as arrays (for a checkpoint), and the kept texts."""
        touched = np.flatnonzero(self.seen).astype(np.uint32)
        return {"slots": touched, **{name: getattr(self, name)[touched] for name in ARRAYS},
                "texts": [[int(slot), text] for slot, text in self.texts.items()]}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        """Restore a [`state_dict`]; one written by grpo-curriculum's checkpoint version 2 holds `m2` (the sums of
        squared deviations) instead of `std`."""
        if "std" not in state:
            count = np.asarray(state["count"], dtype=np.float64)
            m2 = np.maximum(np.asarray(state["m2"], dtype=np.float64), 0.0)
            state = {**state, "std": np.sqrt(np.divide(m2, count, out=np.zeros_like(m2), where=count > 0))}
        touched = np.asarray(state["slots"], dtype=np.int64)
        if len(touched) and touched.max() >= self.slots.num_slots:
            raise ValueError(f"the prompt report holds slot {int(touched.max())}, beyond {self.slots.num_slots} "
                             "prompts: another dataset")  # fmt: skip
        for name in ARRAYS:
            array = np.zeros_like(getattr(self, name))
            array[touched] = state[name]
            setattr(self, name, array)
        self.texts = {int(slot): text for slot, text in state["texts"]}


def _mean_std(values: np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation of finite `values`, computed on `values / max|values|` (no overflow)."""
    scale = float(np.abs(values).max())
    if scale == 0.0:
        return 0.0, 0.0
    scaled = values / scale
    mean = float(scaled.mean())
    return min(max(mean * scale, -_MAX), _MAX), min(float(np.sqrt(((scaled - mean) ** 2).mean())) * scale, _MAX)


def _merge(n_a: int, mean_a: float, std_a: float, n_b: int, mean_b: float, std_b: float) -> tuple[float, float]:
    """
    Mean and population standard deviation of two merged samples (Chan et al.), in a scaled form: the mean is a convex
    combination and the deviation is computed relative to the largest of its terms, so no intermediate overflows.
    """
    if n_a == 0:
        return mean_b, std_b
    w_a, w_b = n_a / (n_a + n_b), n_b / (n_a + n_b)
    mean = min(max(w_a * mean_a + w_b * mean_b, -_MAX), _MAX)
    half_gap = mean_b / 2 - mean_a / 2  # finite even when mean_b - mean_a is not
    scale = max(std_a, std_b, abs(half_gap))
    if scale == 0.0:
        return mean, 0.0
    spread = w_a * (std_a / scale) ** 2 + w_b * (std_b / scale) ** 2 + 4 * w_a * w_b * (half_gap / scale) ** 2
    return mean, min(math.sqrt(spread) * scale, _MAX)


def _square(value: float) -> float | None:
    """`value ** 2`, or `None` where it exceeds the float64 range."""
    square = value * value
    return square if math.isfinite(square) else None


_MAX = sys.float_info.max


SETTLED_FILE = "settled_prompts.jsonl"


def settled_rows(policy, limit: int) -> list[dict]:
    """
    The prompts a per-prompt policy (a skipping stage's too) judges settled at the end of a run: the slots whose last
    visits were all successes (`solved`) or all failures (`never succeeded`, or `failed lately` for a prompt that
    succeeded before), with their evidence (the streak of all-equal visits and the discounted successes and
    failures), longest streak first, at most `limit`. What a practitioner filters the next run's data by.
    """
    stats = policy.prompt_stats
    streak = np.asarray(stats.zero_streak)
    slots = np.flatnonzero(streak)
    order = slots[np.lexsort((slots, -np.abs(streak[slots])))][:limit]
    rows = []
    for slot in order.tolist():
        z, successes = int(streak[slot]), float(stats.successes[slot])
        kind = "solved" if z > 0 else "failed lately" if successes > 0 else "never succeeded"
        rows.append({"prompt": policy.slots.key_of(slot), "kind": kind, "streak": abs(z),
                     "successes": round(successes, 4), "failures": round(float(stats.failures[slot]), 4)})
    return rows


def write_settled(path: str | os.PathLike, rows: list[dict], texts: dict | None = None) -> None:
    """Write [`settled_rows`] as JSON lines (with each prompt's text where `texts` has it, by slot), atomically."""
    texts = texts or {}
    atomic_write(path, lambda f: f.writelines(json.dumps({**row, **({"text": texts[row["prompt"]]} if row["prompt"] in
                                                                   texts else {})}, ensure_ascii=False) + "\n"
                                              for row in rows))  # fmt: skip
