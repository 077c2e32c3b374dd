"""
Engine balance of a data-parallel vLLM server: TRL's request layout against `plan_requests`, at the seeds' geometries.

TRL's server mode sends each unique prompt once with `n=G`; vLLM places whole requests on its data-parallel engines.
This simulation assigns requests to engines round-robin, in order (as `RequestPlan.engine_loads` does) and prints
max/mean engine load (1.00 = balanced; a round takes about that many times as long as a balanced one) for:

- generation batches from the seeds' recipes (`/work/shared/SEEDS.md`): 1 GPU 4x8 = 32, 2 GPUs 3x1 = 6 and with
  accumulation 2 = 12, 4 GPUs 2x16 = 128, memory-tight 1x16 = 16, plus 64;
- every G in 2..32 that divides the batch;
- 1, 2, 4 and 8 engines.

Each cell reads `TRL -> ours` and, when ours splits, `(k=split)`. No GPU, no vLLM: pure arithmetic.

    python benchmarks/vllm_balance.py
"""

from __future__ import annotations

import argparse
import math

from grpo_curriculum.vllm_plan import plan_requests, trl_layout

GEOMETRIES = [
    ("1 GPU 4x8", 32),
    ("2 GPUs 3x1", 6),
    ("2 GPUs 3x1, accumulation 2", 12),
    ("4 GPUs 2x16", 128),
    ("memory-tight 1x16", 16),
    ("batch 64", 64),
]
ENGINES = (1, 2, 4, 8)
TARGET = 1.1


def rows(geometries=GEOMETRIES, engines=ENGINES, g_range=range(2, 33)):
    """One entry per (geometry, G, engines): the TRL and planned layouts."""
    for label, batch in geometries:
        for g in g_range:
            if batch % g:
                continue
            for e in engines:
                yield label, batch, g, e, trl_layout(batch // g, g, e), plan_requests(batch // g, g, e)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()

    results = list(rows())
    cell_width = 18
    header = f"{'geometry':<28} {'batch':>5} {'G':>3} {'prompts':>7}  " + "".join(
        f"{f'{e} engine' + ('s' if e > 1 else ''):>{cell_width}}" for e in ENGINES
    )
    print("max/mean engine load, TRL -> ours (k = sub-requests per prompt when ours splits)")
    print(header)
    print("-" * len(header))
    by_row = {}
    for label, batch, g, e, trl, ours in results:
        by_row.setdefault((label, batch, g), {})[e] = (trl, ours)
    for (label, batch, g), cells in by_row.items():
        line = f"{label:<28} {batch:>5} {g:>3} {batch // g:>7}  "
        for e in ENGINES:
            trl, ours = cells[e]
            cell = f"{trl.imbalance:.2f} -> {ours.imbalance:.2f}" + (f" k={ours.split}" if ours.split > 1 else "")
            line += f"{cell:>{cell_width}}"
        print(line)

    enough = [r for r in results if r[1] >= r[3]]  # completions >= engines
    divisible = [r for r in results if r[1] % r[3] == 0]
    worst_ours = max(enough, key=lambda r: r[5].imbalance)
    worst_divisible = max(divisible, key=lambda r: r[5].imbalance)
    worst_trl = max(enough, key=lambda r: r[4].imbalance)
    optimal = all(
        math.isclose(r[5].imbalance, math.ceil(r[1] / r[3]) * r[3] / r[1]) for r in enough
    )  # ceil(C/E)/(C/E): the best any assignment of C indivisible completions to E engines can do
    improved = sum(r[5].imbalance < r[4].imbalance - 1e-12 for r in enough)
    unbalanceable = sorted({(r[1], r[3]) for r in enough if r[1] % r[3]})
    print()
    print(
        f"summary: {len(enough)} cases with completions >= engines; TRL worst {worst_trl[4].imbalance:.2f} "
        f"(batch {worst_trl[1]}, G {worst_trl[2]}, {worst_trl[3]} engines); ours worst {worst_ours[5].imbalance:.2f} "
        f"(batch {worst_ours[1]}, G {worst_ours[2]}, {worst_ours[3]} engines); ours worst where completions are a "
        f"multiple of engines {worst_divisible[5].imbalance:.2f} (target <= {TARGET}: "
        f"{'met' if worst_divisible[5].imbalance <= TARGET else 'MISSED'}); ours improves {improved} cases and is "
        f"optimal (ceil(C/E)/(C/E)) in {'all' if optimal else 'NOT all'} of them; no layout can balance "
        + ", ".join(f"{c} completions on {e} engines" for c, e in unbalanceable)
    )


if __name__ == "__main__":
    main()
