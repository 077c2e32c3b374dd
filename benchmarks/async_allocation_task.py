"""
The task and the per-run measures of benchmarks/async_allocation.py (issue 46, docs/async.md "Study row"), pure Python
(no torch, no vLLM): importable by name from TRL's spawned rollout worker, which unpickles the reward function.

The task has settled prompts and a reward distribution that does not change while the engine's weights stay frozen
(the benchmark's trainer sends no weights to `trl vllm-serve`): each prompt has a fixed success rate `p`, a third
of them `p = 1` (settled easy), a third `p = 0` (settled hard), a third spread over `[0.2, 0.8]`; a completion's reward
is 1 when a hash of (prompt, completion text, seed) falls below its prompt's `p`, else 0 (a Bernoulli draw that is the
same whenever the same text comes back). The seed also shuffles which prompt gets which `p`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import threading
from collections.abc import Sequence

VERBS = ("count", "echo")
WORDS = ("red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "fish", "bird", "rock", "star")  # the demo's


def success_rates(num_prompts: int = 24, seed: int = 0) -> list[float]:
    """Each prompt's success rate: a third 1.0, a third 0.0, a third evenly over [0.2, 0.8], shuffled by `seed`."""
    if num_prompts < 3 or num_prompts % 3:
        raise ValueError(f"num_prompts must be a positive multiple of 3 (a third each kind), got {num_prompts}")
    third = num_prompts // 3
    middle = [0.5] if third == 1 else [round(0.2 + 0.6 * i / (third - 1), 6) for i in range(third)]
    rates = [1.0] * third + [0.0] * third + middle
    random.Random(seed).shuffle(rates)
    return rates


def prompt_texts(num_prompts: int = 24) -> list[str]:
    """Distinct prompts over the demo vocabulary (`"count red green"`, ...), the same for every seed."""
    texts = [f"{verb} {a} {b}" for a, b in itertools.product(WORDS, WORDS) for verb in VERBS if a != b]
    if num_prompts > len(texts):
        raise ValueError(f"num_prompts must be at most {len(texts)}, got {num_prompts}")
    return texts[:num_prompts]


def rows(num_prompts: int = 24, seed: int = 0, log: str = "") -> dict[str, list]:
    """The dataset's columns: conversational prompts, each prompt's `p`, the run's `seed` and the path of the file
    [`bernoulli_reward`] logs each scored group to (`""`: none); the last three are reward arguments."""
    return {"prompt": [[{"role": "user", "content": text}] for text in prompt_texts(num_prompts)],
            "p": success_rates(num_prompts, seed), "seed": [seed] * num_prompts,
            "log": [log] * num_prompts}  # fmt: skip


def draw(prompt: str, completion: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (prompt, completion, seed)."""
    digest = hashlib.blake2b(f"{seed}\x00{prompt}\x00{completion}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _text(message) -> str:
    return message if isinstance(message, str) else message[-1]["content"]


_LOG_LOCK = threading.Lock()  # TRL's worker calls a plain reward function in a thread (`asyncio.to_thread`)


def bernoulli_reward(prompts, completions, p, seed, log=None, **kwargs) -> list[float]:
    """1.0 when [`draw`] of the completion is below its prompt's `p`, else 0.0 (a TRL reward function: `p`, `seed` and
    `log` are dataset columns). With a `log` path, each call (TRL's worker scores one whole group a call: every
    completion generated, whether the trainer takes it or not) appends one JSON line: the prompts and the rewards."""
    rewards = [float(draw(_text(prompt), _text(completion), s) < rate)
               for prompt, completion, rate, s in zip(prompts, completions, p, seed, strict=True)]  # fmt: skip
    if log and log[0]:
        line = json.dumps({"prompts": sorted({_text(prompt) for prompt in prompts}), "rewards": rewards})
        with _LOG_LOCK, open(log[0], "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return rewards


def settled(rate: float) -> bool:
    return rate in (0.0, 1.0)


def groups(taken: Sequence) -> list[list]:
    """The taken samples (objects with `group_id`, `prompt`, `reward`, `num_generations`, `model_version`) as whole
    groups, in the order taken: runs of one group id holding their planned G samples (a batch may end inside the last
    group; a partial run is left out, and a group id seen twice is an error: a group arrived split)."""
    runs = [list(run) for _, run in itertools.groupby(taken, key=lambda t: t.group_id)]
    if len({run[0].group_id for run in runs}) != len(runs):
        raise ValueError("a group arrived in two pieces")
    return [run for run in runs if len(run) == int(run[0].num_generations)]


def scored_measures(lines: Sequence[dict], rate_of: dict[str, float], windows: int = 4) -> dict:
    """
    What the worker generated and scored ([`bernoulli_reward`]'s log lines, one a group, in the order scored):
    completions, their share on settled prompts, informative groups per 100 completions, and the settled share by
    consecutive windows of the generated completions.
    """
    sizes, flags, informative = [], [], 0
    for line in lines:
        (prompt,) = line["prompts"]
        sizes.append(len(line["rewards"]))
        flags += [settled(rate_of[prompt])] * len(line["rewards"])
        informative += len(set(line["rewards"])) > 1
    completions = sum(sizes)
    return {"generated": completions, "generated_groups": len(sizes),
            "generated_settled_share": sum(flags) / completions if completions else None,
            "generated_informative_per_100": 100 * informative / completions if completions else None,
            "generated_settled_share_by_window": by_window(flags, windows)}  # fmt: skip


def by_window(flags: Sequence[bool], windows: int) -> list[float | None]:
    """The share of true flags in each of `windows` consecutive, near-equal slices of `flags`."""
    edges = [round(i * len(flags) / windows) for i in range(windows + 1)]
    return [sum(flags[a:b]) / (b - a) if b > a else None for a, b in itertools.pairwise(edges)]


def run_measures(taken: Sequence, rate_of: dict[str, float], windows: int = 4) -> dict:
    """
    What the trainer trained on: completions, their share on settled prompts (`p` 0 or 1), informative groups
    (rewards not all equal) per 100 completions, the mean G of the groups of settled and of unsettled prompts, and the
    settled share by consecutive windows of the trained completions (in the order taken: how fast skipping kicks in).
    `rate_of` maps a prompt's text to its `p`.
    """
    whole = groups(taken)
    completions = sum(len(g) for g in whole)
    on_settled = sum(len(g) for g in whole if settled(rate_of[g[0].prompt]))
    informative = sum(len({t.reward for t in g}) > 1 for g in whole)
    flags = [settled(rate_of[t.prompt]) for g in whole for t in g]

    def mean_g(keep) -> float | None:
        sizes = [len(g) for g in whole if keep(settled(rate_of[g[0].prompt]))]
        return sum(sizes) / len(sizes) if sizes else None

    return {"trained": completions, "groups": len(whole),
            "settled_share": on_settled / completions if completions else None,
            "informative_per_100": 100 * informative / completions if completions else None,
            "mean_g_settled": mean_g(bool), "mean_g_unsettled": mean_g(lambda s: not s),
            "settled_share_by_window": by_window(flags, windows)}  # fmt: skip


def paired(runs: Sequence[dict], metric: str, arm: str, reference: str, seeds: Sequence[int]) -> dict:
    """
    `metric` of `arm` minus `reference`'s, per seed (runs are dicts with `seed`, `arm` and `metric`; a seed missing
    either arm is left out): the differences, their median and its percentile-bootstrap 90% interval, and the verdict
    (+1 / -1 when the interval excludes 0 above / below, else 0), with the study's statistics (benchmarks/study).
    """
    from study.stats import bootstrap_interval, median, verdict_sign  # benchmarks/ on sys.path

    value = {(r["seed"], r["arm"]): r[metric] for r in runs}
    diffs = [value[s, arm] - value[s, reference] for s in seeds
             if value.get((s, arm)) is not None and value.get((s, reference)) is not None]  # fmt: skip
    low, high = bootstrap_interval(diffs) if diffs else (None, None)
    return {"seeds": len(diffs), "diffs": diffs, "median": median(diffs) if diffs else None, "low": low,
            "high": high, "verdict": verdict_sign(diffs) if diffs else 0}  # fmt: skip


def settled_share_between(scored_groups: Sequence, rate_of: dict[str, float], edges: Sequence[int]) -> list:
    """The share of the generated completions on settled prompts between consecutive `edges` (completion counts, in
    the order scored; the last slice runs to the end): `scored_groups` are `[prompt, size, informative]` rows."""
    flags = [settled(rate_of[prompt]) for prompt, size, _ in scored_groups for _ in range(size)]
    slices = [flags[a:b] for a, b in itertools.pairwise([*edges, len(flags)])]
    return [sum(part) / len(part) if part else None for part in slices]


def kind(rate: float) -> str:
    """`"solved"` (p = 1), `"impossible"` (p = 0) or `"informative"` (between)."""
    return "solved" if rate == 1.0 else "impossible" if rate == 0.0 else "informative"


def by_kind(scored_groups: Sequence, rate_of: dict[str, float]) -> dict[str, dict]:
    """Per kind of prompt ([`kind`]): the share of the generated completions it got and the mean G of its groups
    (`scored_groups`: `[prompt, size, informative]` rows)."""
    total = sum(size for _, size, _ in scored_groups)
    out = {}
    for name in ("solved", "impossible", "informative"):
        sizes = [size for prompt, size, _ in scored_groups if kind(rate_of[prompt]) == name]
        out[name] = {"share": sum(sizes) / total if total else None,
                     "mean_g": sum(sizes) / len(sizes) if sizes else None}
    return out
