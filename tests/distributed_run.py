"""
Run under `torchrun --nproc_per_node 2` (CPU, gloo) by tests/conftest.py's `torchrun_scenarios`, once a session, for
tests/test_distributed.py and tests/test_vllm_tp.py.

    distributed_run.py OUTPUT_DIR MODE [MODE ...]

For each mode in turn (`stages`, `adaptive`, `per_prompt`, `increments`, `rloo`), in the same two processes, trains
the tiny model with that curriculum and writes, per rank, what each generation round looked like to
`OUTPUT_DIR/MODE/rankR.json`: the step, the G and temperature in force, the rows' prompt indices and this rank's
rewards (`increments`: a top-up stage then a dynamic-sampling one, and each round's increments and the rows this rank
trained on; `rloo`: `CurriculumRLOOTrainer` through two stage switches into a per-prompt stage, and each round's
group sizes and the advantages this rank trains on). Mode `colocate_tp` runs tests/colocate_tp_run.py (for tests/test_vllm_tp.py); it installs a fake
`vllm` for good, so it comes last. One launch for every mode spares the suite a launcher and two workers (each
importing torch, transformers and TRL) per mode.
"""

import json
import os
import sys

from trl import RLOOConfig

from grpo_curriculum import DynamicSampling, Stage
from grpo_curriculum.core.adaptive import Adaptive
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.demo.tasks import build_model, build_tokenizer
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer
from tests.conftest import RoundRecorder, grpo_args, indexed_dataset, per_prompt_stages


def rank_dependent_reward(prompts, completions, **kwargs):
    # Each rank scores its own rows differently (rank 0: all equal; rank 1: by completion length). A curriculum that
    # decided from its own rank's rewards would diverge; it must decide from the rewards gathered from every rank.
    if os.environ.get("RANK") == "0":
        return [1.0] * len(completions)
    return [float(len(c) % 2) for c in completions]


def settled_or_rank_dependent(prompts, completions, idx, **kwargs):
    # Prompts with index % 3 == 0 always score 1 (solved), == 1 always 0; the others score by rank
    # ([`rank_dependent_reward`]): which prompts a stage skips must come from the rewards of every rank.
    by_rank = rank_dependent_reward(prompts, completions)
    return [1.0 if i % 3 == 0 else 0.0 if i % 3 == 1 else r for i, r in zip(idx, by_rank, strict=True)]


def stages_for(mode: str):
    if mode == "skip":  # G 4 skipping settled prompts: each round one group over both processes (2 rows each)
        return [Stage(num_generations=4, temperature=1.0, skip=True)]
    if mode == "skip_pilot":  # the same with pilot groups of 2 for new and settled prompts, the pooled rule
        return [Stage(num_generations=4, temperature=1.0, skip={"rule": "pooled", "pilot": 2})]
    if mode == "rloo":  # G 4, then G 16 (a group spans both processes), then G per prompt
        return [Stage(num_generations=4, temperature=0.7, until_step=2),
                Stage(num_generations=16, temperature=1.2, until_step=4),
                *per_prompt_stages((2, 4, 8), temperature=1.0, lookahead=2, defer=True)]
    if mode == "increments":  # top-up rounds (pilot 2, groups of up to 4), then dynamic sampling at G 2
        return [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4), policy="top_up"), until_step=3),
                Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling(max_rounds=3))]
    if mode == "per_prompt":
        return per_prompt_stages((2, 4, 8), lookahead=2, defer=True)  # prompts compared and deferred
    if mode == "adaptive":
        adaptive = Adaptive(num_generations=(2, 4, 8), policy="success_rate", cooldown=1, window=2, target=0.6)
        return [Stage(num_generations=2, temperature=1.0, adaptive=adaptive)]
    # G 8 makes every group span both processes (per-device 4 x 2 processes = generation batch 8).
    return [
        Stage(num_generations=2, temperature=0.7, until_step=2),
        Stage(num_generations=8, temperature=1.2, until_step=4),
        Stage(num_generations=4, temperature=1.0),
    ]


def train(output_dir: str, mode: str) -> None:
    recorder = RoundRecorder(reward_fn=settled_or_rank_dependent if mode.startswith("skip") else rank_dependent_reward)
    stages = stages_for(mode)
    rloo = mode == "rloo"  # RLOO without its KL penalty (beta 0): the advantages follow from the rewards alone
    trainer = (CurriculumRLOOTrainer if rloo else CurriculumGRPOTrainer)(
        model=build_model(),
        processing_class=build_tokenizer(),
        reward_funcs=recorder,
        args=grpo_args(output_dir, RLOOConfig if rloo else None,
                       per_device_train_batch_size={"per_prompt": 8, "rloo": 8}.get(mode, 2 if "skip" in mode else 4),
                       num_generations=8 if mode in ("per_prompt", "rloo") else 2,  # TRL's loader: 16 / 8 prompts
                       max_steps={"stages": 6, "adaptive": 10, "increments": 6}.get(mode, 12),
                       shuffle_dataset=True, **({"beta": 0.0} if rloo else {})),
        train_dataset=indexed_dataset({"per_prompt": 8, "rloo": 8, "skip": 6, "skip_pilot": 6}.get(mode, 48)),
        callbacks=[CurriculumCallback(stages)],
    )
    recorder.trainer = trainer
    rounds = record_rounds(trainer) if mode in ("increments", "rloo") else []
    trainer.train()
    rank = trainer.accelerator.process_index
    history = [
        {k: v for k, v in h.items() if k.startswith("curriculum/") or k in ("step", "frac_reward_zero_std")}
        for h in trainer.state.log_history
        if "loss" in h
    ]
    with open(f"{output_dir}/rank{rank}.json", "w") as f:
        json.dump({"calls": recorder.calls, "history": history, "switches": trainer._curriculum.switches,
                   "deferred_total": trainer._curriculum.deferred_total, "rounds": rounds}, f)


def record_rounds(trainer) -> list[dict]:
    """Each round's prompts, increments, sizes and trained groups, and the rows (prompt texts), advantages,
    `num_items_in_batch` and loss tokens this rank trains on."""
    rounds, original = [], trainer._generate_and_score_completions
    tokenizer = build_tokenizer()

    def spy(inputs):
        output = original(inputs)
        round_ = trainer._round
        rounds.append({"prompts": [int(i) for i in round_.prompts], "increments": round_.increments,
                       "sizes": round_.sizes, "trained": round_.trained,
                       "rows": tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True),
                       "advantages": output["advantages"].tolist(),
                       "num_items_in_batch": int(output.get("num_items_in_batch", -1)),  # (RLOO has none: -1)
                       "loss_tokens": int((output["completion_mask"] * output.get("tool_mask", 1)).sum()),
                       })  # fmt: skip
        return output

    trainer._generate_and_score_completions = spy
    return rounds


def main(output_dir: str, *modes: str) -> None:
    for mode in modes or ("stages",):
        os.makedirs(f"{output_dir}/{mode}", exist_ok=True)
        if mode == "colocate_tp":
            from tests import colocate_tp_run

            colocate_tp_run.main(f"{output_dir}/{mode}")
        else:
            train(f"{output_dir}/{mode}", mode)


if __name__ == "__main__":
    main(*sys.argv[1:])
