"""TRL's asynchronous trainer (docs/async.md): what the asynchronous curriculum refuses, and its drop decision on TRL's
real scoring. (Recipes of `trainer: async_grpo`: tests/test_async_recipe.py; the trainer itself:
tests/test_async_real.py, `make test-vllm`.)"""

from __future__ import annotations

import pytest


def _group(rewards):
    from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, TrainingSequence

    n = len(rewards)
    sequence = TrainingSequence(input_ids=[1, 2, 3], completion_mask=[0, 1, 1], old_log_probs=[0.0, -1.0, -1.0],
                                rollout_id="r")
    return RolloutGroup(prompts=[[{"role": "user", "content": "p"}]] * n, reward_kwargs={"reward": list(rewards)},
                        completions=[[{"role": "assistant", "content": "c"}]] * n, completions_ids=[[2, 3]] * n,
                        completions_sequences=[[sequence]] * n, tool_call_counts=[0] * n, tool_failure_counts=[0] * n,
                        model_version=0, group_id=7, env_rewards=[], rollout_rewards=[None] * n)  # fmt: skip


def given_reward(reward, **kwargs):
    return reward


@pytest.mark.parametrize(("rewards", "kept"), [
    ([1.0, 0.0, 1.0, 0.0], True),
    ([1.0, 1.0, 1.0, 1.0], False),  # all equal: advantage 0 everywhere
    ([0.5, 0.5 + 1e-7, 0.5, 0.5], False),  # equal within the package's zero-std tolerance (1e-6)
    ([1.0, None, None, None], False),  # one scorable completion
    ([None, None, None, None], False),  # none
    ([1.0, None, 0.0, None], True),  # two scorable, different
])
def test_dynamic_sampling_keeps_a_scored_group_only_when_informative(rewards, kept):
    """TRL's real `_score_group` on a group, then the drop decision; a dropped group is counted and in the rate."""
    import asyncio
    from collections import defaultdict

    from accelerate.state import PartialState

    from grpo_curriculum.training._trl.async_worker import (
        DROPPED_COMPLETIONS,  # fmt: skip
        DROPPED_GROUPS,
        SAMPLED_G,
        SAMPLED_TEMPERATURE,
        ZERO_STD_FRACTION,
        CurriculumRolloutLoop,
        PlannedGroup,
    )

    PartialState()  # as TRL's worker process does first (its logger needs it)
    loop = object.__new__(CurriculumRolloutLoop)  # the scoring state only: no child process, no server
    loop.dynamic_sampling, loop.curriculum, loop._planned = True, None, {7: PlannedGroup({}, len(rewards), 0.7, 1)}
    loop.reward_funcs, loop.reward_func_names = [given_reward], ["given_reward"]
    loop._env_reward_types, loop._counters = [], defaultdict(float)
    loop._rates = defaultdict(lambda: [0.0, 0.0])
    samples = asyncio.run(loop._score_group(_group(rewards)))
    assert len(samples) == (len(rewards) if kept else 0)
    assert all(sample.metrics[SAMPLED_G] == len(rewards) and sample.metrics[SAMPLED_TEMPERATURE] == 0.7
               for sample in samples) and loop._planned == {}
    assert loop._counters[DROPPED_GROUPS] == (0 if kept else 1)
    assert loop._counters[DROPPED_COMPLETIONS] == (0 if kept else len(rewards))
    assert loop._rates[ZERO_STD_FRACTION] == [0.0 if kept else 1.0, 1.0]


def _refusals(tmp_path, max_steps=10, config=None, **options) -> list[str]:
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.core.errors import CurriculumError
    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    args = AsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], max_steps=max_steps,
                           temperature=1.0, **(config or {}))  # fmt: skip
    with pytest.raises(CurriculumError) as caught:  # before any model loads: the model path does not exist
        CurriculumAsyncGRPOTrainer(model=str(tmp_path / "no-model"), args=args, **options)
    return [f"{problem.key}: {problem.rule}" for problem in caught.value.problems]


@pytest.mark.parametrize(("options", "max_steps", "said"), [
    ({"dynamic_sampling": True}, -1, ["max_steps: must be set (> 0)"]),
    ({"dynamic_sampling": True}, 0, ["max_steps: must be set (> 0)"]),  # TRL reads 0 as unset: an epoch stop
    ({"stages": "G2"}, -1, ["max_steps: must be set (> 0)"]),
    ({"stages": "hysteresis"}, 10, ["stages[0].adaptive.policy: is not supported on the asynchronous trainer"]),
    ({"stages": "top_up"}, 10, ["stages[0].adaptive.policy: is not supported on the asynchronous trainer"]),
    ({"stages": "bounds"}, 10, ["stages[0].adaptive.temperature: is not supported on the asynchronous trainer"]),
    ({"stages": "refill"}, 10, ["stages[0].dynamic_sampling: is not supported on the asynchronous trainer"]),
    ({"stages": "compare"}, 10, ["stages[0].comparison: is not supported on the asynchronous trainer"]),
    ({"stages": "G2", "tools": "tool"}, 10, ["tools: are not supported with a stage schedule"]),
    ({"dynamic_sampling": True, "rollout_worker": "worker"}, 10, ["rollout_worker: must be TRL's own"]),
    ({"stages": "per_prompt_4_8", "config": {"per_device_train_batch_size": 6}}, 10,
     ["per_device_train_batch_size: a per-prompt round (stages[0]) plans"]),
])
def test_what_the_asynchronous_curriculum_refuses_is_named_before_any_model_loads(tmp_path, options, max_steps, said):
    from grpo_curriculum import Adaptive, Stage
    from grpo_curriculum.core.comparison import Comparison
    from grpo_curriculum.core.sampling import DynamicSampling

    stages = {"G2": [Stage(num_generations=2, temperature=1.0)],
              "hysteresis": [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4)))],
              "top_up": [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4), policy="top_up"))],
              "bounds": [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4), policy="per_prompt",
                                                                  temperature=(0.5, 1.0)))],
              "refill": [Stage(num_generations=2, temperature=1.0, dynamic_sampling=DynamicSampling())],
              "compare": [Stage(num_generations=2, temperature=1.0, comparison=Comparison(mode="extremes"))],
              "per_prompt_4_8": [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(4, 8),
                                                                          policy="per_prompt"))]}  # fmt: skip
    options = {**options, **({"stages": stages[options["stages"]]} if "stages" in options else {})}
    options.update({k: object() for k in ("tools", "rollout_worker") if k in options})
    problems = _refusals(tmp_path, max_steps, **options)
    assert all(any(text in problem for problem in problems) for text in said), problems


def test_what_the_asynchronous_trainer_supports_passes_its_checks(tmp_path):
    """Temperature schedules and ramps, per-prompt stages and dynamic sampling together: no problem is found; the
    trainer goes on to load the model (here a path that does not exist)."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum import Adaptive, Stage
    from grpo_curriculum.core.errors import CurriculumError
    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    stages = [Stage(num_generations=4, temperature=1.2, temperature_end=0.8, until_step=5),
              Stage(temperature=0.7, adaptive=Adaptive(num_generations=(2, 4, 8), policy="per_prompt"))]
    args = AsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], max_steps=10)
    with pytest.raises(OSError) as caught:
        CurriculumAsyncGRPOTrainer(model=str(tmp_path / "no-model"), args=args, stages=stages, dynamic_sampling=True)
    assert not isinstance(caught.value, CurriculumError)


class _Value:
    def __init__(self, value):
        self.value = value


def _worker_loop(stages, weight_sync_steps=1, max_steps=100, num_prompts=16):
    """A [`CurriculumRolloutLoop`] with its curriculum, on the state its generation and scoring read (no child
    process, no server: tests drive `_generate_loop` with a stand-in `_generate_one`, and `_score_group`)."""
    from collections import defaultdict

    from accelerate.state import PartialState

    from grpo_curriculum.core.schedule import StageSchedule
    from grpo_curriculum.training._trl.async_worker import AsyncCurriculum, CurriculumRolloutLoop

    from .conftest import indexed_dataset

    PartialState()  # as TRL's worker process does first (its logger needs it)
    loop = object.__new__(CurriculumRolloutLoop)
    loop.curriculum = AsyncCurriculum(StageSchedule(stages).resolve(max_steps), indexed_dataset(num_prompts),
                                      weight_sync_steps=weight_sync_steps, budget=8, seed=0)  # fmt: skip
    loop.dynamic_sampling, loop.channel, loop._planned = False, None, {}
    loop.reward_funcs, loop.reward_func_names = [given_reward], ["given_reward"]
    loop._env_reward_types, loop._counters = [], defaultdict(float)
    loop._rates = defaultdict(lambda: [0.0, 0.0])
    loop._heartbeat_value, loop._model_version_value = _Value(0.0), _Value(1)
    loop.max_inflight_tasks, loop._inflight, loop._total_completion_tokens = 1, 0, 0
    return loop


def test_the_worker_plans_each_group_at_the_stage_of_the_policy_version_current_when_it_starts():
    """
    Issue 55, item 4: TRL's policy version moves on while the worker generates (version 1 before the first step, one
    more every `weight_sync_steps` = 2 steps); a group started at version v is sampled whole at the schedule's setting
    at step (v - 1) * 2: G 2 at 1.0 up to step 4, then G 4 at 0.5. `_generate_loop` runs for real, one group at a
    time (`max_inflight_tasks` 1); the stand-in `_generate_one` records each request's sampling temperature and moves
    the version on as the trainer would.
    """
    import asyncio

    from grpo_curriculum import Stage
    from grpo_curriculum.training._trl.async_worker import _SAMPLING_TEMPERATURE

    loop = _worker_loop([Stage(num_generations=2, temperature=1.0, until_step=4),
                         Stage(num_generations=4, temperature=0.5)], weight_sync_steps=2)  # fmt: skip
    versions = [1, 1, 2, 2, 3, 3, 5]  # the version current when group g starts
    requests = []

    async def generate_one(prompt, tool_dict, tools, group_id):
        requests.append((group_id, _SAMPLING_TEMPERATURE.get()))
        if sum(r[0] == group_id for r in requests) == loop._planned[group_id].size and group_id + 1 < len(versions):
            loop._model_version_value.value = versions[group_id + 1]  # the next group starts after this one
        await asyncio.sleep(0)
        return [{"role": "assistant", "content": "c"}], [5, 6], [], 0, 0, None

    loop._generate_one = generate_one
    queued = []

    async def main():
        loop._groups_to_score = asyncio.Queue()
        stop = asyncio.Event()
        generating = asyncio.create_task(loop._generate_loop(stop))
        while len(queued) < len(versions):
            queued.append(await loop._groups_to_score.get())
        stop.set()
        await generating

    asyncio.run(main())
    settings = [(group.model_version, len(group.completions), loop._planned[group.group_id].temperature)
                for group in queued]  # fmt: skip
    assert settings == [(1, 2, 1.0), (1, 2, 1.0), (2, 2, 1.0), (2, 2, 1.0), (3, 4, 0.5), (3, 4, 0.5), (5, 4, 0.5)]
    sent = [t for g, t in requests if g < len(versions)]  # (a group may start before the stop: not counted)
    assert sent == [t for _, size, t in settings for _ in range(size)]  # each request at its group's temperature


def test_a_group_dynamic_sampling_drops_under_a_schedule_never_restarts_a_checkpoints_stream():
    """Issue 55, item 3: with stages and dynamic sampling, a group the worker drops (TRL's real `_score_group`, then
    the drop) is reported to the curriculum, so a checkpoint taken while it is the first group not trained resumes
    after it, not at it (it will never be trained: a resumed stream starting there would sample it again)."""
    import asyncio

    from grpo_curriculum import Stage

    loop = _worker_loop([Stage(num_generations=4, temperature=1.0)])
    loop.dynamic_sampling = True
    plans = {g: loop.curriculum.next_group(g, version=1) for g in range(8)}
    loop._planned = dict(plans)
    assert asyncio.run(loop._score_group(_group([1.0, 1.0, 1.0, 1.0]))) == []  # group 7: dropped
    state = loop.curriculum.state(untrained=[7], trained_up_to=8)  # 0-6 trained, 7 not
    assert (state["stream"]["epoch"], state["stream"]["position"]) == (1, 8)  # after prompt 7 (epochs count from 1)


def test_a_per_prompt_round_that_is_no_sum_of_the_candidates_is_named_with_each_factor_and_a_size_that_fits():
    """Issue 51, item 6: batch 2 x accumulation 3 showed "per_device_train_batch_size = 6"."""
    from grpo_curriculum import Adaptive, Stage
    from grpo_curriculum.core.asynchronous import async_problems

    stage = Stage(temperature=1.0, adaptive=Adaptive(num_generations=(4, 8), policy="per_prompt"))
    (problem,) = async_problems([stage], max_steps=10, batch=(2, 3, 1))
    assert (problem.key, problem.value) == ("per_device_train_batch_size", 2)
    assert "= 2 x 3 x 1 = 6 completions, which must be a sum of the candidates [4, 8]" in problem.rule
    assert "set per_device_train_batch_size: 4 (the next size whose round is such a sum)" in problem.fix  # 12 = 4 + 8
    assert async_problems([stage], max_steps=10, batch=(4, 3, 1)) == []


def test_the_curriculum_loop_logs_how_long_scoring_held_generation_back_as_trls_does():
    """Issue 51, item 7: TRL's generation loop logs `rollout/score_block_s` when the scoring queue is full; the
    curriculum's loop (which replaces it under a schedule) did not."""
    import asyncio
    import queue

    from grpo_curriculum import Stage

    loop = _worker_loop([Stage(num_generations=2, temperature=1.0)])
    loop._metrics_queue = queue.Queue()

    async def generate_one(prompt, tool_dict, tools, group_id):
        await asyncio.sleep(0)
        return [{"role": "assistant", "content": "c"}], [5, 6], [], 0, 0, None

    loop._generate_one = generate_one

    async def main():
        loop._groups_to_score = asyncio.Queue(maxsize=1)  # full after one group: the next waits for the scorer
        stop = asyncio.Event()
        generating = asyncio.create_task(loop._generate_loop(stop))
        await asyncio.sleep(0.5)
        for _ in range(3):
            await loop._groups_to_score.get()
        stop.set()
        await loop._groups_to_score.get()
        await generating

    asyncio.run(main())
    pushed = [loop._metrics_queue.get_nowait() for _ in range(loop._metrics_queue.qsize())]
    blocked = [m["rollout/score_block_s"] for m in pushed if "rollout/score_block_s" in m]
    assert blocked and 0.3 < blocked[0] < 5.0, pushed


@pytest.mark.parametrize("damage", ["method", "parameter"])
def test_an_asynchronous_module_of_another_shape_is_refused_before_any_model_loads(tmp_path, monkeypatch, damage):
    """Issue 51, item 7: the curriculum overrides private methods of TRL's rollout loop; a TRL whose loop lacks one
    (or renamed a parameter the curriculum passes) is one problem naming what is missing and the TRL to install."""
    from trl.experimental.async_grpo import async_rollout_worker

    loop = async_rollout_worker._AsyncRolloutLoop
    if damage == "method":
        monkeypatch.delattr(loop, "_generate_one_turn")
        said = "_AsyncRolloutLoop._generate_one_turn"
    else:
        async def renamed(self, messages, tool_dict, tools, group_id=0):
            pass

        monkeypatch.setattr(loop, "_generate_one", renamed)
        said = "_AsyncRolloutLoop._generate_one(prompt)"
    (problem,) = _refusals(tmp_path, dynamic_sampling=True)
    assert problem.startswith("trl: has an asynchronous trainer of another shape than TRL 1.16's") and said in problem


def test_deepspeed_is_refused_with_a_curriculum_on_the_asynchronous_trainer(tmp_path, monkeypatch):
    """Issue 51, item 5: TRL's asynchronous trainer is built for FSDP2, and the curriculum is tested under DDP and
    FSDP2 only: DeepSpeed (here as `accelerate launch` sets it; a config's `deepspeed` needs DeepSpeed installed) is
    refused before any model loads, in a recipe too."""
    from grpo_curriculum import Stage
    from grpo_curriculum.config.recipe import parse_recipe
    from grpo_curriculum.core.errors import CurriculumError

    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    args = AsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], max_steps=10)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # (after the config: it would need DeepSpeed installed)
    with pytest.raises(CurriculumError) as caught:
        CurriculumAsyncGRPOTrainer(model=str(tmp_path / "no-model"), args=args,
                                   stages=[Stage(num_generations=2, temperature=1.0)])
    assert [p.key for p in caught.value.problems] == ["deepspeed"]
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    recipe = {"model_name_or_path": "org/model", "dataset_name": "builtin:arithmetic", "trainer": "async_grpo",
              "reward_funcs": ["grpo_curriculum.demo.arithmetic:arithmetic_reward"], "max_steps": 10,
              "deepspeed": {"zero_optimization": {"stage": 2}},
              "curriculum": {"stages": [{"num_generations": 2, "temperature": 1.0}]}}
    with pytest.raises(CurriculumError) as caught:
        parse_recipe(recipe)
    assert [p.key for p in caught.value.problems] == ["deepspeed"]
