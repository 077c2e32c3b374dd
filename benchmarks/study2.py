"""
The second study (issue 25): an instrument with power. Generation batch `GENERATION_BATCH` (128: 16-64 prompts a
round, so the per-prompt knapsack and top-up have choices), candidates (2, 4, 8, 16), three tasks of different
difficulty profiles (one with a noisy reward), `REPORTED` reported seeds a task and `TUNING` separate tuning seeds on
which the reference static G and every rule's knobs are chosen, paired statistics, and its own reproducibility check
(two halves of the reported seeds).

It reuses `benchmarks/study.py` (tasks, warm start, exact evaluation, the probe, one arm's run) and
`benchmarks/study_stats.py` (paired ratios, bootstrap, AUC); what is new here is the geometry, the tuning phase, the
halves check and `verdict.json`.

Tasks (`TASKS`; both the `prefix_levels` prompts of `study.py`, `"echo k : w1 w2 w3 w4 ="`, answer the first k words
then `<eos>`, exact reward; warm start until level 2's exact success at the training temperature reaches 0.4):

- `prefix_levels`: levels k = 1-4 in equal shares: a moving frontier (level k+1 becomes solvable after level k);
- `prefix_tail`: levels drawn 1 : 1 : 3 : 5, so 80% of the prompts are levels 3-4, hard but solvable after the warm
  start (a long tail of hard prompts, the regime where Knapsack RL and GRESO report their gains).
- `prefix_noisy`: `prefix_levels` (the same prompts and warm start a seed) with every training reward flipped with
  probability 0.1 (`REWARD_FLIP`): a noisy reward, so an all-equal group is rarer and a mixed one can be noise; the
  exact evaluation stays noise-free.

Phases. `tune`: on the tuning seeds, every arm of `ARMS` (each static G and each rule variant). The reference of a task
is the static arm with the largest mean AUC on its tuning seeds; for each adaptive mode (`per_prompt`, `top_up`,
`dynamic`) the variant with the largest mean AUC on them. `report`: on the reported seeds, the reference and the chosen
variant of each mode (plus `EXTRA_REPORTED`, the other static arms, for the mechanism and the static choice).

Metrics (paired per reported seed against the reference): AUC difference (mean exact reward over the budget of
completions *generated*), median and bootstrap 90% CI; completions to 90% of the reference's gain over the warm start,
over the reference's own (median, CI; `never` counts as the largest, null in JSON when the median is `never`).
Secondary: rise in seed-stds (mean gain over the std of the gains), worst seed's final, seeds that stall (gain below a
quarter of the reference's median gain on that task) and seeds ending below their start, training wall time, the
informative share, where the completions went (share, mean G and informative share by exact-success bin of the trained
prompt at the training temperature).

Halves: the reported seeds in order, first half and second half. In each half, the verdict of an arm is the sign of its
median AUC difference when the half's CI excludes 0, else 0; the best arm is the one with the largest median AUC
difference (the reference counts 0). An arm's `halves_agree` is true when both halves give the same verdict; the
whole-set verdict of an arm whose halves disagree is printed "undecided", and so is the best arm when the halves name
different ones.

    python benchmarks/study2.py --jobs 2 --out /work/study-out    # tune, then report; resumable
    python benchmarks/study2.py --report-only --out /work/study-out  # the report from the finished runs

Every run's record is written to `OUT/runs/TASK__SEED__ARM.json` as it finishes; a rerun skips those that exist (the
warm start of a (task, seed) is recomputed: it is deterministic). The report goes to `OUT/study2.md`,
`OUT/study2.json` (every run), `OUT/verdict.json` and one plot a task; `--results` copies the three reports to
`benchmarks/results/`.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import argparse
import json
import math
import multiprocessing
import shutil
import statistics
import sys
import time
import warnings
from pathlib import Path

import study  # benchmarks/study.py
from common import RESULTS, fmt_ms, mean_std  # benchmarks/common.py
from study_stats import area_under, bootstrap_interval, first_reaching, median, paired_ratio

GENERATION_BATCH = 128
CANDIDATES = study.CANDIDATES  # (2, 4, 8, 16)
LEARNING_RATE = 1e-3  # chosen on tuning seeds 100, 101 (docs/study.md): every static arm and rule rose at it
STEPS = 48  # budget: STEPS x GENERATION_BATCH generated completions a run
POINTS = 16  # evaluations after step 0
REPORTED = 12
TUNING = 6
TUNING_SEED_BASE = study.TUNING_SEED_BASE  # tuning seeds 100, ..., 105
STALL_SHARE = 0.25  # a seed stalls when its gain is below this share of the reference's median gain on the task
TASKS = {
    "prefix_levels": study.TASKS["prefix_levels"],
    "prefix_tail": ("repeat the first k = 1-4 of 4 words exactly, then <eos>; levels 1:1:3:5 (80% are levels 3-4, "
                    "hard after the warm start)", (1, 1, 3, 5), (8, 8, 1, 1), 300),
    "prefix_noisy": ("prefix_levels with every training reward flipped with probability 0.1 (the exact evaluation "
                     "is noise-free)", (1, 1, 1, 1), (8, 8, 1, 1), 300),
}  # fmt: skip
REWARD_FLIP = {"prefix_noisy": 0.1}  # a task's training rewards are flipped with this probability
MODES = {  # mode: its variants (arm names), the first one the library's default
    "static": [f"static_g{g}" for g in CANDIDATES],
    "per_prompt": ["per_prompt", "per_prompt_variance", "per_prompt_nodefer", "per_prompt_stream",
                   "per_prompt_stream_uniform", "per_prompt_stream_hard"],
    "top_up": ["top_up", "top_up_p16"],
    "dynamic": ["dynamic_g4", "dynamic_g8", "dynamic_g16", "dynamic_g4_r2", "dynamic_g8_r2"],
    # coarse to fine comparisons (issue 29) at the G of the reference static arm the tuning seeds chose (16)
    "comparison": ["comparison_extremes_g16", "comparison_margin_g16"],
}
ARMS = [arm for arms in MODES.values() for arm in arms]
EXTRA_REPORTED: list[str] = []  # more arms to run on the reported seeds (`--extra`)


def mode_of(arm: str) -> str:
    return next(mode for mode, arms in MODES.items() if arm in arms)


def arm_stages(arm: str):
    """The stages of an arm of this study (the rule variants of `MODES`)."""
    from grpo_curriculum import Adaptive, DynamicSampling, Stage

    t = study.TEMPERATURE
    if arm.startswith("static_g"):
        return [Stage(num_generations=int(arm.removeprefix("static_g")), temperature=t)]
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
                      dynamic_sampling=DynamicSampling(max_rounds=int(rounds or study.DYNAMIC_ROUNDS),
                                                       on_limit="mask"))]  # fmt: skip
    if arm == "comparison_extremes_g16":  # only the best and worst of each group for the first half, then all
        return [Stage(num_generations=16, temperature=t, name="extremes", until_fraction=0.5,
                      comparison={"mode": "extremes"}),
                Stage(num_generations=16, temperature=t, name="all")]  # fmt: skip
    if arm == "comparison_margin_g16":  # completions >= 1 group std from the mean, the margin falling to 0
        return [Stage(num_generations=16, temperature=t, name=arm,
                      comparison={"mode": "margin", "margin": 1.0, "margin_end": 0.0})]  # fmt: skip
    raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")


# --- runs ------------------------------------------------------------------------------------------------------------


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
    warm = study.warm_model(task, seed, spec=TASKS[task])
    warm_time = time.perf_counter() - t0
    done = []
    for arm in arms:
        run = study.run_arm(task, arm, seed, steps, points, warm, generation_batch=GENERATION_BATCH,
                            learning_rate=LEARNING_RATE, stages=arm_stages(arm),
                            reward_flip=REWARD_FLIP.get(task, 0.0))  # fmt: skip
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


# --- analysis --------------------------------------------------------------------------------------------------------


def auc(run: dict) -> float:
    xs, ys = study.curve(run)
    return area_under(xs, ys, run["budget"])


def choose(runs: list[dict], task: str, tuning: list[int]) -> dict[str, str]:
    """Per mode, the variant with the largest mean AUC on the tuning seeds (`static`: the reference)."""
    chosen = {}
    for mode, arms in MODES.items():
        scores = {}
        for arm in arms:
            values = [auc(r) for r in runs if r["task"] == task and r["arm"] == arm and r["seed"] in tuning]
            if len(values) == len(tuning):
                scores[arm] = statistics.fmean(values)
        if scores:
            chosen[mode] = max(scores, key=scores.get)
    return chosen


def _tuning_probe(runs: list[dict], task: str, arm: str, tuning: list[int]) -> dict:
    """An arm's mechanism on a task's tuning seeds: mean G, mean G on rare-success prompts, deferrals, informative."""
    rs = [r for r in runs if r["task"] == task and r["arm"] == arm and r["seed"] in tuning]
    bins = [[sum(r["probe"]["bins"][i][k] for r in rs) for k in range(3)] for i in range(len(study.SUCCESS_BINS) - 1)]
    groups, completions = sum(b[0] for b in bins), sum(b[1] for b in bins)
    rare = [sum(b[k] for b in bins[:2]) for k in range(2)]  # exact success <= 0.2 when trained
    return {"mean_G": completions / groups if groups else math.nan,
            "rare_G": rare[1] / rare[0] if rare[0] else math.nan, "deferred": sum(r.get("deferred", 0) for r in rs),
            "informative": statistics.fmean(r["probe"]["informative"] / max(1, r["probe"]["completions"])
                                            for r in rs) if rs else math.nan}  # fmt: skip


def meets_rule(runs: list[dict], task: str, arm: str, tuning: list[int]) -> bool:
    """
    Issue 25's rule of an arm's mode, on a task's tuning seeds (see [`rule_checks`] for the reported seeds):
    per-prompt gives rare-success prompts at least its mean G and defers none; top-up's informative share is above
    the static G of its mean G (the same budget). Other modes have no rule (true).
    """
    mode, probe = mode_of(arm), _tuning_probe(runs, task, arm, tuning)
    if mode == "per_prompt":
        return probe["deferred"] == 0 and probe["rare_G"] >= probe["mean_G"]
    if mode == "top_up":
        static = f"static_g{min(CANDIDATES, key=lambda c: abs(c - probe['mean_G']))}"
        return probe["informative"] > _tuning_probe(runs, task, static, tuning)["informative"]
    return True


def defaults(runs: list[dict], tasks: list[str], tuning: list[int]) -> dict[str, str]:
    """
    Per adaptive mode, the one default the library ships, chosen on the tuning seeds only: among the variants that
    meet the mode's rule on every task ([`meets_rule`]; all of them when none does), the one with the largest AUC
    difference to each task's reference (its tuning seeds' mean AUC minus the reference's), averaged over the tasks.
    A variant missing a tuning seed of some task is not a candidate.
    """
    per_task = {}
    for task in tasks:
        chosen = choose(runs, task, tuning)
        if "static" not in chosen:
            continue
        means = {arm: statistics.fmean(v["auc"]) for arm, v in tuning_table(runs, task, tuning).items()
                 if len(v["auc"]) == len(tuning)}  # fmt: skip
        per_task[task] = {arm: m - means[chosen["static"]] for arm, m in means.items()}
    out = {}
    for mode, arms in MODES.items():
        if mode == "static":
            continue
        scores = {a: statistics.fmean(d[a] for d in per_task.values()) for a in arms
                  if per_task and all(a in d for d in per_task.values())}  # fmt: skip
        ruled = {a: v for a, v in scores.items() if all(meets_rule(runs, t, a, tuning) for t in per_task)}
        scores = ruled or scores
        if scores:
            out[mode] = max(scores, key=scores.get)
    return out


def tuning_table(runs: list[dict], task: str, tuning: list[int]) -> dict[str, dict]:
    out = {}
    for arm in ARMS:
        rs = [r for r in runs if r["task"] == task and r["arm"] == arm and r["seed"] in tuning]
        if rs:
            out[arm] = {"auc": [auc(r) for r in rs], "final": [r["eval"][-1]["exact"] for r in rs],
                        "start": [r["eval"][0]["exact"] for r in rs],
                        "informative": [r["probe"]["informative"] / max(1, r["probe"]["completions"]) for r in rs]}
    return out


def verdict_sign(values: list[float]) -> int:
    """+1 / -1 when the bootstrap 90% CI of the median excludes 0 above / below, else 0."""
    lo, hi = bootstrap_interval(values)
    return 1 if lo > 0 else -1 if hi < 0 else 0


def finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def arm_row(by: dict, arm: str, reference: str, seeds: list[int]) -> dict:
    row = {k: [] for k in ("auc_diff", "ratio90", "start", "final", "gain", "informative", "train_time", "steps",
                           "generated", "mean_G", "deferred")}  # fmt: skip
    bins = [[0, 0, 0] for _ in study.SUCCESS_BINS[1:]]
    for seed in seeds:
        run, ref = by[(arm, seed)], by[(reference, seed)]
        (xs, ys), (rx, ry) = study.curve(run), study.curve(ref)
        target = ry[0] + 0.9 * (ry[-1] - ry[0])
        row["ratio90"].append(paired_ratio(first_reaching(xs, ys, target), first_reaching(rx, ry, target)))
        row["auc_diff"].append(area_under(xs, ys, run["budget"]) - area_under(rx, ry, ref["budget"]))
        row["start"].append(ys[0])
        row["final"].append(ys[-1])
        row["gain"].append(ys[-1] - ys[0])
        probe = run["probe"]
        row["informative"].append(probe["informative"] / probe["completions"] if probe["completions"] else math.nan)
        groups = sum(b[0] for b in probe["bins"])
        row["mean_G"].append(probe["completions"] / groups if groups else math.nan)
        for total, b in zip(bins, probe["bins"], strict=True):
            for i in range(3):
                total[i] += b[i]
        row["train_time"].append(run["train_time"])
        row["steps"].append(run["steps"])
        row["generated"].append(run["generated"])
        row["deferred"].append(run.get("deferred", 0))
    row["bins"] = bins
    total = sum(b[1] for b in bins) or 1
    rare = [sum(b[i] for b in bins[:2]) for i in range(3)]  # exact success <= 0.2 when trained
    row["rare_share"], row["rare_G"] = rare[1] / total, rare[1] / rare[0] if rare[0] else math.nan
    row["auc"] = [area_under(*study.curve(by[(arm, s)]), by[(arm, s)]["budget"]) for s in seeds]
    gain, gain_std = mean_std(row["gain"])
    row["rise_seed_stds"] = gain / gain_std if gain_std else math.inf
    row["auc_diff_median"], row["auc_diff_ci"] = median(row["auc_diff"]), bootstrap_interval(row["auc_diff"])
    row["ratio90_median"], row["ratio90_ci"] = median(row["ratio90"]), bootstrap_interval(row["ratio90"])
    row["sign"] = verdict_sign(row["auc_diff"]) if arm != reference else 0
    return row


def summarise(runs: list[dict], task: str, tuning: list[int], reported: list[int],
              default: dict[str, str] | None = None) -> dict:  # fmt: skip
    """
    One task's report. `default`: per mode, the library's default variant ([`defaults`], chosen over every task);
    `None`: this task's own choice. The verdict's arms ("preregistered") are the reference and the defaults; the
    variants this task's tuning seeds chose, and the `EXTRA_REPORTED` arms, are reported beside them.
    """
    chosen = choose(runs, task, tuning)
    reference = chosen["static"]
    default = {m: a for m, a in chosen.items() if m != "static"} if default is None else default
    by = {(r["arm"], r["seed"]): r for r in runs if r["task"] == task}
    arms = [reference] + [default[m] for m in MODES if m in default]
    preregistered = list(arms)
    arms += [chosen[m] for m in MODES if m != "static" and m in chosen and chosen[m] not in arms]
    arms += [a for a in EXTRA_REPORTED if a not in arms]
    arms = [a for a in arms if all((a, s) in by for s in reported)]
    seeds = [s for s in reported if all((a, s) in by for a in arms)]
    rows = {arm: arm_row(by, arm, reference, seeds) for arm in arms}
    ref_gain = median(rows[reference]["gain"])
    for row in rows.values():
        row["stalled"] = [s for s, g in zip(seeds, row["gain"], strict=True) if g < STALL_SHARE * ref_gain]
        row["below_start"] = [s for s, g in zip(seeds, row["gain"], strict=True) if g < 0]
    half = len(seeds) // 2
    halves = [seeds[:half], seeds[half:]]
    half_rows = [{arm: arm_row(by, arm, reference, h) for arm in arms} for h in halves]
    for arm, row in rows.items():
        signs = [hr[arm]["sign"] for hr in half_rows]
        row["half_signs"] = signs
        row["halves_agree"] = signs[0] == signs[1]

    def best(rs: dict) -> str:
        return max(rs, key=lambda a: 0.0 if a == reference else rs[a]["auc_diff_median"])

    preregistered = [a for a in preregistered if a in arms]  # the reference and the defaults (that ran everywhere)
    best_halves = [best({a: hr[a] for a in preregistered}) for hr in half_rows]
    best_all_halves = [best(hr) for hr in half_rows]
    # Post hoc: against the static arm with the best mean AUC on the reported seeds themselves (favours static G;
    # a robustness check of the reference chosen on the tuning seeds, not the verdict)
    statics = [a for a in arms if a.startswith("static_g")]
    post = max(statics, key=lambda a: statistics.fmean(rows[a]["auc"]))
    post_rows = {a: arm_row(by, a, post, seeds) for a in arms if not a.startswith("static_g")}
    ref_informative = statistics.fmean(rows[reference]["informative"])
    for row in rows.values():
        row["informative_vs_reference"] = statistics.fmean(row["informative"]) / ref_informative
    return {"reference": reference, "chosen": chosen, "defaults": default, "seeds": seeds, "halves": halves,
            "rows": rows,
            "best": best({a: rows[a] for a in preregistered}), "best_halves": best_halves,
            "best_agree": best_halves[0] == best_halves[1], "preregistered": preregistered,
            "best_all": best(rows), "best_all_halves": best_all_halves, "post_hoc_reference": post,
            "post_rows": post_rows,
            "tuning": tuning_table(runs, task, tuning),
            "learns": all(r["rise_seed_stds"] >= study.RISE_SEED_STDS for r in rows.values())}  # fmt: skip


ADAPTIVE_MODES = ("per_prompt", "top_up", "dynamic")  # the product targets' modes (comparisons are a curriculum)
RATIO90_TARGET = 0.7  # the issue's: the best adaptive mode reaches 90% of the reference's gain in <= 0.7x


def rule_checks(s: dict) -> dict:
    """
    Issue 25's rules on one task (reported seeds). Per-prompt's default must not starve rare-success prompts: a
    static G gives every trained prompt the mean share of a round, so a rare-success prompt (exact success <= 0.2
    when trained) must get at least its arm's mean G, and no prompt may be skipped (deferred). The raw share of
    completions on those prompts is reported beside the reference's, but not judged: an arm that learns faster has
    fewer of them. Top-up's default must raise the informative share over the static G of its own mean G (the same
    budget), paired per seed, the 90% CI of the median difference above 0.
    """
    rows, out = s["rows"], {}
    per_prompt, top_up = s["defaults"].get("per_prompt"), s["defaults"].get("top_up")
    if per_prompt in rows:
        row, ref = rows[per_prompt], rows[s["reference"]]
        size, deferred = statistics.fmean(row["mean_G"]), math.fsum(row["deferred"])
        out["per_prompt_rare"] = {"arm": per_prompt, "share": row["rare_share"], "reference_share": ref["rare_share"],
                                  "mean_G_there": finite(row["rare_G"]), "mean_G": size, "deferred": deferred,
                                  "pass": deferred == 0 and row["rare_G"] >= size}  # fmt: skip
    if top_up in rows:
        row = rows[top_up]
        size = statistics.fmean(row["mean_G"])
        static = f"static_g{min(CANDIDATES, key=lambda c: abs(c - size))}"
        if static in rows:
            diffs = [a - b for a, b in zip(row["informative"], rows[static]["informative"], strict=True)]
            ci = bootstrap_interval(diffs)
            out["top_up_informative"] = {
                "arm": top_up, "static": static, "share": statistics.fmean(row["informative"]),
                "static_share": statistics.fmean(rows[static]["informative"]), "diff_median": median(diffs),
                "diff_ci": list(ci), "pass": ci[0] > 0}  # fmt: skip
    return out


def targets(summaries: dict) -> dict:
    """
    The issue's targets, measured. Instrument: every arm rises >= `RISE_SEED_STDS` seed-stds, and the verdicts of the
    reference and the defaults agree between the halves. Product (`ADAPTIVE_MODES`): on at least one task a default
    adaptive mode's AUC
    difference has its 90% CI above 0 (halves agreeing) and its median completions to 90% of the reference's gain <=
    `RATIO90_TARGET`; on no task is a default mode's CI entirely below 0.
    """
    tasks = {}
    for task, s in summaries.items():
        rows = s["rows"]
        modes = [a for a in s["preregistered"] if mode_of(a) in ADAPTIVE_MODES]
        tasks[task] = {
            "every_arm_rises": s["learns"],
            "halves_disagree": [a for a in s["preregistered"] if not rows[a]["halves_agree"]],
            "wins": [a for a in modes if rows[a]["auc_diff_ci"][0] > 0 and rows[a]["halves_agree"]
                     and rows[a]["ratio90_median"] <= RATIO90_TARGET],
            "auc_above_0": [a for a in modes if rows[a]["auc_diff_ci"][0] > 0 and rows[a]["halves_agree"]],
            "losses": [a for a in modes if rows[a]["auc_diff_ci"][1] < 0],
            **rule_checks(s)}  # fmt: skip
    return {"instrument_met": all(t["every_arm_rises"] and not t["halves_disagree"] for t in tasks.values()),
            "product_met": any(t["wins"] for t in tasks.values()) and not any(t["losses"] for t in tasks.values()),
            "tasks": tasks}  # fmt: skip


def targets_lines(t: dict, summaries: dict) -> list[str]:
    lines = ["## Targets (issue 25)", "",
             f"- Instrument (every arm rises >= {study.RISE_SEED_STDS:g} seed-stds; the reference's and the defaults' "
             f"verdicts agree between the halves): **{'met' if t['instrument_met'] else 'missed'}**.",
             f"- Product (on some task a default adaptive mode's AUC CI above 0 and its median completions to 90% of "
             f"the reference's gain <= {RATIO90_TARGET:g}x; on no task a default adaptive mode's CI below 0): "
             f"**{'met' if t['product_met'] else 'missed'}**.", ""]  # fmt: skip
    for task, tt in t["tasks"].items():
        rows = summaries[task]["rows"]
        parts = [f"rises: {'yes' if tt['every_arm_rises'] else 'NO'}",
                 "halves disagree: " + (", ".join(f"`{a}`" for a in tt["halves_disagree"]) or "none"),
                 "AUC CI above 0: " + (", ".join(
                     f"`{a}` (to 90%: {fmt_x(rows[a]['ratio90_median'])})" for a in tt["auc_above_0"]) or "none"),
                 "CI below 0: " + (", ".join(f"`{a}`" for a in tt["losses"]) or "none")]  # fmt: skip
        if "per_prompt_rare" in tt:
            r = tt["per_prompt_rare"]
            parts.append(f"`{r['arm']}` on prompts of success <= 0.2: G {fmt_r(r['mean_G_there'] or math.nan)} vs "
                         f"its mean {r['mean_G']:.2f}, {r['deferred']:.0f} prompts deferred: "
                         f"{'not starved' if r['pass'] else 'STARVED'} (their share of its completions "
                         f"{r['share']:.1%}, the reference's {r['reference_share']:.1%})")  # fmt: skip
        if "top_up_informative" in tt:
            r = tt["top_up_informative"]
            parts.append(f"`{r['arm']}` informative share {r['share']:.2f} vs `{r['static']}` {r['static_share']:.2f}"
                         f" (same budget), paired median {r['diff_median']:+.3f} [{r['diff_ci'][0]:+.3f}, "
                         f"{r['diff_ci'][1]:+.3f}]: {'raised' if r['pass'] else 'NOT raised'}")  # fmt: skip
        lines.append(f"- `{task}`: " + "; ".join(parts) + ".")
    return lines + [""]


def verdict_table(summaries: dict) -> list[str]:
    """The short table (the README's): per task, each default mode against the reference, and post hoc."""
    lines = ["| task | reference | mode | verdict | AUC - ref: median [90% CI] | to 90% of ref's gain | halves agree "
             "| AUC - best static on the reported seeds (post hoc) |", "|" + "---|" * 8]  # fmt: skip
    for task, s in summaries.items():
        for arm in s["preregistered"][1:]:
            row, post = s["rows"][arm], s["post_rows"].get(arm)
            ci = row["auc_diff_ci"]
            hoc = (f"{post['auc_diff_median']:+.3f} [{post['auc_diff_ci'][0]:+.3f}, {post['auc_diff_ci'][1]:+.3f}] "
                   f"(`{s['post_hoc_reference']}`)" if post else "")  # fmt: skip
            lines.append(f"| {task} | `{s['reference']}` | {mode_of(arm)} `{arm}` | "
                         f"{verdict_word(row, False)} | {row['auc_diff_median']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] | "
                         f"{fmt_x(row['ratio90_median'])} | {'yes' if row['halves_agree'] else '**no**'} | {hoc} |")
    return lines + [""]


def verdict_json(summaries: dict, command: str, tuning: list[int], extra: dict) -> dict:
    tasks = {}
    for task, s in summaries.items():
        arms = {}
        for arm, row in s["rows"].items():
            post = s["post_rows"].get(arm)
            role = ("reference" if arm == s["reference"] else "default" if arm in s["preregistered"]
                    else "tuned on this task" if arm in s["chosen"].values() else "extra")  # fmt: skip
            arms[arm] = {"mode": mode_of(arm), "role": role, "rise_seed_stds": finite(row["rise_seed_stds"]),
                         "auc_diff_median": row["auc_diff_median"], "auc_diff_ci": list(row["auc_diff_ci"]),
                         "ratio90_median": finite(row["ratio90_median"]),
                         "ratio90_ci": [finite(v) for v in row["ratio90_ci"]], "halves_agree": row["halves_agree"],
                         "verdict": verdict_word(row, arm == s["reference"]),
                         "final_mean": statistics.fmean(row["final"]), "worst_final": min(row["final"]),
                         "stalled_seeds": row["stalled"], "below_start_seeds": row["below_start"],
                         "informative_share": statistics.fmean(row["informative"]),
                         "informative_vs_reference": row["informative_vs_reference"],
                         "auc_mean": statistics.fmean(row["auc"]), "auc_seed_std": mean_std(row["auc"])[1],
                         "final_seed_std": mean_std(row["final"])[1],
                         "completions_share_success_le_0.2": row["rare_share"],
                         "mean_G_success_le_0.2": finite(row["rare_G"]),
                         **({f"post_hoc_vs_{s['post_hoc_reference']}": {
                             "auc_diff_median": post["auc_diff_median"], "auc_diff_ci": list(post["auc_diff_ci"]),
                             "ratio90_median": finite(post["ratio90_median"]),
                             "ratio90_ci": [finite(v) for v in post["ratio90_ci"]]}} if post else {}),
                         "train_time_s_mean": statistics.fmean(row["train_time"])}  # fmt: skip
        tasks[task] = {"generation_batch": GENERATION_BATCH, "reported_seeds": s["seeds"], "tuning_seeds": tuning,
                       "reference": s["reference"], "chosen_variants": s["chosen"], "defaults": s["defaults"],
                       "final_seed_std_smallest": min(s["rows"], key=lambda a: mean_std(s["rows"][a]["final"])[1]),
                       "best_arm": s["best"] if s["best_agree"] else "undecided", "best_arm_halves": s["best_halves"],
                       "best_arm_with_extras": s["best_all"] if s["best_all_halves"][0] == s["best_all_halves"][1]
                       else "undecided", "best_arm_with_extras_halves": s["best_all_halves"],
                       "post_hoc_reference": s["post_hoc_reference"],
                       "arms": arms}  # fmt: skip
    return {"command": command, **extra, "targets": targets(summaries), "tasks": tasks}


def verdict_word(row: dict, is_reference: bool) -> str:
    if is_reference:
        return "reference"
    if not row["halves_agree"]:
        return "undecided"
    return {1: "better", -1: "worse", 0: "no difference shown"}[row["sign"]]


def fmt_r(v: float) -> str:
    return "never" if math.isinf(v) else "n/a" if math.isnan(v) else f"{v:.2f}"


def fmt_x(v: float) -> str:
    return fmt_r(v) + ("x" if math.isfinite(v) else "")


def fmt_bins(bins: list[list[int]]) -> str:
    total = sum(b[1] for b in bins) or 1
    edges = zip(study.SUCCESS_BINS, study.SUCCESS_BINS[1:])
    return "; ".join(f"{lo:g}-{hi:g}: {b[1] / total:.0%} G {b[1] / b[0]:.1f} inf. {b[2] / b[1]:.0%}"
                     for (lo, hi), b in zip(edges, bins, strict=True) if b[0])  # fmt: skip


def markdown(summaries: dict, meta: dict) -> str:
    lines = [f"# Study 2 (issue 25): generation batch {GENERATION_BATCH}, candidates {list(CANDIDATES)}", "",
             f"Generated by `{meta['command']}`. Budget {meta['budget']} generated completions a run ({STEPS} steps "
             f"of {GENERATION_BATCH}), {POINTS} evaluations after step 0, learning rate {LEARNING_RATE:g}, "
             f"temperature {study.TEMPERATURE:g}; tuning seeds {meta['tuning']}, reported seeds {meta['reported']}. "
             f"Runs on disk: {meta['runs']}; summed run time {meta['run_time_s'] / 60:.1f} min (training, evaluation "
             "and warm starts, one torch thread a process).", "",
             "Exact reward: mean over 256 held-out prompts of the teacher-forced probability of the exact answer at "
             f"temperature {study.EVAL_TEMPERATURE:g}. AUC: mean exact reward over the budget of completions "
             "generated. Paired per seed against the reference (the static G with the best mean AUC on the tuning "
             "seeds); CI: bootstrap 90% over seeds. Verdict: sign of the AUC difference where its CI excludes 0, "
             "`undecided` when the two halves of the reported seeds disagree. ± is the std over seeds.",
             ""]  # fmt: skip
    if summaries:
        default = next(iter(summaries.values()))["defaults"]
        lines += [f"Defaults (one a mode, chosen on the tuning seeds of every task: the largest AUC difference to the "
                  "task's reference, averaged over the tasks): " + ", ".join(f"{m} `{a}`" for m, a in default.items())
                  + ". The verdict is about these; the variants a task's own tuning seeds chose are reported beside "
                  "them. A per-prompt or top-up default must first meet its mode's rule on the tuning seeds of every "
                  "task (per-prompt: rare-success prompts get at least its mean G, none deferred; top-up: an "
                  "informative share above the static G of its mean G); when no variant does, the AUC alone "
                  "decides. Met on the tuning seeds: " + "; ".join(
                      f"`{arm}` " + ", ".join(f"{t} {'yes' if ok else 'no'}" for t, ok in by.items())
                      for arm, by in meta.get("rules", {}).items()) + ".", ""]  # fmt: skip
        lines += targets_lines(targets(summaries), summaries)
        lines += verdict_table(summaries)
    for task, s in summaries.items():
        lines += [f"## `{task}`: {TASKS[task][0]}", "",
                  f"Chosen on this task's tuning seeds (mean AUC): reference `{s['reference']}`; "
                  + ", ".join(f"{m} `{a}`" for m, a in s["chosen"].items() if m != "static") + ".", "",
                  "Tuning seeds, every arm (mean AUC, start -> final, informative share):", ""]  # fmt: skip
        for arm, t in s["tuning"].items():
            lines.append(f"- `{arm}`: AUC {fmt_ms(mean_std(t['auc']))}, {statistics.fmean(t['start']):.3f} -> "
                         f"{fmt_ms(mean_std(t['final']))}, informative {statistics.fmean(t['informative']):.2f}")
        lines += ["", f"Reported seeds {s['seeds']} (halves {s['halves'][0]} / {s['halves'][1]}):", "",
                  "| arm | verdict | AUC - ref: median [90% CI] | halves (sign) | to 90% of ref's gain: median "
                  "[90% CI] | AUC | start -> final | worst final | rise (seed-stds) | stalled / below start | "
                  "informative share (x ref) | completions on success <= 0.2 (G there) | mean G | train s a run |",
                  "|" + "---|" * 14]  # fmt: skip
        for arm, row in s["rows"].items():
            ci, rci = row["auc_diff_ci"], row["ratio90_ci"]
            lines.append(
                f"| `{arm}` | {verdict_word(row, arm == s['reference'])} | {row['auc_diff_median']:+.4f} "
                f"[{ci[0]:+.4f}, {ci[1]:+.4f}] | {row['half_signs'][0]:+d} / {row['half_signs'][1]:+d} | "
                f"{fmt_r(row['ratio90_median'])} [{fmt_r(rci[0])}, {fmt_r(rci[1])}] | "
                f"{fmt_ms(mean_std(row['auc']), 4)} | "
                f"{statistics.fmean(row['start']):.3f} -> {fmt_ms(mean_std(row['final']))} | "
                f"{min(row['final']):.3f} | "
                f"{row['rise_seed_stds']:.1f} | {len(row['stalled'])} / {len(row['below_start'])} | "
                f"{fmt_ms(mean_std(row['informative']), 2)} ({row['informative_vs_reference']:.2f}x) | "
                f"{row['rare_share']:.0%} ({row['rare_G']:.1f}) | {fmt_ms(mean_std(row['mean_G']), 1)} | "
                f"{fmt_ms(mean_std(row['train_time']), 1)} |")  # fmt: skip
        best = s["best"] if s["best_agree"] else "undecided"
        a, b = s["best_all_halves"]
        spread = min(s["rows"], key=lambda a: mean_std(s["rows"][a]["final"])[1])
        lines += ["", "Best arm among the reference and the defaults (largest median AUC difference): "
                  f"`{best}` (halves: {s['best_halves'][0]} / {s['best_halves'][1]}); with the extra arms: "
                  f"`{s['best_all'] if a == b else 'undecided'}` (halves: {a} / {b}).", "",
                  f"Post hoc, against `{s['post_hoc_reference']}`, the static arm with the best mean AUC on the "
                  "reported seeds themselves (favours static G; a check of the tuning-seed reference, not the "
                  "verdict): " + "; ".join(
                      f"`{arm}` AUC {r['auc_diff_median']:+.4f} "
                      f"[{r['auc_diff_ci'][0]:+.4f}, {r['auc_diff_ci'][1]:+.4f}], to 90% of its gain "
                      f"{fmt_r(r['ratio90_median'])} [{fmt_r(r['ratio90_ci'][0])}, "
                      f"{fmt_r(r['ratio90_ci'][1])}]" for arm, r in s["post_rows"].items()) + ".", "",
                  f"Smallest seed spread of the final exact reward: `{spread}` "
                  f"(± {mean_std(s['rows'][spread]['final'])[1]:.3f}; the reference's "
                  f"± {mean_std(s['rows'][s['reference']]['final'])[1]:.3f}).", "",
                  f"Every arm rises >= {study.RISE_SEED_STDS:g} seed-stds: "
                  f"{'yes' if s['learns'] else 'NO'}.", "",
                  "Where the completions went (reported seeds; exact success of the trained prompt at the training "
                  "temperature: share of the arm's completions, mean G, informative share):", ""]  # fmt: skip
        lines += [f"- `{arm}`: {fmt_bins(row['bins'])}" for arm, row in s["rows"].items()]
        lines += ["", f"![{task}](study2_{task}.png)", ""]
    return "\n".join(lines)


def plot(runs: list[dict], task: str, arms: list[str], seeds: list[int], path: Path) -> None:
    curves = {arm: [r for r in runs if r["task"] == task and r["arm"] == arm and r["seed"] in seeds] for arm in arms}
    study.plot_curves(curves, MODES["static"], f"{task}: mean over reported seeds {seeds[0]}-{seeds[-1]}", path)


def report(out: Path, tasks: list[str], tuning: list[int], reported: list[int], command: str,
           results: bool) -> str:  # fmt: skip
    from grpo_curriculum.training.checkpoint import atomic_write

    runs = [r for r in load_runs(out) if r["arm"] in ARMS]  # not the runs of arms the study no longer has
    summaries = {}
    done = [t for t in tasks if all(any(r["task"] == t and r["seed"] == s for r in runs) for s in reported)]
    default = defaults(runs, done, tuning)
    for task in done:
        summaries[task] = summarise(runs, task, tuning, reported, default)
        plot(runs, task, list(summaries[task]["rows"]), summaries[task]["seeds"], out / f"study2_{task}.png")
    rules = {arm: {t: meets_rule(runs, t, arm, tuning) for t in done} for mode in ("per_prompt", "top_up")
             for arm in MODES[mode]}  # fmt: skip
    meta = {"command": command, "budget": STEPS * GENERATION_BATCH, "tuning": tuning, "reported": reported,
            "rules": rules,
            "runs": len(runs), "run_time_s": math.fsum(r["run_time"] for r in runs)
            + math.fsum({(r["task"], r["seed"]): r["warm_time"] for r in runs}.values())}  # fmt: skip
    text = markdown(summaries, meta)
    verdict = verdict_json(summaries, command, tuning, {"budget": meta["budget"], "steps": STEPS, "points": POINTS,
                                                        "learning_rate": LEARNING_RATE,
                                                        "candidates": list(CANDIDATES)})  # fmt: skip
    atomic_write(out / "study2.md", lambda f: f.write(text))
    atomic_write(out / "verdict.json", lambda f: json.dump(verdict, f, indent=1))
    atomic_write(out / "study2.json", lambda f: json.dump({"command": command, "runs": runs}, f,
                                                          separators=(",", ":")))  # fmt: skip
    if results:
        for name in ["study2.md", "verdict.json", "study2.json", *(f"study2_{t}.png" for t in summaries)]:
            shutil.copyfile(out / name, RESULTS / name)
    return text


def main(argv=None) -> int:
    global STEPS, POINTS  # noqa: PLW0603  (the report's budget line)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/work/study-out", help="output folder (runs/ and the reports)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--reported", type=int, default=REPORTED, help="reported seeds 0, 1, ...")
    parser.add_argument("--tuning", type=int, default=TUNING, help=f"tuning seeds {TUNING_SEED_BASE}, ...")
    parser.add_argument("--extra", nargs="*", default=[], choices=ARMS, help="more arms on the reported seeds")
    parser.add_argument("--steps", type=int, default=48, help=f"budget in steps of {GENERATION_BATCH} completions")
    parser.add_argument("--points", type=int, default=16, help="evaluations after step 0")
    parser.add_argument("--jobs", type=int, default=2, help="processes in parallel (one torch thread each)")
    parser.add_argument("--report-only", action="store_true", help="no training: the report from the runs on disk")
    parser.add_argument("--results", action="store_true", help="copy the reports to benchmarks/results/")
    options = parser.parse_args(argv)
    STEPS, POINTS = options.steps, options.points
    out = Path(options.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    EXTRA_REPORTED[:] = options.extra
    tuning = [TUNING_SEED_BASE + i for i in range(options.tuning)]
    reported = list(range(options.reported))
    command = "python benchmarks/study2.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if not options.report_only:
        start = time.perf_counter()
        run_jobs([(out, task, seed, ARMS, STEPS, POINTS) for task in options.tasks for seed in tuning], options.jobs)
        runs = load_runs(out)
        arms, default = {}, defaults(runs, options.tasks, tuning)
        print(f"defaults chosen on tuning seeds {tuning} over {options.tasks}: {default}", flush=True)
        for task in options.tasks:
            chosen = choose(runs, task, tuning)
            print(f"{task}: chosen on tuning seeds {tuning}: {chosen}", flush=True)
            arms[task] = list(dict.fromkeys([*chosen.values(), *default.values(), *options.extra]))
        # seed-major: the tasks advance together, so a run cut short still has every task at the same seeds
        run_jobs([(out, task, seed, arms[task], STEPS, POINTS) for seed in reported for task in options.tasks],
                 options.jobs)  # fmt: skip
        print(f"wall time {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    print(report(out, options.tasks, tuning, reported, command.strip(), options.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
