"""
What a curriculum on TRL's asynchronous GRPO trainer supports (`CurriculumAsyncGRPOTrainer`, and a recipe's
`trainer: async_grpo`; docs/async.md).

TRL's `AsyncGRPOTrainer` samples in a rollout worker (a child process) while it trains: a group is scored, and its
advantages computed, over its own completions, and queued; the trainer trains on what the queue holds, up to
`max_staleness` policy versions old. Supported on it: stage schedules of G and of the temperature (ramps included),
each group sampled whole at the G and temperature of the stage in force when it starts, and trained at that
temperature; per-prompt stages (`Adaptive(policy="per_prompt")`: each group at its own G, settled prompts skipped with
the synchronous knobs and defaults), and trainer-wide DAPO dynamic sampling (`dynamic_sampling=True`). Refused, each
with the fix: the other adaptive policies (they decide one G a round from the round's statistics; the worker has no
rounds to decide over), adaptive temperature bounds, a stage's `dynamic_sampling` (a round refill: use the trainer's),
comparisons, tools or environments with a schedule (the curriculum's generation loop samples plain prompts), no
`max_steps` (stage ends need a last step; TRL's epoch stop counts trained groups, and a skipped or dropped group is never
trained), and a custom rollout worker.
"""

from __future__ import annotations

from .errors import Problem
from .geometry import fills

POLICIES = ("per_prompt",)
"""The adaptive policies the asynchronous trainer runs."""


def round_budget(per_device_train_batch_size: int, gradient_accumulation_steps: int, num_processes: int) -> int:
    """The completions a per-prompt round plans on the asynchronous trainer: `per_device_train_batch_size x
    gradient_accumulation_steps x num_processes`, the generation batch the synchronous trainer derives from the same
    settings. A step trains on that many samples only when TRL batches by count (`token_budget <= 0`); under its
    default token batching a round is the allocator's planning unit, not a step ([`step_size`])."""
    return per_device_train_batch_size * gradient_accumulation_steps * num_processes


def step_size(per_device_train_batch_size: int, gradient_accumulation_steps: int, num_processes: int,
              token_budget: int | None) -> str:
    """
    What one optimizer step of TRL's `AsyncGRPOTrainer` trains on, in words: `gradient_accumulation_steps`
    micro-batches a process, each of `per_device_train_batch_size` samples when `token_budget <= 0` (TRL's
    `FixedCountBatcher`), else packed up to `token_budget` tokens (TRL's `TokenBudgetBatcher`; unset, TRL reads the
    vLLM server's `max_model_len` when training starts), so the samples a step varies with their lengths.

    >>> step_size(16, 1, 1, 0)
    '16 samples a step (16 per-device batch x 1 accumulation x 1 process)'
    >>> step_size(16, 2, 1, 512)
    'micro-batches of up to 512 tokens a process (token_budget), 2 a step: the samples a step vary with their lengths'
    """
    if token_budget is not None and token_budget <= 0:
        n = round_budget(per_device_train_batch_size, gradient_accumulation_steps, num_processes)
        processes = "1 process" if num_processes == 1 else f"{num_processes} processes"
        return (f"{n} samples a step ({per_device_train_batch_size} per-device batch x {gradient_accumulation_steps} "
                f"accumulation x {processes})")
    budget = (f"{token_budget} tokens a process (token_budget)" if token_budget is not None else
              "the vLLM server's max_model_len tokens a process (token_budget unset: read when training starts)")
    return (f"micro-batches of up to {budget}, {gradient_accumulation_steps} a step: the samples a step vary with "
            "their lengths")


def async_problems(stages, *, max_steps, dynamic_sampling: bool = False, tools: bool = False,
                   rollout_worker: bool = False, batch: tuple[int, int, int] | None = None, deepspeed: bool = False,
                   at: str = "stages") -> list[Problem]:  # fmt: skip
    """
    What `CurriculumAsyncGRPOTrainer` refuses of a curriculum, one [`Problem`] each (empty: it runs as given).

    Args:
        stages (`list[Stage]` or `None`): The curriculum's stages (`None`: no schedule).
        max_steps (`int` or `None`): The config's `max_steps`.
        dynamic_sampling (`bool`): Whether the trainer drops zero-variance groups.
        tools (`bool`): Whether the trainer has tools or an environment factory.
        rollout_worker (`bool`): Whether a custom rollout worker is passed.
        batch (`tuple[int, int, int]`, *optional*): `per_device_train_batch_size`, `gradient_accumulation_steps` and
            the processes, whose product a per-prompt round plans ([`round_budget`]); `None`: not checked.
        deepspeed (`bool`): Whether the run uses DeepSpeed (a config's `deepspeed`, or `accelerate launch`'s).
        at (`str`, *optional*, defaults to `"stages"`): The key path of the stages in the messages
            (`"curriculum.stages"` for a recipe).
    """
    problems = []
    budget = None if batch is None else round_budget(*batch)
    curriculum = stages is not None or dynamic_sampling
    if curriculum and (max_steps is None or max_steps <= 0):
        problems.append(Problem(
            "max_steps", max_steps, "must be set (> 0) with a curriculum on the asynchronous trainer: stage ends "
            "need a last step, and TRL's epoch stop counts trained prompt groups (a skipped or dropped group is never "
            "trained)", "set e.g. `max_steps: 100`"))  # fmt: skip
    if curriculum and rollout_worker:
        problems.append(Problem(
            "rollout_worker", "custom", "must be TRL's own `AsyncRolloutWorker` (the default) with a curriculum: the "
            "curriculum runs in its rollout loop", "leave `rollout_worker` unset"))  # fmt: skip
    if curriculum and deepspeed:
        problems.append(Problem(
            "deepspeed", "given", "is not supported with a curriculum on the asynchronous trainer: TRL's "
            "AsyncGRPOTrainer is built for FSDP2 (its weight sync gathers FSDP2's sharded tensors), and the "
            "curriculum's per-sample loss temperatures are tested under DDP and FSDP2 only", "use FSDP2 "
            "(`fsdp: full_shard` with `fsdp_config: {fsdp_version: 2}`) or DDP, or train without the curriculum"))
    if stages is not None and tools:
        problems.append(Problem(
            "tools", "given", "are not supported with a stage schedule on the asynchronous trainer (the curriculum's "
            "generation loop samples plain prompts)", "remove `tools` / `environment_factory`, or the stages"))
    for i, stage in enumerate(stages or ()):
        key = f"{at}[{i}]"
        adaptive = stage.adaptive
        if adaptive is not None and adaptive.policy not in POLICIES:
            problems.append(Problem(
                f"{key}.adaptive.policy", adaptive.policy, "is not supported on the asynchronous trainer: it decides "
                "one G a round from the round's statistics, and the worker samples groups one by one, not in rounds",
                "use `policy: per_prompt` (a G per prompt, settled prompts skipped), or fixed-G stages"))  # fmt: skip
        if adaptive is not None and adaptive.per_prompt and budget is not None and not fills(adaptive.num_generations,
                                                                                               budget):
            size, accumulation, processes = batch
            problems.append(Problem(
                "per_device_train_batch_size", size, f"a per-prompt round ({key}) plans per_device_train_batch_size x "
                f"gradient_accumulation_steps x processes = {size} x {accumulation} x {processes} = {budget} "
                f"completions, which must be a sum of the candidates {list(adaptive.num_generations)}",
                f"set per_device_train_batch_size: {_fitting(adaptive.num_generations, size, accumulation, processes)} "
                "(the next size whose round is such a sum), or choose candidates that sum to it"))
        if adaptive is not None and adaptive.temperature is not None:
            problems.append(Problem(
                f"{key}.adaptive.temperature", list(adaptive.temperature), "is not supported on the asynchronous "
                "trainer (temperature decisions from the round's signals)",
                "remove it and set the stage's `temperature` (a schedule or a ramp is supported)"))  # fmt: skip
        if stage.dynamic_sampling is not None:
            problems.append(Problem(
                f"{key}.dynamic_sampling", "given", "is not supported on the asynchronous trainer: it refills a round, "
                "and the worker has no rounds (it drops a zero-variance group and samples on)",
                "remove it and pass `dynamic_sampling=True` to the trainer"))  # fmt: skip
        if stage.comparison is not None:
            problems.append(Problem(
                f"{key}.comparison", "given", "is not supported on the asynchronous trainer",
                "remove `comparison` from this stage"))  # fmt: skip
    return problems


def _fitting(candidates, size: int, accumulation: int, processes: int) -> int:
    """The smallest per-device batch from `size` up whose round is a sum of `candidates` (one exists: a multiple of
    the smallest candidate is)."""
    while not fills(candidates, size * accumulation * processes):
        size += 1
    return size
