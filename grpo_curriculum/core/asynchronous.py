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
    """The completions a per-prompt round plans on the asynchronous trainer: the samples of one optimizer step at a
    fixed sample count (`per_device_train_batch_size x gradient_accumulation_steps x num_processes`), the generation
    batch the synchronous trainer derives from the same settings."""
    return per_device_train_batch_size * gradient_accumulation_steps * num_processes


def async_problems(stages, *, max_steps, dynamic_sampling: bool = False, tools: bool = False,
                   rollout_worker: bool = False, budget: int | None = None,
                   at: str = "stages") -> list[Problem]:  # fmt: skip
    """
    What `CurriculumAsyncGRPOTrainer` refuses of a curriculum, one [`Problem`] each (empty: it runs as given).

    Args:
        stages (`list[Stage]` or `None`): The curriculum's stages (`None`: no schedule).
        max_steps (`int` or `None`): The config's `max_steps`.
        dynamic_sampling (`bool`): Whether the trainer drops zero-variance groups.
        tools (`bool`): Whether the trainer has tools or an environment factory.
        rollout_worker (`bool`): Whether a custom rollout worker is passed.
        budget (`int`, *optional*): A per-prompt round's completions ([`round_budget`]); `None`: not checked.
        at (`str`, *optional*, defaults to `"stages"`): The key path of the stages in the messages
            (`"curriculum.stages"` for a recipe).
    """
    problems = []
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
            problems.append(Problem(
                "per_device_train_batch_size", budget, f"a per-prompt round ({key}) plans per_device_train_batch_size "
                "x gradient_accumulation_steps x processes completions, which must be a sum of the candidates "
                f"{list(adaptive.num_generations)}", "set per_device_train_batch_size to a multiple of the smallest "
                "candidate (e.g. 16)"))  # fmt: skip
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
