"""
Per-prompt `num_generations`: choose, each round, the prompts and their G that maximise the round's expected value
under its exact budget.

Pure logic: numpy, no torch. The trainer feeds every process the same statistics (rewards gathered from all
processes) and the same stream of prompts, so every process computes the same allocation, and a resumed run too.

The rule, per round (budget `B` = the generation batch, candidates `c_1 < ... < c_k`, `M = B / mean_generations`
prompts a round, as in Knapsack RL's `M` prompts sharing `M x n` rollouts):

1. **Window.** The round looks at a window of `M + lookahead` upcoming prompts of the current pass, in stream order:
   first the prompts the previous round left waiting, then new ones. With `lookahead` 0 (the default of
   [`~core.adaptive.Adaptive`], the study's choice) the window is the round's `M` prompts: they are taken in stream
   order and only their G is chosen (Knapsack RL's geometry); no prompt waits.
2. **Deferral (GRESO; opt-in, `defer=True`).** A new prompt whose last `z` visits all gave zero-std groups (all
   successes: *easy*; all failures: *hard*) is deferred, skipped for the rest of the pass and counted, with
   probability `1 - max(e^z, 0.01)`, `e` the exploration probability of its kind. `e_easy` and `e_hard` start at 0.5
   and move by 0.01 after each round, down while the round's share of all-success (all-failure) groups is above
   `skip_target / 2`, up otherwise, within [0.05, 0.95]: the share of zero-std groups is driven towards
   `skip_target`. The draw is a hash of (seed, prompt, pass). A round defers at most `4 x` its window of prompts;
   later ones enter the window undrawn, so a round costs O(window) even when every prompt is settled, and the pass
   moves on.
3. **Value.** A prompt's value at G is `v(G) = E[(1 - p^G - (1-p)^G) w(p)]`: the probability that its group is
   informative (rewards not all equal) times the information weight `w` (`weight="hard"`, the default of
   [`~core.adaptive.Adaptive`], the study's choice: `p (1-p)^3`; `"knapsack"`: Knapsack RL's `p (1-p)^2`;
   `"variance"`: `p (1-p)`; `"uniform"`: 1, the expected number of informative groups), in expectation
   (not plugged in) under the prompt's Beta posterior of its success rate `p`, in closed form from Beta moments
   ([`expected_value`]). The posterior is the population's prior (empirical Bayes: a Beta fitted by moments to recently
   observed groups, corrected for their binomial noise; Beta(1, 1) before any observation) updated with the prompt's
   discounted successes and failures (old visits weighted by `decay` per new visit). A prompt never seen has the
   prior's value, so a fresh run explores.
4. **Choice.** The round takes `M` prompts of the window: those left waiting by the previous round (in order), then
   the others by value at the largest candidate, ties in stream order; the rest wait at the front of the stream for
   the next round of the pass (order kept, none waits more than one round; a `lookahead` below `M` leaves the round
   a choice). Their G maximise the total value with
   `sum G_i = B` exactly, each `G_i` a candidate: a small DP over prompts x budget. With one candidate, the window's
   first `M` prompts are taken (every prompt gets the same G: reordering gains nothing), which is TRL's order.
5. **The pass's end.** When deferral leaves a round fewer than `M` prompts before the pass ends, the round is filled
   without deferral from the rest of the pass (settled prompts take their turn; none is trained twice in a pass).
   When the prompts left in a pass cannot fill a round, they are dropped, as TRL drops a pass's tail.

**Skipping from evidence (`skip="evidence"`, issue 42; with `defer=True`).** GRESO's streaks cannot tell an impossible
prompt from a rare-success one (both fail every visit), and the pass's end fills rounds with the settled prompts it
skipped. With `skip="evidence"` three things change:

- *A prompt that has ever succeeded is never deferred for failing*: its discounted successes are above 0, so it is
  not impossible; it is deferred only for an all-success streak. A prompt that has failed every visit is deferred
  with GRESO's probability, as before, and comes back at a later pass with GRESO's keep probability (at least
  `KEEP_FLOOR`; its exploration probability rises when the round's all-failure groups fall below the target, i.e.
  when the policy starts solving what it failed): one success and it is never deferred for failing again.
- *The round compares twice its prompts* (`2 M + lookahead`) and takes the `M` of most value; the others are
  skipped for the rest of the pass (counted as deferred), not kept waiting: a known-settled prompt (value near 0)
  loses its place to an unseen or an informative one, where GRESO's draw let it through. A prompt whose draw falls
  under `KEEP_FLOOR` is taken whatever its value, so every prompt still comes back in at least that share of the
  passes that read it.
- *The pass's end is not filled with the prompts it skipped*: when fewer than `M` prompts of the pass are left
  undeferred, the round takes them with larger G (the knapsack over fewer prompts) and the pass ends, where issue 37's
  rule filled the round, and the rounds after it, with the deferred prompts of the pass in turn. Only when they cannot
  fill the budget (fewer than `budget / largest candidate` prompts) is the round filled that way, and then the rest of
  the pass in turn, as before (a round without deferral compares `M + lookahead` prompts, as before).

`skip="greso"` is issue 37's rule (the items above off).

**Skipping from pooled evidence (`skip="pooled"`, issue 50).** `"evidence"`, except that a prompt that has failed
every visit is deferred only as far as the data says it is impossible: its keep probability `k` becomes
`1 - P(impossible) (1 - k)`, with `P(impossible)` its posterior under a prior with a point mass at 0 (a share `pi` of
prompts that never succeed) beside a Beta, both fitted to every visited prompt's discounted counts by EM
([`point_mass`]). Where no prompt is impossible, `pi` falls as prompts that failed start to succeed, and failing
prompts stop being skipped; two all-fail visits mean "probably impossible" only where the data has impossible prompts.

**Pilot groups (`pilot`, issue 50; with `defer`).** A prompt is sampled at the `pilot` candidate while it is unseen
or settled (its last visit's group had rewards all equal), and at the largest candidate once its last group was
informative: a first visit, and every re-check of a settled prompt, costs `pilot` completions, not the largest G.
The round reads the pass's next prompts in order until their sizes fill the budget (the last ones' sizes adjusted by
the knapsack so the sum is exact); none waits, and the pass's end is not filled with deferred prompts.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .adaptive import SKIP_RULES, WEIGHTS  # (the `adaptive:` block's word lists: information weights, skip rules)
from .geometry import sums

EXPLORE_START, EXPLORE_STEP, EXPLORE_BOUNDS, KEEP_FLOOR = 0.5, 0.01, (0.05, 0.95), 0.01
"""GRESO's exploration probabilities: start, step per round, bounds, and the least probability of keeping a prompt."""
MAX_DEFERRED_WINDOWS = 4
SKIP_REASONS = ("solved", "failed", "value")  # a deferral's reason: an all-success streak, an all-failure streak, or
# (`skip="evidence"` with several candidates) less value than the prompts its round took
"""A round defers at most this many windows of prompts, then takes the next ones undrawn."""
FLAT_MOMENTS = (0.5, 1 / 3, 0.0)  # E[x], E[x^2], E[1/n] of Beta(1, 1) seen without noise: the prior before any data


def expected_value(a, b, candidates: Sequence[int], weight: str = "hard") -> np.ndarray:
    """
    Per prompt (posterior `Beta(a, b)`) and candidate G, `E[(1 - p^G - (1-p)^G) w(p)]` with `w` from [`WEIGHTS`]:
    `M(i, j) - M(i+G, j) - M(i, j+G)` with the Beta moment `M(i, j) = E[p^i (1-p)^j] = B(a+i, b+j) / B(a, b) =
    prod_{k<i} (a+k)/(a+b+k) x prod_{k<j} (b+k)/(a+b+i+k)`.

    Returns:
        `np.ndarray`: Shape `(prompts, len(candidates))`, non-negative.
    """
    i, j = WEIGHTS[weight]
    a, b = np.asarray(a, dtype=np.float64)[:, None], np.asarray(b, dtype=np.float64)[:, None]
    g = np.asarray(candidates, dtype=np.int64)
    k = np.arange(int(g.max()) + max(i, j))
    # M(i+G, j) = prod_{k<i+G} (a+k)/(a+b+k) x prod_{k<j} (b+k)/(a+b+i+G+k), and M(i, j+G) likewise: one cumulative
    # product over k for the long factor, a few terms for the short one (a cheap round: few numpy calls).
    successes = np.cumprod((a + k) / (a + b + k), axis=1)[:, i + g - 1]
    failures = np.cumprod((b + k) / (a + b + k), axis=1)[:, j + g - 1]
    weight = 1.0  # M(i, j), the same way
    for m in range(i):
        weight = weight * (a + m) / (a + b + m)
    for m in range(j):
        successes = successes * (b + m) / (a + b + i + g + m)
        weight = weight * (b + m) / (a + b + i + m)
    for m in range(i):
        failures = failures * (a + m) / (a + b + j + g + m)
    return np.maximum(weight - successes - failures, 0.0)


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


def point_mass(successes: np.ndarray, trials: np.ndarray, iterations: int = 50) -> tuple[float, np.ndarray]:
    """
    The share `pi` of prompts that never succeed and, per prompt, the posterior probability that it is one of them,
    under the prior `pi x (point mass at p = 0) + (1 - pi) x Beta(a, b)` fitted by EM to the prompts' (discounted)
    successes and trials: a prompt with a success has probability 0; one with `n` trials and none,
    `pi / (pi + (1 - pi) B(a, b + n) / B(a, b))`. The Beta is fitted by [`beta_prior`] to the success fractions,
    each prompt weighted by its probability of not being impossible (until `pi` moves by less than 1e-4, at most
    `iterations` times). Prompts without a trial are ignored (0).

    Returns:
        `tuple[float, np.ndarray]`: `pi`, and the probabilities (the shape of `successes`).
    """
    successes, trials = np.asarray(successes, dtype=np.float64), np.asarray(trials, dtype=np.float64)
    probability = np.zeros(successes.shape)
    seen = trials > 0
    zero = seen & (successes <= 0)
    if not zero.any():
        return 0.0, probability
    x, n = successes[seen] / trials[seen], trials[seen]
    at_zero, inverse = np.unique(trials[zero], return_inverse=True)  # few distinct trial counts: lgamma per count
    lgamma = np.vectorize(math.lgamma)
    share, fitted = float(zero.sum() / seen.sum()) / 2, np.zeros(int(seen.sum()))
    for _ in range(iterations):
        weights = 1 - fitted
        total = max(weights.sum(), 1e-9)
        a, b = beta_prior([float(weights @ x) / total, float(weights @ x**2) / total, float(weights @ (1 / n)) / total])
        # log B(a, b + n) - log B(a, b): the chance of n failures in a row under the Beta
        none = np.exp(lgamma(b + at_zero) + lgamma(a + b) - lgamma(b) - lgamma(a + b + at_zero))[inverse]
        probability[zero] = share / (share + (1 - share) * none) if share > 0 else 0.0
        fitted, before = probability[seen], share
        share = float(fitted.mean())
        if abs(share - before) < 1e-4:  # converged (most rounds: a few iterations)
            break
    return share, probability


def uniform_draw(seed: int, slot: int, epoch: int) -> float:
    """A uniform number in [0, 1) that depends only on its arguments (the same on every process, after a resume)."""
    digest = hashlib.blake2b(f"{seed}:{slot}:{epoch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def knapsack(values: np.ndarray, candidates: Sequence[int], budget: int) -> list[int] | None:
    """
    The G of each prompt (a candidate each) maximising `sum values[i, G_i]` with `sum G_i = budget` exactly: a DP over
    prompts x budget. Ties go to the smaller G of the earlier prompt.

    Args:
        values (`np.ndarray`): `(prompts, len(candidates))`.
        candidates (`Sequence[int]`): Ascending.
        budget (`int`): The exact total.

    Returns:
        `list[int]` or `None` when no choice of candidates adds up to `budget`.
    """
    n = len(values)
    best = np.full((n + 1, budget + 1), -np.inf)  # best[i, r]: most value of prompts i.. filling exactly r
    best[n, 0] = 0.0
    for i in range(n - 1, -1, -1):
        for k, c in enumerate(candidates):
            if c <= budget:
                np.maximum(best[i, c:], values[i, k] + best[i + 1, : budget + 1 - c], out=best[i, c:])
    if not np.isfinite(best[0, budget]):
        return None
    sizes, r = [], budget
    for i in range(n):
        target = best[i, r] - 1e-12 * max(1.0, abs(best[i, r]))
        k = next(k for k, c in enumerate(candidates) if c <= r and values[i, k] + best[i + 1, r - c] >= target)
        sizes.append(int(candidates[k]))
        r -= candidates[k]
    return sizes


class PromptStats:
    """
    Per-prompt statistics in compact arrays, indexed by a slot (a map-style dataset's row index, or a hash bucket of
    an iterable dataset's prompt): discounted successes and failures (`float32`: with `decay` near 1 they grow to
    `trials / (1 - decay)`, beyond `float16`'s range and precision) and the signed number of consecutive visits that
    gave a zero-std group (`int8`: `+z` all successes, `-z` all failures, 0 after a mixed group), 9 bytes a prompt; and
    the population's moments (an EMA over rounds of the observed groups' `E[x]`, `E[x^2]`, `E[1/n]`), from which the
    prior of every prompt is fitted ([`beta_prior`]).

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
        self.zero_streak = np.zeros(self.size, dtype=np.int8)
        self.moments = np.array(FLAT_MOMENTS)

    def posterior(self, slots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, the Beta posterior `(a, b)` of the success rate: the population prior plus the counts."""
        slots = np.asarray(slots, dtype=np.int64)
        a, b = beta_prior(self.moments)
        return self.successes[slots].astype(np.float64) + a, self.failures[slots].astype(np.float64) + b

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
            streak, easy = int(self.zero_streak[slot]), s >= n / 2
            if not zero:
                streak = 0
            elif easy:
                streak = min(max(streak, 0) + 1, 127)
            else:
                streak = max(min(streak, 0) - 1, -127)
            self.zero_streak[slot] = streak
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
    One round's allocation, over the prompts it looked at: the ones waiting from the previous round, then `read` new
    ones of the stream, in order.

    Args:
        taken (`tuple[int, ...]`): Positions (among those looked at) of the prompts taken, in stream order.
        sizes (`tuple[int, ...]`): G of each prompt taken (candidates summing to the budget).
        left (`tuple[int, ...]`): Positions of the prompts left waiting for the next round, in stream order.
        read (`int`): New prompts read from the stream (taken, left waiting or deferred).
        deferred (`int`): Prompts deferred (skipped for the rest of the pass).
        skipped (`dict[str, int]`): The deferred prompts by reason ([`SKIP_REASONS`]); for the logs, not checkpointed.
    """

    taken: tuple[int, ...]
    sizes: tuple[int, ...]
    left: tuple[int, ...]
    read: int
    deferred: int
    skipped: dict = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict:
        """JSON-serialisable (for checkpoints)."""
        return {"taken": list(self.taken), "sizes": list(self.sizes), "left": list(self.left), "read": self.read,
                "deferred": self.deferred}  # fmt: skip


class PerPromptAllocator:
    """
    Chooses the prompts of each round and their G (see the module docstring for the rule).

    Args:
        candidates (`Sequence[int]`): Candidate G values, ascending.
        budget (`int`): Completions per round (the generation batch); must be reachable as a sum of candidates.
        prompts (`int`): Prompts a round takes (`M`), clipped to what the candidates can fill.
        stats ([`PromptStats`]): Per-prompt statistics.
        weight (`str`): Information weight, a key of [`WEIGHTS`].
        lookahead (`int`): Prompts the window holds beyond the round's `M`.
        defer (`bool`): Whether to defer settled prompts (GRESO).
        skip_target (`float`): The share of zero-std groups the deferral aims at.
        seed (`int`): Seed of the deferral draws.
        skip (`str`): With `defer`: `"evidence"` (issue 42), `"pooled"` or `"solved"` (issue 50: never deferred for
            failing) or `"greso"` (issue 37), a key of [`SKIP_RULES`].
        explore (`float`): GRESO's exploration probability of each kind at the start.
        pilot (`int`, *optional*): With `defer`: the candidate an unseen or settled prompt is sampled at (the
            others: the largest); `None`: the knapsack chooses every G.
    """

    def __init__(self, candidates: Sequence[int], budget: int, prompts: int, stats: PromptStats,
                 weight: str = "hard", lookahead: int = 0, defer: bool = False, skip_target: float = 0.25,
                 seed: int = 0, skip: str = "greso", explore: float = EXPLORE_START,
                 pilot: int | None = None):  # fmt: skip
        self.candidates = tuple(int(c) for c in candidates)
        self.budget = int(budget)
        if not sums(self.candidates, self.budget) >> self.budget & 1:
            raise ValueError(f"no sum of {list(self.candidates)} makes {self.budget}")
        low, high = -(-self.budget // self.candidates[-1]), self.budget // self.candidates[0]
        fills = lambda m: knapsack(np.zeros((m, len(self.candidates))), self.candidates, self.budget)  # noqa: E731
        # `prompts`, or the nearest count whose prompts the candidates can fill exactly (some can: the budget is a sum)
        self.prompts = next(m for m in sorted(range(low, high + 1), key=lambda m: (abs(m - prompts), m)) if fills(m))
        self.stats, self.weight, self.defer, self.skip_target, self.seed = stats, weight, defer, skip_target, seed
        if skip not in SKIP_RULES:
            raise ValueError(f"skip {skip!r}: use one of {list(SKIP_RULES)}")
        self.evidence = defer and skip in ("evidence", "pooled", "solved")
        self.solved_only = defer and skip == "solved"  # never deferred for failing
        self.pooled = defer and skip == "pooled"
        self.impossible = None  # `pooled`: each slot's probability of never succeeding, fitted once a round
        if pilot is not None and (pilot not in self.candidates or pilot == self.candidates[-1]):
            raise ValueError(f"pilot {pilot} must be one of the candidates {list(self.candidates)} below the largest")
        self.pilot = int(pilot) if defer and pilot is not None else None
        # evidence compares twice a round's prompts by value; one candidate has no values to compare (every G the same)
        self.window = self.prompts * (2 if self.evidence and len(self.candidates) > 1 else 1) + int(lookahead)
        self.fill_window = self.prompts + int(lookahead)  # a round without deferral: issue 37's window
        self.max_deferred = MAX_DEFERRED_WINDOWS * self.window
        self.explore = {"easy": float(explore), "hard": float(explore)}

    def deferred(self, slot: int, epoch: int) -> bool:
        """Whether the stream's prompt in `slot`, met during pass `epoch`, is deferred for the rest of that pass."""
        streak = int(self.stats.zero_streak[slot])
        if not self.defer or streak == 0:
            return False
        if streak < 0 and (self.solved_only or self.evidence and self.stats.successes[slot] > 0):
            return False  # it has succeeded: rare-success, not impossible (`solved`: never for failing)
        keep = max(self.explore["easy" if streak > 0 else "hard"] ** abs(streak), KEEP_FLOOR)
        if streak < 0 and self.pooled:  # deferred for failing only as far as it is probably impossible
            keep = 1 - float(self.impossible[slot]) * (1 - keep)
        return uniform_draw(self.seed, slot, epoch) >= keep

    def pilot_size(self, slot: int) -> int:
        """With `pilot`: the G a prompt's rule gives it, the pilot while it is unseen or settled, else the largest."""
        stats = self.stats
        settled = stats.zero_streak[slot] != 0 or stats.successes[slot] + stats.failures[slot] == 0
        return self.pilot if settled else self.candidates[-1]

    def values(self, slots: Sequence[int]) -> np.ndarray:
        """Per slot and candidate, the expected value of a group of that size ([`expected_value`])."""
        a, b = self.stats.posterior(slots)
        return expected_value(a, b, self.candidates, self.weight)

    def choose(self, slots: Sequence[int], waiting: int,
               first: Sequence[int] = ()) -> tuple[list[int], list[int]] | None:  # fmt: skip
        """
        Choose the round from a window of prompts (its first `waiting` ones left waiting by the previous round;
        `first`: positions taken next, before the others by value).

        Returns:
            `(taken, sizes)`: positions in the window (ascending) and their G; or `None` when the window cannot fill
            the budget (the pass's end).
        """
        values = self.values(slots)
        if len(self.candidates) == 1:
            order = list(range(len(slots)))
        else:  # the waiting ones first, then by value at the largest candidate (a stable sort keeps stream order)
            ahead = [*range(waiting), *(i for i in first if i >= waiting)]
            rest = sorted(set(range(len(slots))) - set(ahead), key=lambda i: (-values[i, -1], i))
            order = ahead + rest
        for count in range(min(self.prompts, len(slots)), 0, -1):  # fewer only at the pass's end
            taken = sorted(order[:count])
            sizes = knapsack(values[taken], self.candidates, self.budget)
            if sizes is not None:
                return taken, sizes
        return None

    def plan(self, waiting: Sequence[int], fresh: Iterable[int], epoch: int, defer: bool = True) -> RoundPlan | None:
        """
        Allocate one round.

        Args:
            waiting (`Sequence[int]`): Slots of the prompts the previous round left waiting, in order.
            fresh (`Iterable[int]`): Slots of the next prompts of the current pass, in stream order (read lazily:
                only as many as the round looks at).
            epoch (`int`): The pass they belong to (for the deferral draws).
            defer (`bool`): `False` disables deferral for this round.

        Returns:
            [`RoundPlan`], or `None` when the pass's remaining prompts cannot fill the budget (with deferral: cannot
            fill the round's prompts).
        """
        if self.pooled and defer:
            self.impossible = point_mass(self.stats.successes, self.stats.successes + self.stats.failures)[1]
        if self.pilot is not None:
            return self._plan_pilot(waiting, fresh, epoch, defer)
        window, positions, read, deferred = list(waiting), list(range(len(waiting))), 0, 0
        skipped = dict.fromkeys(SKIP_REASONS, 0)
        floor = []  # evidence: window positions kept by GRESO's floor, taken whatever their value (they come back)
        iterator = iter(fresh)
        size = self.window if defer else self.fill_window
        while len(window) < size:
            slot = next(iterator, None)
            if slot is None:
                break
            read += 1
            if defer and deferred < self.max_deferred and self.deferred(slot, epoch):
                deferred += 1
                skipped["solved" if self.stats.zero_streak[slot] > 0 else "failed"] += 1
                continue
            if self.evidence and defer and uniform_draw(self.seed, slot, epoch) < KEEP_FLOOR:
                floor.append(len(window))
            window.append(slot)
            positions.append(len(waiting) + read - 1)
        if deferred and len(window) < self.prompts and not (self.evidence and defer and not waiting):
            return None  # deferral emptied the rest of the pass: the caller fills the round without it, in turn
        chosen = self.choose(window, len(waiting), floor)
        if chosen is None:
            return None
        taken, sizes = chosen
        left = sorted(set(range(len(window))) - set(taken))
        if self.evidence and defer:  # the prompts of less value are skipped for the pass, not kept waiting
            deferred, skipped["value"], left = deferred + len(left), len(left), []
        return RoundPlan(tuple(positions[i] for i in taken), tuple(sizes), tuple(positions[i] for i in left), read,
                         deferred, skipped)  # fmt: skip

    def _plan_pilot(self, waiting: Sequence[int], fresh: Iterable[int], epoch: int, defer: bool) -> RoundPlan | None:
        """A round of pilot and full groups: the prompts waiting (none, unless a state saved by another rule), then
        the pass's next undeferred ones, in order, until their sizes ([`pilot_size`]) reach the budget; the knapsack
        makes the sum exact, keeping as many rule sizes as it can. None is left waiting."""
        window, positions, looked, deferred, planned = [], [], 0, 0, 0
        skipped = dict.fromkeys(SKIP_REASONS, 0)
        iterator, sizes = itertools.chain(waiting, fresh), None
        while True:
            if planned >= self.budget:
                sizes = self._pilot_sizes(window)
                if sizes is not None:
                    break
            slot = next(iterator, None)
            if slot is None:
                sizes = self._pilot_sizes(window) if window else None
                if sizes is None:
                    return None  # the pass's prompts left cannot fill the budget
                break
            looked += 1
            if looked > len(waiting) and defer and deferred < self.max_deferred and self.deferred(slot, epoch):
                deferred += 1
                skipped["solved" if self.stats.zero_streak[slot] > 0 else "failed"] += 1
                continue
            window.append(slot)
            positions.append(looked - 1)
            planned += self.pilot_size(slot)
        read = max(looked - len(waiting), 0)
        return RoundPlan(tuple(positions), tuple(sizes), (), read, deferred, skipped)

    def _pilot_sizes(self, slots: Sequence[int]) -> list[int] | None:
        """The G of each prompt: the knapsack over {rule size: 1, other candidates: 0}, so the sum is the budget."""
        rule = np.array([self.candidates.index(self.pilot_size(slot)) for slot in slots])
        preference = np.zeros((len(slots), len(self.candidates)))
        preference[np.arange(len(slots)), rule] = 1.0
        return knapsack(preference, self.candidates, self.budget)

    def adapt(self, easy_share: float, hard_share: float) -> None:
        """GRESO's update after a round: each kind's exploration probability moves against its zero-std share."""
        for kind, share in (("easy", easy_share), ("hard", hard_share)):
            step = -EXPLORE_STEP if share > self.skip_target / 2 else EXPLORE_STEP
            self.explore[kind] = round(min(max(self.explore[kind] + step, EXPLORE_BOUNDS[0]), EXPLORE_BOUNDS[1]), 6)

    def skip_probabilities(self) -> dict[str, float]:
        """The probability that a prompt is deferred after one zero-std visit, per kind (`skip_p_easy`,
        `skip_p_hard`)."""
        return {f"skip_p_{kind}": 1 - max(e, KEEP_FLOOR) for kind, e in self.explore.items()}
