"""What the benchmarks share: a quiet environment, the results folder, mean ± std, held-out evaluation."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def quiet_environment() -> Path:
    """Before torch is imported: one intra-op thread, wandb offline, no Hub, no tokenizer threads (each unless set);
    the repository root importable. Returns the root."""
    for name, value in (("OMP_NUM_THREADS", "1"), ("WANDB_MODE", "offline"), ("HF_HUB_OFFLINE", "1"),
                        ("TOKENIZERS_PARALLELISM", "false")):  # fmt: skip
        os.environ.setdefault(name, value)
    sys.path.insert(0, str(ROOT))
    return ROOT


def mean_std(values) -> tuple[float, float]:
    """Mean and sample std of the finite values (NaN, NaN when none; std 0 for one)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt_ms(value: tuple[float, float], digits: int = 3) -> str:
    """A (mean, std) pair as `mean ± std` (`n/a` when the mean is NaN)."""
    m, s = value
    return "n/a" if math.isnan(m) else f"{m:.{digits}f} ± {s:.{digits}f}"


class HeldOut:
    """
    Held-out completions for evaluation: greedy, and `samples` a prompt at `temperature` drawn with torch seeded by
    `seed` (the same random numbers at every evaluation and in every arm; the global RNG is restored, so evaluating
    does not change the training run). `score(texts, copies)` turns the decoded completions (each prompt's `copies` in
    a row) into rewards. `time` adds up the seconds spent evaluating.
    """

    def __init__(self, tokenizer, inputs, score, max_new_tokens: int, temperature: float, samples: int, seed: int):
        from transformers import GenerationConfig

        self.tokenizer, self.inputs, self.score, self.samples, self.seed = tokenizer, inputs, score, samples, seed
        common = dict(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id)  # fmt: skip
        self.greedy = GenerationConfig(do_sample=False, **common)
        self.sampled = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                        num_return_sequences=samples, **common)  # fmt: skip
        self.time = 0.0

    def _rewards(self, model, config, copies: int) -> list[float]:
        import torch

        inputs = {k: v.to(model.device) for k, v in self.inputs.items()}
        with torch.no_grad():
            out = model.generate(**inputs, generation_config=config)
        texts = self.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        return self.score(texts, copies)

    def __call__(self, model) -> tuple[list[float], list[float]]:
        """The greedy rewards and the sampled rewards (each prompt's `samples` in a row), in prompt order."""
        import torch

        start = time.perf_counter()
        was_training = model.training
        model.eval()
        greedy = self._rewards(model, self.greedy, 1)
        rng = torch.get_rng_state()
        torch.manual_seed(self.seed)
        sampled = self._rewards(model, self.sampled, self.samples)
        torch.set_rng_state(rng)
        if was_training:
            model.train()
        self.time += time.perf_counter() - start
        return greedy, sampled
