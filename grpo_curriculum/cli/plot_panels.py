"""
What `plot` shows of the adaptive modes, from a run's log lines (no new metric is needed):

- the distribution of G actually trained at each logged step, where prompts got their own G (per-prompt and top-up
  rounds): its quantiles from `curriculum/prompts_at_g{G}` (the prompts trained at each G since the previous log
  line), drawn as bands around the mean G (`curriculum/num_generations`);
- in stages that sample in increments (top-up, dynamic sampling): the completions generated (`curriculum/generated`)
  and trained (generated minus the dropped groups' completions, `curriculum/dropped` x G) per log line with the
  share of the trained completions in informative groups (`curriculum/informative_share`), the groups dropped and
  the generation passes a round took (`curriculum/increments`).

The arithmetic is pure; the drawing functions take matplotlib axes.
"""

from __future__ import annotations

import math

PER_PROMPT_PREFIX = "curriculum/prompts_at_g"
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def g_counts(entry: dict) -> dict[int, int]:
    """Prompts trained at each G in a log line (its `curriculum/prompts_at_g{G}`), by G."""
    counts = {}
    for key, value in entry.items():
        if key.startswith(PER_PROMPT_PREFIX) and key[len(PER_PROMPT_PREFIX) :].isdigit():
            n = _number(value)
            if n is not None and n > 0:
                counts[int(key[len(PER_PROMPT_PREFIX) :])] = int(n)
    return dict(sorted(counts.items()))


def g_quantiles(entry: dict) -> dict[float, int] | None:
    """The quantiles of [`QUANTILES`] of the G each prompt was trained at in a log line (nearest rank), or `None`
    where the line has no per-prompt counts (one G for all: `curriculum/num_generations`)."""
    counts = g_counts(entry)
    total = sum(counts.values())
    if not total:
        return None
    out = {}
    for q in QUANTILES:
        rank, seen = max(1, math.ceil(q * total)), 0
        for g, n in counts.items():
            seen += n
            if seen >= rank:
                out[q] = g
                break
    return out


BINS = 60  # the bands pool the log lines of longer runs into this many windows


def pooled_quantiles(entries: list[dict], bins: int = BINS) -> list[dict[float, int] | None]:
    """
    Per log line, the G quantiles of the prompts trained in its window: the log lines themselves up to `bins` of
    them, else `bins` windows of consecutive lines whose counts are pooled (each line of a window gets the window's).
    """
    size = max(1, math.ceil(len(entries) / bins))
    out = []
    for start in range(0, len(entries), size):
        window = entries[start : start + size]
        pooled: dict[str, int] = {}
        for entry in window:
            for g, n in g_counts(entry).items():
                key = f"{PER_PROMPT_PREFIX}{g}"
                pooled[key] = pooled.get(key, 0) + n
        out += [g_quantiles(pooled)] * len(window)
    return out


def varies(entries: list[dict]) -> bool:
    """Whether some log line trained prompts at more than one G."""
    return any(len(g_counts(entry)) > 1 for entry in entries)


def sampling_series(entries: list[dict]) -> dict[str, list[float | None]] | None:
    """
    Per log line: `generated`, `trained` (generated minus the dropped groups' completions), `dropped` (groups) and
    `increments` (generation passes a round); `None` values where a line has none of them; `None` for a run with no
    stage that samples in increments.
    """
    if not any(_number(entry.get("curriculum/generated")) is not None for entry in entries):
        return None
    series = {"generated": [], "trained": [], "dropped": [], "increments": [], "informative": []}
    for entry in entries:
        generated = _number(entry.get("curriculum/generated"))
        dropped = _number(entry.get("curriculum/dropped"))
        g = _number(entry.get("curriculum/num_generations"))
        trained = None
        if generated is not None:
            trained = generated - (dropped or 0.0) * (g or 0.0)
        series["generated"].append(generated)
        series["trained"].append(trained)
        series["dropped"].append(dropped)
        series["increments"].append(_number(entry.get("curriculum/increments")))
        series["informative"].append(_number(entry.get("curriculum/informative_share")))
    return series


def _nan(values):
    return [math.nan if value is None else value for value in values]


def draw_g(axis, steps: list[int], entries: list[dict]) -> None:
    """The mean G a step, and where prompts got their own G, bands of its distribution: 10-90% and 25-75% of the
    prompts, the median, and the smallest and largest G trained (over windows of steps in a long run, see
    [`pooled_quantiles`])."""
    axis.plot(steps, _nan([_number(e.get("curriculum/num_generations")) for e in entries]), drawstyle="steps-post",
              linewidth=1.5, label="mean G")  # fmt: skip
    if not varies(entries):
        return
    quantiles = pooled_quantiles(entries)
    column = lambda q: [math.nan if qs is None else qs[q] for qs in quantiles]  # noqa: E731
    pooled = math.ceil(len(entries) / BINS) > 1
    axis.fill_between(steps, column(0.1), column(0.9), step="post", alpha=0.2, color="C0", linewidth=0,
                      label="10-90% of prompts" + (f" ({math.ceil(len(entries) / BINS)} log lines pooled)"
                                                   if pooled else ""))  # fmt: skip
    axis.fill_between(steps, column(0.25), column(0.75), step="post", alpha=0.35, color="C0", linewidth=0,
                      label="25-75%")  # fmt: skip
    axis.plot(steps, column(0.5), drawstyle="steps-post", color="C0", linestyle=":", linewidth=1, label="median")
    axis.plot(steps, column(0.0), drawstyle="steps-post", color="grey", linewidth=0.6, label="smallest / largest")
    axis.plot(steps, column(1.0), drawstyle="steps-post", color="grey", linewidth=0.6)
    low, high = axis.get_ylim()
    axis.set_ylim(low, high + 0.35 * (high - low))  # room for the legend above the bands
    axis.legend(loc="upper left", fontsize=6, ncol=5)


def draw_sampling(completions_axis, passes_axis, steps: list[int], series: dict) -> None:
    """Completions generated and trained per log line (and the informative share of the trained ones); the groups
    dropped and the generation passes a round took."""
    lines = completions_axis.plot(steps, _nan(series["generated"]), linewidth=0.9, label="generated")
    lines += completions_axis.plot(steps, _nan(series["trained"]), linewidth=0.9, label="trained")
    completions_axis.set_ylabel("completions\na log line", fontsize=8)
    share = completions_axis.twinx()
    lines += share.plot(steps, _nan(series["informative"]), linewidth=0.8, color="grey", linestyle=":",
                        label="informative share of trained (right)")  # fmt: skip
    share.set_ylim(0, 1.05)
    share.set_ylabel("informative share", fontsize=8)
    completions_axis.legend(lines, [line.get_label() for line in lines], loc="upper left", fontsize=7)
    dropped = passes_axis.twinx()
    bars = dropped.bar(steps, _nan(series["dropped"]), width=0.8, color="C3", alpha=0.35, label="groups dropped")
    dropped.set_ylabel("groups dropped (bars)", fontsize=8)
    dropped.set_ylim(bottom=0)
    line = passes_axis.plot(steps, _nan(series["increments"]), linewidth=1.2, color="C2",
                            label="generation passes a round")  # fmt: skip
    passes_axis.set_zorder(dropped.get_zorder() + 1)  # the line above the bars
    passes_axis.patch.set_visible(False)
    passes_axis.set_ylabel("passes a round", fontsize=8)
    passes_axis.legend([*line, bars], ["generation passes a round", "groups dropped"], loc="upper left", fontsize=7)
