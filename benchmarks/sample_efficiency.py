"""
Does the curriculum buy reward per completion? Static G, the seeds' stage schedule and the adaptive policies, side by
side, at the same number of completions.

Every arm trains the same warm-started tiny model (grpo_curriculum.demo.tasks: build_model + warm_start) with
`CurriculumGRPOTrainer` + `CurriculumCallback` on CPU, with the same generation batch (so the same completions per
optimizer step) and the same number of optimizer steps:

- `static_g{2,4,8,16}`: one stage, fixed G, temperature 0.9 (a one-stage schedule trains exactly like plain GRPO);
- `schedule`: the seeds' stage schedule, G 4 at temperature 0.7 for the first half, then G 8 at temperature 0.9;
- `hysteresis`, `success_rate`: one adaptive stage starting at G 4, temperature 0.9; G among {2, 4, 8, 16},
  temperature within [0.7, 1.2], the policy's default knobs;
- `per_prompt`: one per-prompt stage, each prompt its own G among {2, 4, 8, 16} under the same budget, predicted
  zero-variance prompts deferred, default knobs, temperature 0.9 like the static arms.

A callback evaluates the policy on a fixed set of 64 prompts (drawn with a different seed from the training prompts;
8 samples a prompt at temperature 0.5, fixed seed) at regular completion counts and records the training wall time
(evaluation excluded). Results: eval reward vs completions and vs wall time, completions to reach a target, final
reward mean +- std over seeds, fluctuation and the zero-std group fraction; a Markdown report with a table per task,
one PNG per task and the raw numbers as JSON (`--from-json` rebuilds the report from them without training).

    python benchmarks/sample_efficiency.py --quick          # 2 seeds x 240 steps, about 3 minutes on one core
    python benchmarks/sample_efficiency.py                  # the full study: 5 seeds x 960 steps
    python benchmarks/sample_efficiency.py --tasks echo_mixed --seeds 3 --steps 200 --arms static_g4 hysteresis

Runs are sequential in one process on one thread (OMP_NUM_THREADS=1, torch.set_num_threads(1)).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import argparse
import copy
import json
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

torch.set_num_threads(1)
warnings.filterwarnings("ignore", category=FutureWarning)

from common import HeldOut, eval_callback, fmt_ms, mean_std, parse_with_output, train_arm  # noqa: E402  (benchmarks/common.py)
from transformers import GenerationConfig  # noqa: E402
from transformers import logging as hf_logging  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from grpo_curriculum import Stage  # noqa: E402
from grpo_curriculum.core.adaptive import Adaptive  # noqa: E402
from grpo_curriculum.training.callback import CurriculumCallback  # noqa: E402
from benchmark_tasks import BENCHMARK_TASKS  # noqa: E402  (benchmarks/benchmark_tasks.py)
from grpo_curriculum.demo.tasks import build_model, build_tokenizer, warm_start  # noqa: E402
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer  # noqa: E402

GENERATION_BATCH = 16  # completions per optimizer step, every arm; G in {2, 4, 8, 16} all divide it
MAX_COMPLETION_LENGTH = 4  # the longest answer (three words) plus <eos>
STATIC_TEMPERATURE = 0.9
LEARNING_RATE = 1e-3  # at 2e-3 the greedy eval of count_mixed first fell well below its start (one-seed probe)
WARM_START_STEPS = 40  # benchmarks/task_spread.py: at 40 most prompts have success rates in (0, 1)
# echo_tiers: a longer warm start on the one- and two-word prompts only (solved / mixed), the rest left hopeless.
TASK_WARM_START = {"echo_tiers": (120, lambda row: len(row["target"].split()) <= 2)}
TRAIN_PROMPTS = 256
EVAL_PROMPTS = 64
EVAL_TEMPERATURE = 0.5  # eval: low-temperature samples, EVAL_SAMPLES a prompt, fixed seed (see Evaluator)
EVAL_SAMPLES = 8
EVAL_SEED = 1234
EVAL_PROMPT_SEED = 10_000
SPREAD_SAMPLES = 16  # completions a prompt when measuring the per-prompt success spread after the warm start
EVAL_POINTS = 16  # evaluations per run after the one at step 0
TARGET_FRACTION = 0.9  # secondary target: this fraction of the best static arm's final mean eval reward
GOAL_SAVING = 0.30  # target: an adaptive arm reaches the best static arm's final reward with >= 30% fewer completions
MOONSHOT_SAVING = 0.50
ZERO_STD_TARGET = 0.5  # ... with at most half the best static arm's zero-std completion share
FLUCTUATION_TAIL = 0.25  # fluctuation of the training reward: std over the last quarter of the steps

MODES = {  # seeds, optimizer steps
    "quick": (2, 240),
    "full": (5, 960),
}
DEFAULT_TASKS = ["echo_mixed", "count_mixed", "echo_tiers"]
TASK_DESCRIPTIONS = {
    "echo": "repeat 2 words; partial credit",
    "count": "name how often a word is repeated, 1-5; binary reward",
    "echo_mixed": "mixed difficulty: repeat 1-3 words; partial credit",
    "count_mixed": "mixed difficulty: name how often a word is repeated, 1-9; binary reward",
    "echo_tiers": "difficulty tiers like real RL data: repeat 1-4 words exactly, binary reward; warm-started on 1-2 "
                  "words only, so at the start many prompts are solved, many hopeless, few mixed",
}
STATIC_ARMS = ["static_g2", "static_g4", "static_g8", "static_g16"]
ADAPTIVE_ARMS = ["hysteresis", "success_rate", "per_prompt"]
ARMS = [*STATIC_ARMS, "schedule", *ADAPTIVE_ARMS]


def arm_stages(arm: str) -> list[Stage]:
    if arm.startswith("static_g"):
        return [Stage(num_generations=int(arm.removeprefix("static_g")), temperature=STATIC_TEMPERATURE)]
    if arm == "schedule":
        return [Stage(num_generations=4, temperature=0.7, until_fraction=0.5, name="explore"),
                Stage(num_generations=8, temperature=0.9, name="compare")]  # fmt: skip
    if arm == "per_prompt":
        adaptive = Adaptive(num_generations=(2, 4, 8, 16), policy=arm)
        return [Stage(temperature=STATIC_TEMPERATURE, adaptive=adaptive, name=arm)]
    if arm in ADAPTIVE_ARMS:
        adaptive = Adaptive(num_generations=(2, 4, 8, 16), temperature=(0.7, 1.2), policy=arm)
        return [Stage(num_generations=4, temperature=STATIC_TEMPERATURE, adaptive=adaptive, name=arm)]
    raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")


def arm_description(arm: str) -> str:
    if arm.startswith("static_g"):
        return f"G {arm.removeprefix('static_g')}, T {STATIC_TEMPERATURE:g}"
    if arm == "schedule":
        return "G 4 / T 0.7, then G 8 / T 0.9 from half the run"
    if arm == "per_prompt":
        return f"per-prompt G in {{2,4,8,16}}, deferral on, T {STATIC_TEMPERATURE:g}"
    return f"adaptive {arm}: G in {{2,4,8,16}} from 4, T in [0.7, 1.2] from {STATIC_TEMPERATURE:g}"


# --- one run ---------------------------------------------------------------------------------------------------------


def held_out_evaluation(tokenizer, dataset, reward):
    """
    Eval on a fixed prompt set ([`common.HeldOut`]): the reward recorded is the mean over `EVAL_SAMPLES` completions a
    prompt sampled at the low temperature `EVAL_TEMPERATURE` with a fixed seed; the greedy reward is recorded too
    (`greedy`): it moves in jumps (a prompt's argmax flips), the low-temperature mean moves smoothly. Returns
    `(evaluate(model) -> dict, held_out)`.
    """
    targets = list(dataset["target"])
    inputs = tokenizer(list(dataset["prompt"]), return_tensors="pt", padding=True)
    evaluation = HeldOut(tokenizer, inputs, lambda texts, copies: reward(texts, [t for t in targets for _ in range(
        copies)]), MAX_COMPLETION_LENGTH, EVAL_TEMPERATURE, EVAL_SAMPLES, EVAL_SEED)  # fmt: skip

    def evaluate(model) -> dict:
        greedy, sampled = evaluation(model)
        return {"reward": math.fsum(sampled) / len(sampled), "greedy": math.fsum(greedy) / len(greedy)}

    return evaluate, evaluation


def warm_model(task: str, seed: int):
    """The warm-started model, tokenizer, training prompts and the fixed eval prompts of one (task, seed)."""
    make_dataset, _ = BENCHMARK_TASKS[task]
    tokenizer = build_tokenizer()
    train = make_dataset(TRAIN_PROMPTS, seed=seed)
    held_out = make_dataset(EVAL_PROMPTS, seed=EVAL_PROMPT_SEED)  # the same eval prompts for every seed and arm
    model = build_model(seed=seed)
    steps, subset = TASK_WARM_START.get(task, (WARM_START_STEPS, None))
    warm_start(model, tokenizer, train if subset is None else train.filter(subset), steps=steps, seed=seed)
    return model, tokenizer, train, held_out


def success_spread(task: str, warm) -> dict:
    """
    Per-prompt success of the warm-started model on the eval prompts: `SPREAD_SAMPLES` completions a prompt at the
    static arms' temperature (fixed seed, global RNG restored); success = reward >= 0.5 (the adaptive default).
    """
    model, tokenizer, _, held_out = warm
    _, reward = BENCHMARK_TASKS[task]
    inputs = tokenizer(list(held_out["prompt"]), return_tensors="pt", padding=True)
    config = GenerationConfig(do_sample=True, temperature=STATIC_TEMPERATURE, top_k=0, top_p=1.0,
                              num_return_sequences=SPREAD_SAMPLES, max_new_tokens=MAX_COMPLETION_LENGTH,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    rng = torch.get_rng_state()
    torch.manual_seed(EVAL_SEED)
    model.eval()
    with torch.no_grad():
        out = model.generate(**inputs, generation_config=config)
    model.train()
    torch.set_rng_state(rng)
    texts = tokenizer.batch_decode(out[:, inputs.input_ids.shape[1] :], skip_special_tokens=True)
    rewards = reward(texts, [t for t in held_out["target"] for _ in range(SPREAD_SAMPLES)])
    groups = [rewards[i : i + SPREAD_SAMPLES] for i in range(0, len(rewards), SPREAD_SAMPLES)]
    rates = [sum(r >= 0.5 for r in g) / len(g) for g in groups]
    n = len(groups)
    return {"mean_reward": statistics.fmean(rewards), "mean_success": statistics.fmean(rates),
            "all_0": sum(p == 0 for p in rates) / n, "all_1": sum(p == 1 for p in rates) / n,
            "mixed": sum(0 < p < 1 for p in rates) / n,
            "equal_rewards": sum(max(g) - min(g) < 1e-9 for g in groups) / n}  # fmt: skip


def run_arm(task: str, arm: str, seed: int, steps: int, warm) -> dict:
    start = time.perf_counter()
    base_model, tokenizer, train, held_out = warm
    _, reward = BENCHMARK_TASKS[task]
    stages = arm_stages(arm)
    evaluate, evaluator = held_out_evaluation(tokenizer, held_out, reward)
    evaluation = eval_callback(evaluate, max(1, steps // EVAL_POINTS), GENERATION_BATCH)
    with tempfile.TemporaryDirectory() as output_dir:
        args = GRPOConfig(
            output_dir=output_dir, per_device_train_batch_size=GENERATION_BATCH,
            num_generations=stages[0].num_generations, temperature=stages[0].temperature,
            max_completion_length=MAX_COMPLETION_LENGTH, max_steps=steps, learning_rate=LEARNING_RATE, logging_steps=1,
            save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=seed, disable_tqdm=True,
        )  # fmt: skip
        curriculum = CurriculumCallback(stages)
        trainer = CurriculumGRPOTrainer(model=copy.deepcopy(base_model), processing_class=tokenizer,
                                        reward_funcs=reward, args=args, train_dataset=train,
                                        callbacks=[curriculum, evaluation])  # fmt: skip
        record = train_arm(trainer, curriculum)
    return {
        "task": task, "arm": arm, "seed": seed, "steps": steps, "completions": steps * GENERATION_BATCH,
        "eval": evaluation.points, **record, "train_time": evaluation.train_time, "eval_time": evaluator.time,
        "run_time": time.perf_counter() - start,
    }  # fmt: skip


# --- statistics ------------------------------------------------------------------------------------------------------


def first_reaching(points: list[dict], target: float) -> dict | None:
    """The first evaluation point whose reward is >= target (None: never within the run)."""
    return next((p for p in points if p["reward"] >= target - 1e-12), None)


def completions_of(point: dict | None) -> int | None:
    return None if point is None else point["completions"]


def mean_curve(runs: list[dict]) -> list[dict]:
    """Per evaluation: completions, mean and std over seeds of the eval reward, and the mean training wall time."""
    curve = []
    for points in zip(*(r["eval"] for r in runs), strict=True):
        m, s = mean_std([p["reward"] for p in points])
        curve.append({"completions": points[0]["completions"], "reward": m, "std": s,
                      "train_time": statistics.fmean(p["train_time"] for p in points)})  # fmt: skip
    return curve


def fluctuation_train(run: dict) -> float:
    """Std of the per-step training reward (mean over the round's completions) over the last quarter of the steps."""
    tail = run["train_reward"][-max(2, int(len(run["train_reward"]) * FLUCTUATION_TAIL)) :]
    return statistics.pstdev(tail)


def fluctuation_eval(run: dict) -> float:
    """Std of the change in eval reward between consecutive evaluations, over the whole run."""
    rewards = [p["reward"] for p in run["eval"]]
    return statistics.pstdev([b - a for a, b in zip(rewards, rewards[1:])])


def summarise(task_runs: dict[str, list[dict]]) -> dict:
    """Per arm: final reward, completions to the targets, fluctuation, zero-std fraction, G used, times."""
    finals = {arm: mean_std([r["eval"][-1]["reward"] for r in runs]) for arm, runs in task_runs.items()}
    statics = [arm for arm in STATIC_ARMS if arm in task_runs]
    best = max(statics or list(task_runs), key=lambda arm: finals[arm][0])
    best_final = finals[best][0]
    targets = {"100%": best_final, f"{TARGET_FRACTION:.0%}": TARGET_FRACTION * best_final}
    rows = {}
    for arm, runs in task_runs.items():
        curve = mean_curve(runs)
        row = {"final": finals[arm], "curve": curve, "reach": {}, "reach_seeds": {}}
        for name, target in targets.items():
            row["reach"][name] = first_reaching(curve, target)
            row["reach_seeds"][name] = [completions_of(first_reaching(r["eval"], target)) for r in runs]
        row["fluct_train"] = mean_std([fluctuation_train(r) for r in runs])
        row["fluct_eval"] = mean_std([fluctuation_eval(r) for r in runs])
        row["zero_std"] = mean_std([statistics.fmean(r["zero_std"]) for r in runs])
        row["mean_G"] = mean_std([statistics.fmean(r["G"]) for r in runs])
        row["final_G"] = [r["G"][-1] for r in runs]
        row["G_range"] = (min(min(r["G"]) for r in runs), max(max(r["G"]) for r in runs))
        row["switches"] = mean_std([r["switches"] for r in runs])
        row["train_time"] = mean_std([r["train_time"] for r in runs])
        row["seeds"] = [r["seed"] for r in runs]
        rows[arm] = row
    return {"best_static": best, "best_final": best_final, "targets": targets, "rows": rows}


def paired_ratio(arm_run: dict, static_run: dict) -> float:
    """
    One seed: completions `arm_run` needs to first reach `static_run`'s final eval reward, over the completions
    `static_run` itself needed to first reach it (same seed: same warm start and prompts). `inf` when the arm never
    reaches it; 1.0 when both start at or above it (nothing to save).
    """
    target = static_run["eval"][-1]["reward"]
    base = completions_of(first_reaching(static_run["eval"], target))
    got = completions_of(first_reaching(arm_run["eval"], target))
    if got is None:
        return math.inf
    return got / base if base else (1.0 if got == 0 else math.inf)


def goal_verdict(summary: dict, task_runs: dict[str, list[dict]]) -> dict:
    """
    The target on one task, for each adaptive arm: reach the best static arm's final eval reward with at most
    `1 - GOAL_SAVING` of its completions, as the median over seeds of the paired per-seed ratio ([`paired_ratio`]),
    and a zero-std completion share at most `ZERO_STD_TARGET` of the best static arm's. Also reported: the ratio on
    the seed-mean curves (the mean final as the target).
    """
    rows, best = summary["rows"], summary["best_static"]
    base = completions_of(rows[best]["reach"]["100%"])
    verdict = {"best_static": best, "static_completions": base, "arms": {}}
    for arm in ADAPTIVE_ARMS:
        if arm not in rows:
            continue
        reached = completions_of(rows[arm]["reach"]["100%"])
        seed_ratios = [paired_ratio(a, b) for a, b in zip(task_runs[arm], task_runs[best], strict=True)]
        median = statistics.median(seed_ratios)
        zero = rows[arm]["zero_std"][0] / rows[best]["zero_std"][0] if rows[best]["zero_std"][0] else math.inf
        verdict["arms"][arm] = {
            "completions": reached, "ratio": reached / base if reached is not None and base else None,
            "seed_ratios": seed_ratios, "median": median, "zero_std_ratio": zero,
            "seeds_met": sum(r <= 1 - GOAL_SAVING for r in seed_ratios),
            "met": median <= 1 - GOAL_SAVING and zero <= ZERO_STD_TARGET,
            "moonshot": median <= 1 - MOONSHOT_SAVING and zero <= ZERO_STD_TARGET,
        }  # fmt: skip
    verdict["met"] = any(a["met"] for a in verdict["arms"].values())
    verdict["degenerate"] = base == 0  # the warm-started model already scores the target: no saving is measurable
    return verdict


# --- output ----------------------------------------------------------------------------------------------------------


def fmt_reach(point: dict | None, per_seed: list[int | None]) -> str:
    reached = [v for v in per_seed if v is not None]
    head = "not reached" if point is None else f"{point['completions']} ({point['train_time']:.1f} s)"
    if not reached:
        return f"{head}; seeds: 0/{len(per_seed)}"
    if len(reached) == 1:
        return f"{head}; seeds: {reached[0]}, 1/{len(per_seed)}"
    m, s = mean_std(reached)
    return f"{head}; seeds: {m:.0f} ± {s:.0f}, {len(reached)}/{len(per_seed)}"


def task_table(task: str, summary: dict) -> str:
    t100, t90 = summary["targets"]["100%"], summary["targets"][f"{TARGET_FRACTION:.0%}"]
    header = ("| arm | G used: mean (range) | final eval reward | completions (train s) to 100% target "
              f"{t100:.3f} | completions (train s) to {TARGET_FRACTION:.0%} target {t90:.3f} | train wall s | "
              "fluct. train | fluct. eval | zero-std frac |")  # fmt: skip
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for arm, row in summary["rows"].items():
        g_lo, g_hi = row["G_range"]
        g = f"{row['mean_G'][0]:.1f} ({g_lo:g}-{g_hi:g})" if g_lo != g_hi else f"{g_lo:g}"
        mark = " (best static)" if arm == summary["best_static"] else ""
        t90 = f"{TARGET_FRACTION:.0%}"
        lines.append(
            f"| {arm}{mark} | {g} | {fmt_ms(row['final'])} | "
            f"{fmt_reach(row['reach']['100%'], row['reach_seeds']['100%'])} | "
            f"{fmt_reach(row['reach'][t90], row['reach_seeds'][t90])} | "
            f"{fmt_ms(row['train_time'], 1)} | {fmt_ms(row['fluct_train'])} | {fmt_ms(row['fluct_eval'])} | "
            f"{fmt_ms(row['zero_std'], 2)} |"
        )  # fmt: skip
    return "\n".join(lines)


def fmt_ratios(ratios: list[float]) -> str:
    """The paired per-seed ratios: median, then each seed's (`never`: the arm never reached the target)."""
    each = ", ".join("never" if math.isinf(r) else f"{r:.2f}" for r in ratios)
    median = statistics.median(ratios)
    return f"median {'never' if math.isinf(median) else f'{median:.2f}'} ({each})"


def explain(task: str, summary: dict, verdict: dict) -> list[str]:
    """Measured facts behind a task's verdict (every number below comes from this run)."""
    rows, best = summary["rows"], summary["best_static"]
    base = verdict["static_completions"]
    total = rows[best]["curve"][-1]["completions"]
    lines = [f"- Best static arm: `{best}`, final eval reward {fmt_ms(rows[best]['final'])}; its seed-mean curve "
             f"first reaches that value at {base} of {total} completions."]  # fmt: skip
    statics = sorted((a for a in STATIC_ARMS if a in rows), key=lambda a: -rows[a]["final"][0])
    if statics:
        lines.append("- Static arms by final eval reward: "
                     + ", ".join(f"`{a}` {fmt_ms(rows[a]['final'])}" for a in statics) + ".")  # fmt: skip
    if verdict["degenerate"]:
        lines.append(f"- The warm-started model (step 0) already scores `{best}`'s final reward on average: the goal "
                     "cannot be met on this task in this run (no completions can be saved).")  # fmt: skip
    for arm, v in verdict["arms"].items():
        row = rows[arm]
        if v["completions"] is None:
            reached = "its seed-mean curve never reaches it"
        elif v["ratio"] is None:
            reached = (f"its seed-mean curve reaches it at {v['completions']} completions (no ratio: the best "
                       "static arm meets it at step 0)")  # fmt: skip
        else:
            reached = (f"its seed-mean curve reaches it at {v['completions']} completions, ratio {v['ratio']:.2f} "
                       f"(goal <= {1 - GOAL_SAVING:.2f})")  # fmt: skip
        (ma, sa), (mb, sb) = row["final"], rows[best]["final"]
        lines.append(
            f"- `{arm}`: {reached}; paired per-seed ratio {fmt_ratios(v['seed_ratios'])}, <= "
            f"{1 - GOAL_SAVING:.2f} on {v['seeds_met']}/{len(v['seed_ratios'])} seeds; zero-std share "
            f"{v['zero_std_ratio']:.2f}x `{best}`'s (target <= {ZERO_STD_TARGET:g}x): target "
            f"{'met' if v['met'] else 'not met'}. Final {fmt_ms(row['final'])} ({ma - mb:+.3f} vs `{best}`, "
            f"{'within' if abs(ma - mb) <= max(sa, sb) else 'beyond'} one std across seeds). G: mean "
            f"{row['mean_G'][0]:.1f} (range {row['G_range'][0]:g}-{row['G_range'][1]:g}, last G per seed "
            f"{[round(g, 1) for g in row['final_G']]}), {row['switches'][0]:.1f} switches a run; zero-std fraction "
            f"{fmt_ms(row['zero_std'], 2)} vs {fmt_ms(rows[best]['zero_std'], 2)} for `{best}`."
        )  # fmt: skip
    return lines


def plot_task(task: str, summary: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    styles = {arm: ("-" if arm in STATIC_ARMS else "--" if arm == "schedule" else "-.") for arm in ARMS}
    for arm, row in summary["rows"].items():
        curve = row["curve"]
        means = [c["reward"] for c in curve]
        lo = [c["reward"] - c["std"] for c in curve]
        hi = [c["reward"] + c["std"] for c in curve]
        for axis, x in zip(axes, ([c["completions"] for c in curve], [c["train_time"] for c in curve]), strict=True):
            (line,) = axis.plot(x, means, styles[arm], label=arm, linewidth=1.6)
            axis.fill_between(x, lo, hi, color=line.get_color(), alpha=0.12)
    for axis in axes:
        axis.axhline(summary["best_final"], color="black", linewidth=0.7, linestyle=":")
        axis.grid(alpha=0.3)
    axes[0].set_xlabel("completions (optimizer steps x generation batch)")
    axes[1].set_xlabel("training wall time, s (mean over seeds; evaluation excluded)")
    axes[0].set_ylabel(f"eval reward ({EVAL_PROMPTS} prompts x {EVAL_SAMPLES} samples, T {EVAL_TEMPERATURE:g})")
    axes[0].legend(fontsize=8, loc="lower right")
    figure.suptitle(f"{title}: mean ± std over seeds; dotted: best static arm's final mean", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def estimate_full(runs: list[dict], warm_times: list[float], seeds: int, steps: int) -> float:
    """Seconds a study of `seeds` seeds x `steps` steps would take, scaled from measured runs (same evals a run)."""
    total = 0.0
    for run in runs:
        fixed = run["run_time"] - run["train_time"] - run["eval_time"]
        total += fixed + run["train_time"] * steps / run["steps"] + run["eval_time"]
    per_seed = total / len({r["seed"] for r in runs})
    warm = statistics.fmean(warm_times) * len({r["task"] for r in runs}) if warm_times else 0.0
    return (per_seed + warm) * seeds


def markdown(mode: str, options, summaries: dict, verdicts: dict, wall: float, estimate: float, full_seeds: int,
             full_steps: int, command: str, spreads: list[dict]) -> str:  # fmt: skip
    tasks = list(summaries)
    completions = options.steps * GENERATION_BATCH
    suffix = "_quick" if options.quick else ""
    lines = [
        f"# Sample efficiency: curriculum vs static G ({mode} run)",
        "",
        f"Generated by `{command.strip()}`. Every number below was measured by that invocation.",
        "",
        "## What was measured",
        "",
        f"- Mode: **{mode}**; {len(options.seed_list)} seeds {options.seed_list}; tasks "
        + ", ".join(f"`{t}` ({TASK_DESCRIPTIONS[t]})" for t in tasks) + " from `grpo_curriculum.demo.tasks` (the "
        "single-difficulty `echo` and `count` run with `--tasks echo count`).",
        f"- Every arm: **{options.steps} optimizer steps x generation batch {GENERATION_BATCH} = {completions} "
        "completions**, the same for every arm; `CurriculumGRPOTrainer` + `CurriculumCallback` for every arm (a "
        "one-stage schedule trains exactly like plain GRPO).",
        "- Arms: " + "; ".join(f"`{a}` ({arm_description(a)})" for a in options.arms) + ". The adaptive policies use "
        "their default knobs (not tuned on these tasks).",
        f"- Model: the tiny built-in Llama (hidden 32, 2 layers), per seed warm-started by {WARM_START_STEPS} "
        f"supervised steps (`grpo_curriculum.demo.tasks.warm_start`) on the {TRAIN_PROMPTS} training prompts"
        + "".join(f" (`{t}`: {TASK_WARM_START[t][0]} steps on its one- and two-word prompts only)"
                  for t in options.tasks if t in TASK_WARM_START)
        + f", the same start for every arm; learning rate {LEARNING_RATE:g}, max completion length "
        f"{MAX_COMPLETION_LENGTH}, beta 0 (TRL default); CPU, one torch thread, the runs of one process one after the "
        "other (wall times grow when other processes share the cores). Per-prompt success after the warm start: next "
        "section (`benchmarks/task_spread.py` compares warm-start lengths).",
        f"- Eval reward: mean task reward of {EVAL_SAMPLES} completions a prompt sampled at temperature "
        f"{EVAL_TEMPERATURE:g} with a fixed seed (the same random numbers at every evaluation, in every arm), on "
        f"{EVAL_PROMPTS} fixed prompts drawn with another seed than the training prompts (the tasks' prompt spaces "
        "are small, so they overlap with training prompts); the greedy reward is in the JSON too (it moves in jumps), "
        f"at step 0 and every {max(1, options.steps // EVAL_POINTS)} steps "
        f"({max(1, options.steps // EVAL_POINTS) * GENERATION_BATCH} completions). Wall time: training only, "
        "evaluation excluded.",
        f"- Targets: **100%** = the best static arm's final mean eval reward; **{TARGET_FRACTION:.0%}** of it. "
        "'Completions (train s) to target': the first evaluation at which the seed-mean curve reaches it, and the "
        "mean training wall time there; then per seed: mean ± std of the completions over the seeds that reach it, "
        "and how many do.",
        "- Fluctuation: **train** = std of the per-step training reward (mean over the round's 16 completions) over "
        f"the last {FLUCTUATION_TAIL:.0%} of the steps; **eval** = std of the change in eval reward between "
        "consecutive evaluations. At a fixed generation batch a G 16 step holds one prompt, so the training-reward "
        "fluctuation grows with G by construction; the eval one does not.",
        "- Zero-std frac: mean over steps of TRL's `frac_reward_zero_std`: the share of the round's completions "
        "whose group's rewards are all equal (no advantage, no gradient); for per-prompt rounds, of the real groups "
        "of mixed sizes.",
        "- ± is the std across seeds throughout.",
        f"- Wall time of this invocation: {wall:.0f} s. Estimated full study ({full_seeds} seeds x {full_steps} "
        f"steps, same tasks and arms, scaled from this invocation's per-step timings): {estimate / 60:.1f} min"
        + (" (not run)." if options.quick else "."),
        "",
    ]  # fmt: skip
    lines += [
        "## The regime after the warm start",
        "",
        f"Per-prompt success on the {EVAL_PROMPTS} eval prompts, {SPREAD_SAMPLES} samples a prompt at temperature "
        f"{STATIC_TEMPERATURE:g} (success: reward >= 0.5); all-0 / all-1 / mixed: fraction of prompts with no, only, "
        f"some successes; equal rewards: fraction of prompts whose {SPREAD_SAMPLES} rewards are all equal (a "
        f"zero-std group at G {SPREAD_SAMPLES}).",
        "",
        "| task | seed | mean reward | mean success | all-0 | all-1 | mixed | equal rewards |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {d['task']} | {d['seed']} | {d['mean_reward']:.3f} | {d['mean_success']:.3f} | {d['all_0']:.2f} | "
          f"{d['all_1']:.2f} | {d['mixed']:.2f} | {d['equal_rewards']:.2f} |" for d in spreads),
        "",
        "## Target",
        "",
        f"An adaptive arm reaches the best static arm's final eval reward with at most {1 - GOAL_SAVING:.1f}x its "
        f"completions (moonshot {1 - MOONSHOT_SAVING:.1f}x), as the median over seeds of the paired per-seed ratio "
        "(per seed: completions the arm needs to first reach that seed's best-static final reward, over the "
        "completions the best static arm itself needed to first reach it; `never`: not within the run), with a "
        f"zero-std completion share at most {ZERO_STD_TARGET:g}x the best static arm's, on every task. The ratio on "
        "the seed-mean curves is shown too. Arms meeting it: "
        + ("; ".join(f"`{t}`: " + (", ".join(f"`{a}`" for a, x in v["arms"].items() if x["met"]) or "none")
                     for t, v in verdicts.items())) + ".",
        "",
    ]  # fmt: skip
    for task in tasks:
        lines += [f"## `{task}`: target {'met' if verdicts[task]['met'] else 'not met'}", "",
                  task_table(task, summaries[task]), "", f"![{task}](sample_efficiency{suffix}_{task}.png)", "",
                  "Measured facts behind the verdict:", "", *explain(task, summaries[task], verdicts[task]),
                  ""]  # fmt: skip
    lines += ["## Reading", "", *reading(summaries, verdicts, mode, options), ""]
    return "\n".join(lines)


def reading(summaries: dict, verdicts: dict, mode: str, options) -> list[str]:
    """The verdicts in words, from this run's numbers only."""
    out = []
    for task, v in verdicts.items():
        rows, best = summaries[task]["rows"], v["best_static"]
        for arm, a in v["arms"].items():
            (ma, sa), (mb, sb) = rows[arm]["final"], rows[best]["final"]
            noise = ("final rewards within one std across seeds" if abs(ma - mb) <= max(sa, sb) else
                     f"final rewards {ma - mb:+.3f} apart, more than one std across seeds")  # fmt: skip
            head = "no verdict (the warm start already scores the target)" if v["degenerate"] else (
                "**target met**" + (" (moonshot too)" if a["moonshot"] else "") if a["met"] else "**target not met**")
            out.append(f"- `{task}`, `{arm}` vs `{best}`: {head}: paired per-seed ratio {fmt_ratios(a['seed_ratios'])}"
                       f", zero-std share {a['zero_std_ratio']:.2f}x; mean G {rows[arm]['mean_G'][0]:.1f} vs "
                       f"{rows[best]['mean_G'][0]:.0f}; {noise}.")  # fmt: skip
    if options.quick:
        out += ["", "This quick run has 2 seeds and a short run: read it as a smoke test of the study, not as its "
                    "result."]  # fmt: skip
    return out


# --- main ------------------------------------------------------------------------------------------------------------


def report(raw: dict, out: Path) -> str:
    """Tables, plots and the Markdown file from the raw results of an invocation; returns the Markdown."""
    options = argparse.Namespace(**raw["options"])
    suffix = "_quick" if options.quick else ""
    summaries, verdicts = {}, {}
    for task in options.tasks:
        task_runs = {arm: [r for r in raw["runs"] if r["task"] == task and r["arm"] == arm] for arm in options.arms}
        summaries[task] = summarise(task_runs)
        verdicts[task] = goal_verdict(summaries[task], task_runs)
        plot_task(task, summaries[task], out / f"sample_efficiency{suffix}_{task}.png",
                  f"{task}, {raw['mode']}: {len(options.seed_list)} seeds x {options.steps} steps")  # fmt: skip
    full_seeds, full_steps = MODES["full"]
    text = markdown(raw["mode"], options, summaries, verdicts, raw["wall_time_s"], raw["full_estimate_s"], full_seeds,
                    full_steps, raw["command"], raw["spread"])  # fmt: skip
    (out / f"sample_efficiency{suffix}.md").write_text(text)
    return text


def merge(raws: list[dict]) -> dict:
    """One invocation's raw results from several (same mode, seeds, steps and arms; different tasks)."""
    first = raws[0]
    for raw in raws[1:]:
        for key in ("seed_list", "steps", "arms", "quick"):
            if raw["options"][key] != first["options"][key]:
                raise SystemExit(f"cannot merge runs with different `{key}`")
    tasks = [task for raw in raws for task in raw["options"]["tasks"]]
    options = first["options"]
    mode = "quick" if options["quick"] else "full"
    if ((options["seeds"], options["steps"]) != MODES[mode] or options["arms"] != ARMS
            or sorted(tasks) != sorted(DEFAULT_TASKS)):  # fmt: skip
        mode += ", custom"
    return {**first, "mode": mode, "options": {**options, "tasks": tasks},
            "command": " && ".join(raw["command"] for raw in raws),
            "wall_time_s": max(raw["wall_time_s"] for raw in raws),
            "full_estimate_s": sum(raw["full_estimate_s"] for raw in raws),
            "warm_start_s": [t for raw in raws for t in raw["warm_start_s"]],
            "spread": [d for raw in raws for d in raw["spread"]], "runs": [r for raw in raws for r in raw["runs"]]}


def main(argv=None) -> int:
    global LEARNING_RATE, WARM_START_STEPS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"(seeds, steps) {MODES['quick']} instead of {MODES['full']}")  # fmt: skip
    parser.add_argument("--seeds", type=int, help="number of seeds (seeds 0, 1, ...)")
    parser.add_argument("--steps", type=int,
                        help=f"optimizer steps per run (completions = steps x {GENERATION_BATCH})")  # fmt: skip
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS, choices=list(BENCHMARK_TASKS))
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=ARMS)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--warm-start-steps", type=int, default=WARM_START_STEPS)
    options, out = parse_with_output(parser, argv, "sample_efficiency")
    if options.from_json:
        raw = merge([json.loads(Path(path).read_text()) for path in options.from_json])
        if len(options.from_json) > 1:  # keep the merged raw numbers next to the report
            suffix = "_quick" if raw["options"]["quick"] else ""
            (out / f"sample_efficiency{suffix}.json").write_text(json.dumps(raw, separators=(",", ":")))
        print(report(raw, out))
        return 0

    mode = "quick" if options.quick else "full"
    default_seeds, default_steps = MODES[mode]
    options.seeds = options.seeds or default_seeds
    options.steps = options.steps or default_steps
    options.seed_list = list(range(options.seeds))
    if options.steps < EVAL_POINTS:
        parser.error(f"--steps must be at least {EVAL_POINTS}")
    custom = ((options.seeds, options.steps) != (default_seeds, default_steps) or options.arms != ARMS
              or options.tasks != DEFAULT_TASKS or options.learning_rate != LEARNING_RATE
              or options.warm_start_steps != WARM_START_STEPS)  # fmt: skip
    mode += ", custom" if custom else ""
    LEARNING_RATE, WARM_START_STEPS = options.learning_rate, options.warm_start_steps
    hf_logging.set_verbosity_error()
    suffix = "_quick" if options.quick else ""

    print(f"mode {mode}: tasks {options.tasks}, arms {options.arms}, seeds {options.seed_list}, {options.steps} steps "
          f"x {GENERATION_BATCH} = {options.steps * GENERATION_BATCH} completions per arm; torch threads "
          f"{torch.get_num_threads()}", flush=True)  # fmt: skip
    start = time.perf_counter()
    runs, warm_times, spreads = [], [], []
    for task in options.tasks:
        for seed in options.seed_list:
            t0 = time.perf_counter()
            warm = warm_model(task, seed)
            warm_times.append(time.perf_counter() - t0)
            spreads.append({"task": task, "seed": seed, **success_spread(task, warm)})
            for arm in options.arms:
                run = run_arm(task, arm, seed, options.steps, warm)
                runs.append(run)
                print(f"  {task} seed {seed} {arm:>13}: final eval {run['eval'][-1]['reward']:.3f}, mean G "
                      f"{statistics.fmean(run['G']):.1f}, train {run['train_time']:.1f} s "
                      f"({run['train_time'] / run['steps'] * 1e3:.0f} ms/step), run {run['run_time']:.1f} s",
                      flush=True)  # fmt: skip
    wall = time.perf_counter() - start
    full_seeds, full_steps = MODES["full"]
    estimate = estimate_full(runs, warm_times, full_seeds, full_steps)
    command = "python benchmarks/sample_efficiency.py " + " ".join(sys.argv[1:] if argv is None else argv)
    raw = {"mode": mode, "command": command.strip(), "generation_batch": GENERATION_BATCH,
           "options": {k: v for k, v in vars(options).items() if k != "from_json"},
           "wall_time_s": wall, "warm_start_s": warm_times, "full_estimate_s": estimate, "spread": spreads,
           "runs": runs}  # fmt: skip
    (out / f"sample_efficiency{suffix}.json").write_text(json.dumps(raw, separators=(",", ":")))
    text = report(raw, out)
    print()
    print(text)
    print(f"wall time {wall:.0f} s; estimated full study ({full_seeds} seeds x {full_steps} steps, scaled from this "
          f"run's per-step timings): {estimate / 60:.1f} min")  # fmt: skip
    print(f"wrote {out / f'sample_efficiency{suffix}.md'}, {out / f'sample_efficiency{suffix}.json'} and "
          + ", ".join(str(out / f"sample_efficiency{suffix}_{t}.png") for t in options.tasks))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
