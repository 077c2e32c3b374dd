"""
Per-prompt success spread of the built-in tasks after the supervised warm start: the regime where G matters is the
one where many prompts have a success rate strictly between 0 and 1.

For each task and warm-start length, sample `--samples` completions per prompt (temperature `--temperature`) for
`--prompts` distinct prompts and print the fraction of prompts whose groups would be all-0, all-1 or mixed, and the
expected fraction of informative groups `1 - p^G - (1-p)^G` for G in {2, 4, 8, 16}. Single thread, CPU, seeded.

    OMP_NUM_THREADS=1 python benchmarks/task_spread.py [--tasks echo count echo_mixed count_mixed] [--warm 20 40 80]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def success_rates(model, tokenizer, dataset, reward, samples, temperature, max_new_tokens=4, threshold=0.5):
    import torch

    rates, means = [], []
    model.eval()
    with torch.no_grad():
        for prompt, target in zip(dataset["prompt"], dataset["target"], strict=True):
            ids = tokenizer([prompt], return_tensors="pt")
            out = model.generate(**ids, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 num_return_sequences=samples, max_new_tokens=max_new_tokens)  # fmt: skip
            texts = tokenizer.batch_decode(out[:, ids.input_ids.shape[1] :], skip_special_tokens=True)
            r = reward(texts, [target] * samples)
            rates.append(sum(v >= threshold for v in r) / samples)
            means.append(sum(r) / samples)
    model.train()
    return rates, means


def main():
    import torch
    from transformers import logging as hf_logging

    from benchmark_tasks import BENCHMARK_TASKS as TASKS  # benchmarks/benchmark_tasks.py
    from grpo_curriculum.demo.tasks import build_model, build_tokenizer, warm_start

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--warm", nargs="+", type=int, default=[20, 40, 80])
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    tokenizer = build_tokenizer()
    print(f"{options.prompts} prompts x {options.samples} samples at temperature {options.temperature}, "
          "success = reward >= 0.5")  # fmt: skip
    print("| task | warm steps | mean reward | mean success | all-0 | all-1 | mixed | E[inf] G=2 | G=4 | G=8 | G=16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for task in options.tasks:
        make_dataset, reward = TASKS[task]
        train = make_dataset(256, seed=options.seed)
        held_out = make_dataset(options.prompts, seed=options.seed + 10_000)
        for steps in options.warm:
            model = build_model(seed=options.seed)
            warm_start(model, tokenizer, train, steps=steps, seed=options.seed)
            torch.manual_seed(options.seed)
            rates, means = success_rates(model, tokenizer, held_out, reward, options.samples, options.temperature)
            n = len(rates)
            informative = {g: sum(1 - p**g - (1 - p) ** g for p in rates) / n for g in (2, 4, 8, 16)}
            print(f"| {task} | {steps} | {sum(means) / n:.3f} | {sum(rates) / n:.3f} | "
                  f"{sum(p == 0 for p in rates) / n:.2f} | {sum(p == 1 for p in rates) / n:.2f} | "
                  f"{sum(0 < p < 1 for p in rates) / n:.2f} | "
                  + " | ".join(f"{informative[g]:.2f}" for g in (2, 4, 8, 16)) + " |")  # fmt: skip


if __name__ == "__main__":
    main()
