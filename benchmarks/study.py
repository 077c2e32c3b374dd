"""
The study that can tell per-prompt arms apart: completions *generated* to reach the best static G's held-out reward,
paired over seeds, on a task whose difficulty frontier moves, with an evaluation free of sampling noise.

Task `prefix_levels` (`TASKS`): `"echo k : w1 w2 w3 w4 ="` (k a digit word) must be answered with exactly the
tokens of the first k words and `<eos>` (reward 1, else 0), levels k = 1-4 in equal shares. The words to copy sit at
the same distance from the answer at every level, so copying learned at level k carries to level k+1 and only where to
stop is new: the frontier moves up as training goes on. The tiny model (`grpo_curriculum.demo.tasks`) is warm-started on a
mix weighted to levels 1-2 until level 2's exact success at the training temperature reaches `WARM_GATE` (a fixed step
count leaves some seeds where RL cannot start): after it, level 1 is about solved, level 2 mixed, levels 3-4 hard but
solvable (exact success at evaluation about 0.3 and 0.1). A first task, `"echo : w1 ... wk ="` with k = 1-4, was
dropped: after any warm start its levels 3-4 did not learn within 7680 completions (the copy distance differs by
level, so nothing carries over).

Evaluation (every `--points`-th of the completion budget): the exact probability that the policy, sampling at
`EVAL_TEMPERATURE`, answers a held-out prompt correctly (teacher forcing over the answer tokens and `<eos>`:
`study_stats.answer_probability`), averaged over `EVAL_PROMPTS` fixed prompts; no sampling noise. The sampled reward
(`EVAL_SAMPLES` completions a prompt, fixed seed, text match) is a secondary column.

Arms (every one: same warm start and prompt order per seed, temperature `TEMPERATURE`, learning rate, constant
schedule, the same budget of generated completions):

- `static_g{2,4,8,16}`: fixed G, generation batch `GENERATION_BATCH`;
- `success_rate`: one G a round among {2, 4, 8, 16} (`Adaptive(policy="success_rate")`, default knobs);
- `per_prompt`: a G per prompt among {2, 4, 8, 16} under the same batch, deferral on (`Adaptive(policy="per_prompt",
  lookahead=2, defer=True)`: the defaults this study ran with, written out since the defaults changed);
- `top_up`: each round sampled in increments (`Adaptive(policy="top_up", num_generations=(2, 4, 8, 16),
  prompts=GENERATION_BATCH // 4)`: the default round size its runs had, set explicitly): a pilot of 2
  for `GENERATION_BATCH / 4` prompts, the other half of the batch 2 at a time to the groups whose rewards are still all
  equal, then to the lowest-variance ones, up to 16 (`grpo_curriculum.core.sampling`); the same completions a round;
- `dynamic`: DAPO's dynamic sampling at G `DYNAMIC_G` (`DynamicSampling(max_rounds=DYNAMIC_ROUNDS)`): groups whose
  rewards are all equal are dropped and more rounds generated, so a step costs up to `DYNAMIC_ROUNDS` rounds;
- `cgrpo`: the published peer `trl-cgrpo` 0.2.0 (`CGRPOTrainer`: per-prompt budgets along [2, 4, 8, 16] stopped by
  split-conformal sets; its defaults but for the grid, `CGRPO_CALIBRATION` calibration prompts and one generation call
  per calibration). Needs `pip install --no-deps trl-cgrpo==0.2.0`; skipped with a printed line when missing.

Completions on the x axis are the rows the model *generated* while training (counted at `model.generate`, evaluation
excluded): padded rows of `cgrpo` are not counted, its calibration rollouts are; every increment of `top_up` and every
round of `dynamic`, dropped groups included, is. The trainer's own count (`curriculum/generated`, summed over the log
lines) is kept next to it, with `curriculum/increments` and `curriculum/dropped`, and each arm's wall time (training,
evaluation excluded). Every run stops at the first step that
reaches the budget (`cgrpo`, whose steps vary, ends up to one step past it).

Primary metric, per task: per reported seed, the completions an arm needs to first reach the best static arm's final
exact reward (that seed's run), over those the best static arm needed; median over seeds and a bootstrap 90%
interval; the same at 90% of the best static arm's gain over the warm start (a target on the reference's plateau
measures noise). The best static G is chosen on separate tuning seeds (`--tuning-seeds`), not the reported ones.
Secondary: the area under the exact-reward-vs-completions curve, paired difference to the best static arm.
Mechanism: informative-completion share (completions in groups whose rewards are not all equal, of those generated:
`dynamic` trains on its informative groups only, and its share of generated completions shows what that costs), G by
exact-success
bin (the exact probability of each trained prompt's answer at the training temperature, when it was trained), prompts
deferred, calibration rollouts.

    python benchmarks/study.py --pilot --jobs 2       # 2 seeds + 1 tuning seed x 240 steps: proves every part runs
    python benchmarks/study.py --jobs 2               # the full study (README: the exact command and its wall time)
    python benchmarks/study.py --from-json benchmarks/results/study.json   # the report again, no training

Each process trains on one torch thread; `--jobs` processes run the (task, seed) jobs in parallel.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import argparse
import importlib.util
import json
import math
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from common import HeldOut, fmt_ms, mean_std, parse_with_output  # benchmarks/common.py
from study_stats import answer_probability, area_under, bootstrap_interval, first_reaching, median, paired_ratio

GENERATION_BATCH = 16  # completions a round for the curriculum arms
CANDIDATES = (2, 4, 8, 16)
TEMPERATURE = 0.9
LEARNING_RATE = 1e-3
MAX_LEVEL = 4
MAX_COMPLETION_LENGTH = MAX_LEVEL + 1  # the longest answer and <eos>
TRAIN_PROMPTS = 256
EVAL_PROMPTS = 256
EVAL_TEMPERATURE = 0.5
EVAL_SAMPLES = 4
EVAL_SEED = 1234
EVAL_PROMPT_SEED = 10_000
CALIBRATION_PROMPT_SEED = 20_000
TUNING_SEED_BASE = 100  # tuning seeds: 100, 101, ...
CGRPO_CALIBRATION = 16  # calibration prompts of the cgrpo arm (x 16 completions a calibration, every 50 steps)
CGRPO_BATCH = 32  # its rows a step (its default): 2 prompts of width 16
SUCCESS_BINS = (0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0)
RISE_SEED_STDS = 3.0  # a task counts as learnable when every arm's mean gain is this many stds of the seeds' gains
DYNAMIC_G = 4  # G of the `dynamic` arm (DAPO's dynamic sampling)
DYNAMIC_ROUNDS = 4  # its max_rounds
STATIC_ARMS = [f"static_g{g}" for g in CANDIDATES]
INCREMENT_ARMS = ["top_up", "dynamic"]  # arms whose reward calls are increments, not whole rounds
ARMS = [*STATIC_ARMS, "success_rate", "per_prompt", *INCREMENT_ARMS, "cgrpo"]
WARM_CHUNK = 10
WARM_GATE = (2, 0.4)  # the warm start stops when level 2's exact success at the training temperature reaches 0.4
CHECK_PROMPT_SEED = 30_000
TASKS = {  # name: (description, level weights of training / eval prompts, warm-start level weights, most warm steps)
    "prefix_levels": ("repeat the first k = 1-4 of 4 words exactly, then <eos>; warm-started mostly on k <= 2",
                      (1, 1, 1, 1), (8, 8, 1, 1), 300),
}  # fmt: skip
MODES = {"pilot": (2, 1, 240, 8), "full": (10, 3, 320, 12)}  # reported seeds, tuning seeds, steps, evaluations
TARGETS = {"ratio": 0.7, "interval_high": 1.0, "worst_median": 1.1, "informative": 1.3}
TOP_UP_TARGETS = {"ratio": 0.7, "informative": 1.5}  # the sampling issue's targets for `top_up`


# --- task ------------------------------------------------------------------------------------------------------------


def level_dataset(task: str, num_prompts: int, seed: int, weights: tuple[int, ...]):
    """
    Prompts of `task` whose level k is drawn with `weights`; columns `prompt`, `target`, `level`. `prefix_levels`:
    `"echo k : w1 ... w4 ="` (k a digit word), answer the first k words. The words to copy sit at the same distance
    from the answer at every level, so copying transfers from level to level and only where to stop is new.
    """
    from datasets import Dataset

    from grpo_curriculum.demo.tasks import DIGITS, WORDS

    rng = random.Random(seed)
    rows = {"prompt": [], "target": [], "level": []}
    for _ in range(num_prompts):
        level = rng.choices(range(1, len(weights) + 1), weights=weights)[0]
        words = [rng.choice(WORDS) for _ in range(MAX_LEVEL)]
        rows["prompt"].append(f"echo {DIGITS[level]} : " + " ".join(words) + " =")
        rows["target"].append(" ".join(words[:level]))
        rows["level"].append(level)
    return Dataset.from_dict(rows)


class ExactAnswer:
    """
    The reward: 1.0 when the completion's tokens are exactly the target's and `<eos>`, else 0.0, so the correct answer
    is one token sequence and its probability can be computed exactly. `observer(prompts, target, rewards)`, when set,
    sees every call (the mechanism probe).
    """

    __name__ = "exact_answer"

    def __init__(self, tokenizer, flip: float = 0.0, seed: int = 0):
        self.tokenizer, self.observer, self._ids = tokenizer, None, {}
        self.flip, self._rng = flip, random.Random(seed)  # a noisy reward: each one flipped with probability `flip`

    def answer_ids(self, target: str) -> list[int]:
        if target not in self._ids:
            self._ids[target] = self.tokenizer(target).input_ids + [self.tokenizer.eos_token_id]
        return self._ids[target]

    def __call__(self, prompts, completions, completion_ids, target, **kwargs) -> list[float]:
        rewards = [float(list(ids) == self.answer_ids(t)) for ids, t in zip(completion_ids, target, strict=True)]
        if self.flip:
            rewards = [1.0 - r if self._rng.random() < self.flip else r for r in rewards]
        if self.observer is not None:
            self.observer(prompts, target, rewards)
        return rewards


class GenerationCounter:
    """Counts the rows `model.generate` returns (wraps it on the instance); `paused` stops counting (evaluation)."""

    def __init__(self, model):
        self.count, self.paused = 0, False
        generate = model.generate

        def counted(*args, **kwargs):
            out = generate(*args, **kwargs)
            if not self.paused:
                self.count += out.shape[0]
            return out

        model.generate = counted


class Probe:
    """
    Per training round: each group's real size, whether its rewards differ (informative) and the exact probability of
    its prompt's answer at the training temperature under the policy that generated it. `group_rows()` returns the
    round's groups as lists of row indices (real rows only); `None` groups rows by prompt instead, over reward calls
    until `round_size` rows are in, then counts them (a top-up round's increments, or a dynamic-sampling round).
    """

    def __init__(self, model, reward: ExactAnswer, group_rows, round_size: int = GENERATION_BATCH):
        self.model, self.reward, self.group_rows, self.round_size = model, reward, group_rows, round_size
        self.completions = self.informative = 0
        self.bins = [[0, 0, 0] for _ in SUCCESS_BINS[1:]]  # per bin: groups, completions, informative completions
        self._pending = {}  # by-prompt mode: prompt -> (target, rewards so far), in first-seen order

    def __call__(self, prompts, target, rewards) -> None:
        if self.group_rows is None:
            for prompt, t, r in zip(prompts, target, rewards, strict=True):
                self._pending.setdefault(prompt, (t, []))[1].append(r)
            if sum(len(r) for _, r in self._pending.values()) < self.round_size:
                return
            pending, self._pending = self._pending, {}
            prompts = [p for p, (_, r) in pending.items() for _ in r]
            target = [t for t, r in pending.values() for _ in r]
            rewards = [v for _, r in pending.values() for v in r]
            sizes = [len(r) for _, r in pending.values()]
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            groups = [list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)]
        else:
            groups = self.group_rows(len(rewards))
        self._count(prompts, target, rewards, groups)

    def _count(self, prompts, target, rewards, groups) -> None:
        tokenizer = self.reward.tokenizer
        heads = [rows[0] for rows in groups]
        prompt_ids = [tokenizer(prompts[i]).input_ids for i in heads]
        answer_ids = [self.reward.answer_ids(target[i]) for i in heads]
        probabilities = answer_probability(self.model, prompt_ids, answer_ids, TEMPERATURE)
        for rows, p in zip(groups, probabilities, strict=True):
            values = [rewards[i] for i in rows]
            informative = len(rows) if max(values) != min(values) else 0
            self.completions += len(rows)
            self.informative += informative
            b = next(i for i, edge in enumerate(SUCCESS_BINS[1:]) if p <= edge)
            self.bins[b][0] += 1
            self.bins[b][1] += len(rows)
            self.bins[b][2] += informative

    def summary(self) -> dict:
        return {"completions": self.completions, "informative": self.informative, "bins": self.bins}


def curriculum_groups(trainer):
    """Group rows of a `CurriculumGRPOTrainer` increment (a whole round unless it samples in increments): consecutive
    blocks of its groups' sizes (one process)."""

    def rows(n: int) -> list[list[int]]:
        sizes, start, out = trainer._round.last_increment()[1], 0, []
        for size in sizes:
            out.append(list(range(start, start + size)))
            start += size
        if start != n:
            raise RuntimeError(f"round sizes {sizes} do not cover the {n} rewarded rows")
        return out

    return rows


def cgrpo_groups(trainer):
    """Group rows of a `CGRPOTrainer` batch: blocks of `num_generations`, less the rows it padded (not generated)."""

    def rows(n: int) -> list[list[int]]:
        width, padded = trainer.num_generations, trainer._padded_rows or [False] * n
        return [[i for i in range(s, s + width) if not padded[i]] for s in range(0, n, width)]

    return rows


# --- one run ---------------------------------------------------------------------------------------------------------


def warm_model(task: str, seed: int, spec: tuple | None = None) -> dict:
    """
    The warm-started model, tokenizer and the prompt sets of one (task, seed): the same for every arm. The warm start
    ([`grpo_curriculum.demo.tasks.warm_start`], `WARM_CHUNK` steps at a time) stops once the exact success of level
    `WARM_GATE[0]` at the training temperature reaches `WARM_GATE[1]` (on prompts of its own), so every seed starts
    from a comparable frontier; a fixed step count leaves some seeds where RL cannot start. `spec`: the task's
    `TASKS`-style tuple when it is not in `TASKS` (`benchmarks/study2.py`'s tasks).
    """
    from grpo_curriculum.demo.tasks import build_model, build_tokenizer, warm_start

    _, weights, warm_weights, max_steps = TASKS[task] if spec is None else spec
    level, gate = WARM_GATE
    tokenizer = build_tokenizer()
    model = build_model(seed=seed)
    warm = level_dataset(task, TRAIN_PROMPTS, seed, warm_weights)
    check = level_dataset(task, 64, CHECK_PROMPT_SEED, tuple(int(k == level) for k in range(1, MAX_LEVEL + 1)))
    check_ids = ([tokenizer(p).input_ids for p in check["prompt"]],
                 [tokenizer(t).input_ids + [tokenizer.eos_token_id] for t in check["target"]])  # fmt: skip
    steps = 0
    while steps < max_steps and statistics.fmean(answer_probability(model, *check_ids, TEMPERATURE)) < gate:
        warm_start(model, tokenizer, warm, steps=WARM_CHUNK, seed=seed * 1000 + steps)
        steps += WARM_CHUNK
    held_out = level_dataset(task, EVAL_PROMPTS, EVAL_PROMPT_SEED, weights)
    calibration = level_dataset(task, CGRPO_CALIBRATION, CALIBRATION_PROMPT_SEED + seed, weights)
    return {"model": model, "tokenizer": tokenizer, "train": level_dataset(task, TRAIN_PROMPTS, seed, weights),
            "held_out": held_out, "calibration": calibration.add_column("answer", calibration["target"]),
            "warm_steps": steps}  # fmt: skip


def evaluator(warm: dict, reward: ExactAnswer):
    """`evaluate(model) -> dict`: the exact reward (mean and per level), the sampled and greedy rewards."""
    from benchmark_tasks import exact_echo_reward  # benchmarks/benchmark_tasks.py

    tokenizer, held_out = warm["tokenizer"], warm["held_out"]
    prompt_ids = [tokenizer(p).input_ids for p in held_out["prompt"]]
    answer_ids = [reward.answer_ids(t) for t in held_out["target"]]
    levels = held_out["level"]
    targets = list(held_out["target"])
    inputs = tokenizer(list(held_out["prompt"]), return_tensors="pt", padding=True)
    def score(texts, copies):
        return exact_echo_reward(texts, [t for t in targets for _ in range(copies)])

    sampled = HeldOut(tokenizer, inputs, score, MAX_COMPLETION_LENGTH, EVAL_TEMPERATURE, EVAL_SAMPLES, EVAL_SEED)

    def evaluate(model) -> dict:
        p = answer_probability(model, prompt_ids, answer_ids, EVAL_TEMPERATURE)
        greedy, samples = sampled(model)
        by_level = {k: statistics.fmean(v for v, lv in zip(p, levels, strict=True) if lv == k)
                    for k in sorted(set(levels))}  # fmt: skip
        return {"exact": math.fsum(p) / len(p), "levels": by_level, "sampled": math.fsum(samples) / len(samples),
                "greedy": math.fsum(greedy) / len(greedy)}  # fmt: skip

    return evaluate


def budget_callback(evaluate, counter: GenerationCounter, budget: int, points: int):
    """
    Evaluates at step 0 and each time the generated completions pass another `budget / points`; stops training at
    the budget (recording the last point there). `train_time` excludes evaluation.
    """
    from transformers import TrainerCallback

    class BudgetCallback(TrainerCallback):
        def __init__(self):
            self.points, self.train_time, self.eval_time, self._clock, self._next = [], 0.0, 0.0, None, 1

        def _record(self, step, model):
            start = time.perf_counter()
            counter.paused = True
            self.points.append({"step": step, "completions": counter.count, "train_time": self.train_time,
                                **evaluate(model)})  # fmt: skip
            counter.paused = False
            self.eval_time += time.perf_counter() - start

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self._record(0, model)
            self._clock = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            done = counter.count >= budget or state.global_step >= state.max_steps
            if counter.count >= budget * self._next / points or done:
                self.train_time += time.perf_counter() - self._clock
                self._record(state.global_step, model)
                while self._next <= points and counter.count >= budget * self._next / points:
                    self._next += 1
                self._clock = time.perf_counter()
            if done:
                control.should_training_stop = True

    return BudgetCallback()


def cgrpo_available() -> bool:
    return importlib.util.find_spec("trl_cgrpo") is not None


def run_arm(task: str, arm: str, seed: int, steps: int, points: int, warm: dict, *,
            generation_batch: int = GENERATION_BATCH, learning_rate: float = LEARNING_RATE, stages=None,
            max_grad_norm: float | None = None, reward_flip: float = 0.0) -> dict:  # fmt: skip
    """
    Train one arm from the warm start to `steps x generation_batch` generated completions; its record. `stages`: the
    arm's stages when not [`arm_stages`]'s (`benchmarks/study2.py`'s tuned rules); `max_grad_norm`: the gradient
    clipping norm (`None`: the `GRPOConfig` default); `reward_flip`: each training reward is flipped with this
    probability (a noisy reward; the evaluation stays exact).
    """
    import copy

    from transformers import PrinterCallback

    start = time.perf_counter()
    budget = steps * generation_batch
    model, tokenizer = copy.deepcopy(warm["model"]), warm["tokenizer"]
    counter = GenerationCounter(model)
    reward = ExactAnswer(tokenizer, flip=reward_flip, seed=seed)
    recorder = budget_callback(evaluator(warm, reward), counter, budget, points)
    common = dict(temperature=TEMPERATURE, max_completion_length=MAX_COMPLETION_LENGTH, learning_rate=learning_rate,
                  lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                  bf16=False, seed=seed, disable_tqdm=True)  # fmt: skip
    if max_grad_norm is not None:
        common["max_grad_norm"] = max_grad_norm
    with tempfile.TemporaryDirectory() as output_dir:
        if arm == "cgrpo":
            from trl_cgrpo import CGRPOConfig, CGRPOTrainer

            args = CGRPOConfig(output_dir=output_dir, budget_grid=list(CANDIDATES), max_steps=budget // 4 + 1,
                               per_device_train_batch_size=CGRPO_BATCH, num_calibration_samples=CGRPO_CALIBRATION,
                               calibration_batch_size=CGRPO_CALIBRATION, **common)  # fmt: skip
            trainer = CGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=warm["train"],
                                   processing_class=tokenizer, calibration_dataset=warm["calibration"],
                                   answer_extractor=str.strip, callbacks=[recorder])  # fmt: skip
            groups = cgrpo_groups(trainer)
        else:
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
        increments = arm in INCREMENT_ARMS or (arm != "cgrpo" and any(
            st.dynamic_sampling is not None or (st.adaptive is not None and st.adaptive.policy == "top_up")
            for st in stages))  # rounds sampled in increments: the probe groups rows by prompt  # fmt: skip
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
        "calibration_rollouts": sum(h.get("cgrpo/calibration_rollouts", 0) for h in history), "logged": logged,
        "train_time": recorder.train_time, "eval_time": recorder.eval_time, "run_time": time.perf_counter() - start,
    }  # fmt: skip


def arm_stages(arm: str):
    from grpo_curriculum import Adaptive, DynamicSampling, Stage

    if arm.startswith("static_g"):
        return [Stage(num_generations=int(arm.removeprefix("static_g")), temperature=TEMPERATURE)]
    if arm == "success_rate":
        return [Stage(num_generations=4, temperature=TEMPERATURE, name=arm,
                      adaptive=Adaptive(num_generations=CANDIDATES, policy=arm))]  # fmt: skip
    if arm == "per_prompt":
        return [Stage(temperature=TEMPERATURE, name=arm,  # the defaults of its runs, explicit (issue 25 changed them)
                      adaptive=Adaptive(num_generations=CANDIDATES, policy=arm, lookahead=2, defer=True,
                                        weight="knapsack"))]
    if arm == "top_up":  # the round size its runs had, explicit (issue 25 changed the default to GENERATION_BATCH // 8)
        return [Stage(temperature=TEMPERATURE, name=arm,
                      adaptive=Adaptive(num_generations=CANDIDATES, policy=arm, prompts=GENERATION_BATCH // 4))]
    if arm == "dynamic":
        return [Stage(num_generations=DYNAMIC_G, temperature=TEMPERATURE, name=arm,
                      dynamic_sampling=DynamicSampling(max_rounds=DYNAMIC_ROUNDS))]  # fmt: skip
    raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")


def run_job(job: tuple) -> list[dict]:
    """One (task, seed): the warm start, then each arm in turn (a worker process: one torch thread)."""
    import torch
    from transformers import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    task, seed, arms, steps, points = job
    t0 = time.perf_counter()
    warm = warm_model(task, seed)
    warm_time = time.perf_counter() - t0
    runs = []
    for arm in arms:
        run = run_arm(task, arm, seed, steps, points, warm)
        run["warm_time"], run["warm_steps"] = warm_time, warm["warm_steps"]
        runs.append(run)
        print(f"  {task} seed {seed:>3} {arm:>12}: exact {run['eval'][0]['exact']:.3f} -> "
              f"{run['eval'][-1]['exact']:.3f}"
              f", sampled {run['eval'][-1]['sampled']:.3f}, {run['generated']} completions in {run['steps']} steps, "
              f"informative {run['probe']['informative'] / max(1, run['probe']['completions']):.2f}, "
              f"run {run['run_time']:.0f} s", flush=True)  # fmt: skip
    return runs


# --- analysis --------------------------------------------------------------------------------------------------------


def curve(run: dict) -> tuple[list[float], list[float]]:
    return [p["completions"] for p in run["eval"]], [p["exact"] for p in run["eval"]]


def choose_best_static(runs: list[dict], tuning: list[int], reported: list[int]) -> tuple[str, str]:
    """The static arm with the highest mean final exact reward on the tuning seeds (reported seeds if none)."""
    seeds, source = (tuning, "tuning seeds") if tuning else (reported, "reported seeds (no tuning seeds: biased)")
    finals = {}
    for arm in STATIC_ARMS:
        values = [r["eval"][-1]["exact"] for r in runs if r["arm"] == arm and r["seed"] in seeds]
        if values:
            finals[arm] = statistics.fmean(values)
    return max(finals, key=finals.get), source


def summarise_task(runs: list[dict], arms: list[str], tuning: list[int], reported: list[int]) -> dict:
    """Per arm: finals, the paired ratios (100% and 90%-of-gain targets), AUC differences, the mechanism."""
    best, source = choose_best_static(runs, tuning, reported)
    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = [s for s in reported if all((a, s) in by for a in arms)]
    rows = {}
    for arm in arms:
        row = {"ratio_100": [], "ratio_90": [], "auc": [], "auc_diff": [], "start": [], "final": [], "sampled": [],
               "informative": [], "mean_G": [], "deferred": [], "calibration": [], "steps": [], "train_time": [],
               "reach_100": [], "generated": [], "logged_generated": [], "increments": [], "dropped": [],
               "informative_steps": [], "bins": [[0, 0, 0] for _ in SUCCESS_BINS[1:]]}  # fmt: skip
        for seed in seeds:
            run, ref = by[(arm, seed)], by[(best, seed)]
            (xs, ys), (rx, ry) = curve(run), curve(ref)
            for name, target in (("ratio_100", ry[-1]), ("ratio_90", ry[0] + 0.9 * (ry[-1] - ry[0]))):
                row[name].append(paired_ratio(first_reaching(xs, ys, target), first_reaching(rx, ry, target)))
            row["reach_100"].append(first_reaching(xs, ys, ry[-1]))  # completions to the best static's final
            logged = run.get("logged") or {}  # (runs of the earlier study have none)
            row["generated"].append(run["generated"])
            for name in ("generated", "increments", "dropped", "informative_steps"):
                row["logged_generated" if name == "generated" else name].append(logged.get(name, math.nan))
            budget = run["budget"]
            row["auc"].append(area_under(xs, ys, budget))
            row["auc_diff"].append(row["auc"][-1] - area_under(rx, ry, budget))
            row["start"].append(ys[0])
            row["final"].append(ys[-1])
            row["sampled"].append(run["eval"][-1]["sampled"])
            probe = run["probe"]
            share = probe["informative"] / probe["completions"] if probe["completions"] else math.nan
            row["informative"].append(share)
            groups = sum(b[0] for b in probe["bins"])
            row["mean_G"].append(probe["completions"] / groups if groups else math.nan)
            for total, b in zip(row["bins"], probe["bins"], strict=True):
                for i in range(3):
                    total[i] += b[i]
            row["deferred"].append(run["deferred"])
            row["calibration"].append(run["calibration_rollouts"])
            row["steps"].append(run["steps"])
            row["train_time"].append(run["train_time"])
        for name in ("ratio_100", "ratio_90"):
            row[name + "_median"] = median(row[name])
            row[name + "_interval"] = bootstrap_interval(row[name])
        row["auc_diff_median"] = median(row["auc_diff"])
        row["auc_diff_interval"] = bootstrap_interval(row["auc_diff"])
        gain, gain_std = mean_std([b - a for a, b in zip(row["start"], row["final"], strict=True)])
        row["rise_seed_stds"] = gain / gain_std if gain_std else math.inf
        rows[arm] = row
    informative_best = statistics.fmean(rows[best]["informative"])
    for row in rows.values():
        share = statistics.fmean(row["informative"])
        row["informative_vs_best"] = share / informative_best if informative_best else math.inf
    learns = all(row["rise_seed_stds"] >= RISE_SEED_STDS for row in rows.values())
    return {"best_static": best, "best_source": source, "seeds": seeds, "rows": rows, "learns": learns}


def sampling_verdicts(summary: dict) -> dict[str, dict]:
    """
    The sampling issue's targets, per arm, each `True`/`False` or a number reported either way: `top_up` against the
    best static arm (informative share, median paired ratio and its interval); `dynamic`: the share of its steps whose
    training batch held only informative groups, and its completions to the best static arm's final reward over
    those of `top_up` (paired per seed).
    """
    rows, out = summary["rows"], {}
    if "top_up" in rows:
        row = rows["top_up"]
        out["top_up"] = {
            f"informative share >= {TOP_UP_TARGETS['informative']}x best static ({row['informative_vs_best']:.2f}x)":
                row["informative_vs_best"] >= TOP_UP_TARGETS["informative"],
            f"completions to the best static's final reward <= {TOP_UP_TARGETS['ratio']}x (median "
            f"{fmt_ratio(row['ratio_100_median'])}, 90% CI {fmt_interval(row['ratio_100_interval'])})":
                row["ratio_100_median"] <= TOP_UP_TARGETS["ratio"],
            f"90% interval upper end <= {TOP_UP_TARGETS['ratio']}":
                row["ratio_100_interval"][1] <= TOP_UP_TARGETS["ratio"],
            f"to 90% of the best static's gain: median {fmt_ratio(row['ratio_90_median'])}, 90% CI "
            f"{fmt_interval(row['ratio_90_interval'])}": None,
        }  # fmt: skip
    if "dynamic" in rows:
        row = rows["dynamic"]
        steps = [v for v in row["informative_steps"] if not math.isnan(v)]
        full = statistics.fmean(steps) if steps else math.nan
        verdict = {f"steps whose batch held only informative groups: {full:.0%}" if steps else
                   "steps whose batch held only informative groups: not logged": None,
                   f"completions to the best static's final reward over the best static's: median "
                   f"{fmt_ratio(row['ratio_100_median'])}, 90% CI {fmt_interval(row['ratio_100_interval'])}": None,
                   f"to 90% of its gain: median {fmt_ratio(row['ratio_90_median'])}, 90% CI "
                   f"{fmt_interval(row['ratio_90_interval'])}": None}  # fmt: skip
        if "top_up" in rows:
            ratios = [paired_ratio(a, b) for a, b in zip(row["reach_100"], rows["top_up"]["reach_100"], strict=True)]
            verdict[f"over top_up's (paired, to the best static's final reward): median {fmt_ratio(median(ratios))}, "
                    f"90% CI {fmt_interval(bootstrap_interval(ratios))}"] = None
        out["dynamic"] = verdict
    return out


def targets_verdict(summary: dict) -> dict:
    """The brief's targets for `per_prompt`, each `True`/`False` (`None`: an arm missing)."""
    rows = summary["rows"]
    if "per_prompt" not in rows:
        return {}
    pp = rows["per_prompt"]
    verdict = {
        f"median ratio <= {TARGETS['ratio']}": pp["ratio_100_median"] <= TARGETS["ratio"],
        f"90% interval upper end < {TARGETS['interval_high']}": pp["ratio_100_interval"][1] < TARGETS["interval_high"],
        f"median ratio <= {TARGETS['worst_median']} (never worse)": pp["ratio_100_median"] <= TARGETS["worst_median"],
        f"informative share >= {TARGETS['informative']}x best static":
            pp["informative_vs_best"] >= TARGETS["informative"],
    }  # fmt: skip
    if "cgrpo" in rows:
        verdict["ahead of trl-cgrpo (median ratio)"] = pp["ratio_100_median"] < rows["cgrpo"]["ratio_100_median"]
    return verdict


# --- report ----------------------------------------------------------------------------------------------------------


def fmt_ratio(value: float) -> str:
    return "never" if math.isinf(value) else "n/a" if math.isnan(value) else f"{value:.2f}"


def fmt_interval(values: tuple[float, float]) -> str:
    return f"[{fmt_ratio(values[0])}, {fmt_ratio(values[1])}]"


def fmt_bins(bins: list[list[int]]) -> str:
    """Per exact-success bin with completions: `range: share of completions, mean G, informative share`."""
    total = sum(b[1] for b in bins) or 1
    edges = zip(SUCCESS_BINS, SUCCESS_BINS[1:])
    return "; ".join(f"{lo:g}-{hi:g}: {b[1] / total:.0%} G {b[1] / b[0]:.1f} inf. {b[2] / b[1]:.0%}"
                     for (lo, hi), b in zip(edges, bins, strict=True) if b[0])  # fmt: skip


def task_table(summary: dict) -> list[str]:
    best = summary["best_static"]
    lines = ["| arm | exact reward: start -> final | sampled final | rise (seed-stds) | completions ratio to 100% "
             "target: median [90% CI] (per seed) | ratio to 90% of gain: median [90% CI] | AUC | AUC - best static: "
             "median [90% CI] | informative share (x best) | mean G | deferred | calibration completions | steps | "
             "generated (trainer's count) | increments a round | groups dropped | training time (s) |",
             "|" + "---|" * 17]  # fmt: skip
    for arm, row in summary["rows"].items():
        mark = " (best static)" if arm == best else ""
        lines.append(
            f"| {arm}{mark} | {statistics.fmean(row['start']):.3f} -> {fmt_ms(mean_std(row['final']))} | "
            f"{fmt_ms(mean_std(row['sampled']))} | {row['rise_seed_stds']:.1f} | "
            f"{fmt_ratio(row['ratio_100_median'])} {fmt_interval(row['ratio_100_interval'])} "
            f"({', '.join(fmt_ratio(v) for v in row['ratio_100'])}) | "
            f"{fmt_ratio(row['ratio_90_median'])} {fmt_interval(row['ratio_90_interval'])} | "
            f"{fmt_ms(mean_std(row['auc']))} | {row['auc_diff_median']:+.3f} "
            f"[{row['auc_diff_interval'][0]:+.3f}, {row['auc_diff_interval'][1]:+.3f}] | "
            f"{fmt_ms(mean_std(row['informative']), 2)} ({row['informative_vs_best']:.2f}x) | "
            f"{fmt_ms(mean_std(row['mean_G']), 1)} | {fmt_ms(mean_std(row['deferred']), 0)} | "
            f"{fmt_ms(mean_std(row['calibration']), 0)} | {fmt_ms(mean_std(row['steps']), 0)} | "
            f"{fmt_ms(mean_std(row['generated']), 0)} ({fmt_ms(mean_std(row['logged_generated']), 0)}) | "
            f"{fmt_ms(mean_std(row['increments']), 2)} | {fmt_ms(mean_std(row['dropped']), 0)} | "
            f"{fmt_ms(mean_std(row['train_time']), 0)} |"
        )  # fmt: skip
    lines += ["", "G by exact success of the trained prompt at the training temperature (share of the arm's "
              "completions, mean G, share of those completions in informative groups):", ""]  # fmt: skip
    lines += [f"- `{arm}`: {fmt_bins(row['bins'])}" for arm, row in summary["rows"].items()]
    return lines


def markdown(raw: dict, summaries: dict) -> str:
    o = raw["options"]
    lines = [
        f"# Study: per-prompt G, top-up and dynamic sampling vs static G and trl-cgrpo ({raw['mode']} run)", "",
        f"Generated by `{raw['command']}`: {len(o['seeds'])} reported seeds {o['seeds']}, tuning seeds "
        f"{o['tuning']}, budget {o['steps'] * GENERATION_BATCH} generated completions per run ({o['steps']} steps of "
        f"{GENERATION_BATCH} for the curriculum arms), {o['points']} evaluations after step 0, {o['jobs']} processes. "
        f"Wall time {raw['wall_time_s'] / 60:.1f} min; the full study ({describe_mode('full')}) is estimated at "
        f"{estimate(raw['runs'], 'full', o['jobs'], o['arms'], o['tasks']) / 60:.0f} min with {o['jobs']} processes, "
        "scaled from this run's wall times (they grow when other processes share the cores).", "",
        f"Exact reward: mean over {EVAL_PROMPTS} held-out prompts of the probability that sampling at temperature "
        f"{EVAL_TEMPERATURE:g} answers exactly (teacher forcing). Sampled: {EVAL_SAMPLES} samples a prompt at "
        f"{EVAL_TEMPERATURE:g}, fixed seed. Ratios are paired per seed (completions generated to reach the best "
        "static arm's final exact reward on that seed, or 90% of its gain over the warm start, over the best static "
        "arm's own); `never`: not within the budget; CI: bootstrap over seeds. Rise: mean gain over the run over "
        f"the std of the gains across seeds (the task counts as learnable at >= {RISE_SEED_STDS:g} for every arm). "
        "± is the std over seeds.",
        "",
    ]  # fmt: skip
    for task, summary in summaries.items():
        warm = sorted({(r["seed"], r["warm_steps"]) for r in raw["runs"] if r["task"] == task})
        lines += [f"## `{task}`: {TASKS[task][0]}", "",
                  "Warm-start steps per seed (until level 2's exact success at the training temperature reaches "
                  f"{WARM_GATE[1]:g}): " + ", ".join(f"{s}: {n}" for s, n in warm) + ".", "",
                  f"Best static arm: `{summary['best_static']}` (chosen on {summary['best_source']}). Every arm's "
                  f"exact reward rises by >= {RISE_SEED_STDS:g} seed-stds: "
                  f"{'yes' if summary['learns'] else 'NO'}.", "",
                  *task_table(summary), ""]  # fmt: skip
        for arm, verdict in sampling_verdicts(summary).items():
            lines += [f"Targets for `{arm}`: " + "; ".join(k if v is None else f"{k}: {'met' if v else 'not met'}"
                                                          for k, v in verdict.items()) + ".", ""]  # fmt: skip
        verdict = targets_verdict(summary)
        if verdict:
            lines += ["Targets for `per_prompt`: " + "; ".join(f"{k}: {'met' if v else 'not met'}"
                                                               for k, v in verdict.items()) + ".", ""]  # fmt: skip
        levels = sorted(summary_levels(raw, task).items())
        per_arm = (f"`{arm}` " + ", ".join(f"L{k} {a:.2f}->{b:.2f}" for k, (a, b) in per.items())
                   for arm, per in levels)  # fmt: skip
        lines += ["Exact reward by level, start -> final (mean over seeds): " + "; ".join(per_arm) + ".", ""]
    if raw["mode"].startswith("pilot"):
        lines += ["A pilot: it proves every arm runs and every number is computed; read no verdict from it.", ""]
    return "\n".join(lines)


def reported_runs(raw: dict, task: str, arm: str) -> list[dict]:
    return [r for r in raw["runs"] if r["task"] == task and r["arm"] == arm and r["seed"] in raw["options"]["seeds"]]


def summary_levels(raw: dict, task: str) -> dict:
    out = {}
    for arm in raw["options"]["arms"]:
        runs = reported_runs(raw, task, arm)
        if runs:
            out[arm] = {k: (statistics.fmean(r["eval"][0]["levels"][k] for r in runs),
                            statistics.fmean(r["eval"][-1]["levels"][k] for r in runs))
                        for k in runs[0]["eval"][0]["levels"]}  # fmt: skip
    return out


def plot(raw: dict, task: str, path: Path) -> None:
    curves = {arm: reported_runs(raw, task, arm) for arm in raw["options"]["arms"]}
    plot_curves(curves, STATIC_ARMS, f"{task}: mean over seeds {raw['options']['seeds']}", path)


def plot_curves(runs_by_arm: dict[str, list[dict]], static_arms, title: str, path: Path) -> None:
    """Each arm's mean exact-reward curve against completions generated (static arms solid, the others dash-dot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for arm, runs in runs_by_arm.items():
        if not runs:
            continue
        budget = runs[0]["budget"]
        grid = [budget * i / 50 for i in range(51)]
        ys = [[first_value(*curve(r), x) for x in grid] for r in runs]
        axis.plot(grid, [statistics.fmean(col) for col in zip(*ys)], "-" if arm in static_arms else "-.", label=arm)
    axis.set_xlabel("completions generated")
    axis.set_ylabel(f"exact held-out reward (T {EVAL_TEMPERATURE:g})")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def first_value(xs: list[float], ys: list[float], x: float) -> float:
    """The piecewise-linear curve's value at `x` (held flat after its last point)."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:]), strict=False):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return ys[-1]


def report(raw: dict, out: Path) -> str:
    from grpo_curriculum.training.checkpoint import atomic_write

    o = raw["options"]
    summaries = {}
    for task in o["tasks"]:
        runs = [r for r in raw["runs"] if r["task"] == task]
        summaries[task] = summarise_task(runs, o["arms"], o["tuning"], o["seeds"])
        plot(raw, task, out / f"study_{o['name']}_{task}.png")
    text = markdown(raw, summaries)
    atomic_write(out / f"study_{o['name']}.md", lambda f: f.write(text))
    return text


def describe_mode(mode: str) -> str:
    seeds, tuning, steps, points = MODES[mode]
    return f"{seeds} reported + {tuning} tuning seeds x {steps * GENERATION_BATCH} completions, {points} evaluations"


def estimate(runs: list[dict], mode: str, jobs: int, arms: list[str], tasks: list[str]) -> float:
    """Seconds the `mode` study would take on `jobs` processes, scaled from measured runs (per completion, eval)."""
    seeds, tuning, steps, points = MODES[mode]
    total = 0.0
    for task in tasks:
        for arm in arms:
            measured = [r for r in runs if r["task"] == task and r["arm"] == arm]
            if not measured:
                continue
            per_run = statistics.fmean(
                r["train_time"] / r["generated"] * steps * GENERATION_BATCH
                + r["eval_time"] / len(r["eval"]) * (points + 1)
                + (r["run_time"] - r["train_time"] - r["eval_time"])
                for r in measured
            )
            total += per_run * (seeds + (tuning if arm in STATIC_ARMS else 0))
        warm = [r["warm_time"] for r in runs if r["task"] == task]
        total += statistics.fmean(warm) * (seeds + tuning) if warm else 0.0
    return total / jobs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pilot", action="store_true", help=f"the pilot ({describe_mode('pilot')})")
    parser.add_argument("--seeds", type=int, help="reported seeds (0, 1, ...)")
    parser.add_argument("--tuning-seeds", type=int, help=f"tuning seeds ({TUNING_SEED_BASE}, ...), static arms only")
    parser.add_argument("--steps", type=int, help=f"budget in steps of {GENERATION_BATCH} completions")
    parser.add_argument("--points", type=int, help="evaluations after step 0")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=ARMS)
    parser.add_argument("--jobs", type=int, default=2, help="processes in parallel (one torch thread each)")
    options, out = parse_with_output(parser, argv, "study")
    if options.from_json:
        if len(options.from_json) > 1:
            parser.error("--from-json takes one study_*.json here (one invocation runs every task and seed)")
        raw = json.loads(Path(options.from_json[0]).read_text())
        print(report(raw, out))
        return 0
    mode = "pilot" if options.pilot else "full"
    seeds, tuning, steps, points = MODES[mode]
    seeds = seeds if options.seeds is None else options.seeds
    tuning = tuning if options.tuning_seeds is None else options.tuning_seeds
    steps, points = options.steps or steps, options.points or points
    if (seeds, tuning, steps, points) != MODES[mode] or options.arms != ARMS or options.tasks != list(TASKS):
        mode += ", custom"
    arms = list(options.arms)
    if "cgrpo" in arms and not cgrpo_available():
        print("skipping the `cgrpo` arm: trl-cgrpo is not installed (pip install --no-deps trl-cgrpo==0.2.0)")
        arms.remove("cgrpo")
    if not arms:
        parser.error("no arm left to run: --arms named only `cgrpo`, and trl-cgrpo is not installed")
    reported = list(range(seeds))
    tuning_seeds = [TUNING_SEED_BASE + i for i in range(tuning)]
    jobs = [(task, seed, arms, steps, points) for task in options.tasks for seed in reported]
    jobs += [(task, seed, [a for a in arms if a in STATIC_ARMS], steps, points)
             for task in options.tasks for seed in tuning_seeds]  # fmt: skip
    print(f"{mode}: tasks {options.tasks}, arms {arms}, seeds {reported} + tuning {tuning_seeds}, "
          f"{steps * GENERATION_BATCH} completions a run, {len(jobs)} jobs on {options.jobs} processes", flush=True)
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(options.jobs, maxtasksperchild=1) as pool:
        runs = [run for job_runs in pool.imap_unordered(run_job, jobs) for run in job_runs]
    wall = time.perf_counter() - start
    name = "custom" if "custom" in mode else "pilot" if options.pilot else "full"
    command = "python benchmarks/study.py " + " ".join(sys.argv[1:] if argv is None else argv)
    raw = {"mode": mode, "command": command.strip(), "wall_time_s": wall,
           "options": {"name": name, "tasks": options.tasks, "arms": arms, "seeds": reported, "tuning": tuning_seeds,
                       "steps": steps, "points": points, "jobs": options.jobs},
           "runs": sorted(runs, key=lambda r: (r["task"], r["seed"], ARMS.index(r["arm"])))}  # fmt: skip
    from grpo_curriculum.training.checkpoint import atomic_write

    atomic_write(out / f"study_{name}.json", lambda f: json.dump(raw, f, separators=(",", ":")))
    print(report(raw, out))
    print(f"wall time {wall / 60:.1f} min; estimated full study ({describe_mode('full')}, {options.jobs} processes): "
          f"{estimate(runs, 'full', options.jobs, arms, options.tasks) / 60:.0f} min")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
