"""
The prompt stream: the unique prompts generation rounds consume, in the order TRL's sampler would give them whatever G
each round uses, and the rows a process builds from a round's prompts.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json

import numpy as np
import torch
from datasets import Dataset, IterableDataset

from ..core.slots import PromptSlots


class PromptStream:
    """
    The sequence of unique prompts consumed by generation rounds, independent of G.

    With a constant G it yields exactly the prompts TRL's `RepeatSampler` (map-style datasets) or
    `repeat_iterable_dataset` (iterable datasets) would: a fresh permutation (seeded with `seed`) a pass, consumed in
    order, a pass's tail too short for a whole round dropped. With a changing G, each round takes
    `generation_batch_size / G` prompts from where the last round stopped, so no prompt is skipped or repeated within a
    pass whatever the switches. A per-prompt round looks ahead ([`upcoming`]), reads what it looked at and takes some
    of it; the prompts it leaves wait at the front of the stream for the next round ([`waiting`], [`commit`]).

    Args:
        dataset (`Dataset` or `IterableDataset`):
            The train dataset.
        shuffle (`bool`):
            Whether to shuffle each pass (`GRPOConfig.shuffle_dataset`).
        seed (`int`):
            The run's seed (`TrainingArguments.seed`).
    """

    def __init__(self, dataset, shuffle: bool, seed: int):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.iterable = isinstance(dataset, IterableDataset)
        self.epoch = 0  # passes started so far
        self.position = 0  # prompts consumed in the current pass
        self._order = None  # map-style: the current pass's permutation
        self._iterator = None  # iterable: the current pass's stream
        self._lookahead: list = []  # iterable: rows read from the stream but not consumed yet
        self._waiting: list[tuple[int, object]] = []  # (position in the pass, prompt) left by a per-prompt round
        self.filling = False  # the pass is taken in turn, its skipped prompts too (a stage of one G that skips:
        # a whole pass of settled prompts could not fill a round)
        if not self.iterable:
            self._generator = torch.Generator()
            if shuffle:
                self._generator.manual_seed(seed)

    def _start_pass(self) -> None:
        if self.iterable:
            stream = self.dataset.shuffle(seed=self.seed) if self.shuffle else self.dataset
            stream.set_epoch(self.epoch)
            self._iterator = iter(stream)
        elif self.shuffle:
            self._order = torch.randperm(len(self.dataset), generator=self._generator).tolist()
        else:
            self._order = list(range(len(self.dataset)))
        self._lookahead, self._waiting = [], []
        self.epoch += 1
        self.position = 0
        self.filling = False

    def open_pass(self) -> None:
        """Start a pass if none is open."""
        if self._order is None and self._iterator is None:
            self._start_pass()

    @property
    def waiting(self) -> list:
        """The prompts a per-prompt round left for the next one, in stream order (they come before [`upcoming`])."""
        return [prompt for _, prompt in self._waiting]

    def upcoming(self):
        """The prompts left in the current pass after those read, in order, without consuming them (opens a pass if
        none is open)."""
        self.open_pass()
        if not self.iterable:  # (by index: a slice would copy the rest of the pass every round)
            yield from (self._order[i] for i in range(self.position, len(self._order)))
            return
        for i in itertools.count():
            if i == len(self._lookahead):
                row = next(self._iterator, _END)
                if row is _END:
                    return
                self._lookahead.append(row)
            yield self._lookahead[i]

    def consume(self, num_prompts: int) -> list:
        """Consume the next `num_prompts` prompts of the pass (all offered by [`upcoming`]) and return them."""
        if self.iterable:  # (after `load_state` nothing is read ahead yet: read them from the stream)
            taken = list(itertools.islice(self.upcoming(), num_prompts))
            self._lookahead = self._lookahead[len(taken) :]
        else:
            taken = self._order[self.position : self.position + num_prompts]
        if len(taken) != num_prompts:
            raise RuntimeError(f"the pass has {len(taken)} prompts left, {num_prompts} were asked for")
        self.position += num_prompts
        return taken

    def commit(self, plan: dict) -> list:
        """
        Carry out a per-prompt round's plan ([`grpo_curriculum.core.allocation.RoundPlan.as_dict`]) over the waiting
        prompts and the next `plan["read"]` ones: return the prompts it takes; those it leaves wait for the next round.
        """
        start = self.position
        looked = self._waiting + list(zip(itertools.count(start), self.consume(plan["read"])))
        self._waiting = [looked[i] for i in plan["left"]]
        return [looked[i][1] for i in plan["taken"]]

    def end_pass(self) -> None:
        """Drop the rest of the current pass (too short for a round); the next prompts come from a new pass."""
        self._order, self._iterator, self._lookahead, self._waiting = None, None, [], []

    def take(self, num_prompts: int) -> list:
        """The next `num_prompts` unique prompts: dataset indices (map-style) or rows (iterable)."""
        for _ in range(3):  # a pass too short for one round is an error, not an endless loop
            waiting = self.waiting[:num_prompts]  # (left by a per-prompt stage before a switch)
            need = num_prompts - len(waiting)
            if len(list(itertools.islice(self.upcoming(), need))) == need:
                self._waiting = self._waiting[len(waiting) :]
                return waiting + self.consume(need)
            self.end_pass()
        raise ValueError(
            f"The train dataset has fewer prompts than one generation round needs ({num_prompts}): "
            "use a larger dataset, a smaller generation batch, or a larger num_generations."
        )

    def state(self) -> dict:
        """Where the stream stands: the pass number, the prompts read in it and the positions of those waiting
        (JSON-serialisable)."""
        state = {"epoch": self.epoch, "position": self.position, "waiting": [i for i, _ in self._waiting]}
        return {**state, "filling": True} if self.filling else state

    def load_state(self, state: dict) -> None:
        """Restore a [`state`]: replay the pass's permutation (or stream), skip what was read, keep what waits."""
        self.epoch, self.position, self._order, self._iterator, self._lookahead = 0, 0, None, None, []
        waiting = state.get("waiting", [])
        if self.iterable:
            if state["epoch"] > 0:
                self.epoch = state["epoch"] - 1
                self._start_pass()
                keep = set(waiting)
                read = itertools.islice(self._iterator, state["position"])
                self._waiting = [(i, row) for i, row in enumerate(read) if i in keep]
        else:
            if self.shuffle:
                self._generator.manual_seed(self.seed)
            for _ in range(state["epoch"]):
                self._start_pass()
            self._waiting = [(i, self._order[i]) for i in waiting]
        self.position = state["position"]
        self.filling = state.get("filling", False)

    def materialize(self, prompts: list) -> list[dict]:
        """The rows of `prompts` (as returned by [`take`]), read in one batched call for map-style datasets."""
        if self.iterable:
            return prompts
        if hasattr(self.dataset, "__getitems__"):
            return self.dataset.__getitems__(list(prompts))
        return [self.dataset[i] for i in prompts]


_END = object()


def local_round_rows(trainer, stream: PromptStream, prompts: list, group_sizes: list[int]) -> list[dict]:
    """
    This process's rows of a generation round (or of one increment of it) holding `prompts` (from
    [`PromptStream.take`]), prompt `i` repeated `group_sizes[i]` times in a row: process `p` takes the `p`-th
    contiguous slice of the rows, exactly the layout `RepeatSampler` and accelerate's batch sharding give (groups may
    span processes).
    """
    total, processes = sum(group_sizes), trainer.accelerator.num_processes
    if total % processes:
        raise RuntimeError(f"grpo-curriculum: {total} rows do not split evenly over {processes} processes")
    local = total // processes
    start = trainer.accelerator.process_index * local
    owner = [i for i, size in enumerate(group_sizes) for _ in range(size)][start : start + local]
    first = owner[0]
    rows = stream.materialize(prompts[first : owner[-1] + 1])
    # A fresh copy for every repeat, as the data loader gives: TRL writes per-row fields into them, and a reward
    # function mutating one row's fields must not change the other rows of its group.
    return [copy.deepcopy(rows[i - first]) for i in owner]


def prompt_digest(prompt) -> str:
    """A digest of a prompt (text or chat messages), the same on every process."""
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prompt_keys(stream: PromptStream, prompts: list) -> list[str]:
    """A stable key per prompt, identical on every process: the dataset index, or a digest of an iterable row's prompt."""
    if not stream.iterable:
        return [str(i) for i in prompts]
    return [prompt_digest(row.get("prompt")) for row in prompts]


def first_rows(stream: PromptStream, batch: int = 4096):
    """
    For a map-style dataset, each row's first row holding the same prompt (a numpy array over the rows), so that a
    prompt the dataset repeats (drawn with replacement, or listed with several answers) is one prompt wherever it is
    counted by prompt; `None` for an iterable dataset, whose keys are digests of the prompt already. Reads the
    `prompt` column once, and holds a 16-byte digest a distinct prompt while it does.
    """
    if stream.iterable:
        return None
    dataset = stream.dataset
    if isinstance(dataset, Dataset):  # the column alone, in batches
        prompts = (p for chunk in dataset.select_columns(["prompt"]).iter(batch_size=batch) for p in chunk["prompt"])
    else:
        prompts = (dataset[i].get("prompt") for i in range(len(dataset)))
    seen, rows = {}, np.empty(len(dataset), dtype=np.int64)
    for i, prompt in enumerate(prompts):
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
        rows[i] = seen.setdefault(hashlib.blake2b(text.encode(), digest_size=16).digest(), i)
    return rows


def prompt_texts(stream: PromptStream, prompts: list) -> list:
    """The `prompt` field of each prompt (text or chat messages), for reports."""
    return [row.get("prompt") for row in stream.materialize(prompts)]


def prompt_slots(stream: PromptStream) -> PromptSlots:
    """Where per-prompt statistics live: a slot per dataset row, or hash buckets for an iterable dataset's prompts."""
    return PromptSlots() if stream.iterable else PromptSlots(len(stream.dataset), indexed=True)
