"""
The curriculum in TRL's asynchronous rollout worker (`trl.experimental.async_grpo`, TRL 1.16; docs/async.md):
[`CurriculumRolloutLoop`] runs in the worker's spawned child process, in place of TRL's `_AsyncRolloutLoop` (installed
as the worker's `_loop_cls`, its settings in the worker's `_loop_kwargs`, by `CurriculumAsyncGRPOTrainer`).

TRL's loop generates every completion of a group (one `/v1/completions` request each), scores the whole group
(`_score_group`: rewards, then each completion's advantage over its own group) and queues its samples. This one, with
a stage schedule, plans each group when it starts, from the stage in force at the policy version then current: a
fixed-G stage takes the next prompt at its G, a per-prompt stage plans a round of prompts and their G with the
synchronous trainers' allocator (settled prompts skipped), and each group is sampled whole at its G and at its stage's
temperature, and keeps them until it is complete. Each sample records its G, temperature and stage. What to start
next, what a scored group counts for and the checkpoint's state are [`~training.async_curriculum.AsyncCurriculum`]'s;
the trainer asks for that state through a [`StateChannel`].
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import time

import numpy as np
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, _AsyncRolloutLoop

from ...core.signals import is_informative
from ..async_curriculum import AsyncCurriculum, PlannedGroup
from ..files import atomic_json, atomic_write
from ..schema import join_arrays, split_arrays

SAMPLED_G = "curriculum/num_generations"  # a sample's metrics: the G its group was planned and sampled at,
SAMPLED_TEMPERATURE = "curriculum/temperature"  # the temperature the engine sampled it at,
SAMPLED_STAGE = "curriculum/stage"  # and its stage (logged per step as the means over the samples trained on)
DEFERRED = "curriculum/deferred_total"  # prompts a per-prompt round skipped (summed over the logging window)
DROPPED_GROUPS = "rollout/dropped_groups_total"
DROPPED_COMPLETIONS = "rollout/dropped_completions_total"
ZERO_STD_FRACTION = "frac_reward_zero_std"
_SAMPLING_TEMPERATURE = contextvars.ContextVar("grpo_curriculum_sampling_temperature", default=None)


class CurriculumRolloutLoop(_AsyncRolloutLoop):
    """
    TRL's rollout loop with the curriculum (see the module docstring). Runs in the worker's child process (importable
    by name, so the spawned child can unpickle it).

    Args:
        schedule ([`~core.schedule.ResolvedSchedule`], *optional*):
            A stage schedule. A group's setting is the schedule's at the optimizer step of the policy version current
            when the group starts (`(version - 1) * weight_sync_steps`: TRL publishes version 1 before the first step
            and one more every `weight_sync_steps` steps); a per-prompt round's groups all get the setting of the
            version current when the round is planned. `None`: TRL's generation loop, unchanged.
        weight_sync_steps (`int`): `AsyncGRPOConfig.weight_sync_steps`.
        dynamic_sampling (`bool`): Drop the groups without a learning signal before the queue.
        budget (`int`): Completions a per-prompt round plans ([`~core.asynchronous.round_budget`]).
        seed (`int`): The run's seed (the deferral draws).
        state_dir (`str`, *optional*): Where the trainer asks for the curriculum state ([`StateChannel`]).
        resume (`dict`, *optional*): A checkpoint's curriculum state ([`~training.async_state.read_async_state`]).
        version_origin (`tuple[int, int]`, *optional*): The policy version current when the worker starts and its
            optimizer step (set by the trainer as it starts the worker; see [`AsyncCurriculum`]'s `origin`).
    """

    def __init__(self, *, schedule=None, weight_sync_steps: int = 1, dynamic_sampling: bool = False, budget: int = 0,
                 seed: int = 0, state_dir: str | None = None, resume: dict | None = None,
                 version_origin: tuple[int, int] = (1, 0), **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.dynamic_sampling = dynamic_sampling
        self.channel = None if state_dir is None else StateChannel(state_dir)
        self._planned: dict[int, PlannedGroup] = {}  # group id -> its plan, until it is scored
        self.curriculum = None if schedule is None else AsyncCurriculum(
            schedule, self.dataset, weight_sync_steps=weight_sync_steps, budget=budget, seed=seed, resume=resume,
            origin=version_origin)

    async def _generate_one_turn(self, prompt_ids):
        # TRL builds the request from `self.temperature` before its first `await`, so setting it here, from the
        # group's temperature in this task's context, is exact however many groups are in flight.
        temperature = _SAMPLING_TEMPERATURE.get()
        if temperature is not None:
            self.temperature = temperature
        return await super()._generate_one_turn(prompt_ids)

    async def _generate_loop(self, stop_event: asyncio.Event) -> None:
        """TRL's loop without a schedule; with one, each group started whole at its planned G and temperature, and
        queued for scoring when all its completions are back (no tools, no environments: the trainer refuses them
        with a schedule)."""
        if self.curriculum is None:
            return await super()._generate_loop(stop_event)
        pending: dict[int, RolloutGroup] = {}
        inflight: dict[asyncio.Task, int] = {}
        server = None if self.channel is None else asyncio.create_task(self._serve_state(stop_event))
        group_id = 0
        self._generation_start_time = time.monotonic()
        try:
            while True:
                self._heartbeat_value.value = time.time()
                while len(inflight) < self.max_inflight_tasks and not stop_event.is_set():
                    version = self.model_version
                    plan = self.curriculum.next_group(group_id, version)
                    self._counters[DEFERRED] += plan.deferred
                    row = plan.row
                    pending[group_id] = RolloutGroup(
                        prompts=[], reward_kwargs={key: [row[key]] * plan.size for key in row
                                                   if key not in {"prompt", "completion", "completion_ids"}},
                        completions=[], completions_ids=[], completions_sequences=[], tool_call_counts=[],
                        tool_failure_counts=[], model_version=version, group_id=group_id, env_rewards=[],
                        rollout_rewards=[])  # fmt: skip
                    self._planned[group_id] = plan
                    context = contextvars.copy_context()
                    context.run(_SAMPLING_TEMPERATURE.set, plan.temperature)
                    for _ in range(plan.size):
                        task = asyncio.create_task(self._generate_one(row["prompt"], tool_dict={}, tools=[],
                                                                      group_id=group_id), context=context)  # fmt: skip
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
                    group.prompts.append(self._planned[finished].row["prompt"])
                    group.completions.append(completion)
                    group.completions_ids.append(completion_ids)
                    group.completions_sequences.append(sequences)
                    group.tool_call_counts.append(calls)
                    group.tool_failure_counts.append(failures)
                    group.rollout_rewards.append(rollout_reward)
                    self._total_completion_tokens += len(completion_ids)
                    if len(group.completions) < self._planned[finished].size:
                        continue
                    group.queued_at = time.monotonic()
                    blocked = None
                    while True:
                        try:
                            self._groups_to_score.put_nowait(group)
                            break
                        except asyncio.QueueFull:
                            if stop_event.is_set():
                                return
                            blocked = blocked or time.monotonic()
                            await asyncio.sleep(0.1)
                    if blocked is not None:  # generation held back by scoring, as TRL's loop logs it
                        self._push_metrics({"rollout/score_block_s": time.monotonic() - blocked})
                    del pending[finished]
        finally:
            for task in [*inflight, *([server] if server is not None else [])]:
                task.cancel()
            if inflight:
                await asyncio.gather(*inflight, return_exceptions=True)
            try:
                self._groups_to_score.put_nowait(None)
            except asyncio.QueueFull:
                pass

    async def _score_group(self, group):
        samples = await super()._score_group(group)
        plan = self._planned.pop(group.group_id, None)
        rewards = [sample.metrics["reward"] for sample in samples]
        if plan is not None:
            for sample in samples:
                sample.metrics.update({SAMPLED_G: float(plan.size), SAMPLED_TEMPERATURE: plan.temperature,
                                       SAMPLED_STAGE: float(plan.stage)})  # fmt: skip
            skip = None if self.curriculum is None else self.curriculum.scored(group.group_id, plan, rewards)
            for name, value in (skip or {}).items():
                self._rates[f"curriculum/{name}"] = [value, 1.0]
        if not self.dynamic_sampling:
            return samples
        # One reward per sample (a conversation's rows share its reward): the rewards are all equal, or fewer than two
        # are finite, exactly when they are so per conversation.
        informative = is_informative(rewards)
        self._rates[ZERO_STD_FRACTION][0] += not informative
        self._rates[ZERO_STD_FRACTION][1] += 1
        if informative:
            return samples
        self._counters[DROPPED_GROUPS] += 1
        self._counters[DROPPED_COMPLETIONS] += len(group.completions)
        if self.curriculum is not None:
            self.curriculum.dropped(group.group_id)
        return []

    async def _serve_state(self, stop_event: asyncio.Event) -> None:
        """Answer the trainer's state requests ([`StateChannel`]) while the loop runs."""
        while not stop_event.is_set():
            request = self.channel.pending()
            if request is not None:
                self.channel.answer(request, self.curriculum.state(request["untrained"], request["trained_up_to"],
                                                                   request["dropped"]))
            await asyncio.sleep(0.05)


class StateChannel:
    """
    The trainer's requests for the worker's curriculum state, through files in a folder the trainer made for the run
    (TRL's worker starts its child with a fixed set of queues and events; a request is rare: one a checkpoint). The
    trainer writes `request.json` (`{"id": n, ...}`); the worker answers with `state-n.npz` (`numpy` arrays, through
    `numpy.savez`) and then `answer.json` (`{"id": n}`); every file is written atomically.
    """

    def __init__(self, folder: str):
        self.folder = folder
        self._answered = 0

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    # the worker's side

    def pending(self) -> dict | None:
        """The trainer's request not answered yet, or `None`."""
        try:
            with open(self._path("request.json"), encoding="utf-8") as f:
                request = json.load(f)
        except FileNotFoundError:
            return None
        return request if request["id"] > self._answered else None

    def answer(self, request: dict, state: dict) -> None:
        plain, arrays = split_arrays(state)
        atomic_write(self._path(f"state-{request['id']}.npz"),
                     lambda f: np.savez(f, state=np.array(json.dumps(plain)), **arrays), binary=True)  # fmt: skip
        atomic_json(self._path("answer.json"), {"id": request["id"]})
        self._answered = request["id"]

    # the trainer's side

    def request(self, untrained: list[int], trained_up_to: int, check_health, dropped: list[int] = (),
                timeout: float = 120.0) -> dict:  # fmt: skip
        """Ask the worker for its curriculum state and wait for it (`check_health()` raises if the worker died);
        `dropped`: the groups the trainer dropped as stale ([`~training.async_curriculum.AsyncCurriculum.state`])."""
        self._answered += 1
        atomic_json(self._path("request.json"), {"id": self._answered, "untrained": untrained,
                                                 "trained_up_to": trained_up_to, "dropped": list(dropped)})
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(self._path("answer.json"), encoding="utf-8") as f:
                    if json.load(f)["id"] == self._answered:
                        break
            except FileNotFoundError:
                pass
            check_health()
            if time.monotonic() > deadline:
                raise RuntimeError(f"grpo-curriculum: the rollout worker did not send its curriculum state within "
                                   f"{timeout:.0f} s, so the checkpoint would not hold it; the worker may be stuck.")
            time.sleep(0.02)
        path = self._path(f"state-{self._answered}.npz")
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files if name != "state"}
            state = json.loads(str(archive["state"]))
        os.remove(path)  # ours: the worker wrote it for this request
        return join_arrays(state, arrays)
