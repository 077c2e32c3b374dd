"""
The defaults the study chose (issue 25, `benchmarks/study/` on its tuning seeds; issue 37 on five tasks, one with
settled prompts): per-prompt rounds take the next prompts of the stream in order (`lookahead` 0) and skip settled ones
with GRESO's probabilities (`defer` True, `skip_target` 0.05; issue 25 had chosen no deferral); dynamic sampling draws at most
`max_rounds` 2 generation rounds; a top-up round holds `generation_batch_size // max(2 * pilot, largest // 2)` prompts
(16 at the study's batch 128 with candidates 2-16: its arm `top_up_p16`). A checkpoint written with the earlier
defaults never resumes under the new ones silently.
"""

from __future__ import annotations

import dataclasses

import pytest

from grpo_curriculum import Adaptive, DynamicSampling, Stage
from grpo_curriculum.core.policies import make_policy
from grpo_curriculum.core.slots import PromptSlots
from grpo_curriculum.core.sampling import TopUp, top_up_prompts_by_rule
from grpo_curriculum.training.checkpoint import LEGACY_DEFAULTS, DefaultsChanged, defaults_changed, knob_defaults


def test_the_defaults_are_the_studys():
    adaptive = Adaptive((2, 4, 8, 16), policy="per_prompt")
    assert (adaptive.lookahead, adaptive.defer, adaptive.skip_target) == (0, True, 0.05)
    assert DynamicSampling().max_rounds == 2
    assert adaptive.weight == "hard"
    assert knob_defaults() == {"lookahead": 0, "defer": True, "weight": "hard", "skip_target": 0.05, "max_rounds": 2,
                               "top_up_prompts": "largest_half"}
    assert LEGACY_DEFAULTS == {"lookahead": 2, "defer": True, "weight": "knapsack",  # of checkpoints without a record
                               "max_rounds": 4, "top_up_prompts": "pilot_half", "skip_target": 0.25}
    defaults = {field.name: field.default for field in dataclasses.fields(Adaptive)}
    assert (defaults["lookahead"], defaults["defer"], defaults["skip_target"]) == (0, True, 0.05)


def test_the_default_top_up_round_is_the_studys():
    """At the study's geometry (generation batch 128, candidates 2-16: pilot 2, largest 16) a default top-up round
    holds 16 prompts (`top_up_p16`, mean group 8: the informative share above static G 8's on every task), not the
    earlier rule's 32 (mean group 4: not above static G 4's on `prefix_levels`)."""
    adaptive = Adaptive((2, 4, 8, 16), policy="top_up")
    assert adaptive.prompts is None and adaptive.top_up == TopUp(pilot=2, largest=16)
    assert adaptive.top_up.prompts_for(128) == 16 == 128 // 8
    assert TopUp.PROMPTS_RULE == knob_defaults()["top_up_prompts"]
    assert top_up_prompts_by_rule("pilot_half", 2, 16, 128) == 32  # the earlier default, for the resume guard's fix
    for pilot, largest in ((2, 4), (2, 8), (2, 16), (2, 32), (4, 16), (4, 64), (8, 16)):
        for batch in (4, 8, 16, 24, 64, 128, 1000):
            if batch % pilot == 0:  # the guard's copy of the rule is `prompts_for`'s
                assert top_up_prompts_by_rule("largest_half", pilot, largest, batch) == \
                    TopUp(pilot, largest).prompts_for(batch), (pilot, largest, batch)


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


def test_a_default_per_prompt_round_takes_the_next_prompts_in_order_skipping_settled_ones():
    prompts, plan = per_prompt_round()
    assert prompts == 23 and plan.left == ()  # none waits for the next round
    assert plan.deferred > 0 and plan.read == 23 + plan.deferred  # settled prompts skipped, the next ones read
    assert plan.taken == tuple(sorted(plan.taken)) and len(plan.taken) == 23  # the rest, in stream order
    assert sum(plan.sizes) == 128
    # The knobs of issue 25's default written out: no prompt skipped, the settled ones get the least G.
    _, kept = per_prompt_round(defer=False, skip_target=0.25)
    assert kept.taken == tuple(range(23)) and kept.read == 23 and kept.deferred == 0
    assert max(kept.sizes[12:]) > min(kept.sizes[:12])
    # The earlier knobs set explicitly still compare and defer, as before.
    _, before = per_prompt_round(lookahead=2, defer=True)
    assert before.deferred > 0 and before.taken != tuple(range(23))


def stages(per_prompt=None, dynamic=None):
    """A per-prompt stage and a dynamic-sampling one, with the given knobs (else the defaults)."""
    return [Stage(temperature=1.0, until_step=4,
                  adaptive=Adaptive((2, 4, 8), policy="per_prompt", **(per_prompt or {}))),
            Stage(num_generations=4, temperature=1.0, dynamic_sampling=DynamicSampling(**(dynamic or {})))]


LEGACY = {"lookahead": 2, "weight": "knapsack", "skip_target": 0.25}  # the per-prompt knobs of version 5, written out


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
    assert ("other defaults (lookahead 2, weight knapsack, skip_target 0.25, max_rounds 4, top-up prompts "
            "generation_batch_size // (2 * pilot))") in message  # every default the checkpoint differs in
    assert "prompts" not in changed.fix and "defer" not in changed.fix  # defer: true then and now
    assert "stage 0 has lookahead 0 (today's default; the checkpoint's: 2), weight hard" in message
    assert "stage 1 has max_rounds 2 (today's default; the checkpoint's: 4)" in message
    assert "stage 0's `adaptive`: `lookahead: 2, weight: knapsack, skip_target: 0.25`" in changed.fix
    assert "stage 1's `dynamic_sampling`: `max_rounds: 4`" in changed.fix
    # The earlier defaults written out, or values no default ever had: the same rule then and now.
    assert defaults_changed(stages({**LEGACY, "defer": True}, {"max_rounds": 4}), legacy) is None
    assert defaults_changed(stages({**LEGACY, "lookahead": 5}, {"max_rounds": 3}), legacy) is None
    only_skip = defaults_changed(stages({"lookahead": 5, "weight": "knapsack"}, {"max_rounds": 4}), legacy)
    assert "stage 0 has skip_target 0.05" in str(only_skip) and "lookahead" not in only_skip.fix
    # A dynamic stage the state shows running: with today's value it ran with it; with the earlier default, not.
    assert defaults_changed(stages(LEGACY), {"current": dynamic_setting(2), "switches": []}) is None
    ran_4 = defaults_changed(stages(LEGACY), {"current": dynamic_setting(4), "switches": []})
    assert "max_rounds 2 (today's default; the checkpoint's: 4, and it ran this stage with 4)" in str(ran_4)
    switch = {"step": 4, "round": 4, "from": {"stage": 0, "num_generations": None, "temperature": 1.0},
              "to": dynamic_setting(3), "reason": "stage 1 starts"}
    ran_3 = defaults_changed(stages(LEGACY), {"current": None, "switches": [switch]})
    assert "it ran this stage with 3" in str(ran_3) and "stage 1's `dynamic_sampling`: `max_rounds: 3`" in ran_3.fix


def test_a_state_written_now_resumes_under_any_knobs():
    """A state records the defaults it was written with: a knob at today's default is the same rule then and now,
    and a knob changed on purpose is the recipe's (as before: only the stages' policies and G are compared)."""
    now = {"current": dynamic_setting(4), "switches": [], "defaults": knob_defaults()}
    for knobs in ({}, {"lookahead": 2, "defer": True}):
        assert defaults_changed(stages(knobs), now) is None


@pytest.mark.parametrize("knob", ["lookahead", "skip_target", "max_rounds"])
def test_a_state_of_other_defaults_compares_knob_by_knob(knob):
    """A state that records other defaults: only the knobs that differ count."""
    recorded = {**knob_defaults(), knob: LEGACY_DEFAULTS[knob]}
    changed = defaults_changed(stages(), {"current": None, "switches": [], "defaults": recorded})
    assert changed is not None and f"the checkpoint's: {str(LEGACY_DEFAULTS[knob]).lower()}" in str(changed)
    others = [name for name in LEGACY_DEFAULTS if name != knob]
    assert all(f"{name}:" not in changed.fix for name in others)


def test_a_knob_a_state_does_not_record_has_its_legacy_default():
    """The first version-6 states recorded lookahead, defer and max_rounds but not the top-up round size: they ran
    the earlier rule. A per-prompt and dynamic-sampling run is not affected; a top-up one is."""
    first_6 = {"current": None, "switches": [], "defaults": {"lookahead": 0, "defer": False, "max_rounds": 2}}
    weight = defaults_changed(stages(), first_6)  # they ran the per-prompt weight knapsack (and skip_target 0.25)
    assert "weight hard (today's default; the checkpoint's: knapsack)" in str(weight)
    assert "stage 0's `adaptive`: `defer: false, weight: knapsack, skip_target: 0.25`" in weight.fix
    assert defaults_changed(stages({"weight": "knapsack", "defer": False, "skip_target": 0.25}), first_6) is None
    changed = defaults_changed(top_up_stages(), first_6, 128)
    assert changed is not None
    assert ("other defaults (defer false, weight knapsack, skip_target 0.25, top-up prompts generation_batch_size // "
            "(2 * pilot))") in str(changed)
    assert "stage 0's `adaptive`: `prompts: 32`" in changed.fix


def top_up_stages(candidates=(2, 4, 8, 16), prompts=None):
    """A top-up stage (stage 0) and a fixed-G one."""
    return [Stage(temperature=1.0, until_step=4, adaptive=Adaptive(candidates, policy="top_up", prompts=prompts)),
            Stage(num_generations=4, temperature=1.0)]


def test_a_top_up_state_of_the_earlier_round_size_is_refused_with_the_prompts_it_ran():
    """A state of the earlier default (`generation_batch_size // (2 * pilot)`: 32 prompts at batch 128 with pilot 2,
    largest 16) resumed by a stage that leaves `prompts` out (now 16) would halve the prompts a round mid-run: refused,
    with `prompts: 32` (the old rule at the run's generation batch), or how to compute it when the batch is unknown."""
    legacy = {"current": None, "switches": []}
    changed = defaults_changed(top_up_stages(), legacy, 128)
    assert isinstance(changed, DefaultsChanged)
    assert ("stage 0 has no `prompts` (today's default round size generation_batch_size // max(2 * pilot, largest // "
            "2) = 16 prompts at generation batch 128; the checkpoint's: generation_batch_size // (2 * pilot) = 32)"
            ) in str(changed)  # fmt: skip
    assert "stage 0's `adaptive`: `prompts: 32`;" in changed.fix
    at_64 = defaults_changed(top_up_stages((2, 32)), legacy, 64)  # 64 // 16 = 4 now, 64 // 4 = 16 then
    assert "= 4 prompts at generation batch 64" in str(at_64) and "`prompts: 16`" in at_64.fix
    unknown = defaults_changed(top_up_stages(), legacy)
    assert "`prompts: N` with N = generation_batch_size // (2 * pilot) (pilot 2), at least " \
           "ceil(generation_batch_size / 16) and at most generation_batch_size // 2" in unknown.fix
    # `prompts` given (the old value or any other): the recipe's, the same rounds then and now.
    for prompts in (32, 16, 8):
        assert defaults_changed(top_up_stages(prompts=prompts), legacy, 128) is None
    # Where both rules give the same rounds the resume goes on: pilot 4, largest 16 and pilot 2, largest 8 (the same
    # divisor, 8 and 4, at every batch); pilot 2, largest 16 at batch 2 (2 // 8 and 2 // 4 both clamped to 1), but
    # not at batch 16 (2 now, 4 then).
    assert defaults_changed(top_up_stages((4, 8, 16)), legacy, 64) is None
    assert defaults_changed(top_up_stages((4, 8, 16)), legacy) is None  # for every batch
    assert defaults_changed(top_up_stages((2, 4, 8)), legacy) is None
    assert defaults_changed(top_up_stages(), legacy, 2) is None
    assert defaults_changed(top_up_stages(), legacy, 16) is not None
    # A state written now resumes.
    assert defaults_changed(top_up_stages(), {**legacy, "defaults": knob_defaults()}, 128) is None
