"""
The adaptive policies: choose a whole round's `num_generations` (G) and temperature from the reward-variance signals
([`RoundStats`]) of the rounds before it, within the bounds of an [`~core.adaptive.Adaptive`] stage.

Pure logic: the standard library only at import (numpy only once a policy keeps per-prompt counts; no torch). The
trainer computes the round's statistics from rewards gathered from every process, so every process feeds the same
stream to its policy and takes the same decisions. Decisions are deterministic (no randomness, order-independent
sums), never leave the candidate G values, and G and the temperature each change at most once every `cooldown` rounds;
at most one of the two changes in a round.

A switch must pay for itself, so G does not follow a signal that oscillates around its threshold: each policy decides
on a band (hysteresis: `lower_below` < `raise_above`; success rate: `target` plus or minus `margin`), and a switch
that reverses the previous one (G up after G down, or down after up; the same for the temperature) must wait twice as
long as the reversal before it (`2 * cooldown` rounds after the previous change, then `4 * cooldown`, ...: at most
about `log2(rounds / cooldown)` reversals of each in a stage). Switch reasons give the deciding numbers at the
precision that tells them apart from the threshold.

Three policies decide from the rounds before ([`make_policy`]); the fourth, `top_up`, decides within each round
([`grpo_curriculum.core.sampling`]) and keeps no policy state:

- `hysteresis`: raise G when the smoothed share of zero-std groups stays high, lower it when it stays low.
- `success_rate`: model each prompt's success rate p and pick the smallest G whose groups are expected to be
  informative (probability `1 - p^G - (1-p)^G`, as in Knapsack RL), like GRESO's prediction of zero-variance prompts.
- `per_prompt`: no round-wide G: each prompt of a round gets its own G under the round's fixed budget (by default the
  next prompts of the stream, in order); with `defer=True`, prompts predicted to give zero-variance groups are
  deferred ([`grpo_curriculum.core.allocation`]).

Each optionally adapts the temperature within bounds (as POLARIS tunes it to keep rollouts diverse): raise it when the
completions of a group collapse to identical ones, lower it when completions are diverse but rewards stop improving.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass

from .adaptive import Adaptive
from .errors import Problem, raise_if_any
from .rules import POSITIVE, is_int
from .signals import RoundStats
from .slots import PromptSlots


@dataclass(frozen=True)
class Decision:
    """
    The setting of one generation round.

    Args:
        num_generations (`int`): G for the round (always one of the candidates).
        temperature (`float`): Sampling temperature for the round.
        reason (`str` or `None`): `None` when nothing changed; else one line with the numbers behind the change.
    """

    num_generations: int
    temperature: float
    reason: str | None = None


def _ema(old: float | None, new: float, weight: float) -> float:
    return new if old is None else weight * new + (1 - weight) * old


def _usable(value) -> bool:
    return value is not None and math.isfinite(value)


def compared(value: float, sign: str, bound: float, digits: int = 3) -> str:
    """
    `f"{value} {sign} {bound}"` with at least `digits` decimals, and as many more as it takes to tell the two apart,
    so that a reason never reads "0.80 < 0.8".

    Example:
    ```python
    >>> compared(0.7996, "<", 0.8)
    '0.7996 < 0.8000'
    ```
    """
    if value != bound:
        for places in range(digits, 18):
            a, b = f"{value:.{places}f}", f"{bound:.{places}f}"
            if a != b:
                return f"{a} {sign} {b}"
        return f"{value!r} {sign} {bound!r}"
    return f"{value:.{digits}f} {sign} {bound:.{digits}f}"


def _rounds(n: int) -> str:
    return f"{n} round" if n == 1 else f"{n} rounds"


class Policy:
    """
    Base of the adaptive policies. Call [`Policy.observe`] with each finished round's [`RoundStats`] and
    [`Policy.decide`] at the start of each round (it returns the same [`Decision`] until the next `observe`).

    Every signal is smoothed by an EMA (`smoothing`). The zero-std EMA restarts when G changes and the distinct EMA
    when the temperature changes, since each measures the knob just changed. Rounds without any finite reward advance
    the round count (for cooldowns) but nothing else.
    """

    name = ""
    _STATE = ("num_generations", "temperature", "round", "last_g_change", "last_t_change", "zero_std_ema",
              "distinct_ema", "reward_ema", "best_reward", "stale", "clamped_from", "g_direction", "g_reversals",
              "t_direction", "t_reversals")
    _ADDED = dict.fromkeys(_STATE[-4:], 0)  # state added later: a checkpoint without it starts them afresh

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        if not isinstance(adaptive, Adaptive):
            raise TypeError(f"adaptive must be an Adaptive, got {type(adaptive).__name__}")
        problems = []
        if num_generations not in adaptive.num_generations or not is_int(num_generations):
            problems.append(Problem("num_generations", num_generations,
                                    f"must be one of the adaptive candidates {list(adaptive.num_generations)}",
                                    "start at a candidate, or add it to `adaptive.num_generations`"))
        problems += POSITIVE.problems("temperature", temperature)
        raise_if_any(problems, context=f"{self.name} policy")
        self.adaptive = adaptive
        self.num_generations = int(num_generations)
        self.temperature = float(adaptive.clamp(float(temperature)))
        self.clamped_from = float(temperature) if self.temperature != temperature else None
        self.round = 0
        self.last_g_change = self.last_t_change = None
        self.zero_std_ema = self.distinct_ema = self.reward_ema = self.best_reward = None
        self.stale = 0
        # +1 / -1: the direction of the last G (temperature) change, 0 before the first; changes that reversed one
        self.g_direction = self.g_reversals = self.t_direction = self.t_reversals = 0
        self._decision: Decision | None = None

    # --- to override ---------------------------------------------------------------------------------------------

    def _observe(self, stats: RoundStats) -> None:
        pass

    def _propose(self) -> tuple[int, str] | None:
        """A new candidate G and the reason, or `None` (called only when the G cooldown allows a change)."""
        return None

    def bind(self, **context) -> None:
        """Take what the trainer knows of the run (`budget`, `slots`, `seed`); policies that keep per-prompt state
        need it."""

    def _g_changed(self) -> None:
        pass

    # --- public ----------------------------------------------------------------------------------------------------

    def observe(self, stats: RoundStats) -> None:
        """Take in a finished round's statistics (all-NaN rounds only count as a round)."""
        self.round += 1
        self._decision = None
        if stats.num_groups == 0 or not _usable(stats.zero_std_fraction):
            return
        a = self.adaptive
        self.zero_std_ema = _ema(self.zero_std_ema, stats.zero_std_fraction, a.smoothing)
        if _usable(stats.distinct_fraction):
            self.distinct_ema = _ema(self.distinct_ema, stats.distinct_fraction, a.smoothing)
        if _usable(stats.mean_reward):
            self.reward_ema = _ema(self.reward_ema, stats.mean_reward, a.smoothing)
            if self.best_reward is None or self.reward_ema > self.best_reward:
                self.best_reward, self.stale = self.reward_ema, 0
            else:
                self.stale += 1
        self._observe(stats)

    def decide(self) -> Decision:
        """The [`Decision`] for the round about to start (round number `self.round`, counting from 0)."""
        if self._decision is not None:
            return self._decision
        a, g, t, reasons = self.adaptive, self.num_generations, self.temperature, []
        if self.clamped_from is not None:
            low, high = a.temperature
            reasons.append(f"temperature {self.clamped_from:g} clamped to bounds [{low:g}, {high:g}]")
            self.clamped_from = None
        g_ready = self.last_g_change is None or self.round - self.last_g_change >= a.cooldown
        t_ready = self.last_t_change is None or self.round - self.last_t_change >= a.cooldown
        proposal = self._propose() if g_ready else None
        if proposal is not None:
            note = self._reversal("g", 1 if proposal[0] > g else -1)
            proposal = None if note is None else (proposal[0], proposal[1] + note)
        bounds, d, z = a.temperature, self.distinct_ema, self.zero_std_ema
        collapsed = bounds is not None and d is not None and d < a.collapse_below
        noise = (bounds is not None and d is not None and d >= a.diverse_above and z is not None
                 and z < a.lower_below and self.stale >= a.patience)
        if collapsed and t < bounds[1]:
            held = proposal is not None and proposal[0] > g
            proposal = None if held else proposal  # diversity first: raise T before raising G
            note = self._reversal("t", 1) if t_ready else None
            if note is not None:
                new = min(bounds[1], round(t + a.temperature_step, 6))
                reasons.append(f"distinct fraction {compared(d, '<', a.collapse_below)} (completions collapse): "
                               f"temperature {t:g} -> {new:g}" + (", before raising G" if held else "") + note)
                self._set_temperature(new, 1)
                proposal = None  # one change a round
        if proposal is not None:
            direction = 1 if proposal[0] > g else -1
            self.g_reversals += direction == -self.g_direction
            self.g_direction = direction
            self.num_generations, self.last_g_change, self.zero_std_ema = proposal[0], self.round, None
            self._g_changed()
            reasons.append(proposal[1])
        elif noise and t_ready and t > bounds[0]:  # (`collapsed` and `noise` exclude each other)
            note = self._reversal("t", -1)
            if note is not None:
                new = max(bounds[0], round(t - a.temperature_step, 6))
                reasons.append(f"distinct fraction {compared(d, '>=', a.diverse_above)} but zero-std fraction "
                               f"{compared(z, '<', a.lower_below)} and mean reward not improved for "
                               f"{_rounds(self.stale)}: temperature {t:g} -> {new:g}{note}")
                self._set_temperature(new, -1)
        self._decision = Decision(self.num_generations, self.temperature, "; ".join(reasons) or None)
        return self._decision

    def reversal_wait(self, knob: str = "g") -> int:
        """
        Least rounds after the last change of `knob` (`"g"` or `"t"`, the temperature) before it may move back:
        `2**(reversals + 1) * max(cooldown, 1)`, `reversals` the earlier changes of that knob that reversed one.
        """
        return 2 ** (getattr(self, f"{knob}_reversals") + 1) * max(self.adaptive.cooldown, 1)

    def _reversal(self, knob: str, direction: int) -> str | None:
        """Whether `knob` may move in `direction` now: `""` (not a reversal), a note for the reason (a reversal that
        waited long enough), or `None` (a reversal that must wait longer)."""
        if direction != -getattr(self, f"{knob}_direction"):
            return ""
        wait, held = self.reversal_wait(knob), self.round - getattr(self, f"last_{knob}_change")
        if held < wait:
            return None  # a reversal must pay for itself: it waits until the signal has held long enough
        name = "G" if knob == "g" else "temperature"
        return (f"; reverses the previous {name} change after {held} rounds (a reversal waits {wait},"
                f" the next {2 * wait})")

    def _set_temperature(self, value: float, direction: int) -> None:
        self.t_reversals += direction == -self.t_direction
        self.t_direction = direction
        self.temperature, self.last_t_change, self.distinct_ema, self.stale = value, self.round, None, 0

    def metrics(self) -> dict[str, float]:
        """Current G, temperature and smoothed signals, for logging (a signal not measured yet is left out)."""
        values = {"num_generations": self.num_generations, "temperature": self.temperature,
                  "zero_std_ema": self.zero_std_ema, "distinct_ema": self.distinct_ema, "reward_ema": self.reward_ema}
        return {k: float(v) for k, v in values.items() if v is not None}

    def state_dict(self) -> dict:
        """A JSON-serialisable snapshot; [`Policy.load_state_dict`] on a fresh policy continues identically."""
        state = {"policy": self.name, "version": 1, **copy.deepcopy({k: getattr(self, k) for k in self._STATE})}
        d = self._decision
        state["decision"] = None if d is None else [d.num_generations, d.temperature, d.reason]
        return state

    def load_state_dict(self, state: dict) -> None:
        if state.get("policy") != self.name or state.get("version") != 1:
            raise ValueError(f"state is for policy {state.get('policy')!r} (version {state.get('version')!r}), "
                             f"not {self.name!r} (version 1)")
        if state["num_generations"] not in self.adaptive.num_generations:
            raise ValueError(f"saved num_generations {state['num_generations']} is not one of the candidates "
                             f"{list(self.adaptive.num_generations)}")
        for k in self._STATE:
            setattr(self, k, copy.deepcopy(state.get(k, self._ADDED[k]) if k in self._ADDED else state[k]))
        self._decision = None if state["decision"] is None else Decision(*state["decision"])


class HysteresisPolicy(Policy):
    """
    Move G one candidate up when the smoothed zero-std fraction stayed above `raise_above` for `patience` observed
    rounds, one candidate down when it stayed below `lower_below` for `patience` rounds; counters restart on a change.
    """

    name = "hysteresis"
    _STATE = Policy._STATE + ("above", "below")

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        super().__init__(adaptive, num_generations, temperature)
        self.above = self.below = 0

    def _observe(self, stats: RoundStats) -> None:
        self.above = self.above + 1 if self.zero_std_ema > self.adaptive.raise_above else 0
        self.below = self.below + 1 if self.zero_std_ema < self.adaptive.lower_below else 0

    def _propose(self) -> tuple[int, str] | None:
        a, g, z = self.adaptive, self.num_generations, self.zero_std_ema
        i = a.num_generations.index(g)
        if self.above >= a.patience and i + 1 < len(a.num_generations):
            new = a.num_generations[i + 1]
            above = compared(z, ">", a.raise_above)
            return new, f"zero-std fraction {above} for {_rounds(self.above)}: G {g} -> {new}"
        if self.below >= a.patience and i > 0:
            new = a.num_generations[i - 1]
            below = compared(z, "<", a.lower_below)
            return new, f"zero-std fraction {below} for {_rounds(self.below)}: G {g} -> {new}"
        return None

    def _g_changed(self) -> None:
        self.above = self.below = 0


class SuccessRatePolicy(Policy):
    """
    Estimate each prompt's success rate p as `(successes + 1) / (trials + 2)` (a Beta(1, 1) prior, accumulated over
    every time the prompt was seen; per group when prompt keys are absent), average the probability that a group of G
    is informative, `1 - p^G - (1-p)^G`, over the prompts of the last `window` rounds. When it falls below
    `target - margin`, raise G to the smallest candidate reaching `target` (the largest when none does); lower G only
    to a candidate reaching `target + margin`; in between, G holds.

    The counts live in two arrays over prompt slots ([`PromptSlots`]; [`Policy.bind`] sets them, hashed buckets
    otherwise): 8 bytes a prompt, whatever the dataset's size.
    """

    name = "success_rate"
    _STATE = Policy._STATE + ("window",)

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        super().__init__(adaptive, num_generations, temperature)
        self.slots = None
        self.successes = self.trials = None  # numpy arrays over slots, made by `bind`
        self._window: deque[list] = deque(maxlen=adaptive.window)  # per round: prompt slots, or [successes, trials]

    def bind(self, slots: PromptSlots | None = None, **context) -> None:
        import numpy as np

        self.slots = slots or PromptSlots()
        self.successes = np.zeros(self.slots.num_slots, dtype=np.float32)
        self.trials = np.zeros(self.slots.num_slots, dtype=np.float32)

    @property
    def window(self) -> list[list]:
        return [list(entry) for entry in self._window]

    @window.setter
    def window(self, rounds: list[list]) -> None:
        self._window = deque((list(r) for r in rounds), maxlen=self.adaptive.window)

    def _observe(self, stats: RoundStats) -> None:
        if self.slots is None:
            self.bind()
        entries = []
        for i, (success, n) in enumerate(zip(stats.group_success, stats.group_counts)):
            if n == 0 or not _usable(success):
                continue
            s = round(success * n)
            if stats.prompt_keys is None:
                entries.append([s, n])
            else:
                slot = self.slots.slot_of(stats.prompt_keys[i])
                self.successes[slot] += s
                self.trials[slot] += n
                entries.append(slot)
        self._window.append(entries)

    def expected_informative(self, num_generations: int) -> float | None:
        """Mean `1 - p^G - (1-p)^G` over the window's prompts (each prompt once), or `None` before any observation."""
        slots = sorted({e for r in self._window for e in r if not isinstance(e, list)})
        pairs = [(float(self.successes[i]), float(self.trials[i])) for i in slots]
        pairs += [tuple(e) for r in self._window for e in r if isinstance(e, list)]
        if not pairs:
            return None
        ps = [(s + 1) / (n + 2) for s, n in pairs]
        return math.fsum(1 - p**num_generations - (1 - p) ** num_generations for p in ps) / len(ps)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.slots is not None:
            touched = self.trials.nonzero()[0].astype("uint32")
            state["counts"] = {"slots": touched, "successes": self.successes[touched], "trials": self.trials[touched]}
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "counts" in state:
            if self.slots is None:
                self.bind()
            counts = state["counts"]
            self.successes[counts["slots"]], self.trials[counts["slots"]] = counts["successes"], counts["trials"]

    def _propose(self) -> tuple[int, str] | None:
        a, g = self.adaptive, self.num_generations
        f = {c: self.expected_informative(c) for c in a.num_generations}
        if f[g] is None:
            return None
        if f[g] < a.target - a.margin:
            up = next((c for c in a.num_generations if c > g and f[c] >= a.target), None)
            new = a.num_generations[-1] if up is None else up
            if new == g:
                return None
            now = (f"expected informative fraction {compared(f[g], '<', a.target - a.margin)} (target {a.target:g} - "
                   f"margin {a.margin:g}) at G {g}")
            then = (f"G {new} reaches the target ({compared(f[new], '>=', a.target)})" if up else
                    f"no candidate reaches the target (G {new} gives {f[new]:.3f})")
            return new, f"{now}; {then}: G {g} -> {new}"
        down = next((c for c in a.num_generations if c < g and f[c] >= a.target + a.margin), None)
        if down is None:
            return None
        return down, (f"expected informative fraction {compared(f[down], '>=', a.target + a.margin)} (target "
                      f"{a.target:g} + margin {a.margin:g}) at G {down}: G {g} -> {down}")

    def metrics(self) -> dict[str, float]:
        values = super().metrics()
        for c in self.adaptive.num_generations:
            f = self.expected_informative(c)
            if f is not None:
                values[f"expected_informative_g{c}"] = f
                if c == self.num_generations:
                    values["expected_informative"] = f
        return values


class PerPromptPolicy(Policy):
    """
    A G per prompt: the allocator ([`grpo_curriculum.core.allocation.PerPromptAllocator`]) chooses each round from
    per-prompt statistics that [`Policy.observe`] updates with every round's groups, and GRESO's skip probabilities
    follow the round's zero-std groups. There is no round-wide G to propose; the temperature adapts within its bounds
    as with the other policies. Logs `skip_p_easy` and `skip_p_hard`.

    Call [`PerPromptPolicy.bind`] once the round's budget and the prompts' slots are known (the trainer does).
    """

    name = "per_prompt"

    def __init__(self, adaptive: Adaptive, num_generations: int, temperature: float):
        super().__init__(adaptive, num_generations, temperature)
        self.allocator, self.slots = None, None

    def bind(self, budget: int, slots: PromptSlots, seed: int, **context) -> None:
        """
        Args:
            budget (`int`): Completions per round (the generation batch).
            slots ([`PromptSlots`]): Where each prompt's statistics live.
            seed (`int`): Seed of the deferral draws.
        """
        from .allocation import PerPromptAllocator, PromptStats

        a = self.adaptive
        mean = a.mean_generations or math.prod(a.num_generations) ** (1 / len(a.num_generations))
        stats = PromptStats(slots.num_slots, a.num_generations, decay=a.decay, smoothing=a.smoothing)
        prompts = max(round(budget / mean), 1)
        self.allocator = PerPromptAllocator(a.num_generations, budget, prompts, stats, weight=a.weight,
                                            lookahead=a.lookahead, defer=a.defer, skip_target=a.skip_target,
                                            seed=seed, skip=a.skip, explore=a.skip_explore,
                                            pilot=a.pilot)  # fmt: skip
        self.slots = slots

    def slot_of(self, key: str) -> int:
        """The statistics slot of a prompt key ([`round_stats`]'s `prompt_keys`)."""
        return self.slots.slot_of(key)

    @property
    def prompt_stats(self):
        """Each prompt slot's statistics ([`PromptStats`]: discounted successes and failures, zero-std streak)."""
        return self.allocator.stats

    @property
    def round_prompts(self) -> int:
        """The prompts a round holds at the candidates' mean G (the groups a round's statistics update counts)."""
        return self.allocator.prompts

    def plan(self, waiting, fresh, epoch: int, defer: bool = True):
        """A round's [`RoundPlan`] from the slots of the prompts `waiting` and `fresh` in the pass `epoch`
        ([`PerPromptAllocator.plan`]), or `None` when they cannot fill one."""
        return self.allocator.plan(waiting, fresh, epoch=epoch, defer=defer)

    def skip_probabilities(self) -> dict[str, float]:
        """GRESO's current skip probabilities (`skip_p_easy`, `skip_p_hard`)."""
        return self.allocator.skip_probabilities()

    @property
    def fills_pass_end(self) -> bool:
        """Whether a round the deferral leaves short at the pass's end is filled with the prompts it deferred. Not at
        one candidate with deferral (a stage of one G that skips, [`~core.skipping.Skip`]): the next pass starts
        instead, unless a whole pass cannot fill a round. Nor with pilot groups (`pilot`)."""
        a = self.adaptive
        return not a.defer or (len(a.num_generations) > 1 and a.pilot is None)

    def _observe(self, stats: RoundStats) -> None:
        if stats.prompt_keys is None:
            raise ValueError("the per-prompt policy needs the round's prompt keys")
        successes = [0.0 if n == 0 else round(s * n) for s, n in zip(stats.group_success, stats.group_counts)]
        self.allocator.stats.observe([self.slot_of(k) for k in stats.prompt_keys], successes, stats.group_counts,
                                     stats.group_zero_std)  # fmt: skip
        groups = [(s, n) for s, n, zero in zip(successes, stats.group_counts, stats.group_zero_std) if n and zero]
        total = sum(1 for n in stats.group_counts if n)
        if total:
            easy = sum(1 for s, n in groups if s >= n / 2)
            self.allocator.adapt(easy / total, (len(groups) - easy) / total)

    def metrics(self) -> dict[str, float]:
        values = super().metrics()
        values.pop("num_generations")
        return {**values, **self.skip_probabilities()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "stats": self.allocator.stats.state_dict(),
                "explore": dict(self.allocator.explore)}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.allocator.stats.load_state_dict(state["stats"])
        self.allocator.explore = {kind: float(state["explore"][kind]) for kind in ("easy", "hard")}


def make_policy(adaptive: Adaptive, num_generations: int, temperature: float) -> Policy:
    """
    The policy named by `adaptive.policy`, starting at G `num_generations` (one of the candidates) and `temperature`
    (clamped to the bounds; the first decision then says so).
    """
    policies = {"hysteresis": HysteresisPolicy, "success_rate": SuccessRatePolicy, "per_prompt": PerPromptPolicy}
    if adaptive.policy not in policies:
        raise ValueError(f"policy {adaptive.policy!r} decides within each round and keeps no policy state")
    return policies[adaptive.policy](adaptive, num_generations, temperature)
