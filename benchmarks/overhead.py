"""
Per-step overhead of `CurriculumGRPOTrainer` (one-stage schedule) against plain `trl.GRPOTrainer` (with `--trainer
rloo`: `CurriculumRLOOTrainer` against `trl.RLOOTrainer`, `beta` 0 as GRPO's default), and the cost of a switch.

Both trainers run the same config on the tiny built-in model, interleaved (plain, curriculum, plain, ...) so machine
noise hits both alike; per-step wall times are collected with a callback, the first steps of each run dropped as
warm-up, and the ratio of medians printed. The switch cost is measured two ways: the time `_apply` takes to change G
and temperature everywhere, and the time of the first steps after a switch against steady-state steps at the new G.
The per-prompt allocation is timed inside a per-prompt run (choosing the round's prompts and G, and taking in the
round's outcomes), per round, against that run's own median step.

    python benchmarks/overhead.py [--repeats 5] [--steps 40] [--allocation-only] [--trainer rloo]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from transformers import PrinterCallback, TrainerCallback, logging as hf_logging
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.core.schedule import Setting
from grpo_curriculum.demo.tasks import build_model, build_tokenizer, echo_dataset, echo_reward
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer

TRAINERS = {"grpo": (GRPOTrainer, CurriculumGRPOTrainer), "rloo": (RLOOTrainer, CurriculumRLOOTrainer)}


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def run(cls, stages, steps, seed=0, dataset=None, setup=None):
    timer = StepTimer()
    callbacks = [timer] + ([CurriculumCallback(stages)] if stages else [])
    config = RLOOConfig if issubclass(cls, RLOOTrainer) else GRPOConfig
    args = config(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=16, num_generations=4, max_completion_length=6,
        max_steps=steps, learning_rate=1e-3, logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True,
        bf16=False, seed=seed, disable_tqdm=True, beta=0.0,
    )  # fmt: skip
    trainer = cls(model=build_model(hidden_size=64), processing_class=build_tokenizer(), reward_funcs=echo_reward,
                  args=args, train_dataset=dataset, callbacks=callbacks)  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    if setup is not None:
        setup(trainer)
    trainer.train()
    return timer.times, trainer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--allocation-only", action="store_true", help="time the per-prompt allocation only")
    parser.add_argument("--trainer", choices=sorted(TRAINERS), default="grpo",
                        help="the per-step overhead and switch cost of this trainer (the allocation: GRPO's only)")
    options = parser.parse_args()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)  # one core: stable timings, and no thread oversubscription next to other processes
    dataset = echo_dataset(4096)
    if not options.allocation_only:
        step_and_switch_overhead(options, dataset, *TRAINERS[options.trainer])
    if options.trainer == "grpo":  # per-prompt G: CurriculumRLOOTrainer refuses it
        allocation_overhead(options, dataset)


def step_and_switch_overhead(options, dataset, plain_cls, curriculum_cls) -> None:
    """The per-step ratio curriculum / plain, and the cost of a switch."""
    plain, curriculum = [], []
    for repeat in range(options.repeats):
        order = [(plain_cls, None, plain), (curriculum_cls, [Stage(4, 1.0)], curriculum)]
        for cls, stages, sink in order if repeat % 2 == 0 else reversed(order):
            times, _ = run(cls, stages, options.steps, seed=repeat, dataset=dataset)
            sink.append(statistics.median(times[options.warmup :]))
    ratios = [c / p for c, p in zip(curriculum, plain, strict=True)]
    print(f"per-step median, plain {plain_cls.__name__}:            {statistics.median(plain) * 1e3:8.2f} ms  (runs: "
          + ", ".join(f"{t * 1e3:.2f}" for t in plain) + ")")  # fmt: skip
    print(f"per-step median, {curriculum_cls.__name__} (1 stage): {statistics.median(curriculum) * 1e3:5.2f} ms  "
          "(runs: " + ", ".join(f"{t * 1e3:.2f}" for t in curriculum) + ")")  # fmt: skip
    print(f"ratio curriculum / plain: median {statistics.median(ratios):.3f} "
          f"(per pair: {', '.join(f'{r:.3f}' for r in ratios)}); target <= 1.02")  # fmt: skip

    # The switch itself: change G and temperature everywhere (no data loader or model rebuild).
    _, trainer = run(curriculum_cls, [Stage(4, 1.0)], 2, dataset=dataset)
    settings = [Setting(0, 8, 0.7), Setting(0, 4, 1.0)]
    start = time.perf_counter()
    for i in range(2000):
        trainer._apply(settings[i % 2])
    apply_us = (time.perf_counter() - start) / 2000 * 1e6
    print(f"switch: applying a new (G, temperature) takes {apply_us:.1f} us")

    # Steps right after a switch against steady steps at the new G, same run.
    half = options.steps // 2
    after, before_switch = [], []
    for repeat in range(options.repeats):
        times, trainer = run(
            curriculum_cls, [Stage(4, 0.8, until_step=half), Stage(8, 1.0)], options.steps, seed=repeat,
            dataset=dataset,
        )  # fmt: skip
        after.append(times[half])
        before_switch.append(statistics.median(times[half + options.warmup :]))
    print(f"first step after the switch: median {statistics.median(after) * 1e3:.2f} ms vs steady steps at the new G "
          f"{statistics.median(before_switch) * 1e3:.2f} ms (ratio {statistics.median(after) / statistics.median(before_switch):.3f})")  # fmt: skip



def allocation_overhead(options, dataset) -> None:
    """Per-prompt G: the allocation's own work a round, inside real runs (4096 prompts)."""
    allocation, steps = [], []
    for repeat in range(options.repeats):
        stage = Stage(temperature=1.0, adaptive=Adaptive((2, 4, 8, 16), policy="per_prompt"))
        timed = {}

        def wrap(owner, name):
            original = getattr(owner, name)

            def timed_call(*args, **kwargs):
                start = time.perf_counter()
                result = original(*args, **kwargs)
                timed.setdefault(name, []).append(time.perf_counter() - start)
                return result

            setattr(owner, name, timed_call)

        times, trainer = run(CurriculumGRPOTrainer, [stage], options.steps, seed=repeat, dataset=dataset,
                             setup=lambda t: [wrap(t._curriculum, "per_prompt_round"), wrap(t._curriculum, "observe_round")])  # fmt: skip
        rounds = [a + b for a, b in zip(timed["per_prompt_round"], timed["observe_round"], strict=True)]
        allocation.append(statistics.median(rounds[options.warmup :]))
        steps.append(statistics.median(times[options.warmup :]))
    ratios = [a / s for a, s in zip(allocation, steps, strict=True)]
    print(f"per-prompt allocation a round (choose prompts and G, take in the outcomes): median "
          f"{statistics.median(allocation) * 1e6:.0f} us (runs: {', '.join(f'{a * 1e6:.0f}' for a in allocation)}) "
          f"= {statistics.median(ratios):.2%} of the run's median step {statistics.median(steps) * 1e3:.2f} ms "
          f"(per run: {', '.join(f'{r:.2%}' for r in ratios)}); target <= 2%")  # fmt: skip


if __name__ == "__main__":
    main()
