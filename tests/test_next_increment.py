"""A round's next increment (core/next_increment.py): top-up and dynamic sampling decisions, as tables (no torch)."""

from __future__ import annotations

import math

import pytest

from grpo_curriculum import DynamicSampling
from grpo_curriculum.core.next_increment import DynamicNext, dynamic_next, top_up_next
from grpo_curriculum.core.sampling import TopUp

NAN = math.nan

# --- top-up --------------------------------------------------------------------------------------------------------

TOP_UP = {  # name: (rewards per group, sizes, pilot, largest, batch, expected: completions added per group or None)
    "a full round is complete": ([[1, 0], [0, 0]], [2, 2], 2, 8, 4, None),
    "the all-equal groups grow by the pilot": ([[1, 1], [0, 1], [0, 0]], [2, 2, 2], 2, 8, 14, [2, 0, 2]),
    "within the budget left": ([[1, 1], [0, 0], [0, 0]], [2, 2, 2], 2, 8, 8, [2, 0, 0]),
    "a group at the largest G stays": ([[1] * 8, [0, 0]], [8, 2], 2, 8, 14, [0, 2]),
}


@pytest.mark.parametrize("rewards, sizes, pilot, largest, batch, expected", TOP_UP.values(), ids=TOP_UP)
def test_top_up_next(rewards, sizes, pilot, largest, batch, expected):
    assert top_up_next(rewards, sizes, TopUp(pilot=pilot, largest=largest), batch) == expected


def test_a_top_up_round_that_cannot_grow_is_a_bug():
    with pytest.raises(RuntimeError, match="holds 16 completions and can add none: it cannot reach "
                                           "generation_batch_size 20"):  # fmt: skip
        top_up_next([[1] * 8, [0] * 8], [8, 8], TopUp(pilot=2, largest=8), 20)


# --- dynamic sampling ----------------------------------------------------------------------------------------------

MIXED, EQUAL, ONE = [0.0, 1.0], [1.0, 1.0], [1.0, NAN]  # informative; all equal; a single finite reward
DYNAMIC = {  # name: (rewards per group, G, batch, max_rounds, on_limit, increments, expected DynamicNext)
    "enough informative groups: done, all trained": ([MIXED, MIXED], 2, 4, 2, "mask", 1, DynamicNext()),
    "too few: another batch of prompts": ([MIXED, EQUAL], 2, 4, 2, "mask", 1, DynamicNext(more=2)),
    "a single finite reward is not informative": ([MIXED, ONE], 2, 4, 2, "mask", 1, DynamicNext(more=2)),
    "more than a batch: the informative ones first, in group order":
        ([EQUAL, MIXED, EQUAL, MIXED], 2, 4, 2, "mask", 2, DynamicNext(trained=[1, 3])),
    "at the limit, short, mask: fill up and mask the fill-up":
        ([EQUAL, MIXED, EQUAL, EQUAL], 2, 4, 2, "mask", 2, DynamicNext(trained=[0, 1], masked=[0])),
    "at the limit, short, fill: fill up unmasked":
        ([EQUAL, MIXED, EQUAL, EQUAL], 2, 4, 2, "fill", 2, DynamicNext(trained=[0, 1])),
    "max_rounds 1, short, mask: plain GRPO, nothing masked":
        ([EQUAL, MIXED], 2, 4, 1, "mask", 1, DynamicNext()),
    "max_rounds 1, every group all equal, error: plain GRPO, no error":
        ([EQUAL, EQUAL], 2, 4, 1, "error", 1, DynamicNext()),
}


@pytest.mark.parametrize("rewards, g, batch, max_rounds, on_limit, increments, expected", DYNAMIC.values(),
                         ids=DYNAMIC)  # fmt: skip
def test_dynamic_next(rewards, g, batch, max_rounds, on_limit, increments, expected):
    dynamic = DynamicSampling(max_rounds=max_rounds, on_limit=on_limit)
    generated = sum(map(len, rewards))
    assert dynamic_next(rewards, g, batch, dynamic, increments, stage=0, generated=generated) == expected


def test_dynamic_sampling_short_at_its_limit_with_on_limit_error_names_the_stage_and_the_fix():
    dynamic = DynamicSampling(max_rounds=2, on_limit="error")
    with pytest.raises(RuntimeError, match=r"stage 3\) drew max_rounds 2 generation rounds \(8 completions\) and "
                                           r"found 1 informative groups of the 2"):  # fmt: skip
        dynamic_next([EQUAL, MIXED, EQUAL, EQUAL], 2, 4, dynamic, 2, stage=3, generated=8)


def test_dynamic_sampling_with_on_limit_error_and_enough_groups_trains():
    dynamic = DynamicSampling(max_rounds=1, on_limit="error")
    assert dynamic_next([MIXED, MIXED], 2, 4, dynamic, 1, stage=0, generated=4) == DynamicNext()
