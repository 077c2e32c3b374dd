"""
The study's report: `study2.md` (every table), `verdict.json` (the issue-25 schema) and one plot a task, from the
runs on disk (`OUT/runs/`); `results=True` copies them to `benchmarks/results/`.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from collections import Counter
from pathlib import Path

from common import RESULTS, fmt_ms, mean_std  # benchmarks/common.py

from .arms import ARMS, GENERATION_BATCH, LEARNING_RATE, MODES, load_runs, mode_of
from .stats import (KINDS, RATIO90_TARGET, RISE_SEED_STDS, SEEDS_NEEDED, curve, defaults, finite, meets_rule,
                    summarise, targets)
from .tasks import CANDIDATES, EVAL_TEMPERATURE, SUCCESS_BINS, TASKS, TEMPERATURE


def targets_lines(t: dict, summaries: dict) -> list[str]:
    lines = ["## Targets (issues 25 and 37)", "",
             f"- Instrument (every arm rises >= {RISE_SEED_STDS:g} seed-stds; the reference's and the defaults' "
             f"verdicts agree between the halves): **{'met' if t['instrument_met'] else 'missed'}**.",
             f"- Product (on some task a default adaptive mode's AUC CI above 0 and its median completions to 90% of "
             f"the reference's gain <= {RATIO90_TARGET:g}x; on no task a default adaptive mode's CI below 0): "
             f"**{'met' if t['product_met'] else 'missed'}**.",
             f"- The tuning seeds' reference is the reported seeds' best static G on "
             f"{t['reference_matches_post_hoc'][0]} of {t['reference_matches_post_hoc'][1]} tasks.", ""]  # fmt: skip
    for task, tt in t["tasks"].items():
        rows = summaries[task]["rows"]
        parts = [f"rises: {'yes' if tt['every_arm_rises'] else 'NO'}",
                 "halves disagree: " + (", ".join(f"`{a}`" for a in tt["halves_disagree"]) or "none"),
                 "AUC CI above 0: " + (", ".join(
                     f"`{a}` (to 90%: {fmt_x(rows[a]['ratio90_median'])})" for a in tt["auc_above_0"]) or "none"),
                 "CI below 0: " + (", ".join(f"`{a}`" for a in tt["losses"]) or "none"),
                 "against the post-hoc best static G, AUC CI above 0: " + (", ".join(
                     f"`{a}`" + (" (to 90% <= the target)" if a in tt["post_hoc_wins"] else "")
                     for a in tt["post_hoc_auc_above_0"]) or "none"),
                 "per-prompt default not below it (CI's upper end >= 0): "
                 + ("yes" if tt["per_prompt_not_below_post_hoc"] else "NO")]  # fmt: skip
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
                             "ratio90_ci": [finite(v) for v in post["ratio90_ci"]],
                             "auc_diff_mean": post["auc_diff_mean"], "auc_diff_mean_ci": list(post["auc_diff_mean_ci"]),
                             "seeds_needed": post.get("seeds_needed")}} if post else {}),
                         "auc_over_train_seconds_diff_median": finite(row["auc_time_diff_median"]),
                         "auc_over_train_seconds_diff_ci": [finite(v) for v in row["auc_time_diff_ci"]],
                         "success_histogram_end": row["hist_end"],
                         "completions_by_kind": s["kinds"].get(arm),
                         "train_time_s_mean": statistics.fmean(row["train_time"])}  # fmt: skip
        tasks[task] = {"generation_batch": GENERATION_BATCH, "reported_seeds": s["seeds"], "tuning_seeds": tuning,
                       "reference": s["reference"], "chosen_variants": s["chosen"], "defaults": s["defaults"],
                       "final_seed_std_smallest": min(s["rows"], key=lambda a: mean_std(s["rows"][a]["final"])[1]),
                       "best_arm": s["best"] if s["best_agree"] else "undecided", "best_arm_halves": s["best_halves"],
                       "best_arm_with_extras": s["best_all"] if s["best_all_halves"][0] == s["best_all_halves"][1]
                       else "undecided", "best_arm_with_extras_halves": s["best_all_halves"],
                       "post_hoc_reference": s["post_hoc_reference"],
                       "rloo_row": None if s["rloo"] is None else {
                           "arm": s["rloo"]["arm"], "reference": s["rloo"]["reference"],
                           "auc_diff_median": s["rloo"]["row"]["auc_diff_median"],
                           "auc_diff_ci": list(s["rloo"]["row"]["auc_diff_ci"]),
                           "ratio90_median": finite(s["rloo"]["row"]["ratio90_median"]),
                           "halves_agree": s["rloo"]["half_signs"][0] == s["rloo"]["half_signs"][1]},
                       "oracle": None if s["oracle"] is None else {
                           "arm": s["oracle"]["arm"], "against": s["post_hoc_reference"],
                           "auc_diff_median": s["post_rows"][s["oracle"]["arm"]]["auc_diff_median"],
                           "auc_diff_ci": list(s["post_rows"][s["oracle"]["arm"]]["auc_diff_ci"]),
                           "ratio90_median": finite(s["post_rows"][s["oracle"]["arm"]]["ratio90_median"]),
                           "position": s["oracle"]["position"], "ceiling": s["oracle"]["ceiling"],
                           "ceiling_position": s["oracle"].get("ceiling_position")},
                       "success_bins": list(SUCCESS_BINS),
                       "success_histogram_warm_start": s["rows"][s["reference"]]["hist_start"],
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
    edges = zip(SUCCESS_BINS, SUCCESS_BINS[1:])
    return "; ".join(f"{lo:g}-{hi:g}: {b[1] / total:.0%} G {b[1] / b[0]:.1f} inf. {b[2] / b[1]:.0%}"
                     for (lo, hi), b in zip(edges, bins, strict=True) if b[0])  # fmt: skip


def fmt_share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def headroom_lines(s: dict) -> list[str]:
    """Issue 42's table: each arm between the post-hoc best static G and the oracle, and where its completions went."""
    if s["oracle"] is None:
        return []
    oracle, post, best = s["oracle"]["arm"], s["post_rows"], s["post_hoc_reference"]
    ceiling = s["oracle"]["ceiling"]
    lines = ["", f"Headroom (issue 42): each arm between `{best}` (the post-hoc best static G: 0) and the oracle "
             f"`{oracle}` (static G on the prompts less the settled ones, never sampled: 1), paired by seed; where "
             "its completions went by the exact training success of the prompt when trained (solved >= 0.95, "
             "impossible, rare-success <= 0.05, informative between)"
             + (f"; issue 50: its share of the reachable ceiling's gain (`{ceiling}`: every prompt once, then the "
                "non-settled ones only)" if ceiling else "") + ":", "",
             f"| arm | AUC - `{best}`: median [90% CI] | share of the oracle's AUC gain | share of the ceiling's "
             f"| to 90% of `{best}`'s gain | share of the oracle's completions saving | solved | impossible | "
             "rare-success | informative |", "|" + "---|" * 10]  # fmt: skip
    for arm in [best, *post]:
        kinds = s["kinds"].get(arm) or {}
        shares = " | ".join(fmt_share(kinds.get(k)) for k in KINDS)
        if arm == best:
            lines.append(f"| `{arm}` | 0 | 0% | 0% | 1.00x | 0% | {shares} |")
            continue
        row, position = post[arm], s["oracle"]["position"][arm]
        ci, of_ceiling = row["auc_diff_ci"], (s["oracle"].get("ceiling_position") or {}).get(arm, {})
        lines.append(f"| `{arm}` | {row['auc_diff_median']:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}] | "
                     f"{fmt_share(position['auc_gain_share'])} | {fmt_share(of_ceiling.get('auc_gain_share'))} | "
                     f"{fmt_x(row['ratio90_median'])} | "
                     f"{fmt_share(position['saving_share'])} | {shares} |")  # fmt: skip
    lines += ["", f"Power (issue 50): each arm against `{best}`, paired by seed: the mean AUC difference beside the "
              "median, and the share of samples of N seeds (drawn from these) whose 90% CI of the median excludes 0 "
              "on this verdict's side (none where this verdict is undecided):", "",
              "| arm | mean [90% CI] | median | seeds needed: N = " + " / ".join(map(str, SEEDS_NEEDED)) + " |",
              "|---|---|---|---|"]
    for arm, row in post.items():
        needed = row.get("seeds_needed")
        ci = row["auc_diff_mean_ci"]
        lines.append(f"| `{arm}` | {row['auc_diff_mean']:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}] | "
                     f"{row['auc_diff_median']:+.4f} | "
                     + (" / ".join(f"{needed[n]:.0%}" for n in SEEDS_NEEDED) if needed else "undecided") + " |")
    return lines


def machines(runs: list[dict]) -> str:
    """Issue 50: the machines the runs ran on, by count (runs before issue 50's second round did not record one)."""
    counts = Counter(" / ".join(str(m[k]) for k in ("cpu", "python", "torch", "trl", "transformers"))
                     if (m := r.get("machine")) else "not recorded" for r in runs)
    return "; ".join(f"{name}: {n} runs" for name, n in counts.most_common())


def markdown(summaries: dict, meta: dict) -> str:
    lines = [f"# Study 2 (issue 25): generation batch {GENERATION_BATCH}, candidates {list(CANDIDATES)}", "",
             f"Generated by `{meta['command']}`. Budget {meta['budget']} generated completions a run "
             f"({meta['steps']} steps "
             f"of {GENERATION_BATCH}), {meta['points']} evaluations after step 0, learning rate {LEARNING_RATE:g}, "
             f"temperature {TEMPERATURE:g}; tuning seeds {meta['tuning']}, reported seeds {meta['reported']}. "
             f"Runs on disk: {meta['runs']}; summed run time {meta['run_time_s'] / 60:.1f} min (training, evaluation "
             f"and warm starts, one torch thread a process). Machines: {meta['machines']}.", "",
             "Exact reward: mean over 256 held-out prompts of the teacher-forced probability of the exact answer at "
             f"temperature {EVAL_TEMPERATURE:g}. AUC: mean exact reward over the budget of completions "
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
        hist = s["rows"][s["reference"]]
        if hist["hist_start"] is not None:
            edges = [f"{a:g}-{b:g}" for a, b in zip(SUCCESS_BINS, SUCCESS_BINS[1:])]
            lines += ["", "Training prompts per exact training success (0: an impossible prompt), mean over the "
                      f"reported seeds: at the warm start "
                      + ", ".join(f"{e}: {v:.2f}" for e, v in zip(edges, hist["hist_start"], strict=True))
                      + f"; after the reference `{s['reference']}` "
                      + ", ".join(f"{e}: {v:.2f}" for e, v in zip(edges, hist["hist_end"], strict=True)) + "."]
        lines += ["", f"Reported seeds {s['seeds']} (halves {s['halves'][0]} / {s['halves'][1]}):", "",
                  "| arm | verdict | AUC - ref: median [90% CI] | halves (sign) | to 90% of ref's gain: median "
                  "[90% CI] | AUC over train s - ref: median [90% CI] | AUC | start -> final | worst final | "
                  "rise (seed-stds) | stalled / below start | informative share (x ref) | completions on success "
                  "<= 0.2 (G there) | mean G | train s a run |",
                  "|" + "---|" * 15]  # fmt: skip
        for arm, row in s["rows"].items():
            ci, rci = row["auc_diff_ci"], row["ratio90_ci"]
            lines.append(
                f"| `{arm}` | {verdict_word(row, arm == s['reference'])} | {row['auc_diff_median']:+.4f} "
                f"[{ci[0]:+.4f}, {ci[1]:+.4f}] | {row['half_signs'][0]:+d} / {row['half_signs'][1]:+d} | "
                f"{fmt_r(row['ratio90_median'])} [{fmt_r(rci[0])}, {fmt_r(rci[1])}] | "
                f"{row['auc_time_diff_median']:+.4f} [{row['auc_time_diff_ci'][0]:+.4f}, "
                f"{row['auc_time_diff_ci'][1]:+.4f}] | {fmt_ms(mean_std(row['auc']), 4)} | "
                f"{statistics.fmean(row['start']):.3f} -> {fmt_ms(mean_std(row['final']))} | "
                f"{min(row['final']):.3f} | "
                f"{row['rise_seed_stds']:.1f} | {len(row['stalled'])} / {len(row['below_start'])} | "
                f"{fmt_ms(mean_std(row['informative']), 2)} ({row['informative_vs_reference']:.2f}x) | "
                f"{row['rare_share']:.0%} ({row['rare_G']:.1f}) | {fmt_ms(mean_std(row['mean_G']), 1)} | "
                f"{fmt_ms(mean_std(row['train_time']), 1)} |")  # fmt: skip
        if s["rloo"] is not None:
            r, row = s["rloo"], s["rloo"]["row"]
            ci = row["auc_diff_ci"]
            lines += ["", f"RLOO (issue 39): `{r['arm']}` against `{r['reference']}` (the RLOO static arm with the best "
                      f"mean AUC on these seeds, post hoc): AUC {row['auc_diff_median']:+.4f} [{ci[0]:+.4f}, "
                      f"{ci[1]:+.4f}], halves {r['half_signs'][0]:+d} / {r['half_signs'][1]:+d}, to 90% of its gain "
                      f"{fmt_r(row['ratio90_median'])}, informative share "
                      f"{statistics.fmean(row['informative']):.2f} vs "
                      f"{statistics.fmean(s['rows'][r['reference']]['informative']):.2f}."]  # fmt: skip
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
                  f"Every arm rises >= {RISE_SEED_STDS:g} seed-stds: "
                  f"{'yes' if s['learns'] else 'NO'}.", "",
                  "Where the completions went (reported seeds; exact success of the trained prompt at the training "
                  "temperature: share of the arm's completions, mean G, informative share):", ""]  # fmt: skip
        lines += [f"- `{arm}`: {fmt_bins(row['bins'])}" for arm, row in s["rows"].items()]
        lines += headroom_lines(s)
        lines += ["", f"![{task}](study2_{task}.png)", ""]
    return "\n".join(lines)


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


def plot(runs: list[dict], task: str, arms: list[str], seeds: list[int], path: Path) -> None:
    curves = {arm: [r for r in runs if r["task"] == task and r["arm"] == arm and r["seed"] in seeds] for arm in arms}
    plot_curves(curves, MODES["static"], f"{task}: mean over reported seeds {seeds[0]}-{seeds[-1]}", path)


def report(out: Path, tasks: list[str], tuning: list[int], reported: list[int], command: str, results: bool | Path,
           steps: int, points: int, extra: list[str] = (), tune_on: list[str] | None = None) -> str:  # fmt: skip
    from grpo_curriculum.training.files import atomic_write

    runs = [r for r in load_runs(out) if r["arm"] in ARMS]  # not the runs of arms the study no longer has
    summaries = {}
    done = [t for t in tasks if all(any(r["task"] == t and r["seed"] == s for r in runs) for s in reported)]
    default = defaults(runs, tune_on or done, tuning)  # the defaults: chosen on the tuning seeds of `tune_on`
    for task in done:
        summaries[task] = summarise(runs, task, tuning, reported, default, extra)
        plot(runs, task, list(summaries[task]["rows"]), summaries[task]["seeds"], out / f"study2_{task}.png")
    rules = {arm: {t: meets_rule(runs, t, arm, tuning) for t in done} for mode in ("per_prompt", "top_up", "skip")
             for arm in MODES[mode]}  # fmt: skip
    meta = {"command": command, "budget": steps * GENERATION_BATCH, "steps": steps, "points": points,
            "tuning": tuning, "reported": reported,
            "rules": rules,
            "runs": len(runs), "machines": machines(runs), "run_time_s": math.fsum(r["run_time"] for r in runs)
            + math.fsum({(r["task"], r["seed"]): r["warm_time"] for r in runs}.values())}  # fmt: skip
    text = markdown(summaries, meta)
    verdict = verdict_json(summaries, command, tuning, {"budget": meta["budget"], "steps": steps, "points": points,
                                                        "learning_rate": LEARNING_RATE,
                                                        "machines": meta["machines"],
                                                        "candidates": list(CANDIDATES)})  # fmt: skip
    atomic_write(out / "study2.md", lambda f: f.write(text))
    atomic_write(out / "verdict.json", lambda f: json.dump(verdict, f, indent=1))
    atomic_write(out / "study2.json", lambda f: json.dump({"command": command, "runs": runs}, f,
                                                          separators=(",", ":")))  # fmt: skip
    if results:  # True: benchmarks/results/; a Path: that folder
        folder = RESULTS if results is True else Path(results)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ["study2.md", "verdict.json", "study2.json", *(f"study2_{t}.png" for t in summaries)]:
            shutil.copyfile(out / name, folder / name)
    return text
