"""
Per-prompt `num_generations`: give each prompt of a generation round its own G under the round's fixed budget.

Pure logic: numpy, no torch. The trainer feeds every process the same statistics (rewards gathered from all
processes), so every process computes the same allocation.

The rule, per round (budget `B` = the generation batch, candidates `c_1 < ... < c_k`):

1. Prompts come from the prompt stream in order. A prompt whose last visit gave a zero-std group (all rewards equal:
   solved or hopeless for now) is *deferred* with probability `1 - revisit` (GRESO-style): it is skipped for the rest
   of the current pass over the dataset and reconsidered, with a fresh draw, when the next pass reaches it. The draw
   is a hash of (seed, prompt, pass), so every process and a resumed run draw the same. With `defer=False`, nothing
   is deferred.
2. Each accepted prompt wants the smallest candidate G whose probability of an informative group (rewards not all
   equal), `1 - p^G - (1-p)^G`, reaches `target`, else the smallest candidate. `p` is the prompt's estimated success
   rate: the mean of its Beta posterior, from its discounted successes and failures (old visits weighted by `decay`
   per new visit) and the population's prior (empirical Bayes: a Beta fitted by moments to the success fractions of
   recently observed groups, corrected for their binomial noise; Beta(1, 1) before any observation). An unseen prompt
   gets the population's mean rate; a prompt seen a few times is pulled towards it, the more so the more alike the
   population's prompts are. So a mixed prompt gets enough samples to expect a contrast, more when its successes
   (or failures) are rare, and a settled one (solved or hopeless: no candidate reaches `target`) the fewest.
3. Prompts are taken in stream order, each with the largest candidate up to the G it wants that keeps the rest of
   the budget fillable, until exactly `B` completions are allocated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .geometry import sums

MAX_DEFERRED_ROUNDS = 4
"""A round defers at most this many rounds' worth of prompts (at the smallest candidate), then takes the next ones."""
FLAT_MOMENTS = (0.5, 1 / 3, 0.0)  # E[x], E[x^2], E[1/n] of Beta(1, 1) seen without noise: the prior before any data


def informative_probability(success_rate, num_generations: Sequence[int]) -> np.ndarray:
    """
    Probability that a group of G binary rewards with success rate `p` is informative (not all equal):
    `1 - p^G - (1-p)^G`.

    Args:
        success_rate (array-like): Per prompt, `p`.
        num_generations (`Sequence[int]`): The G values to evaluate.

    Returns:
        `np.ndarray`: Shape `(prompts, len(num_generations))`.

    Example:
    ```python
    >>> informative_probability([0.5], [2, 4]).tolist()
    [[0.5, 0.875]]
    ```
    """
    p = np.asarray(success_rate, dtype=np.float64)[:, None]
    g = np.asarray(num_generations)[None, :]
    return 1.0 - p**g - (1.0 - p) ** g


def wanted_num_generations(probability: np.ndarray, candidates: Sequence[int], target: float) -> np.ndarray:
    """
    Per row of `probability` (informative probabilities at each candidate, ascending), the G a prompt wants: the
    smallest candidate reaching `target`, else the smallest candidate.
    """
    reaches = np.asarray(probability) >= target
    return np.asarray(candidates)[np.where(reaches.any(axis=1), reaches.argmax(axis=1), 0)]


def beta_prior(moments: Sequence[float]) -> tuple[float, float]:
    """
    The Beta prior of the success rate fitted by moments to observed group success fractions `x = k / n`: from
    `E[x]`, `E[x^2]` and `E[1/n]`, the spread of the true rates is `Var[x]` minus the binomial noise
    `E[x](1 - E[x]) E[1/n]`, rescaled by `1 / (1 - E[1/n])`; strength `a + b` clipped to [0.2, 50].
    """
    first, second, inverse_n = moments
    mean = min(max(first, 0.01), 0.99)
    spread = (second - first**2 - mean * (1 - mean) * inverse_n) / (1 - inverse_n)
    spread = min(max(spread, 1e-6), mean * (1 - mean) * 0.999)
    strength = min(max(mean * (1 - mean) / spread - 1, 0.2), 50.0)
    return mean * strength, (1 - mean) * strength


def uniform_draw(seed: int, slot: int, epoch: int) -> float:
    """A uniform number in [0, 1) that depends only on its arguments (the same on every process, after a resume)."""
    digest = hashlib.blake2b(f"{seed}:{slot}:{epoch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class PromptStats:
    """
    Per-prompt statistics in compact arrays, indexed by a slot (a map-style dataset's row index, or a hash bucket of
    an iterable dataset's prompt): discounted successes and failures (`float32`: with `decay` near 1 they grow to
    `trials / (1 - decay)`, beyond `float16`'s range and precision) and the number of consecutive visits that gave a
    zero-std group (`uint8`), 9 bytes a prompt; and the population's moments (an EMA over rounds of the observed
    groups' `E[x]`, `E[x^2]`, `E[1/n]`), from which the prior of every prompt is fitted ([`beta_prior`]).

    Args:
        size (`int`): Number of slots.
        candidates (`Sequence[int]`): Candidate G values, ascending.
        decay (`float`): Weight of the past when a new visit is added (`0`: only the last visit counts).
        smoothing (`float`): EMA weight of the newest round in the population estimate.
    """

    ARRAYS = ("successes", "failures", "zero_streak", "moments")

    def __init__(self, size: int, candidates: Sequence[int], decay: float, smoothing: float):
        self.size, self.candidates, self.decay, self.smoothing = int(size), tuple(candidates), decay, smoothing
        self.successes = np.zeros(self.size, dtype=np.float32)
        self.failures = np.zeros(self.size, dtype=np.float32)
        self.zero_streak = np.zeros(self.size, dtype=np.uint8)
        self.moments = np.array(FLAT_MOMENTS)

    def success_rate(self, slots: Sequence[int]) -> np.ndarray:
        """Per slot, the estimated success rate: the posterior mean under the population prior."""
        slots = np.asarray(slots, dtype=np.int64)
        a, b = beta_prior(self.moments)
        s, f = self.successes[slots].astype(np.float64), self.failures[slots].astype(np.float64)
        return (s + a) / (s + f + a + b)

    def observe(self, slots: Sequence[int], successes: Sequence[float], trials: Sequence[int],
                zero_std: Sequence[bool]) -> None:  # fmt: skip
        """
        Add one visit per slot. `successes[i]` of `trials[i]` finite rewards were successes; `zero_std[i]` says the
        group's rewards were all equal. A slot seen twice in one call (two groups of one prompt) adds both visits.
        """
        fractions = []
        for slot, s, n, zero in zip(slots, successes, trials, zero_std, strict=True):
            if n == 0:
                continue  # no finite reward: nothing learned
            self.successes[slot] = self.decay * float(self.successes[slot]) + s
            self.failures[slot] = self.decay * float(self.failures[slot]) + (n - s)
            self.zero_streak[slot] = min(int(self.zero_streak[slot]) + 1, 255) if zero else 0
            fractions.append((s / n, (s / n) ** 2, 1 / n))
        if fractions:
            self.moments = self.smoothing * np.mean(fractions, axis=0) + (1 - self.smoothing) * self.moments

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.ARRAYS}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name in self.ARRAYS:
            array, own = np.asarray(state[name]), getattr(self, name)
            if array.shape != own.shape:
                raise ValueError(f"per-prompt statistics `{name}` have shape {array.shape}, expected {own.shape}")
            setattr(self, name, array.astype(own.dtype))


@dataclass(frozen=True)
class RoundPlan:
    """
    One round's allocation.

    Args:
        offsets (`tuple[int, ...]`): Positions, among the prompts the stream offered, of the prompts taken.
        sizes (`tuple[int, ...]`): G of each prompt taken (candidates summing to the budget).
        consumed (`int`): Prompts consumed from the stream: the taken ones and those deferred before the last taken.
        deferred (`int`): Prompts deferred while building the round.
    """

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    consumed: int
    deferred: int


class PerPromptAllocator:
    """
    Chooses the prompts of each round and their G (see the module docstring for the rule).

    Args:
        candidates (`Sequence[int]`): Candidate G values, ascending.
        budget (`int`): Completions per round (the generation batch); must be reachable as a sum of candidates.
        stats ([`PromptStats`]): Per-prompt statistics.
        target (`float`): Wanted probability of an informative group.
        defer (`bool`): Whether to defer prompts whose last visit gave a zero-std group.
        revisit (`float`): Probability that such a prompt is trained anyway when the stream reaches it.
        seed (`int`): Seed of the deferral draws.
    """

    def __init__(self, candidates: Sequence[int], budget: int, stats: PromptStats, target: float, defer: bool,
                 revisit: float, seed: int):  # fmt: skip
        self.candidates = tuple(int(c) for c in candidates)
        self.budget = int(budget)
        self.stats, self.target, self.defer, self.revisit, self.seed = stats, target, defer, revisit, seed
        self._sums = sums(self.candidates, self.budget)  # bit r set: r completions can be filled with candidates
        if not self._sums >> self.budget & 1:
            raise ValueError(f"no sum of {list(self.candidates)} makes {self.budget}")
        # A round defers at most this many prompts (then takes the next ones): O(round) work even when every prompt
        # of a pass is settled, and the pass moves on.
        self.max_deferred = MAX_DEFERRED_ROUNDS * (self.budget // self.candidates[0])

    def deferred(self, slot: int, epoch: int) -> bool:
        """Whether the stream's prompt in `slot`, met during pass `epoch`, is deferred for the rest of that pass."""
        if not self.defer or self.stats.zero_streak[slot] == 0:
            return False
        return uniform_draw(self.seed, slot, epoch) >= self.revisit

    def wanted(self, slot: int) -> int:
        """The G the prompt in `slot` wants (before the budget is applied)."""
        probability = informative_probability(self.stats.success_rate([slot]), self.candidates)
        return int(wanted_num_generations(probability, self.candidates, self.target)[0])

    def plan(self, offered: Iterable[int], epoch: int, defer: bool = True) -> RoundPlan | None:
        """
        Allocate one round from the slots the stream offers, in order.

        Args:
            offered (`Iterable[int]`): Slots of the upcoming prompts of the current pass, in stream order.
            epoch (`int`): The pass they belong to (for the deferral draws).
            defer (`bool`): `False` disables deferral for this round (used when a whole pass was deferred).

        Returns:
            [`RoundPlan`], or `None` when the offered prompts run out before the budget is filled.
        """
        remaining, offsets, sizes, deferred = self.budget, [], [], 0
        iterator: Iterator[int] = iter(offered)
        for offset, slot in enumerate(iterator):
            if defer and deferred < self.max_deferred and self.deferred(slot, epoch):
                deferred += 1
                continue
            wanted = self.wanted(slot)
            fits = [c for c in self.candidates if c <= remaining and self._sums >> (remaining - c) & 1]
            below = [c for c in fits if c <= wanted]
            size = below[-1] if below else fits[0]
            offsets.append(offset)
            sizes.append(size)
            remaining -= size
            if remaining == 0:
                return RoundPlan(tuple(offsets), tuple(sizes), offset + 1, deferred)
        return None
