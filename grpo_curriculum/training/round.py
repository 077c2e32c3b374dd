"""
One generation round as one object: its setting, its prompts and how their completions were sampled. The trainer
builds it when a round starts; the TRL hooks ([`grpo_curriculum.training._trl.hooks.GRPOHooks`]) sample and merge it.

A round is sampled in one or more *increments*, each one generation and scoring pass of TRL: a round of one G and a
per-prompt round are one increment; a top-up round is a pilot for every prompt, then increments for the groups whose
rewards are still all equal (or the least varied ones) until it holds `generation_batch_size` completions; a round with
dynamic sampling is one increment per batch of new prompts at the stage's G, until enough groups are informative.
Pure: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.schedule import Setting


@dataclass
class Round:
    """
    A generation round.

    Args:
        setting ([`Setting`]):
            The stage, G (`None`: per prompt or top-up) and temperature it is sampled at.
        prompts (`list`):
            Its prompts, one group each, in group order: dataset indices (map-style) or rows (iterable).
        sizes (`list[int]`):
            Each group's completions sampled so far (its G once the round is sampled). The first increment samples
            these.
        start_stream (`dict`, *optional*):
            Where the prompt stream stood when the round started ([`PromptStream.state`]), to replay it after a resume
            from a checkpoint taken inside it.
        plan (`dict`, *optional*):
            A per-prompt round's allocation ([`RoundPlan.as_dict`]), to replay it after such a resume.
        replay (`bool`):
            Whether the round regenerates the one a checkpoint was taken inside (that one was observed and counted
            before the checkpoint; this one is not).
        deferred (`int`):
            Prompts a per-prompt round deferred.
    """

    setting: Setting
    prompts: list
    sizes: list[int]
    start_stream: dict | None = None
    plan: dict | None = None
    replay: bool = False
    deferred: int = 0
    increments: list[list[int]] = field(default_factory=list)  # per increment: the completions added to each group
    rewards: list[list[float]] = field(default_factory=list)  # each group's rewards (every process), sampling order
    keys: list[list] | None = None  # each group's completion keys, when the curriculum needs them
    trained: list[int] | None = None  # the groups trained on, in group order (dynamic sampling); `None`: all
    masked: list[int] | None = None  # trained groups whose tokens are out of the loss (dynamic sampling's fill-up)
    request_sizes: list[int] | None = None  # the group sizes of the next increment's first turn, if they are mixed
    requesting: list[int] | None = None  # while that first turn is sampled: its group sizes (vLLM server requests)

    def __post_init__(self):
        self.sizes = list(self.sizes)
        if not self.increments:
            self.increments = [list(self.sizes)]
            self.rewards = [[] for _ in self.sizes]

    @property
    def trained_groups(self) -> list[int]:
        """The groups trained on, in group order."""
        return list(range(len(self.sizes))) if self.trained is None else list(self.trained)

    @property
    def trained_sizes(self) -> list[int]:
        return [self.sizes[g] for g in self.trained_groups]

    @property
    def mixed(self) -> bool:
        """Whether the groups trained on differ in size."""
        return len(set(self.trained_sizes)) > 1

    @property
    def generated(self) -> int:
        """Completions sampled for the round, over every increment."""
        return sum(map(sum, self.increments))

    @property
    def dropped(self) -> int:
        """Groups sampled but not trained on (dynamic sampling)."""
        return len(self.sizes) - len(self.trained_groups)

    @property
    def one_pass(self) -> bool:
        """Whether the round is one increment, trained as sampled."""
        return len(self.increments) == 1 and self.trained is None

    def add_increment(self, added: list[int]) -> None:
        """A new increment: `added[g]` more completions for group `g`."""
        if len(added) != len(self.sizes):
            raise ValueError(f"an increment of {len(added)} groups for a round of {len(self.sizes)}")
        self.increments.append(list(added))
        self.sizes = [size + a for size, a in zip(self.sizes, added)]

    def add_groups(self, prompts: list, size: int) -> None:
        """A new increment of new groups: `size` completions for each of `prompts`."""
        old = len(self.sizes)
        self.prompts = list(self.prompts) + list(prompts)
        self.sizes += [0] * len(prompts)
        self.increments = [added + [0] * len(prompts) for added in self.increments]
        self.rewards += [[] for _ in prompts]
        if self.keys is not None:
            self.keys += [[] for _ in prompts]
        self.add_increment([0] * old + [size] * len(prompts))

    def last_increment(self) -> tuple[list[int], list[int]]:
        """The groups the last increment samples, in group order, and how many completions each."""
        added = self.increments[-1]
        groups = [g for g, a in enumerate(added) if a]
        return groups, [added[g] for g in groups]

    def add_rewards(self, rewards: list[float], keys: list | None = None) -> None:
        """The last increment's rewards (every process, its row order) and completion keys go to their groups."""
        if keys is not None and self.keys is None:
            self.keys = [[] for _ in self.sizes]
        start = 0
        for g, count in zip(*self.last_increment()):
            self.rewards[g] += rewards[start : start + count]
            if keys is not None:
                self.keys[g] += keys[start : start + count]
            start += count

    def order(self) -> list[int]:
        """
        The rows trained on, as indices into the increments' rows (every process, increment after increment): each
        group's rows contiguous, groups in group order, a group's rows in sampling order.
        """
        starts, offset = [], 0  # per increment, where each group's rows start among all increments' rows
        for added in self.increments:
            group_starts = []
            for a in added:
                group_starts.append(offset)
                offset += a
            starts.append(group_starts)
        return [starts[k][g] + i for g in self.trained_groups for k, added in enumerate(self.increments)
                for i in range(added[g])]  # fmt: skip

    def masked_rows(self) -> list[bool]:
        """For each row trained on ([`order`]), whether its tokens are out of the loss."""
        masked = set(self.masked or ())
        return [g in masked for g in self.trained_groups for _ in range(self.sizes[g])]

    def group_rewards(self, groups: list[int] | None = None) -> tuple[list[float], list[int]]:
        """The flat rewards of `groups` (default: every group) in group order, and each group's size."""
        groups = range(len(self.sizes)) if groups is None else groups
        return [r for g in groups for r in self.rewards[g]], [self.sizes[g] for g in groups]
