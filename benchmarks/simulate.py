"""
A pure simulation of GRPO rounds that drives the library's real sampling rules (`grpo_curriculum.core`: the
per-prompt knapsack `PerPromptAllocator` with its `PromptStats`, top-up's `top_up_increment`, and DAPO's dynamic
sampling as the trainer applies it), no torch: seconds instead of hours, to design and tune rules before the real
study (`benchmarks/study2.py`), which alone gives the verdict.

The model of learning. Prompts belong to levels `1..L`; prompt `i` of level `l` succeeds with probability
`p_i = sigmoid(s_l + d_i)`: a level skill `s_l` and a fixed prompt offset `d_i ~ N(0, OFFSET_STD)`. A training step
moves the skills by `RATE` in all, shared among the levels by their completions in informative groups (rewards not
all equal; a group whose rewards are all equal carries no advantage, and Adam normalises the gradient's scale, so
zero-std groups dilute nothing: the real study's G 2 learns about as fast per completion as G 8), `TRANSFER` of each
level's share also to the next level (the frontier moves), plus Gaussian noise that shrinks with the informative
completions of the step (`NOISE * RATE / sqrt(informative / 16)` a level). The x axis is completions *generated*; the y axis the exact expected reward
(mean `p` over the prompts), its area over the budget the primary metric, as in the real study.

Tasks (`TASKS`): `prefix_levels` (4 levels in equal shares, starting skills like the real task after its warm start)
and `prefix_tail` (levels 1 : 1 : 3 : 5).

    python benchmarks/simulate.py                  # every arm, 12 seeds a task, a table per task
    python benchmarks/simulate.py --seeds 40 --rounds 60

Arms: `static_g{2,4,8,16}`, `per_prompt` (`lookahead=2, defer=True`, set explicitly: the library's defaults before
issue 25) and `per_prompt_variance`, `per_prompt_uniform` (the `weight` knob), `per_prompt_nodefer` (`defer=False`),
`top_up` (the library's default round size, `TopUp.prompts_for`: 16 prompts a round at `BATCH` 128 since issue 25;
`benchmarks/results/simulate.md` was written with the earlier default, 32), `dynamic_g{4,8}` (`max_rounds` 4, its own constant): the same names as the real study's.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import numpy as np

from grpo_curriculum.core.allocation import PerPromptAllocator, PromptStats
from grpo_curriculum.core.sampling import TopUp, top_up_increment

CANDIDATES = (2, 4, 8, 16)
BATCH = 128
PROMPTS = 256
OFFSET_STD = 1.0
RATE = 0.15
NOISE = 0.5
TRANSFER = 0.5
DECAY, SMOOTHING = 0.5, 0.3  # the `Adaptive` defaults of `decay` and `smoothing`
MAX_ROUNDS = 4  # dynamic sampling's
TASKS = {  # name: (level weights, starting level skills (logits))
    "prefix_levels": ((1, 1, 1, 1), (3.0, 0.0, -1.5, -3.0)),
    "prefix_tail": ((1, 1, 3, 5), (3.0, 0.0, -1.5, -3.0)),
}
ARMS = [*(f"static_g{g}" for g in CANDIDATES), "per_prompt", "per_prompt_variance", "per_prompt_uniform",
        "per_prompt_nodefer", "top_up", "dynamic_g4", "dynamic_g8"]  # fmt: skip
BINS = (0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0)


class World:
    """The prompts' latent success probabilities and how training moves them."""

    def __init__(self, task: str, seed: int):
        weights, skills = TASKS[task]
        self.rng = np.random.default_rng(seed)
        self.levels = self.rng.choice(len(weights), size=PROMPTS, p=np.array(weights) / sum(weights))
        self.offsets = self.rng.normal(0.0, OFFSET_STD, PROMPTS)
        self.skills = np.array(skills, dtype=float)
        self.order = self.rng.permutation(PROMPTS)  # the pass's prompt order (re-drawn each pass)

    def p(self, slots) -> np.ndarray:
        slots = np.asarray(slots)
        return 1.0 / (1.0 + np.exp(-(self.skills[self.levels[slots]] + self.offsets[slots])))

    def exact(self) -> float:
        return float(self.p(np.arange(PROMPTS)).mean())

    def sample(self, slot: int, n: int) -> list[float]:
        return [float(v) for v in self.rng.random(n) < self.p([slot])[0]]

    def train(self, groups: list[tuple[int, list[float]]]) -> None:
        """
        One optimiser step on `groups` (slot, rewards). Adam-like: a step of size `RATE` whenever some group is
        informative, shared among the levels by their informative completions (zero-std groups dilute nothing: Adam
        normalises the gradient's scale), with direction noise `NOISE * RATE / sqrt(informative completions / 16)`.
        """
        counts = np.zeros(len(self.skills))
        for slot, rewards in groups:
            if max(rewards) != min(rewards):
                counts[self.levels[slot]] += len(rewards)
        total = counts.sum()
        if not total:
            return
        step = RATE * counts / total
        step[1:] += TRANSFER * step[:-1]
        self.skills += step + self.rng.normal(0.0, NOISE * RATE / math.sqrt(total / 16), len(self.skills))

    def stream(self):
        """Prompt slots pass after pass (epoch, slot)."""
        epoch = 0
        while True:
            for slot in self.rng.permutation(PROMPTS):
                yield epoch, int(slot)
            epoch += 1


class Tally:
    """Completions generated, informative completions, and per success bin (groups, completions, informative)."""

    def __init__(self):
        self.generated = self.informative = 0
        self.bins = [[0, 0, 0] for _ in BINS[1:]]

    def group(self, p: float, rewards: list[float]) -> None:
        informative = len(rewards) if max(rewards) != min(rewards) else 0
        self.informative += informative
        b = next(i for i, edge in enumerate(BINS[1:]) if p <= edge)
        self.bins[b][0] += 1
        self.bins[b][1] += len(rewards)
        self.bins[b][2] += informative


def simulate(task: str, arm: str, seed: int, rounds: int, points: int = 16) -> dict:
    """One run of `rounds x BATCH` generated completions; its curve (completions, exact) and tally."""
    world, tally = World(task, seed), Tally()
    budget = rounds * BATCH
    curve = [(0, world.exact())]
    stream = world.stream()
    stats = PromptStats(PROMPTS, CANDIDATES, DECAY, SMOOTHING)
    weight = {"per_prompt_variance": "variance", "per_prompt_uniform": "uniform"}.get(arm, "knapsack")
    allocator = PerPromptAllocator(CANDIDATES, BATCH, round(BATCH / math.prod(CANDIDATES) ** (1 / len(CANDIDATES))),
                                   stats, weight=weight, lookahead=2, defer=arm != "per_prompt_nodefer",
                                   seed=seed)  # fmt: skip
    waiting: list[int] = []
    pending: list[tuple[int, int]] = []  # (epoch, slot) read but not yet used

    def next_slots(n: int) -> list[int]:
        out = []
        while len(out) < n:
            out.append((pending.pop(0) if pending else next(stream))[1])
        return out

    def observe(groups):
        slots = [s for s, _ in groups]
        successes = [sum(r) for _, r in groups]
        stats.observe(slots, successes, [len(r) for _, r in groups], [max(r) == min(r) for _, r in groups])

    next_point = 1
    while tally.generated < budget:
        if arm.startswith("static_g") or arm.startswith("dynamic_g"):
            g = int(arm.rsplit("g", 1)[1])
            kept, tries = [], 0
            while True:
                tries += 1
                groups = [(s, world.sample(s, g)) for s in next_slots(BATCH // g)]
                for s, r in groups:
                    tally.generated += len(r)
                    tally.group(world.p([s])[0], r)
                if arm.startswith("static_g"):
                    kept = groups
                    break
                kept += [(s, r) for s, r in groups if max(r) != min(r)]
                if len(kept) * g >= BATCH or tries >= MAX_ROUNDS:
                    flat = [(s, r) for s, r in groups if max(r) == min(r)]
                    kept = (kept + flat)[: BATCH // g]
                    break
            world.train(kept)
        elif arm.startswith("per_prompt"):
            if not pending:
                pending.append(next(stream))
            epoch = pending[0][0]  # the pass of the next prompt (for the deferral draws)
            window_reads: list[tuple[int, int]] = []

            def fresh():
                while True:
                    item = pending.pop(0) if pending else next(stream)
                    window_reads.append(item)
                    yield item[1]

            plan = allocator.plan(waiting, fresh(), epoch)
            if plan is None:  # deferral emptied the window: fill the round without it
                window_reads.clear()
                plan = allocator.plan(waiting, fresh(), epoch, defer=False)
            looked = waiting + [s for _, s in window_reads]  # positions: waiting first, then the reads in order
            taken = [looked[i] for i in plan.taken]
            waiting = [looked[i] for i in plan.left]
            groups = [(s, world.sample(s, g)) for s, g in zip(taken, plan.sizes, strict=True)]
            for s, r in groups:
                tally.generated += len(r)
                tally.group(world.p([s])[0], r)
            zero = [max(r) == min(r) for _, r in groups]
            easy = sum(z and r[0] == 1 for z, (_, r) in zip(zero, groups, strict=True)) / len(groups)
            hard = sum(z and r[0] == 0 for z, (_, r) in zip(zero, groups, strict=True)) / len(groups)
            allocator.adapt(easy, hard)
            observe(groups)
            world.train(groups)
        elif arm == "top_up":
            plan = TopUp(pilot=CANDIDATES[0], largest=CANDIDATES[-1])
            slots = next_slots(plan.prompts_for(BATCH))
            rewards = [world.sample(s, plan.pilot) for s in slots]
            left = BATCH - sum(len(r) for r in rewards)
            while left > 0:
                added = top_up_increment(rewards, [len(r) for r in rewards], plan.pilot, plan.largest, left)
                if not any(added):
                    break
                for i, a in enumerate(added):
                    if a:
                        rewards[i] += world.sample(slots[i], a)
                left -= sum(added)
            groups = list(zip(slots, rewards, strict=True))
            for s, r in groups:
                tally.generated += len(r)
                tally.group(world.p([s])[0], r)
            world.train(groups)
        else:
            raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")
        while next_point <= points and tally.generated >= budget * next_point / points:
            next_point += 1
        curve.append((tally.generated, world.exact()))
    return {"curve": curve, "budget": budget, "generated": tally.generated, "informative": tally.informative,
            "bins": tally.bins}  # fmt: skip


def auc(run: dict) -> float:
    """Mean exact reward over the budget (trapezoids over the per-step curve, cut at the budget)."""
    xs, ys = zip(*run["curve"], strict=True)
    from study_stats import area_under  # benchmarks/study_stats.py

    return area_under(list(xs), list(ys), run["budget"])


def table(task: str, seeds: int, rounds: int, arms: list[str]) -> list[str]:
    from study_stats import bootstrap_interval, median

    runs = {arm: [simulate(task, arm, seed, rounds) for seed in range(seeds)] for arm in arms}
    aucs = {arm: [auc(r) for r in rs] for arm, rs in runs.items()}
    statics = [a for a in arms if a.startswith("static")]
    reference = max(statics, key=lambda a: statistics.fmean(aucs[a]))
    lines = [f"## `{task}` (simulated; {seeds} seeds x {rounds * BATCH} completions; reference `{reference}`)", "",
             "| arm | AUC | AUC - ref: median [90% CI] | final | informative share | completions on p <= 0.05 | "
             "on p <= 0.2 | G on p <= 0.2 |", "|" + "---|" * 8]  # fmt: skip
    for arm in arms:
        diffs = [a - b for a, b in zip(aucs[arm], aucs[reference], strict=True)]
        lo, hi = bootstrap_interval(diffs)
        bins = np.sum([r["bins"] for r in runs[arm]], axis=0)
        total = bins[:, 1].sum()
        hard = bins[:2].sum(axis=0)
        lines.append(f"| `{arm}` | {statistics.fmean(aucs[arm]):.4f} | {median(diffs):+.4f} [{lo:+.4f}, {hi:+.4f}] | "
                     f"{statistics.fmean(r['curve'][-1][1] for r in runs[arm]):.3f} | "
                     f"{sum(r['informative'] for r in runs[arm]) / sum(r['generated'] for r in runs[arm]):.2f} | "
                     f"{bins[0, 1] / total:.0%} | {hard[1] / total:.0%} | {hard[1] / max(hard[0], 1):.1f} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=48, help=f"budget in rounds of {BATCH} completions")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=ARMS)
    options = parser.parse_args(argv)
    for task in options.tasks:
        print("\n".join(table(task, options.seeds, options.rounds, options.arms)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
