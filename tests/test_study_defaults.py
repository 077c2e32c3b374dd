"""
The defaults the study chose (issue 25, `benchmarks/study2.py` on its tuning seeds): per-prompt rounds take the next
prompts of the stream in order (`lookahead` 0) and defer none (`defer` False); dynamic sampling draws at most
`max_rounds` 2 generation rounds. A checkpoint written with the earlier defaults never resumes under the new ones
silently.
"""

from __future__ import annotations

import dataclasses

import pytest

from grpo_curriculum import Adaptive, DynamicSampling, Stage
from grpo_curriculum.core.adaptive import make_policy
from grpo_curriculum.core.slots import PromptSlots
from grpo_curriculum.training.callback import DefaultsChanged, defaults_changed
from grpo_curriculum.training.checkpoint import LEGACY_DEFAULTS, knob_defaults


def test_the_defaults_are_the_studys():
    adaptive = Adaptive((2, 4, 8, 16), policy="per_prompt")
    assert (adaptive.lookahead, adaptive.defer) == (0, False)
    assert DynamicSampling().max_rounds == 2
    assert knob_defaults() == {"lookahead": 0, "defer": False, "max_rounds": 2}
    assert LEGACY_DEFAULTS == {"lookahead": 2, "defer": True, "max_rounds": 4}  # of checkpoints without a record
    defaults = {field.name: field.default for field in dataclasses.fields(Adaptive)}
    assert (defaults["lookahead"], defaults["defer"]) == (0, False)


def per_prompt_round(**knobs):
    """One round of the study's geometry (generation batch 128, candidates 2-16: 23 prompts) after prompts 0-11 gave
    all-success groups four visits in a row and prompts 30-59 mixed ones: the plan over a stream of 100 prompts."""
    policy = make_policy(Adaptive((2, 4, 8, 16), policy="per_prompt", **knobs), 2, 1.0)
    policy.bind(budget=128, slots=PromptSlots(100, indexed=True), seed=0)
    stats = policy.allocator.stats
    for _ in range(4):
        stats.observe(list(range(12)), [8] * 12, [8] * 12, [True] * 12)  # settled: zero std, streak 4
        stats.observe(list(range(30, 60)), [4] * 30, [8] * 30, [False] * 30)  # mixed: the most informative
    return policy.allocator.prompts, policy.allocator.plan([], iter(range(100)), epoch=0)


def test_a_default_per_prompt_round_takes_the_next_prompts_in_order_and_defers_none():
    prompts, plan = per_prompt_round()
    assert prompts == 23
    assert plan.taken == tuple(range(23)) and plan.read == 23  # the stream's next 23, in order: none waits
    assert plan.left == () and plan.deferred == 0  # the settled prompts 0-11 included (their G is what is chosen)
    assert sum(plan.sizes) == 128 and len(plan.sizes) == 23
    assert max(plan.sizes[12:]) > min(plan.sizes[:12])  # the choice left: the settled prompts get the least G
    # The knobs set explicitly still compare and defer, as before (the earlier defaults).
    _, before = per_prompt_round(lookahead=2, defer=True)
    assert before.deferred > 0 and before.taken != tuple(range(23))


def stages(per_prompt=None, dynamic=None):
    """A per-prompt stage and a dynamic-sampling one, with the given knobs (else the defaults)."""
    return [Stage(temperature=1.0, until_step=4,
                  adaptive=Adaptive((2, 4, 8), policy="per_prompt", **(per_prompt or {}))),
            Stage(num_generations=4, temperature=1.0, dynamic_sampling=DynamicSampling(**(dynamic or {})))]


def dynamic_setting(max_rounds):
    return {"stage": 1, "num_generations": 4, "temperature": 1.0,
            "dynamic_sampling": {"max_rounds": max_rounds, "on_limit": "mask"}}


def test_a_state_of_the_earlier_defaults_is_refused_where_a_stage_relies_on_todays():
    """A state without `defaults` (version 5 and before) was written with lookahead 2, defer true, max_rounds 4: a
    stage that now has today's default of a knob may have relied on that default then, so the resume stops with one
    error naming each knob and the recipe lines that continue the run as it ran."""
    legacy = {"current": None, "switches": []}
    changed = defaults_changed(stages(), legacy)
    assert isinstance(changed, DefaultsChanged)
    message = str(changed)
    assert "other defaults (lookahead 2, defer true, max_rounds 4)" in message
    assert "stage 0 has lookahead 0 (today's default; the checkpoint's: 2), defer false" in message
    assert "stage 1 has max_rounds 2 (today's default; the checkpoint's: 4)" in message
    assert "stage 0's `adaptive`: `lookahead: 2, defer: true`" in changed.fix
    assert "stage 1's `dynamic_sampling`: `max_rounds: 4`" in changed.fix
    # The earlier defaults written out, or values no default ever had: the same rule then and now.
    assert defaults_changed(stages({"lookahead": 2, "defer": True}, {"max_rounds": 4}), legacy) is None
    assert defaults_changed(stages({"lookahead": 5, "defer": True}, {"max_rounds": 3}), legacy) is None
    only_defer = defaults_changed(stages({"lookahead": 5}, {"max_rounds": 4}), legacy)
    assert "stage 0 has defer false" in str(only_defer) and "lookahead" not in only_defer.fix
    # A dynamic stage the state shows running: with today's value it ran with it; with the earlier default, not.
    assert defaults_changed(stages({"lookahead": 2, "defer": True}),
                             {"current": dynamic_setting(2), "switches": []}) is None
    ran_4 = defaults_changed(stages({"lookahead": 2, "defer": True}), {"current": dynamic_setting(4), "switches": []})
    assert "max_rounds 2 (today's default; the checkpoint's: 4, and it ran this stage with 4)" in str(ran_4)
    switch = {"step": 4, "round": 4, "from": {"stage": 0, "num_generations": None, "temperature": 1.0},
              "to": dynamic_setting(3), "reason": "stage 1 starts"}
    ran_3 = defaults_changed(stages({"lookahead": 2, "defer": True}), {"current": None, "switches": [switch]})
    assert "it ran this stage with 3" in str(ran_3) and "stage 1's `dynamic_sampling`: `max_rounds: 3`" in ran_3.fix


def test_a_state_written_now_resumes_under_any_knobs():
    """A state records the defaults it was written with: a knob at today's default is the same rule then and now,
    and a knob changed on purpose is the recipe's (as before: only the stages' policies and G are compared)."""
    now = {"current": dynamic_setting(4), "switches": [], "defaults": knob_defaults()}
    for knobs in ({}, {"lookahead": 2, "defer": True}):
        assert defaults_changed(stages(knobs), now) is None


@pytest.mark.parametrize("knob", ["lookahead", "defer", "max_rounds"])
def test_a_state_of_other_future_defaults_compares_knob_by_knob(knob):
    """A state that records some defaults: the knobs it records count, the others are today's."""
    recorded = {knob: LEGACY_DEFAULTS[knob]}
    changed = defaults_changed(stages(), {"current": None, "switches": [], "defaults": recorded})
    assert changed is not None and f"the checkpoint's: {str(LEGACY_DEFAULTS[knob]).lower()}" in str(changed)
    others = [name for name in LEGACY_DEFAULTS if name != knob]
    assert all(f"{name}:" not in changed.fix for name in others)
