"""What the sample-efficiency benchmarks share: their output options, training one arm and reading its log, mean ± std."""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


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
