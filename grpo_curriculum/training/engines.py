"""
The engine a run trains with (DDP, FSDP, DeepSpeed), as accelerate set it up, and the final save every engine can load
with `from_pretrained`. Reads transformers' `Trainer` and accelerate's state only (no TRL internals), for `train`.
"""

from __future__ import annotations

import os

__all__ = ["engine", "fsdp_fallback", "save_final_model"]


def engine(trainer) -> str:
    """
    The engine accelerate wraps the model with in this run, as a short name: `FSDP2`, `FSDP1` (with the state dict
    type its checkpoints use), `DeepSpeed ZeRO-N`, `DDP` (several processes) or `single process`.
    """
    state = trainer.accelerator.state
    if trainer.is_fsdp_enabled:
        plugin = state.fsdp_plugin
        kind = str(plugin.state_dict_type).rsplit(".", 1)[-1]
        return f"FSDP{plugin.fsdp_version} ({kind} checkpoints)"
    if trainer.is_deepspeed_enabled:
        zero = state.deepspeed_plugin.deepspeed_config.get("zero_optimization", {})
        return f"DeepSpeed ZeRO-{zero.get('stage', 0)}"
    return "DDP" if trainer.accelerator.num_processes > 1 else "single process"


def fsdp_fallback(trainer) -> str | None:
    """
    Why this run trains without FSDP although it asked for it (the `fsdp` field, or `accelerate launch --use_fsdp`),
    or `None`. accelerate sets up FSDP only on GPU-like devices: on CPU processes (`use_cpu: true`, or no GPU) it drops
    the FSDP plugin and trains plain DDP (every process holds the whole model), without a word.
    """
    asked = bool(trainer.args.fsdp) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")
    if not asked or trainer.is_fsdp_enabled:
        return None
    device = trainer.accelerator.device.type
    return (f"FSDP was requested, but accelerate runs {engine(trainer)} on {device} processes: it sets up FSDP only "
            "on GPU-like devices (CUDA, XPU, NPU, ...), so every process holds the whole model. On GPUs, remove "
            "`use_cpu: true`; on CPU, remove `fsdp`/`fsdp_config` (or launch without `--use_fsdp`) to train DDP "
            "knowingly.")


def save_final_model(trainer) -> None:
    """
    Save the trained model to `args.output_dir` for `from_pretrained`. Call it on every process: transformers'
    `Trainer.save_model` (what TRL's own scripts call on every process) gathers the weights in a collective under FSDP
    `FULL_STATE_DICT` and DeepSpeed ZeRO-3, and writes from the first process only. Under FSDP `SHARDED_STATE_DICT`
    (checkpoints as one shard per process) `save_model` writes nothing, so the final save switches accelerate's plugin
    to `FULL_STATE_DICT` first (accelerate's documented "train sharded, save full" use of `set_state_dict_type`).
    Under ZeRO-3 without `stage3_gather_16bit_weights_on_model_save`, transformers writes a DeepSpeed checkpoint
    instead, with its `zero_to_fp32.py` to consolidate it.
    """
    if trainer.is_fsdp_enabled and "FULL_STATE_DICT" not in str(trainer.accelerator.state.fsdp_plugin.state_dict_type):
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model()
