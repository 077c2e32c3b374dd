"""
The curriculum in TRL's asynchronous rollout worker (`trl.experimental.async_grpo`, TRL 1.16; docs/async.md):
[`CurriculumRolloutLoop`] runs in the worker's spawned child process, in place of TRL's `_AsyncRolloutLoop` (installed
as the worker's `_loop_cls`, its settings in the worker's `_loop_kwargs`, by `CurriculumAsyncGRPOTrainer`).

TRL's loop generates every completion of a group (one `/v1/completions` request each), scores the whole group
(`_score_group`: rewards, then each completion's advantage over its own group) and queues its samples. This one, with
a stage schedule, plans each group when it starts, from the stage in force at the policy version then current: a
fixed-G stage takes the next prompt at its G, a per-prompt stage plans a round of prompts and their G with the
synchronous trainers' allocator (settled prompts skipped), and each group is sampled whole at its G and at its stage's
temperature, and keeps them until it is complete. Each sample records its G, temperature and stage. The prompts come
from the same stream as the synchronous trainers' (`training.stream.PromptStream`, the dataset in order, as TRL's
worker reads it), so what the curriculum state records of it is what a resume needs ([`StateChannel`]).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, _AsyncRolloutLoop

from ..core.adaptive import make_policy
from ..core.signals import is_informative, round_stats
from .checkpoint import _join_arrays, _split_arrays, atomic_json, atomic_write
from .stream import PromptStream, per_prompt_round, prompt_keys, prompt_slots

SAMPLED_G = "curriculum/num_generations"  # a sample's metrics: the G its group was planned and sampled at,
SAMPLED_TEMPERATURE = "curriculum/temperature"  # the temperature the engine sampled it at,
SAMPLED_STAGE = "curriculum/stage"  # and its stage (logged per step as the means over the samples trained on)
DEFERRED = "curriculum/deferred_total"  # prompts a per-prompt round skipped (summed over the logging window)
DROPPED_GROUPS = "rollout/dropped_groups_total"
DROPPED_COMPLETIONS = "rollout/dropped_completions_total"
ZERO_STD_FRACTION = "frac_reward_zero_std"
_SAMPLING_TEMPERATURE = contextvars.ContextVar("grpo_curriculum_sampling_temperature", default=None)


@dataclass
class PlannedGroup:
    """A group as the curriculum plans it when it starts: its dataset row, G, sampling temperature and stage, and its
    prompt's key in a per-prompt stage (`None` in a fixed-G stage)."""

    row: dict
    size: int
    temperature: float
    stage: int
    key: str | None = None


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
    """

    def __init__(self, *, schedule=None, weight_sync_steps: int = 1, dynamic_sampling: bool = False, budget: int = 0,
                 seed: int = 0, state_dir: str | None = None, resume: dict | None = None, **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.schedule, self.weight_sync_steps, self.dynamic_sampling = schedule, weight_sync_steps, dynamic_sampling
        self.budget, self.seed = budget, seed
        self.channel = None if state_dir is None else StateChannel(state_dir)
        self._planned: dict[int, PlannedGroup] = {}  # group id -> its plan, until it is scored
        if schedule is None:
            return
        self.stream = PromptStream(self.dataset, shuffle=False, seed=seed)
        self.slots = prompt_slots(self.stream)
        self.policy = self.policy_stage = None  # the per-prompt stage's policy, made when the stage is first planned
        self._queue: deque[PlannedGroup] = deque()  # the groups planned and not started yet
        self._queue_start: dict = self.stream.state()  # where the stream stood before the planned groups
        self._starts: dict[int, dict] = {}  # group id -> where the stream stood before it was planned
        self._dropped: set[int] = set()  # group ids dynamic sampling dropped (never trained)
        self._observed: list[tuple[str, list[float]]] = []  # the per-prompt stage's scored groups not yet observed
        if resume is not None:
            self.stream.load_state(resume["stream"])
            self._queue_start = self.stream.state()
            if resume["policy_stage"] is not None:
                self._make_policy(resume["policy_stage"], 1.0).load_state_dict(resume["policy"])

    def step_of(self, version: int) -> int:
        """The optimizer step whose setting a group started while policy `version` is current gets."""
        return max(version - 1, 0) * self.weight_sync_steps

    def _make_policy(self, stage: int, temperature: float):
        adaptive = self.schedule.stages[stage].adaptive
        self.policy = make_policy(adaptive, adaptive.num_generations[0], temperature)
        self.policy.bind(budget=self.budget, slots=self.slots, seed=self.seed)
        self.policy_stage, self._observed = stage, []
        return self.policy

    def next_group(self, version: int) -> PlannedGroup:
        """The next group to start while policy `version` is current (planning a round first when none is left)."""
        if not self._queue:
            self._queue_start = self.stream.state()
            setting = self.schedule.setting_at(self.step_of(version))
            adaptive = self.schedule.stages[setting.stage].adaptive
            if adaptive is None:  # a fixed-G stage: the next prompt
                prompts, sizes, keys = self.stream.take(1), [setting.num_generations], [None]
            else:
                if self.policy_stage != setting.stage:
                    self._make_policy(setting.stage, setting.temperature)
                planned = per_prompt_round(self.stream, self.policy)
                if planned is None:
                    raise ValueError(f"The train dataset has too few prompts to fill one per-prompt round of "
                                     f"{self.budget} completions: use a larger dataset, a smaller "
                                     "per_device_train_batch_size, or larger num_generations candidates.")
                _, plan, prompts = planned
                sizes, keys = plan["sizes"], prompt_keys(self.stream, prompts)
                self._counters[DEFERRED] += plan["deferred"]
            for row, size, key in zip(self.stream.materialize(prompts), sizes, keys, strict=True):
                self._queue.append(PlannedGroup(row, size, setting.temperature, setting.stage, key))
        return self._queue.popleft()

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
        if self.schedule is None:
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
                    plan = self.next_group(version)
                    self._starts[group_id] = self._queue_start
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
                    while True:
                        try:
                            self._groups_to_score.put_nowait(group)
                            break
                        except asyncio.QueueFull:
                            if stop_event.is_set():
                                return
                            await asyncio.sleep(0.1)
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
            if plan.key is not None and plan.stage == self.policy_stage:
                self._observe(plan.key, rewards)
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
        if self.schedule is not None:
            self._dropped.add(group.group_id)
        return []

    def _observe(self, key: str, rewards: list[float]) -> None:
        """Count a per-prompt stage's scored group; a round's worth of them (the round's prompt count) updates the
        policy's statistics and GRESO's skip probabilities at once, as one synchronous round does."""
        self._observed.append((key, rewards))
        if len(self._observed) < self.policy.allocator.prompts:
            return
        keys, groups = zip(*self._observed, strict=True)
        self._observed = []
        adaptive = self.schedule.stages[self.policy_stage].adaptive
        self.policy.observe(round_stats([r for g in groups for r in g], [len(g) for g in groups], prompt_keys=keys,
                                        success_threshold=adaptive.success_threshold))  # fmt: skip
        for name, value in self.policy.allocator.skip_probabilities().items():
            self._rates[f"curriculum/{name}"] = [value, 1.0]

    def curriculum_state(self, untrained: list[int], trained_up_to: int) -> dict:
        """
        The curriculum state a checkpoint needs, given the group ids the trainer has not trained below
        `trained_up_to` (it trained every other id below it): the stream as it stood before the first group that is
        neither trained nor dropped (a resumed worker starts there), and the per-prompt policy as it is now.
        """
        first = next((g for g in untrained if g not in self._dropped), None)
        if first is None:
            first = next(g for g in range(trained_up_to, trained_up_to + len(self._dropped) + 1)
                         if g not in self._dropped)  # fmt: skip
        stream = self._starts.get(first, self._queue_start if self._queue else self.stream.state())
        for g in [g for g in self._starts if g < first]:  # the trainer's first untrained group only moves on
            del self._starts[g]
        self._dropped = {g for g in self._dropped if g >= first}
        policy = None if self.policy is None else self.policy.state_dict()
        return {"stream": stream, "policy_stage": self.policy_stage, "policy": policy}

    async def _serve_state(self, stop_event: asyncio.Event) -> None:
        """Answer the trainer's state requests ([`StateChannel`]) while the loop runs."""
        while not stop_event.is_set():
            request = self.channel.pending()
            if request is not None:
                self.channel.answer(request, self.curriculum_state(request["untrained"], request["trained_up_to"]))
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
        plain, arrays = _split_arrays(state)
        atomic_write(self._path(f"state-{request['id']}.npz"),
                     lambda f: np.savez(f, state=np.array(json.dumps(plain)), **arrays), binary=True)  # fmt: skip
        atomic_json(self._path("answer.json"), {"id": request["id"]})
        self._answered = request["id"]

    # the trainer's side

    def request(self, untrained: list[int], trained_up_to: int, check_health, timeout: float = 120.0) -> dict:
        """Ask the worker for its curriculum state and wait for it (`check_health()` raises if the worker died)."""
        self._answered += 1
        atomic_json(self._path("request.json"), {"id": self._answered, "untrained": untrained,
                                                 "trained_up_to": trained_up_to})  # fmt: skip
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
        return _join_arrays(state, arrays)
