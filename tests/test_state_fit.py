"""A checkpoint's curriculum state against the recipe and dataset it resumes with (`fit_problems`): pure tables."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_curriculum import Adaptive, DynamicSampling, Stage
from grpo_curriculum.training.checkpoint import fit_problems

TOP_UP = Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 8), policy="top_up"))
TOP_UP_32 = Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 8), policy="top_up", prompts=32))
DYNAMIC = Stage(num_generations=4, temperature=1.0, dynamic_sampling=DynamicSampling())
FIXED = Stage(num_generations=4, temperature=1.0)
PLAN = {"pilot": 2, "largest": 8, "prompts": None}
BLOCK = {"max_rounds": 2, "on_limit": "mask"}


def state(top_up=None, dynamic_sampling=None, version=6, position=0):
    current = {"stage": 0, "num_generations": None if top_up else 4, "temperature": 1.0, "top_up": top_up,
               "dynamic_sampling": dynamic_sampling}  # fmt: skip
    return {"version": version, "callback": {"current": current, "policy_stage": None, "policy": None},
            "stream": {"epoch": 1, "position": position, "waiting": []}, "round_start_stream": None,
            "round_plan": None, "prompt_report": {"slots": np.array([0, 5], dtype=np.uint32)}}  # fmt: skip


@pytest.mark.parametrize("stage, saved, expected", [
    (TOP_UP, state(PLAN), None),
    (TOP_UP_32, state(PLAN), None),  # prompts of the default rule: a recipe may now set what the rule gave
    (TOP_UP_32, state({**PLAN, "prompts": 32}), None),
    (TOP_UP, state({**PLAN, "prompts": 1}), "must be stage 0's top-up plan: pilot 2, largest 8, prompts by the "
                                            "default rule"),
    (TOP_UP, state({**PLAN, "pilot": 4}), "must be stage 0's top-up plan: pilot 2, largest 8"),
    (TOP_UP, state(), "must be stage 0's top-up plan"),
    (FIXED, state(PLAN), "must be null: stage 0 of the recipe is not a top-up stage"),
    (DYNAMIC, state(dynamic_sampling=BLOCK), None),
    (DYNAMIC, state(dynamic_sampling={"max_rounds": 1024, "on_limit": "fill"}), None),  # the recipe's applies next
    (DYNAMIC, state(), "must be given: stage 0 of the recipe samples dynamically"),
    (DYNAMIC, state(version=4), None),  # written before the current setting held the block
    (FIXED, state(dynamic_sampling=BLOCK), "must be null: stage 0 of the recipe has no `dynamic_sampling`"),
])  # fmt: skip
def test_the_current_round_s_blocks_are_its_recipe_stage_s(stage, saved, expected):
    problems = fit_problems(saved, [stage], dataset_size=48)
    if expected is None:
        assert problems == []
    else:
        (problem,) = problems
        assert problem.rule.startswith(expected) and problem.key.startswith("callback.current.") and problem.fix


@pytest.mark.parametrize("slots, size, refused", [
    ([0, 47], 48, []), ([0, 48], 48, ["prompt_report.slots[1]"]), ([0, 2**20 - 1], None, []),
    ([2**20], None, ["prompt_report.slots[0]"]),
])  # fmt: skip
def test_prompt_slots_lie_within_the_dataset_s(slots, size, refused):
    """A slot a row of a map-style dataset (48 here); 2^20 hash buckets for an iterable one."""
    saved = {**state(), "prompt_report": {"slots": np.array(slots, dtype=np.uint32)}}
    assert [p.key for p in fit_problems(saved, [FIXED], dataset_size=size)] == refused


@pytest.mark.parametrize("position, size, refused", [(48, 48, False), (49, 48, True), (10**6, None, False)])
def test_the_stream_position_lies_within_the_dataset(position, size, refused):
    """A pass may be read to its end (48 of 48); beyond it is refused; an iterable dataset's end is not known."""
    problems = fit_problems(state(position=position), [FIXED], dataset_size=size)
    assert [p.key for p in problems] == (["stream.position"] if refused else [])
