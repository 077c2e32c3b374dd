"""
Run under `torchrun --nproc_per_node 2` (CPU, gloo) for tests/test_vllm_tp.py, as the last mode of
tests/distributed_run.py (or alone: `colocate_tp_run.py OUTPUT_DIR`).

Trains the tiny model with `use_vllm=True, vllm_mode="colocate", vllm_tensor_parallel_size=2` through TRL's real
`VLLMGeneration`, with the fake `vllm` module of tests/fake_vllm.py installed in this process (the only thing replaced:
the `LLM` engine and its parameter classes). Nothing of TRL's TP path is patched: `_init_vllm` creates the TP subgroup
with `torch.distributed.new_subgroups_by_enumeration` on the gloo default group, and `generate` all-gathers the prompts
within it, calls `LLM.generate` once with the gathered rows and keeps this rank's slice. No CUDA is involved: the only
device-specific call on that path (`barrier(device_ids=...)`) is taken with PEFT models only.

Writes `rank{R}.json`: what the reward function saw each round, every `LLM.generate` call (prompts, `SamplingParams`),
the `LLM` constructor arguments, the TP subgroup TRL built, and each dataset row's prompt ids and target words.
"""

import json
import sys

import pytest
import torch.distributed as dist

from grpo_curriculum import Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.demo.tasks import build_model, build_tokenizer
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer
from tests.conftest import RoundRecorder, grpo_args, indexed_dataset
from tests.fake_vllm import install_fake_vllm_colocate

# The fake completion is the prompt's 2 echo words + 3 digit tokens + <eos>: keep all of it.
MAX_COMPLETION_LENGTH = 6

# Per-device batch 4 x 2 processes = generation batch 8: at G = 8 every group spans both ranks.
STAGES = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=8, temperature=1.2)]


def main(output_dir: str) -> None:
    engine = install_fake_vllm_colocate(pytest.MonkeyPatch())  # never undone: the process ends with the run
    recorder = RoundRecorder()
    dataset = indexed_dataset()
    tokenizer = build_tokenizer()
    args = grpo_args(
        output_dir, per_device_train_batch_size=4, max_steps=4, shuffle_dataset=True, use_vllm=True,
        vllm_mode="colocate", vllm_tensor_parallel_size=2, max_completion_length=MAX_COMPLETION_LENGTH,
    )  # fmt: skip
    trainer = CurriculumGRPOTrainer(
        model=build_model(),
        processing_class=tokenizer,
        reward_funcs=recorder,
        args=args,
        train_dataset=dataset,
        callbacks=[CurriculumCallback(STAGES)],
    )
    recorder.trainer = trainer
    generation = trainer.vllm_generation
    tp_group = generation.tp_group
    trainer.train()

    rank = trainer.accelerator.process_index
    (llm,) = engine.llms
    record = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
        "tp_group": {
            "ranks": dist.get_process_group_ranks(tp_group),
            "rank_in_group": dist.get_rank(group=tp_group),
            "backend": str(dist.get_backend(tp_group)),
        },
        "llm_init": {k: llm.init_kwargs[k] for k in ("tensor_parallel_size", "seed", "distributed_executor_backend")},
        "calls": recorder.calls,
        "generate_calls": [
            {
                "prompts": call.prompts,
                "n": call.sampling_params.n,
                "temperature": call.sampling_params.temperature,
                "max_tokens": call.sampling_params.max_tokens,
            }
            for call in engine.generate_calls
        ],
        "switches": trainer._curriculum.switches,
        "history": [
            {k: v for k, v in h.items() if k.startswith("curriculum/") or k in ("step", "frac_reward_zero_std")}
            for h in trainer.state.log_history
            if "loss" in h
        ],
        "rows": [
            {"prompt_ids": tokenizer(text=row["prompt"])["input_ids"], "target": row["target"].split()}
            for row in dataset
        ],
    }
    with open(f"{output_dir}/rank{rank}.json", "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
