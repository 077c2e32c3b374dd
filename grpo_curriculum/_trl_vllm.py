"""
Request balancing for TRL's vLLM server mode (temporary module: to be merged into `_trl.py`, the one module that knows
TRL internals).

Tested against TRL 1.16. What this relies on:

- In server mode, the main process holds `trainer.vllm_generation.vllm_client` (a `trl.generation.vllm_client.
  VLLMClient`); other processes have none.
- `VLLMGeneration.generate` sends the round's unique prompts (`all_prompts[::G]`) in one call
  `vllm_client.generate(prompts=..., features=..., n=G, ...)`, reads `prompt_ids` (one per unique prompt) and
  `completion_ids` / `logprobs` / `logprob_token_ids` (G per prompt, prompt-major) from the returned dict, then
  repeats each prompt id G times.
- The server's `/server_info` (`VLLMClient.get_server_info`) reports `parallel_config.data_parallel_size`.
"""

from __future__ import annotations

import functools
import logging

from .vllm_plan import RequestPlan, plan_requests

logger = logging.getLogger("grpo_curriculum")

_PLAN_ATTRIBUTE = "_vllm_request_plan"


def _server_client(trainer):
    """The main process's `VLLMClient` in server mode, else `None` (colocate mode, other processes, no vLLM)."""
    if not getattr(trainer, "use_vllm", False):
        return None
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or getattr(generation, "mode", None) != "server":
        return None
    if not trainer.accelerator.is_main_process:
        return None
    return getattr(generation, "vllm_client", None)


def vllm_num_engines_from_server(trainer) -> int | None:
    """
    The number of data-parallel engines behind the trainer's vLLM server, as the server reports it.

    Args:
        trainer ([`~trl.GRPOTrainer`]):
            A trainer built with `use_vllm=True`.

    Returns:
        `int` or `None`: `parallel_config.data_parallel_size` from the server's `/server_info`, or `None` in colocate
        mode, on processes other than the main one, or when the server does not report it (no dev endpoints, older
        vLLM, unreachable).
    """
    client = _server_client(trainer)
    if client is None:
        return None
    try:
        info = client.get_server_info()
    except Exception as error:  # noqa: BLE001 - any failure means "unknown": keep TRL's layout
        logger.info("vLLM server did not report its data-parallel size (%s); keeping TRL's request layout.", error)
        return None
    size = (info or {}).get("parallel_config", {}).get("data_parallel_size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return None
    return size


def _expand(values, k: int):
    return None if values is None else [value for value in values for _ in range(k)]


def install_request_plan(trainer, num_engines: int | None) -> None:
    """
    Balance the trainer's vLLM server requests over `num_engines` data-parallel engines.

    Wraps `trainer.vllm_generation.vllm_client.generate` on the main process in server mode. Each call is planned from
    its own arguments ([`plan_requests`] with `len(prompts)` unique prompts and `n`), so a change of G between rounds
    is picked up: with a split `k > 1`, every prompt (and its `features`, if any) is sent `k` times in a row with
    `n = G / k`, and the result is handed back as TRL expects it: `prompt_ids` one per unique prompt (`[::k]`),
    completions and log-probs unchanged (the server returns choices prompt-major, so they already come in group order).
    The last plan is kept in `trainer._vllm_request_plan` for logging.

    Splitting is skipped (TRL's layout) when `generation_kwargs` fixes a sampling `seed`: identical sub-requests with
    the same seed would draw identical completions.

    Installing again replaces the previous plan's engine count. A no-op in colocate mode, on processes other than the
    main one, and when `num_engines` is `None`.

    Args:
        trainer ([`~trl.GRPOTrainer`]):
            A trainer built with `use_vllm=True`.
        num_engines (`int` or `None`):
            Data-parallel engines behind the server (see [`vllm_num_engines_from_server`]), `None` when unknown.
    """
    client = _server_client(trainer)
    if client is None or num_engines is None:
        return
    original = getattr(client.generate, "_grpo_curriculum_original", client.generate)

    @functools.wraps(original)
    def generate(prompts, features=None, n=1, **kwargs):
        generation_kwargs = kwargs.get("generation_kwargs") or {}
        if generation_kwargs.get("seed") is not None:
            plan = RequestPlan(len(prompts), n, num_engines, split=1)
        else:
            plan = plan_requests(len(prompts), n, num_engines)
        setattr(trainer, _PLAN_ATTRIBUTE, plan)
        k = plan.split
        if k == 1:
            return original(prompts=prompts, features=features, n=n, **kwargs)
        output = original(prompts=_expand(prompts, k), features=_expand(features, k), n=plan.n_per_request, **kwargs)
        return {**output, "prompt_ids": output["prompt_ids"][::k]}

    generate._grpo_curriculum_original = original
    generate._grpo_curriculum_num_engines = num_engines
    client.generate = generate
