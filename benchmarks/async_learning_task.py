"""
The task of benchmarks/async_learning.py (issue 51 item 3, docs/async.md "Learning with the file transfer"): the demo's
*count* task as conversations, importable by name from TRL's spawned rollout worker (which unpickles the reward
function), its noise-free measure and the paired statistics (pure Python but for the measure).

`"count : w w w ="` is answered with the digit word (`"three"`); a completion's reward is 1 when its first word is the
answer, else 0 (`grpo_curriculum.demo.tasks.exact_first_word_reward`). The measure is the *exact* expected reward of a
model at temperature 1, without sampling: the mean over the prompts of the probability that the first completion token
is the answer (the reward's value unless a special token, which decoding drops, comes first).
"""

from __future__ import annotations

import math
import statistics

from grpo_curriculum.demo.tasks import count_dataset, exact_first_word_reward

# two-sided 95% Student t quantiles by degrees of freedom (scipy.stats.t.ppf(0.975, df))
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131}  # fmt: skip


def rows(num_prompts: int, seed: int, max_count: int) -> dict[str, list]:
    """The dataset's columns: conversational prompts and each prompt's answer (`target`, a reward argument)."""
    data = count_dataset(num_prompts, seed=seed, max_count=max_count)
    return {"prompt": [[{"role": "user", "content": p}] for p in data["prompt"]], "target": list(data["target"])}


def count_reward(completions, target, **kwargs) -> list[float]:
    """1.0 when the completion's first word is the target, else 0.0 (the completions are messages)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return exact_first_word_reward(texts, target)


def exact_rewards(model, tokenizer, columns: dict[str, list]) -> list[float]:
    """Each prompt's exact expected reward under `model` (a plain transformers causal LM) at temperature 1: the
    probability of the answer as the first token after the prompt as the rollout worker renders it."""
    import torch

    out = []
    model.eval()
    for prompt, target in zip(columns["prompt"], columns["target"], strict=True):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        with torch.no_grad():
            logprobs = model(torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)
        out.append(logprobs[tokenizer.convert_tokens_to_ids(target)].exp().item())
    return out


def paired(results: list[dict], key: str, seeds: list[int]) -> dict:
    """`key` of the per-prompt arm minus static G 4's, per seed: the mean difference and its 95% t interval."""
    value = {(r["seed"], r["arm"]): r[key] for r in results}
    diffs = [value[s, "per-prompt"] - value[s, "static-G4"] for s in seeds
             if (s, "per-prompt") in value and (s, "static-G4") in value]  # fmt: skip
    if len(diffs) < 2:
        return {"n": len(diffs), "diffs": diffs, "mean": statistics.fmean(diffs) if diffs else None}
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = T975[len(diffs) - 1] * sd / math.sqrt(len(diffs))
    return {"n": len(diffs), "diffs": diffs, "mean": mean, "low": mean - half, "high": mean + half}
