"""
The curriculum on TRL's asynchronous GRPO trainer (`trl.experimental.async_grpo.AsyncGRPOTrainer`, TRL 1.16):
everything here knows TRL's internals (docs/async.md).

What it supports today: DAPO-style **dynamic sampling** in the rollout worker. TRL's worker (`AsyncRolloutWorker`)
runs `_AsyncRolloutLoop` in a spawned child process; the loop generates every completion of a group, scores the whole
group (`_score_group`: rewards, then each completion's advantage over its own group) and puts its samples on the queue
the trainer batches from. [`DynamicSamplingRolloutLoop`] drops a group whose rewards carry no learning signal
(`core.signals.is_informative`: fewer than two finite rewards, or all equal, so every advantage is 0) there, after
scoring and before the queue: none of its samples reaches the trainer, and every dropped group is counted
(`rollout/dropped_groups_total`, `rollout/dropped_completions_total`) and logged as TRL's other trainers log it
(`frac_reward_zero_std`: the share of scored groups dropped). The worker keeps generating: the trainer's batches fill
with informative groups only.

Not supported (refused where a recipe could ask for it; docs/async.md says why): G and temperature schedules,
per-prompt G and skipping. TRL's loop fixes `num_generations` when the worker starts and closes a group when that many
of its completions are back, inside `_generate_loop`; the trainer computes its log-probabilities at the temperature
fixed into its fused LM head (`add_fused_lm_head(model, temperature=args.temperature)`) when it is built.
"""

from __future__ import annotations

from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker, _AsyncRolloutLoop

from ..core.errors import Problem, raise_if_any
from ..core.signals import is_informative

DROPPED_GROUPS = "rollout/dropped_groups_total"
DROPPED_COMPLETIONS = "rollout/dropped_completions_total"
ZERO_STD_FRACTION = "frac_reward_zero_std"


class DynamicSamplingRolloutLoop(_AsyncRolloutLoop):
    """TRL's rollout loop, dropping the groups without a learning signal before the queue (see the module docstring).
    Runs in the worker's child process: it is importable by name, so the spawned child can unpickle it."""

    async def _score_group(self, group):
        samples = await super()._score_group(group)
        # One reward per sample (a conversation's rows share its reward): the rewards are all equal, or fewer than two
        # are finite, exactly when they are so per conversation.
        informative = is_informative([sample.metrics["reward"] for sample in samples])
        self._rates[ZERO_STD_FRACTION][0] += not informative
        self._rates[ZERO_STD_FRACTION][1] += 1
        if informative:
            return samples
        self._counters[DROPPED_GROUPS] += 1
        self._counters[DROPPED_COMPLETIONS] += len(group.completions)
        return []


class CurriculumAsyncGRPOTrainer(AsyncGRPOTrainer):
    """
    TRL's `AsyncGRPOTrainer` with the curriculum's dynamic sampling in its rollout worker (see the module docstring).
    Without `dynamic_sampling` it is TRL's trainer, unchanged.

    Args:
        *args, **kwargs: TRL's `AsyncGRPOTrainer` arguments.
        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            Drop the groups whose rewards are all equal (or with fewer than two finite rewards) in the worker, before
            the queue. Needs `args.max_steps > 0`: TRL's epoch stop counts trained groups, and a dropped group is never
            trained, so an epoch-bounded run would go on to TRL's safety ceiling. Needs TRL's own rollout worker.
    """

    def __init__(self, *args, dynamic_sampling: bool = False, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if dynamic_sampling:
            raise_if_any(dynamic_sampling_problems(config, kwargs.get("rollout_worker")),
                         context="CurriculumAsyncGRPOTrainer")  # fmt: skip
        super().__init__(*args, **kwargs)
        self.dynamic_sampling = bool(dynamic_sampling)
        if dynamic_sampling and isinstance(self.rollout_worker, AsyncRolloutWorker):  # rank 0 holds the worker
            self.rollout_worker._loop_cls = DynamicSamplingRolloutLoop  # read by `AsyncRolloutWorker.start`


def dynamic_sampling_problems(config, rollout_worker=None) -> list[Problem]:
    """Why dynamic sampling cannot run with this `AsyncGRPOConfig` (and custom rollout worker); empty when it can."""
    problems = []
    max_steps = getattr(config, "max_steps", -1)
    if max_steps is None or max_steps <= 0:
        problems.append(Problem(
            "max_steps", max_steps, "must be set (> 0) with dynamic sampling on the asynchronous trainer: TRL's epoch "
            "stop counts trained prompt groups, and a dropped group is never trained",
            "set e.g. `max_steps: 100` (or turn dynamic sampling off)"))  # fmt: skip
    if rollout_worker is not None:
        problems.append(Problem(
            "rollout_worker", type(rollout_worker).__name__, "must be TRL's own `AsyncRolloutWorker` (the default) "
            "with dynamic sampling: the groups are dropped in its rollout loop", "leave `rollout_worker` unset"))  # fmt: skip
    return problems
