"""
The study's statistics and its exact evaluation (`benchmarks/study.py`): paired ratios, bootstrap intervals, areas
under curves, and the teacher-forced probability of the correct answer.

Pure Python but for [`answer_probability`] (torch, imported inside).
"""

from __future__ import annotations

import math
import random
import statistics


def first_reaching(xs: list[float], ys: list[float], target: float) -> float | None:
    """
    The first `x` at which the piecewise-linear curve `(xs, ys)` reaches `target` (interpolated between the last point
    below it and the first at or above it); `None` when it never does.

    Example:
    ```python
    >>> first_reaching([0, 10, 20], [0.0, 0.5, 1.0], 0.75)
    15.0
    ```
    """
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if y >= target - 1e-12:
            if i == 0:
                return float(x)
            x0, y0 = xs[i - 1], ys[i - 1]
            return x0 + (x - x0) * (target - y0) / (y - y0)
    return None


def paired_ratio(arm: float | None, reference: float | None) -> float:
    """
    One seed's ratio of the completions an arm needs to reach a target over those the reference arm needs: `inf` when
    the arm never reaches it, `nan` when the reference does not (no ratio on that seed), 1 when both start there.
    """
    if reference is None:
        return math.nan
    if arm is None:
        return math.inf
    if reference == 0:
        return 1.0 if arm == 0 else math.inf
    return arm / reference


def median(values: list[float]) -> float:
    """Median of the non-NaN values (`inf` counts as larger than any number); NaN when there are none."""
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def bootstrap_interval(values: list[float], statistic=median, level: float = 0.9, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:  # fmt: skip
    """
    Percentile bootstrap interval of `statistic` over `values` (the seeds, resampled with replacement): the
    `(1 - level) / 2` and `(1 + level) / 2` quantiles of the resampled statistic. NaN values are dropped first.

    Example:
    ```python
    >>> bootstrap_interval([1.0] * 5)
    (1.0, 1.0)
    ```
    """
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    rng = random.Random(seed)
    stats = sorted(statistic(rng.choices(values, k=len(values))) for _ in range(resamples))
    low = stats[min(resamples - 1, int(math.floor((1 - level) / 2 * resamples)))]
    high = stats[min(resamples - 1, int(math.ceil((1 + level) / 2 * resamples)) - 1)]
    return low, high


def area_under(xs: list[float], ys: list[float], until: float) -> float:
    """
    Mean height of the piecewise-linear curve `(xs, ys)` over `[xs[0], until]` (trapezoids; the last segment cut at
    `until`, the curve held flat after its last point): the area under it divided by the width.

    Example:
    ```python
    >>> area_under([0, 10], [0.0, 1.0], 10)
    0.5
    ```
    """
    area, x_end = 0.0, xs[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:]), strict=False):
        if x0 >= until:
            break
        if x1 > until:
            y1, x1 = y0 + (y1 - y0) * (until - x0) / (x1 - x0), until
        area += (x1 - x0) * (y0 + y1) / 2
        x_end = x1
    area += (until - x_end) * ys[-1] if until > x_end else 0.0
    return area / (until - xs[0])


def answer_probability(model, prompt_ids: list[list[int]], answer_ids: list[list[int]], temperature: float,
                       batch_size: int = 256) -> list[float]:  # fmt: skip
    """
    The exact probability that sampling from `model` at `temperature` (no top-k / top-p truncation) continues each
    prompt with exactly its answer tokens (teacher forcing: the product over the answer's tokens of
    `softmax(logits / temperature)`). Sequences are right-padded, so positions start at 0 as in generation.

    Args:
        model: A causal LM.
        prompt_ids (`list[list[int]]`): Token ids of each prompt.
        answer_ids (`list[list[int]]`): Token ids of each answer (include the end-of-sequence token to require it).
        temperature (`float`): The sampling temperature.
        batch_size (`int`, *optional*, defaults to `256`): Sequences per forward pass.

    Returns:
        `list[float]`: One probability per prompt.
    """
    import torch

    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(prompt_ids), batch_size):
            prompts, answers = prompt_ids[start : start + batch_size], answer_ids[start : start + batch_size]
            width = max(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
            ids = torch.zeros((len(prompts), width), dtype=torch.long)
            mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
                ids[row, : len(p) + len(a)] = torch.tensor(p + a)
                mask[row, : len(p) + len(a)] = 1
            logprobs = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float() / temperature, -1)
            for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
                positions = torch.arange(len(p) - 1, len(p) + len(a) - 1)
                out.append(math.exp(logprobs[row, positions, torch.tensor(a)].sum().item()))
    if was_training:
        model.train()
    return out
