"""What the sample-efficiency benchmarks share: their output options, training one arm and reading its log, mean ± std."""

from __future__ import annotations

import argparse
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


def train_arm(trainer, curriculum) -> dict:
    """
    Train `trainer` (a `CurriculumGRPOTrainer` with `curriculum` among its callbacks, console printing removed) and
    return its per-step record: training reward, zero-std fraction, G (mean over each step's prompts), temperature,
    step time and clipped ratio; the number of switches and deferred prompts; the training loop's wall time.
    """
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    loop_time = time.perf_counter() - start
    history = [h for h in trainer.state.log_history if "reward" in h and "curriculum/num_generations" in h]
    return {
        "train_reward": [h["reward"] for h in history],
        "zero_std": [h["frac_reward_zero_std"] for h in history],
        "G": [h["curriculum/num_generations"] for h in history],
        "T": [h["curriculum/temperature"] for h in history],
        "step_time": [h.get("step_time") for h in history],
        "clipped": [h.get("completions/clipped_ratio") for h in history],
        "switches": len(curriculum.switches),
        "deferred": curriculum.deferred_total,
        "loop_time": loop_time,
    }  # fmt: skip


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


def parse_with_output(parser: argparse.ArgumentParser, argv, report: str) -> tuple[argparse.Namespace, Path]:
    """Add `--out` and `--from-json` (reports named `report*.json`), parse `argv`, create the output folder."""
    parser.add_argument("--out", default=str(RESULTS), help="output folder")
    parser.add_argument("--from-json", nargs="+", help=f"rebuild the report from saved {report}*.json files (no "
                        "training); several files (seeds or tasks run in parallel processes) are merged")  # fmt: skip
    options = parser.parse_args(argv)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    return options, out


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


def eval_callback(evaluate, every: int, generation_batch: int):
    """
    A `TrainerCallback` that records `{"step", "completions", "train_time", **evaluate(model)}` at step 0, every
    `every` optimizer steps and at the last; its `train_time` excludes evaluation.
    """
    from transformers import TrainerCallback

    class EvalCallback(TrainerCallback):
        def __init__(self):
            self.points, self.train_time, self._clock = [], 0.0, None

        def _record(self, step, model):
            self.points.append({"step": step, "completions": step * generation_batch, "train_time": self.train_time,
                                **evaluate(model)})  # fmt: skip

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self._record(0, model)
            self._clock = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                self.train_time += time.perf_counter() - self._clock
                self._record(state.global_step, model)
                self._clock = time.perf_counter()

    return EvalCallback()
