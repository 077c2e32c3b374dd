"""
Long-run check: thousands of generation rounds with a switch every few rounds on the tiny model.

Prints RSS and per-step time over the run (first vs last tenth, medians, ratio) and checks that the round/step
bookkeeping never drifts: every round used the schedule's setting for its step, the curriculum counted every round and
every switch, and the prompt stream consumed exactly the prompts the rounds asked for.

    python benchmarks/long_run.py [--steps 3000] [--switch-every 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from transformers import PrinterCallback, TrainerCallback, logging as hf_logging
from trl import GRPOConfig

from grpo_curriculum import Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.demo.tasks import build_model, build_tokenizer, echo_dataset, echo_reward
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Probe(TrainerCallback):
    def __init__(self):
        self.times, self.rss, self._start = [], [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)
        self.rss.append(rss_mib())


def timed(trainer, name: str) -> list[float]:
    """Time every call of one of the trainer's curriculum hooks (our own code, apart from TRL and the model)."""
    durations, original = [], getattr(trainer, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - start)

    setattr(trainer, name, wrapper)
    return durations


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--switch-every", type=int, default=5, help="0: one stage, no switch (the baseline)")
    options = parser.parse_args()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)  # one core: stable timings, and no thread oversubscription next to other processes

    cycle = [(2, 0.7), (4, 0.9), (8, 1.1)]
    ends = range(options.switch_every, options.steps, options.switch_every) if options.switch_every else []
    stages = [Stage(*cycle[i % 3], until_step=end) for i, end in enumerate(ends)]
    stages.append(Stage(*cycle[len(stages) % 3]))
    seen = []

    def reward(prompts, completions, trainer_state, idx, **kwargs):
        seen.append((trainer_state.global_step, trainer.num_generations, trainer.temperature, len(set(idx))))
        return echo_reward(prompts=prompts, completions=completions, **kwargs)

    probe = Probe()
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=16, num_generations=2, max_completion_length=3,
        max_steps=options.steps, learning_rate=1e-4, logging_steps=100, save_strategy="no", report_to=[],
        use_cpu=True, bf16=False, disable_tqdm=True,
    )  # fmt: skip
    dataset = echo_dataset(1000).add_column("idx", list(range(1000)))
    curriculum = CurriculumCallback(stages)
    trainer = CurriculumGRPOTrainer(model=build_model(), processing_class=build_tokenizer(), reward_funcs=reward,
                                    args=args, train_dataset=dataset, callbacks=[curriculum, probe])  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    hooks = {name: timed(trainer, name) for name in ("_curriculum_round_start", "_curriculum_round_end")}
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start

    tenth = max(1, options.steps // 10)
    first_t, last_t = statistics.median(probe.times[:tenth]), statistics.median(probe.times[-tenth:])
    first_m, last_m = statistics.median(probe.rss[:tenth]), statistics.median(probe.rss[-tenth:])
    print(f"{options.steps} steps = {len(seen)} rounds, {len(stages)} stages, {len(curriculum.switches)} switches "
          f"in {elapsed:.0f} s")  # fmt: skip
    print(f"per-step time, median of first vs last tenth: {first_t * 1e3:.2f} ms vs {last_t * 1e3:.2f} ms "
          f"(ratio {last_t / first_t:.3f})")  # fmt: skip
    print(f"RSS, median of first vs last tenth: {first_m:.1f} MiB vs {last_m:.1f} MiB (+{last_m - first_m:.1f} MiB; "
          f"max {max(probe.rss):.1f} MiB)")  # fmt: skip

    for name, durations in hooks.items():
        a, b = statistics.median(durations[:tenth]), statistics.median(durations[-tenth:])
        print(f"curriculum hook {name}: median {a * 1e6:.0f} us (first tenth) vs {b * 1e6:.0f} us (last tenth)")

    resolved = curriculum.resolved
    drift = [(step, g, t) for step, g, t, _ in seen
             if (g, t) != (resolved.setting_at(step).num_generations, resolved.setting_at(step).temperature)]  # fmt: skip
    wrong_prompts = [(step, g, n) for step, g, _, n in seen if n != 16 // g]
    stream = trainer._prompt_stream
    taken = sum(16 // g for _, g, _, _ in seen)
    assert len(seen) == curriculum.rounds == options.steps, (len(seen), curriculum.rounds)
    assert len(curriculum.switches) == len(stages) - 1, len(curriculum.switches)
    assert not drift, drift[:5]
    assert not wrong_prompts, wrong_prompts[:5]
    # Every pass drops a tail shorter than the round that did not fit; the stream's position is what the last pass used.
    assert stream.position <= len(dataset) and taken >= (stream.epoch - 1) * (len(dataset) - 8) + stream.position
    print(f"bookkeeping: {curriculum.rounds} rounds counted, {len(curriculum.switches)} switches, 0 rounds off-schedule, "
          f"prompt stream at pass {stream.epoch} position {stream.position} after {taken} prompts: OK")  # fmt: skip


if __name__ == "__main__":
    main()
