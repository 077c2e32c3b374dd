"""
Prompts of fixed kinds: where a sampling rule puts its completions when each prompt's success rate never changes.

Every prompt is one kind for the whole run: `solved` (p = 1), `impossible` (p = 0), `rare` (p = 0.05) or `coin`
(p = 0.5), in the shares of `mix`. Rounds of `batch` completions over passes of the shuffled prompts drive the library's
real rules, as the trainer calls them: the per-prompt policy (`make_policy`, its allocator's `plan` with the trainer's
pass handling, `observe` with `round_stats`), top-up (`TopUp.prompts_for`, `top_up_next`) and a static G. Nothing
learns, so the numbers are the rules' alone: the share of completions in informative groups (rewards not all equal),
each kind's share of the completions. Pure: numpy and the package's core, no torch; a run takes well under a second.

    python benchmarks/study/fixed_kinds.py     # the table: every static G, the per-prompt and top-up defaults

The test suite (tests/test_fixed_kinds.py) holds the defaults to the rules of issue 37: per-prompt informative share
>= 1.3x the best static G's, solved + impossible prompts <= 0.15 of its completions, rare-success prompts at least
their static share; top-up >= 1.5x static G 4's informative share.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

KINDS = {"solved": 1.0, "impossible": 0.0, "rare": 0.05, "coin": 0.5}
EQUAL = {"solved": 1, "impossible": 1, "rare": 1, "coin": 1}
CANDIDATES = (2, 4, 8, 16)
BATCH = 128
PROMPTS = 256
ROUNDS = 48  # the study's budget: 48 rounds of 128 completions


def kinds_of(mix: dict[str, int], prompts: int) -> list[str]:
    """`prompts` kinds in the proportions of `mix` (largest remainders), in a fixed interleaved order."""
    total = sum(mix.values())
    counts = {k: prompts * w // total for k, w in mix.items()}
    for k in sorted(mix, key=lambda k: -(prompts * mix[k] % total))[: prompts - sum(counts.values())]:
        counts[k] += 1
    out = [k for k, n in counts.items() for _ in range(n)]
    random.Random(0).shuffle(out)
    return out


class Tally:
    def __init__(self, kinds: list[str]):
        self.kinds = kinds
        self.completions = {k: 0 for k in KINDS}
        self.informative = {k: 0 for k in KINDS}

    def add(self, slot: int, rewards: Sequence[float]) -> None:
        kind = self.kinds[slot]
        self.completions[kind] += len(rewards)
        if max(rewards) != min(rewards):
            self.informative[kind] += len(rewards)

    def summary(self) -> dict:
        total = sum(self.completions.values())
        return {"completions": total, "informative_share": sum(self.informative.values()) / total,
                "share": {k: v / total for k, v in self.completions.items()},
                "settled_share": (self.completions["solved"] + self.completions["impossible"]) / total}  # fmt: skip


def _rewards(rng: np.random.Generator, kind: str, n: int) -> list[float]:
    return [float(v) for v in rng.random(n) < KINDS[kind]]


def run(rule, mix: dict[str, int] = EQUAL, seed: int = 0, rounds: int = ROUNDS, batch: int = BATCH,
        prompts: int = PROMPTS) -> dict:  # fmt: skip
    """
    One run of `rounds` rounds. `rule`: an int (a static G), or an `Adaptive` (`policy` `per_prompt` or `top_up`).
    """
    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.core.next_increment import top_up_next
    from grpo_curriculum.core.signals import round_stats
    from grpo_curriculum.core.slots import PromptSlots

    kinds = kinds_of(mix, prompts)
    rng = np.random.default_rng(seed)
    tally = Tally(kinds)
    order, pos, epoch = list(rng.permutation(prompts)), 0, 0

    def take(n: int) -> list[int]:  # the next n prompts of the stream (a new pass drops the rest, as TRL does)
        nonlocal order, pos, epoch
        if pos + n > prompts:
            order, pos, epoch = list(rng.permutation(prompts)), 0, epoch + 1
        out, pos = order[pos : pos + n], pos + n
        return [int(s) for s in out]

    if isinstance(rule, int):
        for _ in range(rounds):
            for slot in take(batch // rule):
                tally.add(slot, _rewards(rng, kinds[slot], rule))
        return tally.summary()
    if rule.policy == "top_up":
        top_up = rule.top_up
        for _ in range(rounds):
            slots = take(top_up.prompts_for(batch))
            groups = [_rewards(rng, kinds[s], top_up.pilot) for s in slots]
            while (added := top_up_next(groups, [len(g) for g in groups], top_up, batch)) is not None:
                for g, n in enumerate(added):
                    groups[g] += _rewards(rng, kinds[slots[g]], n) if n else []
            for slot, rewards in zip(slots, groups, strict=True):
                tally.add(slot, rewards)
        return tally.summary()
    policy = make_policy(rule, rule.num_generations[0], 1.0)
    policy.bind(budget=batch, slots=PromptSlots(prompts, indexed=True), seed=seed)
    waiting: list[int] = []
    for _ in range(rounds):
        plan = None
        for _ in range(2):  # the trainer's `_per_prompt_round`: this pass (deferring, then not), else a new pass
            for defer in (True, False):
                plan = policy.plan(waiting, iter(order[pos:]), epoch=epoch, defer=defer)
                if plan is not None:
                    break
            if plan is not None:
                break
            order, pos, epoch, waiting = list(rng.permutation(prompts)), 0, epoch + 1, []
        window = waiting + [int(s) for s in order[pos : pos + plan.read]]
        pos += plan.read
        taken = [window[i] for i in plan.taken]
        waiting = [window[i] for i in plan.left]
        rewards = [_rewards(rng, kinds[s], g) for s, g in zip(taken, plan.sizes, strict=True)]
        for slot, r in zip(taken, rewards, strict=True):
            tally.add(slot, r)
        policy.observe(round_stats([v for r in rewards for v in r], list(plan.sizes),
                                   prompt_keys=[str(s) for s in taken]))  # fmt: skip
    return tally.summary()


def mean_runs(rule, seeds: int = 4, **kwargs) -> dict:
    """`run` averaged over `seeds` seeds (shares of pooled completions)."""
    runs = [run(rule, seed=s, **kwargs) for s in range(seeds)]
    keys = ("informative_share", "settled_share")
    out = {k: float(np.mean([r[k] for r in runs])) for k in keys}
    out["share"] = {k: float(np.mean([r["share"][k] for r in runs])) for k in KINDS}
    return out


RULES = {  # issue 37's rules on the equal-kinds mix: (what, bound)
    "per_prompt": {"informative_vs_best_static": (">=", 1.3), "settled_share": ("<=", 0.15),
                   "rare_vs_static": (">=", 1.0)},
    "top_up": {"informative_vs_static_g4": (">=", 1.5)},
}  # fmt: skip


def checks(adaptive, seeds: int = 4) -> dict[str, dict]:
    """
    The fixed-kind rules of `adaptive`'s policy (`RULES`) on the equal-kinds mix: per rule its measured value, the
    bound and whether it holds. Static G's share of rare-success prompts is their share of the prompts.
    """
    m = mean_runs(adaptive, seeds=seeds)
    static = {g: mean_runs(g, seeds=seeds)["informative_share"] for g in CANDIDATES}
    values = {"informative_vs_best_static": m["informative_share"] / max(static.values()),
              "settled_share": m["settled_share"], "rare_vs_static": m["share"]["rare"] / (EQUAL["rare"] / 4),
              "informative_vs_static_g4": m["informative_share"] / static[4]}  # fmt: skip
    out = {}
    for name, (sign, bound) in RULES[adaptive.policy].items():
        value = values[name]
        out[name] = {"value": round(value, 4), "bound": f"{sign} {bound}",
                     "ok": value >= bound if sign == ">=" else value <= bound}  # fmt: skip
    return out


def main() -> None:
    from grpo_curriculum import Adaptive

    rules = {**{f"static G {g}": g for g in CANDIDATES},
             "per_prompt (default)": Adaptive(CANDIDATES, policy="per_prompt"),
             "per_prompt skip=greso": Adaptive(CANDIDATES, policy="per_prompt", skip="greso"),
             "per_prompt skip=evidence": Adaptive(CANDIDATES, policy="per_prompt", skip="evidence"),
             "top_up (default)": Adaptive(CANDIDATES, policy="top_up")}  # fmt: skip
    for name, mix in (("equal kinds", EQUAL), ("half settled, half coins", {"solved": 1, "impossible": 1, "coin": 2})):
        print(f"\n{name} ({PROMPTS} prompts, {ROUNDS} rounds of {BATCH}, 4 seeds)")
        print(f"{'rule':>24} {'informative':>11} {'settled':>8} " + " ".join(f"{k:>10}" for k in KINDS))
        for label, rule in rules.items():
            m = mean_runs(rule, mix=mix)
            print(f"{label:>24} {m['informative_share']:>11.3f} {m['settled_share']:>8.3f} "
                  + " ".join(f"{m['share'][k]:>10.3f}" for k in KINDS))  # fmt: skip


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
