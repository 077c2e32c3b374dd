"""
TEST-ONLY: TRL 1.16's `AsyncGRPOTrainer` on a CPU, for the real-engine tests of the asynchronous trainer
(tests/test_async_real.py, run by `make test-vllm`; docs/async.md). Not for training runs. (As tests/vllm_cpu.py is for
the synchronous trainers' server mode.)

Two parts of `AsyncGRPOTrainer` cannot run on a CPU:

- Its training forward: the trainer loads the policy with `attn_implementation="tree_fa3"`, whose kernel
  (`trl/experimental/async_grpo/packing.py`, `_flash_attn`) is fetched from the Hub with `kernels.get_kernel(
  "kernels-community/flash-attn3")`, a CUDA kernel. [`allow_async_grpo_on_cpu`] replaces `_flash_attn` with
  [`VarlenAttention`], the same `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
  max_seqlen_k, softmax_scale, causal, window_size)` contract in plain PyTorch (each query segment attends causally,
  aligned to the end, to its key path, as flash-attention's varlen causal mask does). TRL's tree packing, the indices
  it passes and the rest of the forward and loss run unpatched.
- Its weight transfer: TRL's `WeightTransferClient` streams the weights over NCCL only. The tests pass the trainer a
  [`NoWeightTransfer`] (TRL's documented `weight_transfer=` argument: "Pass a no-op implementation to disable
  trainer-side weight sync"): the server keeps its initial weights, so a test trains at `learning_rate=0` where its
  assertions need the engine to sample with the trainer's weights. (Without NCCL the package's `FileWeightTransfer`
  brings the trained weights to the server: tests/test_async_transfer_real.py.)

Everything else (the spawned rollout worker, its HTTP requests to `trl vllm-serve`, scoring, the queue, batching,
staleness, the loss) runs unpatched.
"""

from __future__ import annotations

from itertools import pairwise

import torch


class VarlenAttention:
    """`flash_attn_varlen_func` in PyTorch (see the module docstring); float32, any device."""

    @staticmethod
    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                               causal=True, window_size=(-1, -1), softcap=None):  # fmt: skip
        if window_size != (-1, -1) or softcap:
            raise NotImplementedError("the CPU stand-in for flash-attention has no sliding window or softcap")
        heads, kv_heads = q.shape[1], k.shape[1]
        if heads != kv_heads:
            k, v = (x.repeat_interleave(heads // kv_heads, dim=1) for x in (k, v))
        out = torch.empty_like(q)
        bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for (q0, q1), (k0, k1) in zip(pairwise(bounds_q), pairwise(bounds_k), strict=True):
            length_q, length_k = q1 - q0, k1 - k0
            mask = None
            if causal:  # flash-attention aligns the causal mask to the end: query i sees keys j <= i + (Lk - Lq)
                rows = torch.arange(length_q).unsqueeze(1) + (length_k - length_q)
                mask = torch.arange(length_k).unsqueeze(0) <= rows
            out[q0:q1] = torch.nn.functional.scaled_dot_product_attention(
                q[q0:q1].transpose(0, 1), k[k0:k1].transpose(0, 1), v[k0:k1].transpose(0, 1), attn_mask=mask,
                scale=softmax_scale).transpose(0, 1)  # fmt: skip
        return out


class NoWeightTransfer:
    """TRL's `WeightTransferProtocol`, doing nothing (see the module docstring); counts the weight syncs."""

    def __init__(self):
        self.syncs = 0

    def init_weight_transfer(self):
        pass

    def pause(self):
        pass

    def send_weights(self, iterator):
        for _ in iterator:  # TRL's gathers run; nothing reaches the server
            pass
        self.syncs += 1

    def resume(self):
        pass

    def destroy(self):
        pass


def allow_async_grpo_on_cpu(monkeypatch) -> None:
    """Patch `AsyncGRPOTrainer` for a CPU (test-only, see the module docstring)."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    monkeypatch.setattr(async_grpo_trainer, "get_peak_flops_per_device", lambda accelerator, dtype: None)
    monkeypatch.setattr(packing, "_flash_attn", lambda: VarlenAttention)


def build_async_trainer(monkeypatch, model_dir: str, output_dir: str, stages=None, **config):
    """A `CurriculumAsyncGRPOTrainer` built as TRL builds it, for tests without a server: the CPU patches above, a
    [`NoWeightTransfer`], and TRL's rollout worker made but never started (it needs neither vLLM nor aiohttp until
    it starts); four conversation prompts, a reward of 0, `max_steps` 8 unless `config` says otherwise."""
    from datasets import Dataset
    from trl.experimental.async_grpo import AsyncGRPOConfig, async_rollout_worker

    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    from .async_real import chat_tokenizer

    allow_async_grpo_on_cpu(monkeypatch)
    for check in ("is_vllm_available", "is_aiohttp_available"):
        monkeypatch.setattr(async_rollout_worker, check, lambda: True)
    args = AsyncGRPOConfig(output_dir=output_dir, use_cpu=True, bf16=False, report_to=[],
                           **{"max_steps": 8, "temperature": 1.0, "num_generations": 2, **config})  # fmt: skip
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "count one"}]] * 4})
    return CurriculumAsyncGRPOTrainer(
        model=model_dir, reward_funcs=[lambda completions, **kwargs: [0.0] * len(completions)], args=args,
        train_dataset=dataset, processing_class=chat_tokenizer(), weight_transfer=NoWeightTransfer(), stages=stages)
