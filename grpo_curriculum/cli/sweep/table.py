"""
The arithmetic of `grpo-curriculum sweep`: per-arm metrics from the runs' records, the target, the table and the
recommendation. Pure logic: no torch, no TRL.

A run's record (what each arm's run writes, see [`RESULT_SCHEMA`]) holds its held-out evaluations (`points`: step,
completions, training seconds so far, mean held-out reward), its per-step training rewards and zero-std fractions, and
its throughput and peak memory. An arm is run once per seed; its curve is the mean of its seeds' curves (they are
evaluated at the same steps).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ...core.rules import MAX_STEPS, Rule, integer
from ...training.schema import Each, Nullable

RESULT_VERSION = 1
_STEP = integer(0, MAX_STEPS)
_NUMBER = Rule("number", finite=False)  # a reward may be NaN when every reward function returned None
_SECONDS = Rule("number", low=0)
RESULT_SCHEMA = {
    "version": integer(RESULT_VERSION, RESULT_VERSION), "arm": Rule("str"), "seed": Rule("int"), "steps": _STEP,
    "completions_per_step": integer(1, 2**40), "train_time": _SECONDS, "wall_time": _SECONDS, "num_tokens": _SECONDS,
    "peak_memory": _SECONDS, "memory_kind": Rule("choice", choices=("cuda", "rss")), "held_out": Rule("str"),
    "points": Each({"step": _STEP, "completions": _SECONDS, "time": _SECONDS, "reward": _NUMBER,
                    "generated?": _SECONDS}, high=MAX_STEPS),
    "train_reward": Each(Nullable(_NUMBER), high=MAX_STEPS), "zero_std": Each(Nullable(_NUMBER), high=MAX_STEPS),
}  # fmt: skip
"""What a finished run's `sweep_result.json` must hold."""

DEFAULT_SEEDS = 2  # the fewest that measure the noise: each arm gets an interval
TARGET_FRACTION = 0.9
TIE = 0.05  # wall times to the target within 5% of each other are a tie: the higher final reward wins
METRICS = ("final", "best", "fluctuation", "samples_per_s", "tokens_per_s", "peak_memory", "zero_std",
           "gain_per_hour")  # fmt: skip


@dataclass(frozen=True)
class Arm:
    """
    One arm of a sweep.

    Args:
        name (`str`): Its name (`g4`, `g8-t0.7`, `recipe`), also its folder under `arms/`.
        stages (`list[dict]`): The `curriculum.stages` it trains with.
        num_generations (`int`, *optional*): G of a static arm (`None`: the recipe's own schedule).
        temperature (`float`, *optional*): Its temperature.
    """

    name: str
    stages: list
    num_generations: int | None = None
    temperature: float | None = None

    @property
    def label(self) -> str:
        """The arm in words: `"G 4 T 0.8"`, `"per-prompt G from [2, 4, 8]"`, `"top-up [2, 4, 8]"`, `"dynamic
        sampling at G 8 (max_rounds 4)"`, `"G 4 skipping settled prompts"` (a one-stage arm of `sweep --arms`), else `"the
        recipe's schedule"`."""
        if self.num_generations is not None:
            return f"G {self.num_generations}" + (f" T {self.temperature:g}" if self.temperature is not None else "")
        stage = self.stages[0] if len(self.stages) == 1 and self.name != "recipe" else {}
        adaptive = stage.get("adaptive") if isinstance(stage.get("adaptive"), dict) else {}
        if stage.get("dynamic_sampling") is not None:
            rounds = (stage["dynamic_sampling"] or {}).get("max_rounds", "default")
            return f"dynamic sampling at G {stage.get('num_generations')} (max_rounds {rounds})"
        if stage.get("skip") not in (None, False):
            return f"G {stage.get('num_generations')} skipping settled prompts"
        if adaptive.get("policy") in ("per_prompt", "top_up"):
            kind = "per-prompt G from " if adaptive["policy"] == "per_prompt" else "top-up "
            return kind + str(adaptive.get("num_generations"))
        return "the recipe's schedule"


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def finite_mean(values) -> float:
    """The mean of the finite values (NaN when there is none)."""
    values = _finite(values)
    return statistics.fmean(values) if values else math.nan


def _std(values) -> float:
    values = _finite(values)
    return statistics.stdev(values) if len(values) > 1 else 0.0 if values else math.nan


T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}  # Student's t, two-sided 95%, by degrees of freedom
CONFIDENCE = 0.95


def t_quantile(df: int) -> float:
    """Student's t 97.5% quantile for `df` degrees of freedom (the table's entry at or below it; 1.96 past 30)."""
    if df > 30:
        return 1.96
    return T_975[max(k for k in T_975 if k <= df)]  # a lower df: a wider interval, never a narrower one


def interval(values) -> tuple[float, float] | None:
    """The 95% t-interval of the mean of the finite `values` (over seeds); `None` for fewer than two."""
    values = _finite(values)
    if len(values) < 2:
        return None
    n = len(values)
    mean, half = statistics.fmean(values), t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean - half, mean + half


def fluctuation(rewards) -> float:
    """Reward fluctuation: the standard deviation of the step-to-step differences of the training reward."""
    values = _finite(rewards)
    return _std([b - a for a, b in zip(values, values[1:])]) if len(values) > 2 else math.nan


def run_metrics(run: dict) -> dict:
    """
    A run's own numbers: final and best held-out reward, reward fluctuation, completions and tokens per training
    second, peak memory (bytes), mean zero-std fraction and held-out reward gained per hour of training (final minus
    step 0, over the training time; evaluation excluded).
    """
    rewards = [p["reward"] for p in run["points"]]
    hours = run["train_time"] / 3600
    seconds = run["train_time"] or math.nan
    gain = rewards[-1] - rewards[0] if rewards else math.nan
    return {"final": rewards[-1] if rewards else math.nan, "best": max(_finite(rewards), default=math.nan),
            "fluctuation": fluctuation(run["train_reward"]),
            "samples_per_s": run["steps"] * run["completions_per_step"] / seconds,
            "tokens_per_s": run["num_tokens"] / seconds, "peak_memory": run["peak_memory"],
            "zero_std": finite_mean(run["zero_std"]),
            "gain_per_hour": gain / hours if hours else math.nan}  # fmt: skip


def mean_curve(runs: list[dict]) -> list[dict]:
    """The seeds' held-out curves averaged point by point (step, completions, training seconds and reward)."""
    length = min(len(run["points"]) for run in runs)
    keys = ("step", "completions", "time", "reward")
    if all("generated" in point for run in runs for point in run["points"][:length]):  # runs of this version
        keys += ("generated",)
    return [{key: finite_mean(run["points"][i][key] for run in runs) for key in keys} for i in range(length)]


def summarise(arms: list[Arm], runs: dict[str, list[dict]], target: float | None = None) -> tuple[list[dict], float]:
    """
    Per-arm rows: each metric of [`run_metrics`] as `(mean, std)` over the seeds, the mean curve, and the step, the
    completions and the training seconds at which the mean curve first reaches the target.

    Args:
        arms (`list[Arm]`): The arms, in order.
        runs (`dict[str, list[dict]]`): Each arm's runs (one a seed), by arm name.
        target (`float`, *optional*): The held-out reward to reach (default: [`default_target`]).

    Returns:
        `tuple[list[dict], float]`: The rows, and the target used.
    """
    rows = []
    for arm in arms:
        per_seed = [run_metrics(run) for run in runs[arm.name]]
        row = {"arm": arm, "seeds": len(per_seed), "curve": mean_curve(runs[arm.name])}
        row.update({key: (finite_mean(m[key] for m in per_seed), _std(m[key] for m in per_seed)) for key in METRICS})
        row["interval"] = interval(m["final"] for m in per_seed)  # of the final held-out reward
        rows.append(row)
    if target is None:
        target = default_target(rows)
    for row in rows:
        reached = next((p for p in row["curve"] if p["reward"] >= target), None)
        row["to_target"] = reached
    return rows, target


def default_target(rows: list[dict]) -> float:
    """
    90% of the way from the step-0 held-out reward (the same model in every arm: the mean over the arms) to the best
    arm's final: 90% of the best final when the step-0 reward is 0.
    """
    start = finite_mean(row["curve"][0]["reward"] for row in rows if row["curve"])
    best = max(row["final"][0] for row in rows)
    return start + TARGET_FRACTION * (best - start)


def recommend(rows: list[dict], target: float) -> dict:
    """
    The recommended arm, or a switch between two static arms, with its reason.

    Rule: when no arm's mean final held-out reward is above the step-0 reward, there is none (the best final arm's
    schedule is still returned). Nor is there one when the best final arm cannot be separated from another (see
    [`inseparable`]: their 95% intervals over the seeds overlap, or a single seed measures no noise): the line names
    the arms it cannot separate. Otherwise the arms whose mean final held-out reward reaches the target qualify (with
    the default target, the best arm always does); of these, the one that reaches it in the least training time wins
    (times within 5% are a tie: the higher final reward wins, then the earlier arm). When a static arm with a larger G
    ends higher than the winner (by more than the seeds' spread, at least 0.01) and the two measured curves cross --
    the winner ahead at an evaluation before step `s`, the larger G ahead or level at every evaluation from `s` on --
    the recommendation is to switch: the winner's G until step `s`, then the larger G. The switch itself is not
    measured by the sweep: its reason says so.

    Returns:
        `dict`: `arm` (the winning [`Arm`]), `switch` (`None`, or `(G before, step, G after)` with `after`, the later
        arm), `recommended` (`False` when there is no recommendation: `arm` is then only the best final), `line` (the
        recommendation in one line with its reason).
    """
    best = max(rows, key=lambda row: row["final"][0])
    start = finite_mean(row["curve"][0]["reward"] for row in rows if row["curve"])
    if not best["final"][0] > start:  # nothing learned: no arm is faster to anything
        return {"arm": best["arm"], "switch": None, "recommended": False, "line": (
            f"none: no arm gained held-out reward over step 0 ({start:.3f}); train longer (--max-steps) or check the "
            f"reward functions (the best final: {best['arm'].label}, {best['final'][0]:.3f})")}
    close = inseparable(rows)
    if close:  # never a recommendation from noise
        return {"arm": best["arm"], "switch": None, "recommended": False, "line": _inseparable_line(best, close)}
    qualified = [row for row in rows if row["to_target"] is not None and row["final"][0] >= target]
    if not qualified:  # the best arm's mean curve can end above the target yet never reach it at one evaluation
        qualified = [best]
    fastest = min(row["to_target"]["time"] if row["to_target"] else math.inf for row in qualified)
    tied = [row for row in qualified if row["to_target"] and row["to_target"]["time"] <= fastest * (1 + TIE)]
    winner = max(tied or qualified, key=lambda row: row["final"][0])
    arm, line = winner["arm"], _reason(winner, best, target)
    if len(rows) > 1:
        line += f"; {best['arm'].name}'s final is above every other arm's ({_separation(rows)})"
    switch = _switch(winner, rows)
    if switch is None:
        return {"arm": arm, "switch": None, "recommended": True, "line": line}
    later, step = switch
    g_a, g_b = arm.num_generations, later["arm"].num_generations
    line = (f"G {g_a} until step {step}, then G {g_b}: G {g_a} leads the held-out reward until step {step}, G {g_b} "
            f"from then on and ends higher ({later['final'][0]:.3f} vs {winner['final'][0]:.3f}); the switch itself "
            "was not run: measure it with `grpo-curriculum sweep recommended.yaml --curriculum`")
    return {"arm": arm, "switch": (g_a, step, g_b), "later": later["arm"], "recommended": True, "line": line}


def inseparable(rows: list[dict]) -> list[dict]:
    """
    The arms whose final held-out reward cannot be told from the best arm's: their 95% intervals over the seeds
    overlap (every other arm when an arm has a single seed: one run measures no noise).
    """
    if len(rows) < 2:
        return []
    best = max(rows, key=lambda row: row["final"][0])
    if best.get("interval") is None:
        return [row for row in rows if row is not best]
    low = best["interval"][0]
    return [row for row in rows if row is not best and (row.get("interval") is None or row["interval"][1] >= low)]


def _interval_text(row: dict) -> str:
    bounds = row.get("interval")
    return f"{row['final'][0]:.3f}" + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")


def _separation(rows: list[dict]) -> str:
    seeds = min(row["seeds"] for row in rows)
    return f"{int(CONFIDENCE * 100)}% intervals over {seeds} seeds: " + ", ".join(
        f"{row['arm'].name} {_interval_text(row)}" for row in sorted(rows, key=lambda row: -row["final"][0]))


def _inseparable_line(best: dict, close: list[dict]) -> str:
    names = [best["arm"].name, *(row["arm"].name for row in close)]
    together = " and ".join(names) if len(names) == 2 else ", ".join(names[:-1]) + " and " + names[-1]
    if best.get("interval") is None:
        return (f"none: cannot separate {together}: with one seed an arm the sweep measures no noise, and a "
                f"difference may be only that (the highest final: {best['arm'].name}, {best['final'][0]:.3f}); run "
                "`--seeds 2` or more")
    return (f"none: cannot separate {together}: their final held-out rewards' "
            f"{_separation([best, *close])} overlap; more seeds (`--seeds N`) or more steps would tell")


def _reason(winner: dict, best: dict, target: float) -> str:
    arm, reached = winner["arm"], winner["to_target"]
    final = f"final {winner['final'][0]:.3f}"
    if reached is None:
        return f"{arm.label}: the best final held-out reward ({final}); no arm reached the target {target:.3f}"
    head = f"{arm.label}: reaches the target {target:.3f} in {reached['time']:.1f} s of training ({final}"
    if best is winner:
        return head + ", the best)"
    ratio = reached["time"] / best["to_target"]["time"] if best["to_target"] and best["to_target"]["time"] else None
    than = f", {ratio:.2f}x the time of {best['arm'].label}" if ratio is not None else ""
    return head + f"{than}, whose final is {best['final'][0]:.3f})"


def _switch(winner: dict, rows: list[dict]):
    """`(row, step)`: the static arm with a larger G to switch to and the step, when the curves cross (see above)."""
    g = winner["arm"].num_generations
    if g is None:
        return None
    for later in sorted(rows, key=lambda row: -row["final"][0]):
        g_b = later["arm"].num_generations
        margin = max(0.01, later["final"][1], winner["final"][1])
        if g_b is None or g_b <= g or later["final"][0] - winner["final"][0] <= margin:
            continue
        a, b = winner["curve"], later["curve"]
        points = list(zip(a, b))
        start = len(points)
        while start > 0 and points[start - 1][1]["reward"] >= points[start - 1][0]["reward"]:
            start -= 1
        if 0 < start < len(points) and any(pa["reward"] > pb["reward"] for pa, pb in points[:start]):
            step = int(points[start][0]["step"])
            if step > 0:
                return later, step
    return None


def recommended_stages(recommendation: dict) -> list[dict]:
    """The `curriculum.stages` of the recommended schedule (a switch: two stages, the first `until_step`)."""
    arm = recommendation["arm"]
    if recommendation["switch"] is None:
        return arm.stages
    first, later = dict(arm.stages[0]), dict(recommendation["later"].stages[0])
    return [{**first, "until_step": recommendation["switch"][1]}, later]


def _cell(value: tuple[float, float], seeds: int, digits: int = 3) -> str:
    mean, std = value
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if seeds > 1 else "")


def _memory(value: tuple[float, float], seeds: int) -> str:
    mean, std = value
    return f"{mean / 2**20:.0f} MiB" + (f" ± {std / 2**20:.0f}" if seeds > 1 else "")


def _completions(reached: dict | None, both: bool) -> str:
    """Completions generated to the target (and trained, when some arm generates more than it trains)."""
    if reached is None:
        return "not reached"
    generated = reached.get("generated", reached["completions"])
    return f"{generated:.0f}" + (f" ({reached['completions']:.0f})" if both else "")


def generates_more(rows: list[dict]) -> bool:
    """Whether some arm generated more completions than it trained (dynamic sampling drops groups)."""
    return any(point.get("generated", point["completions"]) > point["completions"] * (1 + 1e-9)
               for row in rows for point in row["curve"])  # fmt: skip


def _gain(value: tuple[float, float], seeds: int) -> str:
    """Reward gained per hour; `no gain` where the final held-out reward is not above step 0's (a negative rate
    says only that)."""
    if not math.isnan(value[0]) and value[0] <= 0:
        return "no gain"
    return _cell(value, seeds, 2)


def _final(row: dict) -> str:
    bounds = row.get("interval")
    if bounds is None:
        return _cell(row["final"], row["seeds"])
    return f"{row['final'][0]:.3f} [{bounds[0]:.3f}, {bounds[1]:.3f}]"


def table_rows(rows: list[dict]) -> list[dict]:
    """
    The rows of the sweep's table, as text: the final held-out reward's mean and 95% interval over the seeds (when
    there are several), the other metrics `mean ± std`; completions to the target counted as generated (with the
    trained ones in parentheses when an arm generates more than it trains).
    """
    out, both = [], generates_more(rows)
    completions = "completions to target" + (" generated (trained)" if both else "")
    for row in rows:
        n, reached = row["seeds"], row["to_target"]
        out.append({
            "arm": row["arm"].name, "final": _final(row), "best": _cell(row["best"], n),
            "steps to target": f"{reached['step']:.0f}" if reached else "not reached",
            completions: _completions(reached, both),
            "fluctuation": _cell(row["fluctuation"], n), "samples/s": _cell(row["samples_per_s"], n, 1),
            "tokens/s": _cell(row["tokens_per_s"], n, 0), "peak memory": _memory(row["peak_memory"], n),
            "zero-std": _cell(row["zero_std"], n, 2), "reward/hour": _gain(row["gain_per_hour"], n),
        })  # fmt: skip
    return out
