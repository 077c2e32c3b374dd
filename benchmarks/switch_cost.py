"""
The cost of a curriculum switch under each engine (issue 36): a run that switches every two steps against the same run
without switches, side by side, on 2 CPU processes (torchrun, gloo), the built-in tiny model.

The switching run alternates the temperature (1.0, 0.9, 1.0, ...) at a fixed G 4, so both runs generate and train the
same number of completions and tokens: what differs is the switch itself (the new setting applied on every process,
the geometry re-validated, the sampler re-planned). Engines: DDP, and FSDP2 through the test-only shim of
`tests/fsdp_cpu.py` (accelerate runs FSDP only on GPU-like devices; torch's `fully_shard` itself runs on a CPU mesh).
Time is transformers' `train_runtime` (the training loop, without imports and model loading). Runs are interleaved
(static, switching, static, ...) so drift on a shared machine hits both arms; each run's result is written to
`OUT/results.jsonl` as it finishes and a rerun skips what is there (resumable).

    python benchmarks/switch_cost.py [--repeats 3] [--steps 16] [--out runs/switch_cost]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The shipped demo recipe (the built-in tiny model on the echo task) without its curriculum, on 2 processes: generation
# batch 16 at G 4, 4 prompts a round; no warm start, no checkpoints.
OVERRIDES = {"num_processes": 2, "per_device_train_batch_size": 8, "warm_start_steps": 0, "save_strategy": "no"}


def base_recipe(steps: int) -> dict:
    import yaml

    recipe = yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text())
    recipe.pop("curriculum"), recipe.pop("output_dir")
    return {**recipe, **OVERRIDES, "max_steps": steps}


ENGINES = {"DDP": {}, "FSDP2": {"fsdp": True, "fsdp_config": {"version": 2}}}


def stages(steps: int, switching: bool) -> list[dict]:
    """G 4 throughout: at temperature 1.0, or switching between 1.0 and 0.9 every two steps."""
    if not switching:
        return [{"num_generations": 4, "temperature": 1.0}]
    ends = list(range(2, steps, 2))
    temperatures = [1.0 if i % 2 == 0 else 0.9 for i in range(len(ends) + 1)]
    return [{"num_generations": 4, "temperature": t, **({"until_step": ends[i]} if i < len(ends) else {})}
            for i, t in enumerate(temperatures)]


def run(out: Path, engine: str, switching: bool, steps: int, repeat: int) -> dict:
    name = f"{engine}-{'switching' if switching else 'static'}-{repeat}"
    folder = out / name
    folder.mkdir(parents=True)
    recipe = folder / "recipe.yaml"
    recipe.write_text(json.dumps({**base_recipe(steps), **ENGINES[engine],
                                  "curriculum": {"stages": stages(steps, switching)}}))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline",
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(ROOT / "tests" / "fsdp_cpu.py"), "train", str(recipe), "--output_dir", str(folder / "run")]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    history = json.loads((folder / "run" / "trainer_state.json").read_text())["log_history"]
    switches = sum(1 for entry in history if "curriculum/switch" in entry)
    return {"name": name, "engine": engine, "switching": switching, "repeat": repeat, "steps": steps,
            "switches": switches, "train_runtime": history[-1]["train_runtime"],
            "engine_line": next((line for line in done.stdout.splitlines() if "engine" in line), "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--out", default="runs/switch_cost")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.jsonl"
    results = [json.loads(line) for line in results_file.read_text().splitlines()] if results_file.exists() else []
    done = {r["name"] for r in results}
    for repeat in range(args.repeats):
        for engine in ENGINES:
            for switching in (False, True):
                name = f"{engine}-{'switching' if switching else 'static'}-{repeat}"
                if name in done:
                    continue
                result = run(out, engine, switching, args.steps, repeat)
                with open(results_file, "a") as file:
                    file.write(json.dumps(result) + "\n")
                results.append(result)
                print(f"{name}: {result['train_runtime']:.2f} s, {result['switches']} switches, "
                      f"{result['engine_line'].strip()}", flush=True)
    print(f"\n| engine | static (s, median of {args.repeats}) | switching (s) | switches | ratio switching / static "
          "(median of the paired ratios) |")
    print("|---|---|---|---|---|")
    for engine in ENGINES:
        static = {r["repeat"]: r for r in results if r["engine"] == engine and not r["switching"]}
        switching = {r["repeat"]: r for r in results if r["engine"] == engine and r["switching"]}
        pairs = sorted(set(static) & set(switching))
        if not pairs:
            continue
        ratios = [switching[k]["train_runtime"] / static[k]["train_runtime"] for k in pairs]
        print(f"| {engine} | {statistics.median(static[k]['train_runtime'] for k in pairs):.2f} | "
              f"{statistics.median(switching[k]['train_runtime'] for k in pairs):.2f} | "
              f"{switching[pairs[0]]['switches']} | {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}) |")


if __name__ == "__main__":
    main()
