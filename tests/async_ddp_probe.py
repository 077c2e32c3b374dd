"""
TEST-ONLY: `CurriculumAsyncGRPOTrainer` on two processes (`torchrun --nproc-per-node 2`, gloo), against a running
`trl vllm-serve`, with the CPU stand-ins of tests/async_cpu.py; run by tests/test_async_real.py.

    torchrun --nproc-per-node 2 tests/async_ddp_probe.py MODEL_DIR SERVER_URL OUT_DIR [ddp|fsdp2]

Temperature 1.0 until step 2, then 0.4, at `learning_rate=0` (the trainer's weights stay the server's). Each process
writes `OUT_DIR/rank-N.json`: the loss temperatures its loss saw, its steps, and on rank 0 the log history and the
G and temperature of each group taken from the rollout queue. `fsdp2`: accelerate's FSDP2 on the CPU processes
(tests/fsdp_cpu.py's test-only patch of its device check; the parameters become DTensors sharded across both).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.async_cpu import NoWeightTransfer, allow_async_grpo_on_cpu  # noqa: E402
from tests.async_real import chat_tokenizer, record_taken, varied_reward  # noqa: E402


class _Patch:
    """`pytest`'s `monkeypatch.setattr`, for a process that ends after the run."""

    @staticmethod
    def setattr(target, name, value):
        setattr(target, name, value)


def main(model_dir: str, url: str, out: str, engine: str = "ddp") -> None:
    from datasets import Dataset
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum import Stage
    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer
    from grpo_curriculum.training._trl.async_trainer import LOSS_TEMPERATURE

    seen: list[float] = []

    class Recording(CurriculumAsyncGRPOTrainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            temperatures = inputs.get(LOSS_TEMPERATURE)
            if temperatures is not None:
                seen.extend(sorted({round(float(t), 4) for t in temperatures[inputs["token_index"] >= 0].tolist()}))
            return super().compute_loss(model, inputs, *args, **kwargs)

    allow_async_grpo_on_cpu(_Patch)
    taken = record_taken(_Patch)
    engine_args = {}
    if engine == "fsdp2":
        from tests.fsdp_cpu import allow_fsdp_on_cpu

        allow_fsdp_on_cpu()
        engine_args = {"fsdp": True, "fsdp_config": {"fsdp_version": 2}}
    args = AsyncGRPOConfig(
        output_dir=out, num_generations=4, max_completion_length=8, max_steps=12, vllm_server_base_url=url,
        bf16=False, gradient_checkpointing=False, use_cpu=True, report_to=[], max_staleness=100, seed=0,
        learning_rate=0.0, per_device_train_batch_size=4, max_inflight_tasks=4, queue_maxsize=2, save_strategy="no",
        logging_steps=1, **engine_args)  # fmt: skip
    stages = [Stage(num_generations=4, temperature=1.0, until_step=2), Stage(num_generations=4, temperature=0.4)]
    prompts = ["count one", "echo red", "count two", "echo cat"]
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    trainer = Recording(model=model_dir, reward_funcs=[varied_reward], args=args, train_dataset=dataset,
                        processing_class=chat_tokenizer(), weight_transfer=NoWeightTransfer(),
                        stages=stages)  # fmt: skip
    trainer.train()
    rank = trainer.accelerator.process_index
    from torch.distributed.tensor import DTensor

    parameters = list(trainer.model.parameters())
    result = {"rank": rank, "world_size": trainer.accelerator.num_processes, "global_step": trainer.state.global_step,
              "loss_temperatures": seen, "sharded": all(isinstance(p, DTensor) for p in parameters),
              "log_history": trainer.state.log_history if rank == 0 else [],
              "taken": [[t.group_id, t.model_version, t.num_generations, t.temperature] for t in taken]}  # fmt: skip
    Path(out, f"rank-{rank}.json").write_text(json.dumps(result))
    os._exit(0)  # TRL's rollout worker child and its queues: the run is over and its results are written


if __name__ == "__main__":
    main(*sys.argv[1:5])
