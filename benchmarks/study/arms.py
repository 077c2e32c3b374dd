"""
The study's arms and its runs. An arm is a static G or a variant of an adaptive mode (`MODES`, the first variant of
each mode the library's default before the study chose); every arm of a (task, seed) starts from the same warm start
and prompt order, at temperature `TEMPERATURE`, the same learning rate and the same budget of *generated*
completions (`steps x GENERATION_BATCH`). Each run's record is written to `OUT/runs/TASK__SEED__ARM.json` as it
finishes; a rerun skips those that exist (the warm start of a (task, seed) is recomputed: it is deterministic).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from .tasks import (CANDIDATES, GRADED, MAX_COMPLETION_LENGTH, REWARD_FLIP, TEMPERATURE, ExactAnswer,
                    GenerationCounter, Probe, budget_callback, curriculum_groups, evaluator, success_histogram,
                    warm_model)

GENERATION_BATCH = 128
LEARNING_RATE = 1e-3  # chosen on tuning seeds 100, 101 (docs/study.md): every static arm and rule rose at it
STEPS = 48  # budget: STEPS x GENERATION_BATCH generated completions a run
POINTS = 16  # evaluations after step 0
REPORTED = 12
TUNING = 6
TUNING_SEED_BASE = 100  # tuning seeds: 100, 101, ...
DYNAMIC_ROUNDS = 4  # max_rounds of a `dynamic_gN` arm (`dynamic_gN_r2`: 2)
MODES = {  # mode: its variants (arm names), the first one the library's default when the study began
    "static": [f"static_g{g}" for g in CANDIDATES],
    "per_prompt": ["per_prompt", "per_prompt_variance", "per_prompt_nodefer", "per_prompt_stream",
                   "per_prompt_stream_uniform", "per_prompt_stream_hard", "per_prompt_skip", "per_prompt_skip_wide"],
    "top_up": ["top_up", "top_up_p16"],
    "dynamic": ["dynamic_g4", "dynamic_g8", "dynamic_g16", "dynamic_g4_r2", "dynamic_g8_r2"],
    # coarse to fine comparisons (issue 29) at the G of the reference static arm the tuning seeds chose (16)
    "comparison": ["comparison_extremes_g16", "comparison_margin_g16"],
}
ARMS = [arm for arms in MODES.values() for arm in arms]
SKIP_ARMS = {  # the fixed-kind check's best knobs (benchmarks/study/fixed_kinds.py), explicit
    # `per_prompt_skip`: the stream's next prompts (lookahead 0), settled ones skipped with GRESO's probabilities
    "per_prompt_skip": {"weight": "hard", "lookahead": 0, "defer": True, "skip_target": 0.05},
    # `per_prompt_skip_wide`: 32 prompts a round (mean G 4) chosen from a window of 64, settled ones skipped
    "per_prompt_skip_wide": {"weight": "hard", "lookahead": 32, "defer": True, "skip_target": 0.05,
                             "mean_generations": 4},
}


def mode_of(arm: str) -> str:
    return next(mode for mode, arms in MODES.items() if arm in arms)


def arm_stages(arm: str):
    """The stages of an arm of this study (the rule variants of `MODES`)."""
    from grpo_curriculum import Adaptive, DynamicSampling, Stage

    t = TEMPERATURE
    if arm.startswith("static_g"):
        return [Stage(num_generations=int(arm.removeprefix("static_g")), temperature=t)]
    if arm in SKIP_ARMS:  # issue 37: GRESO's skipping of settled prompts (`defer`) on top of the per-prompt knapsack
        return [Stage(temperature=t, name=arm, adaptive=Adaptive(num_generations=CANDIDATES, policy="per_prompt",
                                                                 **SKIP_ARMS[arm]))]  # fmt: skip
    if arm.startswith("per_prompt"):
        weight = {"per_prompt_variance": "variance", "per_prompt_stream_uniform": "uniform",
                  "per_prompt_stream_hard": "hard"}.get(arm, "knapsack")
        # `per_prompt_stream`: Knapsack RL's geometry, the round's prompts in stream order (`lookahead` 0: no prompt
        # waits) and none deferred: only their G is chosen, so the prompt mix is a static G's
        # `per_prompt_stream_uniform`: the same with the weight `uniform` (the expected number of informative groups)
        knobs = ({"lookahead": 0, "defer": False} if arm.startswith("per_prompt_stream")
                 else {"lookahead": 2, "defer": arm != "per_prompt_nodefer"})  # explicit: the study outlives defaults
        return [Stage(temperature=t, name=arm,
                      adaptive=Adaptive(num_generations=CANDIDATES, policy="per_prompt", weight=weight,
                                        **knobs))]  # fmt: skip
    if arm.startswith("top_up"):  # `top_up`: 32 prompts a round (mean G 4), `top_up_p16`: 16 (mean G 8); explicit,
        prompts = 16 if arm == "top_up_p16" else 32  # as the default round size changed (to p16's) after this study
        return [Stage(temperature=t, name=arm,
                      adaptive=Adaptive(num_generations=CANDIDATES, policy="top_up", prompts=prompts))]
    if arm.startswith("dynamic_g"):  # `_r2`: at most 2 generation rounds a batch instead of 4
        size, _, rounds = arm.removeprefix("dynamic_g").partition("_r")
        return [Stage(num_generations=int(size), temperature=t, name=arm,
                      dynamic_sampling=DynamicSampling(max_rounds=int(rounds or DYNAMIC_ROUNDS),
                                                       on_limit="mask"))]  # fmt: skip
    if arm == "comparison_extremes_g16":  # only the best and worst of each group for the first half, then all
        return [Stage(num_generations=16, temperature=t, name="extremes", until_fraction=0.5,
                      comparison={"mode": "extremes"}),
                Stage(num_generations=16, temperature=t, name="all")]  # fmt: skip
    if arm == "comparison_margin_g16":  # completions >= 1 group std from the mean, the margin falling to 0
        return [Stage(num_generations=16, temperature=t, name=arm,
                      comparison={"mode": "margin", "margin": 1.0, "margin_end": 0.0})]  # fmt: skip
    raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")


def run_arm(task: str, arm: str, seed: int, steps: int, points: int, warm: dict, *,
            generation_batch: int = GENERATION_BATCH, learning_rate: float = LEARNING_RATE, stages=None,
            max_grad_norm: float | None = None, reward_flip: float = 0.0) -> dict:  # fmt: skip
    """
    Train one arm from the warm start to `steps x generation_batch` generated completions; its record. `stages`: the
    arm's stages when not [`arm_stages`]'s; `max_grad_norm`: the gradient
    clipping norm (`None`: the `GRPOConfig` default); `reward_flip`: each training reward is flipped with this
    probability (a noisy reward; the evaluation stays exact).
    """
    import copy

    from transformers import PrinterCallback

    start = time.perf_counter()
    budget = steps * generation_batch
    model, tokenizer = copy.deepcopy(warm["model"]), warm["tokenizer"]
    counter = GenerationCounter(model)
    reward = ExactAnswer(tokenizer, flip=reward_flip, seed=seed, graded=task in GRADED)
    start_histogram = success_histogram(model, warm)
    recorder = budget_callback(evaluator(warm, reward), counter, budget, points)
    common = dict(temperature=TEMPERATURE, max_completion_length=MAX_COMPLETION_LENGTH, learning_rate=learning_rate,
                  lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                  bf16=False, seed=seed, disable_tqdm=True)  # fmt: skip
    if max_grad_norm is not None:
        common["max_grad_norm"] = max_grad_norm
    with tempfile.TemporaryDirectory() as output_dir:
        from trl import GRPOConfig

        from grpo_curriculum.training.callback import CurriculumCallback
        from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

        stages = arm_stages(arm) if stages is None else stages
        args = GRPOConfig(output_dir=output_dir, per_device_train_batch_size=generation_batch, max_steps=steps,
                          num_generations=stages[0].num_generations, **common)  # fmt: skip
        trainer = CurriculumGRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                                        train_dataset=warm["train"],
                                        callbacks=[CurriculumCallback(stages), recorder])  # fmt: skip
        groups = curriculum_groups(trainer)
        trainer.remove_callback(PrinterCallback)
        # rounds sampled in increments: the probe groups rows by prompt
        increments = any(st.dynamic_sampling is not None
                         or (st.adaptive is not None and st.adaptive.policy == "top_up") for st in stages)
        probe = Probe(model, reward, None if increments else groups, round_size=generation_batch)
        reward.observer = probe
        trainer.train()
    history = trainer.state.log_history
    deferred = [h["curriculum/deferred_total"] for h in history if "curriculum/deferred_total" in h]
    lines = [h for h in history if "loss" in h]  # the training log lines (one a step)
    shares = [h["curriculum/informative_share"] for h in lines if h.get("curriculum/informative_share") is not None]
    logged = {"generated": sum(h.get("curriculum/generated", 0) for h in lines),
              "dropped": sum(h.get("curriculum/dropped", 0) for h in lines),
              "increments": statistics.fmean(h.get("curriculum/increments", 1) for h in lines) if lines else math.nan,
              "informative_steps": sum(share >= 1 - 1e-9 for share in shares) / len(shares) if shares else math.nan}
    return {
        "task": task, "arm": arm, "seed": seed, "budget": budget, "steps": trainer.state.global_step,
        "generated": counter.count, "eval": recorder.points, "probe": probe.summary(),
        "deferred": deferred[-1] if deferred else 0,
        "success_histogram": {"start": start_histogram, "end": success_histogram(model, warm)},
        "logged": logged,
        "train_time": recorder.train_time, "eval_time": recorder.eval_time, "run_time": time.perf_counter() - start,
    }  # fmt: skip


def run_path(out: Path, task: str, seed: int, arm: str) -> Path:
    return out / "runs" / f"{task}__{seed}__{arm}.json"


def run_job(job: tuple) -> list[str]:
    """One (task, seed): the warm start, then each arm not yet on disk, each record written as it finishes."""
    import torch
    from transformers import logging as hf_logging

    from grpo_curriculum.training.checkpoint import atomic_write

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    out, task, seed, arms, steps, points = job
    arms = [a for a in arms if not run_path(out, task, seed, a).exists()]
    if not arms:
        return []
    t0 = time.perf_counter()
    warm = warm_model(task, seed)
    warm_time = time.perf_counter() - t0
    done = []
    for arm in arms:
        run = run_arm(task, arm, seed, steps, points, warm, stages=arm_stages(arm),
                      reward_flip=REWARD_FLIP.get(task, 0.0))
        run["warm_time"], run["warm_steps"] = warm_time, warm["warm_steps"]
        path = run_path(out, task, seed, arm)
        atomic_write(path, lambda f, run=run: json.dump(run, f, separators=(",", ":")))
        done.append(str(path))
        probe = run["probe"]
        print(f"  {time.strftime('%H:%M:%S')} {task} seed {seed:>3} {arm:>20}: exact {run['eval'][0]['exact']:.3f} "
              f"-> {run['eval'][-1]['exact']:.3f}, {run['generated']} completions in {run['steps']} steps, "
              f"informative {probe['informative'] / max(1, probe['completions']):.2f}, "
              f"train {run['train_time']:.0f} s, run {run['run_time']:.0f} s", flush=True)  # fmt: skip
    return done


def load_runs(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def run_jobs(jobs: list[tuple], processes: int) -> None:
    jobs = [j for j in jobs if any(not run_path(j[0], j[1], j[2], a).exists() for a in j[3])]
    if not jobs:
        return
    with multiprocessing.get_context("spawn").Pool(processes, maxtasksperchild=1) as pool:
        for _ in pool.imap_unordered(run_job, jobs):
            pass
