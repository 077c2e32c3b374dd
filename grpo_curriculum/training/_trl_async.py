"""
The curriculum on TRL's asynchronous GRPO trainer (`trl.experimental.async_grpo.AsyncGRPOTrainer`, TRL 1.16):
everything here knows TRL's internals (docs/async.md).

TRL's worker (`AsyncRolloutWorker`) runs `_AsyncRolloutLoop` in a spawned child process; the loop generates every
completion of a group (one `/v1/completions` request each), scores the whole group (`_score_group`: rewards, then each
completion's advantage over its own group) and puts its samples on the queue the trainer batches from.
[`CurriculumRolloutLoop`] (installed as the worker's `_loop_cls`, its settings in the worker's `_loop_kwargs`) adds:

- **Stage schedules of G**: its own generation loop starts each group whole at the G of the stage in force at the
  policy version current when the group starts, and the group keeps it until complete; each sample records it
  (`metrics["num_generations"]`).
- **Dynamic sampling** (DAPO): a group whose rewards carry no learning signal (`core.signals.is_informative`: fewer
  than two finite rewards, or all equal, so every advantage is 0) is dropped after scoring, before the queue, counted
  (`rollout/dropped_groups_total`, `rollout/dropped_completions_total`) and logged as TRL's other trainers log it
  (`frac_reward_zero_std`: the share of scored groups dropped). The worker keeps generating.

Refused (docs/async.md says why): temperature schedules and ramps (TRL computes its log-probabilities at the
temperature fixed into its fused LM head when the trainer is built, `add_fused_lm_head(model,
temperature=args.temperature)`), adaptive, per-prompt and top-up stages, comparisons, tools and environments with a
schedule.
"""

from __future__ import annotations

import asyncio
import time

from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker, RolloutGroup, _AsyncRolloutLoop

from ..core.asynchronous import async_problems
from ..core.errors import Problem, raise_if_any
from ..core.schedule import StageSchedule
from ..core.signals import is_informative

SAMPLED_G = "num_generations"  # a sample's metric: the G its group was planned and sampled at
DROPPED_GROUPS = "rollout/dropped_groups_total"
DROPPED_COMPLETIONS = "rollout/dropped_completions_total"
ZERO_STD_FRACTION = "frac_reward_zero_std"


class CurriculumRolloutLoop(_AsyncRolloutLoop):
    """
    TRL's rollout loop with the curriculum (see the module docstring). Runs in the worker's child process (importable
    by name, so the spawned child can unpickle it); its extra arguments travel in the worker's `_loop_kwargs`.

    Args:
        schedule ([`~core.schedule.ResolvedSchedule`], *optional*):
            A stage schedule of G. A group's G is the schedule's at the optimizer step of the policy version current
            when the group starts (`(version - 1) * weight_sync_steps`: TRL publishes version 1 before the first step
            and one more every `weight_sync_steps` steps): it keeps that G until it is complete, whatever is published
            meanwhile. `None`: TRL's generation loop, unchanged.
        weight_sync_steps (`int`): `AsyncGRPOConfig.weight_sync_steps`.
        dynamic_sampling (`bool`): Drop the groups without a learning signal before the queue.
    """

    def __init__(self, *, schedule=None, weight_sync_steps: int = 1, dynamic_sampling: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.schedule = schedule
        self.weight_sync_steps = weight_sync_steps
        self.dynamic_sampling = dynamic_sampling
        self._planned: dict[int, int] = {}  # group id -> its G

    def group_size(self, version: int) -> int:
        """The G of a group started while policy `version` is current."""
        if self.schedule is None:
            return self.num_generations
        return self.schedule.setting_at(max(version - 1, 0) * self.weight_sync_steps).num_generations

    def _next_row(self):
        try:
            return next(self._dataset_iter)
        except StopIteration:  # TRL's `_repeat_iterator` cycles the dataset the same way
            self._dataset_iter = iter(self.dataset)
            return next(self._dataset_iter)

    async def _generate_loop(self, stop_event: asyncio.Event) -> None:
        """TRL's loop without a schedule; with one, each group started whole at its own G and queued for scoring when
        all its completions are back (no tools, no environments: the trainer refuses them with a schedule)."""
        if self.schedule is None:
            return await super()._generate_loop(stop_event)
        pending: dict[int, RolloutGroup] = {}
        prompts: dict[int, list] = {}  # group id -> its prompt (messages)
        inflight: dict[asyncio.Task, int] = {}
        group_id = 0
        self._generation_start_time = time.monotonic()
        try:
            while True:
                self._heartbeat_value.value = time.time()
                while len(inflight) < self.max_inflight_tasks and not stop_event.is_set():
                    row = self._next_row()
                    version = self.model_version
                    size = self.group_size(version)
                    pending[group_id] = RolloutGroup(
                        prompts=[], reward_kwargs={key: [row[key]] * size for key in row
                                                   if key not in {"prompt", "completion", "completion_ids"}},
                        completions=[], completions_ids=[], completions_sequences=[], tool_call_counts=[],
                        tool_failure_counts=[], model_version=version, group_id=group_id, env_rewards=[],
                        rollout_rewards=[])  # fmt: skip
                    self._planned[group_id], prompts[group_id] = size, row["prompt"]
                    for _ in range(size):
                        task = asyncio.create_task(self._generate_one(row["prompt"], tool_dict={}, tools=[],
                                                                      group_id=group_id))  # fmt: skip
                        inflight[task] = group_id
                    group_id += 1
                self._inflight = len(inflight)
                if not inflight:
                    if stop_event.is_set():
                        return
                    await asyncio.sleep(0.01)
                    continue
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED, timeout=0.1)
                for task in done:
                    finished = inflight.pop(task)
                    if task.exception() is not None:
                        raise task.exception()
                    completion, completion_ids, sequences, calls, failures, rollout_reward = task.result()
                    group = pending[finished]
                    group.prompts.append(prompts[finished])
                    group.completions.append(completion)
                    group.completions_ids.append(completion_ids)
                    group.completions_sequences.append(sequences)
                    group.tool_call_counts.append(calls)
                    group.tool_failure_counts.append(failures)
                    group.rollout_rewards.append(rollout_reward)
                    self._total_completion_tokens += len(completion_ids)
                    if len(group.completions) < self._planned[finished]:
                        continue
                    group.queued_at = time.monotonic()
                    while True:
                        try:
                            self._groups_to_score.put_nowait(group)
                            break
                        except asyncio.QueueFull:
                            if stop_event.is_set():
                                return
                            await asyncio.sleep(0.1)
                    del pending[finished], prompts[finished]
        finally:
            for task in inflight:
                task.cancel()
            if inflight:
                await asyncio.gather(*inflight, return_exceptions=True)
            try:
                self._groups_to_score.put_nowait(None)
            except asyncio.QueueFull:
                pass

    async def _score_group(self, group):
        samples = await super()._score_group(group)
        planned = self._planned.pop(group.group_id, self.num_generations)
        for sample in samples:
            sample.metrics[SAMPLED_G] = float(planned)
        if not self.dynamic_sampling:
            return samples
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
    TRL's `AsyncGRPOTrainer` with the curriculum in its rollout worker (see the module docstring). Without `stages` and
    `dynamic_sampling` it is TRL's trainer, unchanged.

    Args:
        *args, **kwargs: TRL's `AsyncGRPOTrainer` arguments.
        stages (`list[Stage]` or [`~core.schedule.StageSchedule`], *optional*):
            A stage schedule of G (`Stage(num_generations=2, temperature=1.0, until_step=50)`, ...): each group is
            sampled whole at the G of the stage in force when it starts (see [`CurriculumRolloutLoop`]), and every
            sample logs it (`num_generations`). Every stage's temperature must be `args.temperature` (no ramp): TRL
            computes the loss at that temperature. Fixed-G stages only (no `adaptive`, stage `dynamic_sampling` or
            `comparison`); no tools or environments. Needs `args.max_steps > 0`.
        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            Drop the groups whose rewards are all equal (or with fewer than two finite rewards) in the worker, before
            the queue. Needs `args.max_steps > 0`: TRL's epoch stop counts trained groups, and a dropped group is never
            trained, so an epoch-bounded run would go on to TRL's safety ceiling.

    Both need TRL's own rollout worker (no `rollout_worker`).
    """

    def __init__(self, *args, stages=None, dynamic_sampling: bool = False, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        schedule, problems = curriculum_problems(config, stages, dynamic_sampling, **kwargs)
        raise_if_any(problems, context="CurriculumAsyncGRPOTrainer")
        super().__init__(*args, **kwargs)
        self.curriculum_schedule = schedule
        self.dynamic_sampling = bool(dynamic_sampling)
        if (schedule is not None or dynamic_sampling) and isinstance(self.rollout_worker, AsyncRolloutWorker):
            # rank 0 holds the worker; `AsyncRolloutWorker.start` spawns `_loop_cls(**_loop_kwargs)` in its child
            self.rollout_worker._loop_cls = CurriculumRolloutLoop
            self.rollout_worker._loop_kwargs.update(schedule=schedule, weight_sync_steps=self.args.weight_sync_steps,
                                                    dynamic_sampling=self.dynamic_sampling)  # fmt: skip


def curriculum_problems(config, stages=None, dynamic_sampling: bool = False, **kwargs):
    """
    The resolved schedule of `stages` (`None` without stages or with a problem) and every problem of this curriculum
    on the asynchronous trainer ([`~core.asynchronous.async_problems`] and the stages' own), before any model loads.
    `kwargs`: the trainer's other keyword arguments (`tools`, `environment_factory`, `rollout_worker`).
    """
    schedule, problems = None, []
    if stages is not None:
        schedule = stages if isinstance(stages, StageSchedule) else StageSchedule(stages)
        problems += schedule.problems()
    max_steps = getattr(config, "max_steps", -1)
    problems += async_problems(None if schedule is None else schedule.stages, max_steps=max_steps,
                               dynamic_sampling=bool(dynamic_sampling),
                               tools=bool(kwargs.get("tools") or kwargs.get("environment_factory")),
                               rollout_worker=kwargs.get("rollout_worker") is not None)  # fmt: skip
    temperature = getattr(config, "temperature", 1.0)
    for i, stage in enumerate(schedule.stages if schedule is not None else ()):  # not yet built: the next commits
        if stage.temperature != temperature or stage.temperature_end is not None:
            problems.append(Problem(f"stages[{i}].temperature", stage.temperature, "must be the config's temperature "
                                    "(no schedule yet)", f"set `temperature={temperature}` on every stage"))
        if stage.adaptive is not None and stage.adaptive.per_prompt:
            problems.append(Problem(f"stages[{i}].adaptive", "per_prompt", "not yet", "use fixed-G stages"))
    if schedule is None or problems:
        return None, problems
    return schedule.resolve(max_steps), problems
