"""
The uncertain-prompt report: per-prompt reward mean and variance over the run, the highest-variance prompts written
to `uncertain_prompts.jsonl` (the prompts worth a human look: the seeds' active-learning idea).

Compact: 16 bytes a prompt slot in numpy arrays, no texts (a map-style dataset's texts are read when the report is
written; an iterable dataset's are kept for the prompts likely to be in it only), and a checkpoint holds the touched
slots alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np

from .checkpoint import atomic_write
from .signals import group_sizes_of
from .slots import PromptSlots

ARRAYS = ("count", "seen", "mean", "m2")


class PromptReport:
    """
    Per-prompt reward mean, variance and times seen, merged round by round (Chan et al.'s parallel update); missing
    rewards (`None`, NaN, infinite) are skipped.

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
        self.mean = np.zeros(slots.num_slots, dtype=np.float32)
        self.m2 = np.zeros(slots.num_slots, dtype=np.float32)  # sum of squared deviations
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
        sizes = group_sizes_of(num_generations, len(values))
        if len(prompt_keys) != len(sizes):
            raise ValueError(f"prompt_keys has {len(prompt_keys)} entries, but the round has {len(sizes)} groups")
        start = 0
        for i, (key, size) in enumerate(zip(prompt_keys, sizes)):
            group = values[start : start + size]
            start += size
            group = group[np.isfinite(group)]
            slot = self.slots.slot_of(key)
            self.seen[slot] += 1
            if texts is not None and slot not in self.texts:
                self.texts[slot] = texts[i]
            if not len(group):
                continue
            n, mean = len(group), float(group.mean())
            total = int(self.count[slot]) + n
            delta = mean - float(self.mean[slot])
            self.m2[slot] += float(((group - mean) ** 2).sum()) + delta * delta * int(self.count[slot]) * n / total
            self.mean[slot] += delta * n / total
            self.count[slot] = total
        if len(self.texts) > 4 * max(self.size, 1):
            keep = set(self.top().tolist())
            self.texts = {slot: text for slot, text in self.texts.items() if slot in keep}

    def top(self) -> np.ndarray:
        """The slots of the report: the `size` seen prompts of highest variance (ties: lowest slot first)."""
        seen = np.flatnonzero(self.seen)
        scored = self.count[seen] > 0
        variance = np.where(scored, self.m2[seen] / np.maximum(self.count[seen], 1), -1.0)  # unscored last
        order = np.lexsort((seen, -variance))
        return seen[order[: self.size]]

    def rows(self, texts: dict | None = None) -> list[dict]:
        """
        Returns:
            `list[dict]`: The report: one row a prompt, `{"prompt_key", "prompt", "mean", "variance", "times_seen",
            "completions"}`, highest variance first. `variance` is the population variance of the prompt's finite
            rewards over the run; `completions` counts those rewards; `mean` and `variance` are `None` for a prompt
            without any (those come last). `prompt` is from `texts` (slot -> text) or the kept texts, else `None`.
        """
        texts = {**self.texts, **(texts or {})}
        rows = []
        for slot in self.top().tolist():
            count = int(self.count[slot])
            rows.append({
                "prompt_key": self.slots.key_of(slot),
                "prompt": texts.get(slot),
                "mean": float(self.mean[slot]) if count else None,
                "variance": max(float(self.m2[slot]), 0.0) / count if count else None,
                "times_seen": int(self.seen[slot]),
                "completions": count,
            })  # fmt: skip
        return rows

    def write_jsonl(self, path: str | os.PathLike, texts: dict | None = None) -> None:
        """Write [`rows`] as JSON lines, atomically ([`~grpo_curriculum.checkpoint.atomic_write`])."""
        rows = self.rows(texts)
        atomic_write(path, lambda f: f.writelines(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"
                                                  for row in rows))

    def state_dict(self) -> dict:
        """The touched slots only, as arrays (for a checkpoint), and the kept texts."""
        touched = np.flatnonzero(self.seen).astype(np.uint32)
        return {"slots": touched, **{name: getattr(self, name)[touched] for name in ARRAYS},
                "texts": [[int(slot), text] for slot, text in self.texts.items()]}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        touched = np.asarray(state["slots"], dtype=np.int64)
        if len(touched) and touched.max() >= self.slots.num_slots:
            raise ValueError(f"the prompt report holds slot {int(touched.max())}, beyond {self.slots.num_slots} "
                             "prompts: another dataset")  # fmt: skip
        for name in ARRAYS:
            array = np.zeros_like(getattr(self, name))
            array[touched] = state[name]
            setattr(self, name, array)
        self.texts = {int(slot): text for slot, text in state["texts"]}
