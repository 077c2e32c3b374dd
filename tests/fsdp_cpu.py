"""
TEST-ONLY: real FSDP2 on CPU processes (gloo), for tests/test_engines.py. Not for training runs. (It also runs the
DeepSpeed test there: without an FSDP plugin the patch changes nothing.)

accelerate sets `DistributedType.FSDP` only for GPU-like devices: on CPU processes an FSDP plugin is dropped and the
run trains as plain DDP (`MULTI_CPU`). torch's own `fully_shard` does work on a CPU mesh with gloo (the parameters
become DTensors sharded across the processes), so [`allow_fsdp_on_cpu`] patches accelerate's state right after it is
built: when an FSDP plugin was given and accelerate chose `MULTI_CPU`, the state says `FSDP` with that plugin, and
`Accelerator.prepare` then wraps the model with `fully_shard` as it does on GPUs. Everything else (TRL's trainer,
transformers' checkpointing and saving, the curriculum) runs unpatched.

    python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_cpu.py train RECIPE [--key value ...]

runs `grpo-curriculum train` (the CLI's own `main`) with the patch in place. With `FSDP_CPU_RECORD=DIR` set, each
process also writes `DIR/rankR.json` when training ends ([`record_ranks`]): every generation round's step, G and
temperature, the switches, and whether the model really is sharded (its parameters DTensors, or ZeRO-3 partitions, each
process holding a part).
"""

import json
import os
import sys


def allow_fsdp_on_cpu() -> None:
    """Patch `accelerate.state.AcceleratorState.__init__` (test-only, see the module docstring)."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__
    if getattr(original, "_fsdp_on_cpu", False):
        return

    def __init__(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    __init__._fsdp_on_cpu = True
    AcceleratorState.__init__ = __init__


def record_ranks(folder: str) -> None:
    """Patch `CurriculumGRPOTrainer` to write each process's rounds, switches and sharding to `folder/rankR.json`."""
    from torch.distributed.tensor import DTensor

    from grpo_curriculum.training.engines import engine
    from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

    generate, train = CurriculumGRPOTrainer._generate_and_score_completions, CurriculumGRPOTrainer.train
    rounds = []

    def _generate_and_score_completions(self, inputs):
        output = generate(self, inputs)  # (the round's G and temperature are set when it starts, inside)
        if self.model.training:
            rounds.append([self.state.global_step, self.num_generations, self.temperature, len(inputs)])
        return output

    def train_and_record(self, *args, **kwargs):
        result = train(self, *args, **kwargs)
        parameters = list(self.model.parameters())
        zero3 = [hasattr(p, "ds_tensor") for p in parameters]  # DeepSpeed ZeRO-3: each process holds `ds_tensor`
        record = {"rounds": rounds, "switches": self._curriculum.switches,
                  "sharded": bool(parameters) and (all(zero3) or all(isinstance(p, DTensor) for p in parameters)),
                  "local": sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else
                               p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in parameters),
                  "full": sum(p.ds_numel if hasattr(p, "ds_tensor") else p.numel() for p in parameters),
                  "engine": engine(self)}  # fmt: skip
        with open(os.path.join(folder, f"rank{self.accelerator.process_index}.json"), "w") as file:
            json.dump(record, file)
        return result

    CurriculumGRPOTrainer._generate_and_score_completions = _generate_and_score_completions
    CurriculumGRPOTrainer.train = train_and_record


if __name__ == "__main__":
    allow_fsdp_on_cpu()
    if os.environ.get("FSDP_CPU_RECORD"):
        record_ranks(os.environ["FSDP_CPU_RECORD"])
    from grpo_curriculum.cli.main import main

    sys.exit(main(sys.argv[1:]))
