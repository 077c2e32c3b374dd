"""
The cost of the asynchronous trainer's loss temperatures (issue 51 item 4; docs/async.md "The cost of several
temperatures"): one micro-batch's forward and backward through TRL's fused LM head (`add_fused_lm_head`, as
`AsyncGRPOTrainer` adds it) with its loss terms at 1, 2 or 3 temperatures, before and after, side by side in one run:

- before: the whole fused forward (body and head) once per temperature, as `LossTemperatures` did until issue 51
  ([`PerTemperaturePasses`] below: the package's code with each head application running its own body pass);
- after: `LossTemperatures` as shipped: the body once, TRL's head once per temperature on its hidden states.

The model is a random Llama whose body dominates (hidden 384, 6 layers, vocabulary 8192: the head is about a fifth of
a token's flops, as in a 1.5B model), one sequence of 1024 tokens, every position a loss term, the terms' temperatures
in equal blocks; one torch thread. Each case runs in its own process (interleaved: before 1, after 1, before 2, ...,
the whole order `--rounds` times): time is the fastest wall time of a step (forward and backward, `--repeats` of them
after one warm-up step, in every round), the one least disturbed by other load on a shared machine, and the fastest
CPU time (`time.process_time`: on one thread the work itself, less exposed to other load than the wall time, though
not to its memory bandwidth); memory is
the process's peak resident set size (`getrusage` `ru_maxrss`) over its steps less its resident size just before the
first step (imports, weights), so it counts what the steps add: activations, the head's tiles, gradients (the
largest of the rounds).

    python benchmarks/loss_temperatures.py [--rounds 2] [--repeats 3] [--seq 1024] [--hidden 384] [--layers 6]
                                           [--vocab 8192]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_curriculum.training._trl.async_trainer import LossTemperatures, OneBody  # noqa: E402

TEMPERATURES = (1.0, 0.7, 0.4)


class _OwnBodies(OneBody):
    """The model as TRL's fused forward sees it, each call of the backbone a body pass of its own (before issue 51)."""

    def _run_body(self, *args, **kwargs):
        self.passes += 1
        return self._body(*args, **kwargs)


class PerTemperaturePasses(LossTemperatures):
    """`LossTemperatures` before issue 51: the whole fused forward, body and head, once per temperature (TRL's
    `_fused_forward` built at each temperature, called on the model itself, as `LossTemperatures` called it)."""

    def one_body(self) -> OneBody:
        return _OwnBodies(self.module)


def build(args, implementation: str, count: int):
    """The model with TRL's fused head and loss temperatures of `implementation` ("before", "after"), and a micro-batch
    (ids, labels, the terms' positions and temperatures: `count` of them, in equal blocks)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                         num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                         max_position_embeddings=args.seq)  # fmt: skip
    model = LlamaForCausalLM(config).train()
    add_fused_lm_head(model, temperature=TEMPERATURES[0], outputs=("log_probs", "entropy"))  # as AsyncGRPOTrainer
    kind = PerTemperaturePasses if implementation == "before" else LossTemperatures
    heads = kind(model, temperature=TEMPERATURES[0])
    ids = torch.randint(0, args.vocab, (1, args.seq), generator=torch.Generator().manual_seed(1))
    labels = torch.cat([ids[0, 1:], torch.tensor([-100])]).unsqueeze(0)
    index = torch.arange(args.seq - 1)
    blocks = torch.arange(args.seq - 1) * count // (args.seq - 1)
    temperatures = torch.tensor(TEMPERATURES[:count], dtype=torch.float64)[blocks]
    return model, heads, (ids, labels, index, temperatures)


def step(model, heads, batch) -> float:
    """One micro-batch's forward and backward (a loss of every term's log-probability and entropy); its loss."""
    ids, labels, index, temperatures = batch
    model.zero_grad(set_to_none=False)
    heads.plan = (index, temperatures)
    try:
        output = model(input_ids=ids, shift_labels=labels, fused_lm_head=True)
    finally:
        heads.plan = None
    loss = -output.log_probs[0].mean() + 0.01 * output.entropy[0].mean()
    loss.backward()
    return float(loss)


def run_case(args, implementation: str, count: int) -> dict:
    import torch

    torch.set_num_threads(1)
    model, heads, batch = build(args, implementation, count)
    start_rss = _rss_kib()
    loss = step(model, heads, batch)  # warm-up (and the gradient buffers)
    times, cpu_times = [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        step(model, heads, batch)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    grad_norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())))
    return {"implementation": implementation, "temperatures": count, "time_s": min(times), "cpu_s": min(cpu_times),
            "peak_mib": (peak - start_rss) / 1024, "loss": loss, "grad_norm": grad_norm,
            "body_passes": heads.body_passes, "head_passes": heads.head_passes}  # fmt: skip


def _rss_kib() -> int:
    """The resident set size now, in KiB (Linux's /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def table(results: list[dict]) -> str:
    by = {(r["implementation"], r["temperatures"]): r for r in results}
    lines = ["| temperatures | body passes before / after | wall s before / after | ratio | CPU s before / after | "
             "ratio | peak MiB before / after | ratio | loss gap |", "|---|---|---|---|---|---|---|---|---|"]
    for count in sorted({r["temperatures"] for r in results}):
        before, after = by[("before", count)], by[("after", count)]
        gap = abs(after["loss"] - before["loss"]) / abs(before["loss"])
        cells = [f"{before['body_passes']} / {after['body_passes']}"]
        for key, form in (("time_s", ".2f"), ("cpu_s", ".2f"), ("peak_mib", ".0f")):
            cells += [f"{before[key]:{form}} / {after[key]:{form}}", f"{after[key] / before[key]:.2f}"]
        lines.append(f"| {count} | {' | '.join(cells)} | {gap:.1e} |")
    return "\n".join(lines)


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--case", nargs=2, metavar=("IMPLEMENTATION", "TEMPERATURES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:  # a child: one case, its result as JSON on the last line
        print(json.dumps(run_case(args, args.case[0], int(args.case[1]))))
        return
    shape = [f"--{k}={getattr(args, k)}" for k in ("repeats", "seq", "hidden", "layers", "vocab")]  # (not rounds)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    results = {}
    for _ in range(args.rounds):
        for count in range(1, len(TEMPERATURES) + 1):
            for implementation in ("before", "after"):
                done = subprocess.run([sys.executable, __file__, *shape, "--case", implementation, str(count)],
                                      env=env, capture_output=True, text=True, check=True)  # fmt: skip
                result = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"# {result}", file=sys.stderr)
                seen = results.setdefault((implementation, count), result)
                for key, best in (("time_s", min), ("cpu_s", min), ("peak_mib", max)):
                    seen[key] = best(seen[key], result[key])
    print(f"Llama hidden {args.hidden}, {args.layers} layers, vocabulary {args.vocab}, {args.seq} tokens; the fastest "
          f"of {args.repeats} steps x {args.rounds} rounds a case, one torch thread; {_cpu()}\n")
    print(table(list(results.values())))


if __name__ == "__main__":
    main()
