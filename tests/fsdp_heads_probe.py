"""
TEST-ONLY: the asynchronous trainer's per-term loss temperatures (`_trl.async_trainer.LossTemperatures`) under real
FSDP2 on two CPU processes (gloo), for tests/test_async_temperature.py.

    python -m torch.distributed.run --nproc_per_node 2 tests/fsdp_heads_probe.py OUT_DIR

Each process builds the same tiny Llama, adds TRL's fused LM head and `LossTemperatures` (as
`CurriculumAsyncGRPOTrainer` does before accelerate prepares the model), shards it with torch's `fully_shard` (each
decoder layer, then the root: accelerate's FSDP2 layout), and trains one micro-batch of its own whose loss terms mix
temperatures: two on rank 0, three on rank 1, so the head is applied twice on one process and three times on the
other, the body once on each (the processes gather the same parameters the same number of times). A full
copy on every process computes the same two micro-batches unsharded with a whole forward per temperature (the
implementation before issue 51: `PerTemperaturePasses` of benchmarks/loss_temperatures.py). Then the same micro-batches
(forward only) with the LM head sharded on its own as well, so TRL's head reads a `DTensor` weight, gathered once
for every temperature (gathered once per head, two gathers on rank 0 and three on rank 1 would not match). Each process
writes `OUT_DIR/rank-R.json`: its loss, the reference's, the largest difference between each sharded gradient
(gathered) and the reference's mean gradient, its head and body passes (and body forward calls counted by a hook), and
the loss with the head sharded.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

VOCAB = 50
TEMPERATURES = ([1.0, 0.4, 1.0, 0.4, 0.4, 1.0, 1.0], [1.0, 0.4, 1.0, 0.4, 0.4, 1.0, 0.7])  # rank 1: three, rank 0: two


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=64))  # fmt: skip
    with torch.no_grad():  # logits far from uniform, so that temperatures differ clearly
        model.get_output_embeddings().weight.mul_(8.0)
    return model.train()


def _with_heads(model, before: bool = False):
    from loss_temperatures import PerTemperaturePasses
    from trl.trainer.utils import add_fused_lm_head

    from grpo_curriculum.training._trl.async_trainer import LossTemperatures

    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))  # as AsyncGRPOTrainer does
    return (PerTemperaturePasses if before else LossTemperatures)(model, temperature=1.0)


def _batch(rank: int):
    """A micro-batch of rank `rank`: ids, labels and its loss terms (positions, temperatures of two kinds)."""
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(10 + rank))
    labels = torch.cat([ids[0, 1:], torch.tensor([-100])]).unsqueeze(0)
    index = torch.tensor([1, 3, 4, 4, 7, 9, 10])
    temperatures = torch.tensor(TEMPERATURES[rank], dtype=torch.float64)
    return ids, labels, index, temperatures


def _loss(model, heads, batch):
    ids, labels, index, temperatures = batch
    heads.plan = (index, temperatures)
    try:
        output = model(input_ids=ids, shift_labels=labels, fused_lm_head=True)
    finally:
        heads.plan = None
    weights = torch.linspace(0.5, 1.5, len(index))  # terms weighted unequally, entropy in it too
    return -(output.log_probs[0] * weights).sum() + 0.1 * output.entropy[0].sum()


def main(out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = _model()
    reference, head_sharded = copy.deepcopy(model), copy.deepcopy(model)
    heads, reference_heads = _with_heads(model), _with_heads(reference, before=True)
    sharded_head_heads = _with_heads(head_sharded)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for layer in [*head_sharded.model.layers, head_sharded.lm_head]:  # the head too: never called, left sharded
        fully_shard(layer, mesh=mesh)
    fully_shard(head_sharded, mesh=mesh)
    body_calls = []
    model.model.register_forward_hook(lambda *_: body_calls.append(1))

    loss = _loss(model, heads, _batch(rank))
    loss.backward()
    references = [_loss(reference, reference_heads, _batch(r)) for r in range(world)]
    (sum(references) / world).backward()  # FSDP2 averages the ranks' gradients

    with torch.no_grad():
        head_sharded_loss = _loss(head_sharded, sharded_head_heads, _batch(rank))
    head_is_dtensor = isinstance(head_sharded.lm_head.weight, DTensor)

    names = dict(reference.named_parameters())
    gaps, sharded = {}, []
    for name, parameter in model.named_parameters():
        sharded.append(isinstance(parameter, DTensor))
        grad = parameter.grad.full_tensor() if isinstance(parameter.grad, DTensor) else parameter.grad
        gaps[name] = float((grad - names[name].grad).abs().max())
    result = {"rank": rank, "loss": float(loss), "reference": float(references[rank]), "gaps": gaps,
              "sharded": all(sharded), "head_passes": heads.head_passes, "body_passes": heads.body_passes,
              "body_calls": len(body_calls), "head_sharded_loss": float(head_sharded_loss),
              "head_is_dtensor": head_is_dtensor, "head_sharded_head_passes": sharded_head_heads.head_passes,
              "grad_scale": float(max(p.grad.abs().max() for p in reference.parameters()))}  # fmt: skip
    Path(out, f"rank-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1])
