"""
The asynchronous worker's curriculum bookkeeping (training/async_curriculum.py; docs/async.md), without TRL's loop:
where a checkpoint's stream stands, and that a resumed worker counts every scored group of a per-prompt stage once, as
the run it resumes counted them (the groups it samples again are not counted twice, the scored groups not yet applied
are not lost). The real engine: tests/test_async_real.py (`make test-vllm`).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.core.schedule import Setting, StageSchedule, stage_signature
from grpo_curriculum.training.async_curriculum import AsyncCurriculum
from grpo_curriculum.training.round import Round
from grpo_curriculum.training.async_state import read_async_state, write_async_state

from .conftest import indexed_dataset

STAGES = [Stage(temperature=0.7, adaptive=Adaptive(num_generations=(2, 4), policy="per_prompt", defer=False))]
BUDGET = 8


def _curriculum(dataset, resume=None) -> tuple[AsyncCurriculum, list[str]]:
    """An [`AsyncCurriculum`] over `dataset` and the prompt keys its policy observes, in order."""
    curriculum = AsyncCurriculum(StageSchedule(STAGES).resolve(100), dataset, budget=BUDGET, seed=0, resume=resume)
    observed: list[str] = []
    policy_for = curriculum.driver.policy_for

    def recording(index):
        known = curriculum.driver.policy
        policy = policy_for(index)
        if policy is not known:  # made now
            observe = policy.observe
            policy.observe = lambda stats: (observed.extend(stats.prompt_keys), observe(stats))[1]
        return policy

    curriculum.driver.policy_for = recording
    if curriculum.policy is not None:  # resumed: made in __init__, before the wrapper
        observe = curriculum.policy.observe
        curriculum.policy.observe = lambda stats: (observed.extend(stats.prompt_keys), observe(stats))[1]
    return curriculum, observed


def _rewards(plan) -> list[float]:
    return [float((int(plan.key) + i) % 3 == 0) for i in range(plan.size)]


def _start_and_score(curriculum, groups, plans=None) -> dict:
    """Start `groups` at policy version 1 and score each; `plans` (updated) by group id."""
    plans = {} if plans is None else plans
    for g in groups:
        plans[g] = curriculum.next_group(g, version=1)
        curriculum.scored(g, plans[g], _rewards(plans[g]))
    return plans


def _run(curriculum, plans: dict, until) -> None:
    """Start groups and score them in order until the stream stands at `until` with no planned group left."""
    group = max(plans, default=-1) + 1
    while (curriculum.stream.state()["epoch"], curriculum.stream.state()["position"]) < until or curriculum._queue:
        plans[group] = curriculum.next_group(group, version=1)
        curriculum.scored(group, plans[group], _rewards(plans[group]))
        group += 1


@pytest.mark.parametrize("pending_at_save", [True, False])
@pytest.mark.parametrize("untrained", [[6, 7], [7]])
def test_a_resumed_worker_counts_each_scored_group_once(tmp_path, pending_at_save, untrained):
    """
    Twelve groups start (rounds of 3); they are scored out of order (7 last) and the checkpoint is taken with 6 and 7,
    or 7 alone, not trained, so a resumed worker samples the round of 6 again from the first of them (the same prompts
    and G). The keys the resumed policy observes from there on are the ones the uninterrupted run observes after the
    save: the groups the save counted are not observed again, the scored groups it had not applied yet are, in the
    same rounds.
    """
    dataset = indexed_dataset(num_prompts=40)
    original, seen = _curriculum(dataset)
    plans = {g: original.next_group(g, version=1) for g in range(12)}
    prompts = original.policy.allocator.prompts
    assert prompts == 3 and [p.key for p in plans.values()] == [str(i) for i in range(12)]  # in order (no deferral)
    order = [0, 1, 2, 3, 5, 4, 6, 8, 9, 10, 11, 7]
    scored = order[: 8 if pending_at_save else 8 + (-8) % prompts]  # 8 groups: part of a round not applied yet
    for g in scored:
        original.scored(g, plans[g], _rewards(plans[g]))
    state = original.state(untrained=untrained, trained_up_to=9)
    first = untrained[0]
    assert state["round"]["skip"] == first - 6 and state["stream"]["position"] == 6
    assert state["observed"]["counted"] == sorted(plans[g].key for g in scored if g >= first)
    assert bool(state["observed"]["pending"]) == (len(scored) % prompts != 0)
    write_async_state(str(tmp_path), {"stages": stage_signature(STAGES), "dataset_size": len(dataset), **state})
    resume = read_async_state(str(tmp_path), stage_signature(STAGES), len(dataset))

    before = len(seen)
    for g in sorted(set(order) - set(scored)):  # the uninterrupted run goes on, in the order the resumed one samples
        original.scored(g, plans[g], _rewards(plans[g]))
    _run(original, plans, until=(1, 30))
    resumed, seen_resumed = _curriculum(dataset, resume)
    resumed_plans: dict = {}
    _run(resumed, resumed_plans, until=(1, 30))

    assert seen_resumed == seen[before:] and len(seen_resumed) > 2 * prompts
    assert [key for key, _ in resumed._observed] == [key for key, _ in original._observed]
    assert [(p.key, p.size) for p in resumed_plans.values()][: 9 - first] == [(p.key, p.size) for p in
                                                                               list(plans.values())[first:9]]
    assert resumed._frontier is None and not resumed._replays  # past the frontier: nothing left to skip


def test_a_second_checkpoint_after_a_resume_still_lists_the_groups_counted_before_the_first():
    """A group the resumed worker did not count (a replay) is still counted in its statistics: a checkpoint taken
    before it is trained lists it again, so a second resume does not count it either."""
    dataset = indexed_dataset(num_prompts=40)
    original, _ = _curriculum(dataset)
    _start_and_score(original, range(6))
    state = original.state(untrained=[3], trained_up_to=6)
    resumed, _ = _curriculum(dataset, {**state, "stream": dict(state["stream"])})
    _start_and_score(resumed, range(3))
    second = resumed.state(untrained=list(range(3)), trained_up_to=3)
    assert second["observed"]["counted"] == state["observed"]["counted"]
    assert second["observed"]["frontier"] == state["observed"]["frontier"]


def test_two_checkpoints_with_the_same_first_untrained_group_each_resume_at_it_and_sample_it_once(tmp_path):
    """
    Issue 55, item 2: group 4 (the middle of the second round of 3) is still not trained at two checkpoints in a row,
    while later groups are. Each checkpoint names the same round and place, and a worker resumed from either samples
    group 4's prompt again exactly once, then 5's, then goes on planning from the stream (no trained group of that
    round sampled again, no group skipped).
    """
    dataset = indexed_dataset(num_prompts=40)
    curriculum, _ = _curriculum(dataset)
    plans = _start_and_score(curriculum, range(9))
    first = curriculum.state(untrained=[4], trained_up_to=9)
    _start_and_score(curriculum, range(9, 12), plans)
    second = curriculum.state(untrained=[4], trained_up_to=12)
    assert first["round"] == second["round"] and first["round"]["skip"] == 1
    assert first["stream"] == second["stream"] == {**first["stream"], "position": 3}
    for n, state in enumerate((first, second)):
        folder = tmp_path / str(n)
        folder.mkdir()
        write_async_state(str(folder), {"stages": stage_signature(STAGES), "dataset_size": len(dataset), **state})
        resumed, _ = _curriculum(dataset, read_async_state(str(folder), stage_signature(STAGES), len(dataset)))
        again = [resumed.next_group(g, version=1) for g in range(5)]
        assert [(p.key, p.size) for p in again[:2]] == [(plans[g].key, plans[g].size) for g in (4, 5)]
        assert [p.key for p in again].count(plans[4].key) == 1 and again[2].key == "6"  # then the next round


class _Stream:
    def state(self):
        return {"epoch": 1, "position": 80}


def _bookkeeping() -> AsyncCurriculum:
    """Eight fixed-G groups started, 3 and 4 dropped by dynamic sampling."""
    curriculum = object.__new__(AsyncCurriculum)
    curriculum.driver = SimpleNamespace(policy=None, policy_stage=None)
    curriculum._queue, curriculum._dropped, curriculum._counted = [], {3, 4}, {}
    curriculum._origin = {g: (Round(Setting(0, 2, 1.0), [g], [2], start_stream={"epoch": 1, "position": 10 * g}), 0)
                          for g in range(8)}  # fmt: skip
    curriculum.stream = _Stream()
    return curriculum


@pytest.mark.parametrize(("untrained", "up_to", "position"), [
    ([2, 5], 7, 20),  # group 2 never trained: the stream before it
    ([3, 4, 5], 7, 50),  # 3 and 4 were dropped by dynamic sampling (never to be trained): 5 is the first
    ([3, 4], 5, 50),  # everything below 5 trained or dropped: 5
    ([], 8, 80),  # every started group trained: the stream as it is now (no round planned and not started)
])
def test_the_checkpoint_stream_stands_before_the_first_group_neither_trained_nor_dropped(untrained, up_to, position):
    curriculum = _bookkeeping()
    state = curriculum.state(untrained, up_to)
    assert state["stream"] == {"epoch": 1, "position": position} and state["round"] is None
    assert state["observed"] is None
    assert min(curriculum._origin, default=up_to) >= min([*untrained, up_to])  # what no later request needs: gone


def test_a_resumed_worker_plans_at_the_stage_of_the_step_it_resumes_at():
    """
    Issue 51, item 3: TRL restores the checkpoint's policy version and then publishes one more at its start-of-training
    weight sync, so a run resumed from step 7 (version 8, syncing every step) starts at version 9. Counted from
    version 1 (step 0) that read step 8, one sync interval early: past a stage boundary at step 8, the resumed worker
    sampled stage 1's G at step 7. Counted from where the worker starts (`origin`), it is stage 0's until step 8.
    """
    stages = [Stage(num_generations=2, temperature=1.0, until_step=8), Stage(num_generations=4, temperature=0.5)]
    schedule = StageSchedule(stages).resolve(20)
    for sync_every, origin, expected in (
        (1, (9, 7), [(9, 0, 2), (10, 1, 4)]),  # resumed at step 7: version 9 is step 7's, 10 step 8's
        (1, (1, 0), [(1, 0, 2), (8, 0, 2), (9, 1, 4)]),  # a new run: version v is step v - 1's
        (4, (3, 6), [(3, 0, 2), (4, 1, 4)]),  # resumed at step 6, syncing every 4: version 4 comes at step 8
    ):
        curriculum = AsyncCurriculum(schedule, indexed_dataset(num_prompts=16), budget=BUDGET,
                                     weight_sync_steps=sync_every, origin=origin)  # fmt: skip
        planned = [(version, curriculum.next_group(g, version)) for g, (version, _, _) in enumerate(expected)]
        assert [(v, p.stage, p.size) for v, p in planned] == expected, (sync_every, origin)


def test_groups_dropped_as_stale_are_never_a_checkpoints_first_untrained_group(tmp_path, tiny_model_dir, monkeypatch):
    """
    Issue 51, item 2: TRL's `RolloutQueueDataset` (real) drops a sample more than `max_staleness` versions old; a group
    dropped whole is never trained. The trainer notes the groups it drops, so a checkpoint after 400 groups, of which
    group 5 went stale, resumes at prompt 400, not at prompt 5 (which sampled the 394 trained groups after it again at
    every later resume), and the worker's table of started groups shrinks to what a later request needs.
    """
    import queue as queues

    from trl.experimental.async_grpo.async_grpo_trainer import RolloutQueueDataset

    from .async_cpu import build_async_trainer

    trainer = build_async_trainer(monkeypatch, tiny_model_dir, str(tmp_path),
                                  stages=[Stage(num_generations=2, temperature=1.0)], max_staleness=1)  # fmt: skip
    samples = queues.Queue()
    for group, version in ((4, 4), (5, 3), (5, 3), (6, 4)):  # at version 5, group 5 (of version 3) is 2 versions old
        samples.put(SimpleNamespace(model_version=version, group_id=group, input_ids=[1], completion_mask=[1],
                                    old_log_probs=[0.0], advantage=0.0, metrics={}, enqueued_at=None))  # fmt: skip
    trainer.model_version = 5
    dataset = RolloutQueueDataset(rollout_queue=samples, model_version_fn=lambda: trainer.model_version,
                                  check_health_fn=lambda after: None, stale_after_s=60,
                                  metrics=trainer._metrics["train"], max_staleness=trainer.args.max_staleness)
    dataset.queue = trainer._stale.watch(dataset.queue, lambda: trainer.model_version, trainer.args.max_staleness)
    taken = iter(dataset)
    assert [next(taken)["group_id"] for _ in range(2)] == [4, 6]  # TRL dropped both samples of group 5
    assert trainer._stale.groups == {5}  # TRL's own test, at its version: not the groups it kept
    trainer._trained_groups.update(set(range(400)) - {5})
    untrained, up_to, dropped = trainer._untrained_groups()
    assert (untrained, up_to, dropped) == ([], 400, [])

    curriculum = AsyncCurriculum(StageSchedule([Stage(num_generations=2, temperature=1.0)]).resolve(100),
                                 indexed_dataset(num_prompts=500), budget=BUDGET)  # fmt: skip
    for g in range(400):
        curriculum.next_group(g, version=1)
    state = curriculum.state(untrained, up_to, dropped)
    assert state["stream"]["position"] == 400 and len(curriculum._origin) == 0


def test_the_trainer_starts_its_worker_at_the_version_and_step_it_resumes_at(tmp_path, tiny_model_dir, monkeypatch):
    """Issue 51, item 3, the trainer's side: TRL's start-of-training callback publishes a version, then starts the
    worker; the worker is told that version and the optimizer step it was published at (here as after a resume from
    step 7's checkpoint of version 8)."""
    from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

    from .async_cpu import build_async_trainer

    started = []
    monkeypatch.setattr(AsyncRolloutWorker, "start", lambda worker: started.append(dict(worker._loop_kwargs)))
    trainer = build_async_trainer(monkeypatch, tiny_model_dir, str(tmp_path),
                                  stages=[Stage(num_generations=2, temperature=1.0)])  # fmt: skip
    trainer.model_version, trainer.state.global_step = 9, 7
    trainer.rollout_worker.start()
    (kwargs,) = started
    assert kwargs["version_origin"] == (9, 7) and kwargs["schedule"] is trainer.curriculum_schedule


def test_a_skipping_stage_with_pilot_groups_plans_pilots_then_full_groups(monkeypatch):
    """Issue 50: the asynchronous worker runs a skipping stage with pilot groups as the synchronous trainers do: every
    prompt's first group holds the pilot (2), the settled prompts (index % 3 != 2: always 1 or always 0) are skipped
    from the next pass, the informative ones come back at the stage's G (4)."""
    from .test_per_prompt import always_defer_settled

    always_defer_settled(monkeypatch)
    stages = [Stage(num_generations=4, temperature=1.0, skip={"pilot": 2})]
    curriculum = AsyncCurriculum(StageSchedule(stages).resolve(100), indexed_dataset(num_prompts=12), budget=BUDGET,
                                 seed=0)  # fmt: skip
    sizes: dict[int, list[int]] = {}
    for group in range(12 + 8):  # pass 1: 12 pilots (3 rounds); then 2 rounds of two G-4 groups a pass
        plan = curriculum.next_group(group, version=1)
        key = int(plan.key)
        rewards = [float(key % 3 == 0)] * plan.size if key % 3 != 2 else [float(i % 2) for i in range(plan.size)]
        curriculum.scored(group, plan, rewards)
        sizes.setdefault(key, []).append(plan.size)
    assert sorted(sizes) == list(range(12)) and all(s[0] == 2 for s in sizes.values())
    assert {k: s[1:] for k, s in sizes.items() if len(s) > 1} == {k: [4, 4] for k in (2, 5, 8, 11)}
