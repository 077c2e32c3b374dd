"""
What the asynchronous trainer's rollout worker knows of the curriculum (docs/async.md), apart from TRL's loop
([`~training._trl.async_worker.CurriculumRolloutLoop`] drives it): which group to start next and at what setting,
what a scored group tells a per-prompt stage's statistics, and the state a checkpoint needs.

Groups are numbered in the order they start (TRL's `group_id`). A checkpoint records the first group the trainer had
neither trained nor seen dropped: where the prompt stream stood before its round, and for a per-prompt round its plan
and how many of its groups came before that one. A resumed worker samples that round again from that group on (the same
prompts, G and temperature), then goes on planning. The groups from that one on had their first scoring counted in the
saved statistics (or in the saved scored groups not yet applied to them): up to the point the stream had reached at the
save (the frontier), a scored group of a prompt the save lists as counted is not counted again, once per listing, as
the synchronous trainers do not observe a round they regenerate after a resume.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..core.schedule import Setting
from ..core.signals import finite_or_none, round_stats
from .driver import CurriculumDriver
from .round import Round
from .stream import PromptStream, prompt_keys, prompt_slots

# the end of a per-prompt round's "too few prompts" error, at a round of {0} completions
ROUND_FIX = ("per-prompt round of {0} completions: use a larger dataset, a smaller per_device_train_batch_size, or "
             "larger num_generations candidates.")


@dataclass
class PlannedGroup:
    """A group as the curriculum plans it when it starts: its dataset row, G, sampling temperature and stage, its
    prompt's key in a per-prompt stage (`None` in a fixed-G stage), the prompts its round deferred (counted on the
    round's first group), and whether a resumed checkpoint may have counted it already."""

    row: dict
    size: int
    temperature: float
    stage: int
    key: str | None = None
    deferred: int = 0
    replay: bool = False


def _position(state: dict) -> tuple[int, int]:
    return state["epoch"], state["position"]


class AsyncCurriculum:
    """
    The worker's curriculum: the driver ([`~training.driver.CurriculumDriver`], the synchronous trainers' own) deciding
    each round over the dataset's prompt stream, and the bookkeeping of the groups a round is split into.

    Args:
        schedule ([`~core.schedule.ResolvedSchedule`]): The stage schedule.
        dataset: The train dataset (read in order, as TRL's worker reads it).
        weight_sync_steps (`int`): `AsyncGRPOConfig.weight_sync_steps`.
        budget (`int`): Completions a per-prompt round plans ([`~core.asynchronous.round_budget`]).
        seed (`int`): The run's seed (the deferral draws).
        resume (`dict`, *optional*): A checkpoint's curriculum state ([`~training.async_state.read_async_state`]).
        origin (`tuple[int, int]`, *optional*, defaults to `(1, 0)`): The policy version current when the worker
            starts and the optimizer step it was published at ([`step_of`]): `(1, 0)` for a new run; a resumed one
            starts at the checkpoint's step with the checkpoint's version plus one (TRL restores the version, then
            publishes the next one at its start-of-training weight sync).
    """

    def __init__(self, schedule, dataset, *, budget: int, weight_sync_steps: int = 1, seed: int = 0,
                 resume: dict | None = None, origin: tuple[int, int] = (1, 0)):  # fmt: skip
        self.schedule, self.weight_sync_steps, self.budget, self.seed = schedule, weight_sync_steps, budget, seed
        self.origin = tuple(origin)
        self.stream = PromptStream(dataset, shuffle=False, seed=seed)
        self.driver = CurriculumDriver(list(schedule.stages), uncertain_prompts=0)
        self.driver.resolved = schedule
        self.driver.round_context = {"budget": budget, "slots": prompt_slots(self.stream), "seed": seed}
        self._round: Round | None = None  # the round being started
        self._queue: list[PlannedGroup] = []  # its groups not started yet
        self._origin: dict[int, tuple[Round, int]] = {}  # group id -> its round and place in it
        self._dropped: set[int] = set()  # group ids dynamic sampling dropped (never trained)
        self._observed: list[tuple[str, list]] = []  # the per-prompt stage's scored groups not applied yet
        self._counted: dict[int, str] = {}  # group id -> its prompt's key, for the groups counted in the statistics
        self._replays: Counter = Counter()  # a resumed checkpoint's counted prompts, not to be counted again
        self._frontier: tuple[int, int] | None = None  # up to where the stream meets them again
        if resume is None:
            return
        self.stream.load_state(resume["stream"])
        if resume["policy_stage"] is not None:
            self.driver.policy_for(resume["policy_stage"]).load_state_dict(resume["policy"])
            observed = resume["observed"]
            self._observed = [(g["key"], g["rewards"]) for g in observed["pending"]]
            self._replays = Counter(observed["counted"])
            self._frontier = _position(observed["frontier"])
        again = resume["round"]
        if again is not None:  # the per-prompt round of the first untrained group: the same prompts, G and setting
            setting = Setting(again["stage"], None, again["temperature"])
            self._round = self.driver.replay_round(self.stream, setting, resume["stream"], again["plan"], None)
            self._enqueue()
            del self._queue[: again["skip"]]

    def step_of(self, version: int) -> int:
        """
        The optimizer step whose setting a group started while policy `version` is current gets: the step that version
        was published at. TRL publishes a version at the start of training (version 1 at step 0 in a new run; the
        checkpoint's version plus one at the checkpoint's step in a resumed one: [`origin`](AsyncCurriculum)) and one
        more at every optimizer step that is a multiple of `weight_sync_steps`. E.g. a new run syncing every 2 steps:
        version 3 is step 4's; a run resumed from step 7's checkpoint (its version 8) syncing every step: version 9 is
        step 7's, version 10 step 8's.
        """
        version0, step0 = self.origin
        return max(step0, (step0 // self.weight_sync_steps + version - version0) * self.weight_sync_steps)

    @property
    def policy(self):
        """The per-prompt policy in force (`None` in a fixed-G stage)."""
        return self.driver.policy

    @property
    def policy_stage(self) -> int | None:
        return self.driver.policy_stage

    def next_group(self, group_id: int, version: int) -> PlannedGroup:
        """Group `group_id`, started while policy `version` is current (planning a round first when none is left)."""
        if not self._queue:
            self._plan(version)
        plan = self._queue.pop(0)
        self._origin[group_id] = (self._round, self._started() - 1)
        return plan

    def _started(self) -> int:
        """How many groups of the round being started have started."""
        return len(self._round.sizes) - len(self._queue)

    def _plan(self, version: int) -> None:
        replay = self._frontier is not None and _position(self.stream.state()) < self._frontier
        if self._frontier is not None and not replay:  # past the frontier: what was not met again counts as new
            self._frontier, self._replays = None, Counter()
        stage = self.driver.policy_stage
        self._round = self.driver.new_round(self.stream, self.step_of(version), None, ROUND_FIX.format(self.budget))
        if self.driver.policy_stage != stage:  # a new per-prompt stage: its groups count afresh
            self._observed, self._counted, self._replays = [], {}, Counter()
        self._round.replay = replay
        self._enqueue()

    def _enqueue(self) -> None:
        """The round's groups, queued to start (a per-prompt round's deferred prompts counted on its first)."""
        round_, setting = self._round, self._round.setting
        keys = [None] * len(round_.prompts) if round_.plan is None else prompt_keys(self.stream, round_.prompts)
        deferred = round_.deferred
        for row, size, key in zip(self.stream.materialize(round_.prompts), round_.sizes, keys, strict=True):
            self._queue.append(PlannedGroup(row, size, setting.temperature, setting.stage, key, deferred,
                                            round_.replay))  # fmt: skip
            deferred = 0

    def scored(self, group_id: int, plan: PlannedGroup, rewards: list) -> dict | None:
        """
        Group `group_id` (planned as `plan`) is scored with `rewards` (one a completion). A per-prompt stage's group
        counts in its statistics, unless a resumed checkpoint counted its prompt already (a replay); a round's worth of
        counted groups (the round's prompt count) updates the statistics and GRESO's skip probabilities at once, as one
        synchronous round does. Returns the skip probabilities when they were updated, else `None`.
        """
        if plan.key is None or plan.stage != self.policy_stage:
            return None
        self._counted[group_id] = plan.key
        if plan.replay and self._replays[plan.key] > 0:
            self._replays[plan.key] -= 1
            return None
        self._observed.append((plan.key, [finite_or_none(r) for r in rewards]))
        if len(self._observed) < self.policy.round_prompts:
            return None
        keys, groups = zip(*self._observed, strict=True)
        self._observed = []
        adaptive = self.schedule.stages[self.policy_stage].adaptive
        self.policy.observe(round_stats([r for g in groups for r in g], [len(g) for g in groups], prompt_keys=keys,
                                        success_threshold=adaptive.success_threshold))  # fmt: skip
        return self.policy.skip_probabilities()

    def dropped(self, group_id: int) -> None:
        """Dynamic sampling dropped group `group_id` (it will never be trained)."""
        self._dropped.add(group_id)

    def state(self, untrained: list[int], trained_up_to: int, dropped=()) -> dict:
        """
        The curriculum state a checkpoint needs, given the group ids the trainer has not trained below
        `trained_up_to` (it trained every other id below it) and those it dropped as stale (`dropped`: never to be
        trained, as a group dynamic sampling dropped): for the first group that is neither trained nor dropped,
        where the stream stood before its round and, for a per-prompt round, the round's plan, setting and the number
        of its groups before that one (`round`); the per-prompt policy as it is now, and what of it the groups from
        that one on already count (`observed`: the scored groups not applied yet, the prompts counted, and the
        frontier up to which a resumed worker meets them again).
        """
        self._dropped.update(dropped)
        first = next((g for g in untrained if g not in self._dropped), None)
        if first is None:
            first = next(g for g in range(trained_up_to, trained_up_to + len(self._dropped) + 1)
                         if g not in self._dropped)  # fmt: skip
        if first in self._origin:
            round_, skip = self._origin[first]
        elif self._queue:  # the next group to start: the rest of the round being started
            round_, skip = self._round, self._started()
        else:  # every started group trained: the stream as it is now
            round_, skip = None, 0
        for g in [g for g in self._origin if g < first]:  # the trainer's first untrained group only moves on
            del self._origin[g]
        self._dropped = {g for g in self._dropped if g >= first}
        self._counted = {g: key for g, key in self._counted.items() if g >= first}
        again = None if round_ is None or round_.plan is None else {
            "plan": round_.plan, "stage": round_.setting.stage, "temperature": round_.setting.temperature,
            "skip": skip}  # fmt: skip
        state = {"stream": self.stream.state() if round_ is None else round_.start_stream, "round": again,
                 "policy_stage": self.policy_stage, "policy": None, "observed": None}  # fmt: skip
        if self.policy is None:
            return state
        now = _position(self.stream.state())
        frontier = now if self._frontier is None else max(now, self._frontier)
        counted = sorted([*self._counted.values(), *self._replays.elements()])
        observed = {"pending": [{"key": key, "rewards": rewards} for key, rewards in self._observed],
                    "counted": counted, "frontier": {"epoch": frontier[0], "position": frontier[1]}}  # fmt: skip
        return {**state, "policy": self.policy.state_dict(), "observed": observed}
