"""TRL's asynchronous trainer in recipes (docs/async.md): `trainer: async_grpo` is refused by `check` and `train`,
naming the key and the Python class that supports it; nothing is written. (The trainer itself: tests/test_async_real.py,
`make test-vllm`.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_curriculum.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def test_trainer_async_grpo_is_refused_with_the_python_class_to_use(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    data = {**yaml.safe_load((ROOT / "recipes" / "rloo-demo.yaml").read_text()), "trainer": "async_grpo",
            "output_dir": str(tmp_path / "out")}  # fmt: skip
    recipe.write_text(yaml.safe_dump(data))
    for command in ("check", "train"):
        assert main([command, str(recipe)]) == 2
        captured = capsys.readouterr()
        assert "trainer = 'async_grpo': must be one of ['grpo', 'rloo']" in captured.err, captured.err
        assert "TRL's AsyncGRPOTrainer has no recipe yet" in captured.err
        assert "grpo_curriculum.training.async_grpo.CurriculumAsyncGRPOTrainer" in captured.err
        assert "Traceback" not in captured.err + captured.out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["recipe.yaml"]


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

    from grpo_curriculum.training._trl_async import (
        DROPPED_COMPLETIONS, DROPPED_GROUPS, ZERO_STD_FRACTION, DynamicSamplingRolloutLoop)  # fmt: skip

    from accelerate.state import PartialState

    PartialState()  # as TRL's worker process does first (its logger needs it)
    loop = object.__new__(DynamicSamplingRolloutLoop)  # the scoring state only: no child process, no server
    loop.reward_funcs, loop.reward_func_names = [given_reward], ["given_reward"]
    loop._env_reward_types, loop._counters = [], defaultdict(float)
    loop._rates = defaultdict(lambda: [0.0, 0.0])
    samples = asyncio.run(loop._score_group(_group(rewards)))
    assert len(samples) == (len(rewards) if kept else 0)
    assert loop._counters[DROPPED_GROUPS] == (0 if kept else 1)
    assert loop._counters[DROPPED_COMPLETIONS] == (0 if kept else len(rewards))
    assert loop._rates[ZERO_STD_FRACTION] == [0.0 if kept else 1.0, 1.0]
