"""Tests for `grpo_curriculum.allocation`: the per-prompt G rule, deferral and the exact fill of a round's budget."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from grpo_curriculum.adaptive import Adaptive, make_policy
from grpo_curriculum.allocation import (
    FLAT_MOMENTS,
    PerPromptAllocator,
    PromptStats,
    beta_prior,
    informative_probability,
    uniform_draw,
    wanted_num_generations,
)
from grpo_curriculum.geometry import sums
from grpo_curriculum.signals import round_stats
from grpo_curriculum.slots import PromptSlots

CANDIDATES = (2, 4, 8, 16)


def allocator(size=64, candidates=CANDIDATES, budget=16, target=0.8, defer=True, revisit=0.2, decay=0.5, seed=0):
    stats = PromptStats(size, candidates, decay=decay, smoothing=0.3)
    return PerPromptAllocator(candidates, budget, stats, target, defer, revisit, seed)


@pytest.mark.parametrize(
    "p, expected",
    [
        (0.5, [0.5, 0.875, 1 - 2 * 0.5**8, 1 - 2 * 0.5**16]),  # 1 - 2 * 0.5^G
        (0.0, [0.0] * 4),
        (1.0, [0.0] * 4),
        (0.1, [1 - 0.1**g - 0.9**g for g in CANDIDATES]),
    ],
)
def test_informative_probability(p, expected):
    assert informative_probability([p], CANDIDATES)[0].tolist() == pytest.approx(expected, abs=1e-12)


def test_informative_probability_grows_with_g_and_is_symmetric():
    p = np.random.default_rng(0).uniform(0, 1, 50)
    probability = informative_probability(p, CANDIDATES)
    assert np.all(np.diff(probability, axis=1) >= 0) and np.all((probability >= 0) & (probability <= 1))
    np.testing.assert_allclose(probability, informative_probability(1 - p, CANDIDATES))


@pytest.mark.parametrize(
    "candidates, budget, reachable",
    [
        ((2, 4, 8), 8, [0, 2, 4, 6, 8]),
        ((3, 4), 11, [0, 3, 4, 6, 7, 8, 9, 10, 11]),
        ((4, 8), 6, [0, 4]),
        ((5,), 5, [0, 5]),
    ],
)
def test_sums(candidates, budget, reachable):
    mask = sums(candidates, budget)
    assert [r for r in range(budget + 1) if mask >> r & 1] == reachable


@pytest.mark.parametrize(
    "p, target, wanted",
    [
        (0.5, 0.8, 4),  # mixed outcome: 4 samples give a contrast with probability 0.875
        (0.5, 0.9, 8),
        (0.2, 0.8, 8),  # rare successes need more samples
        (0.1, 0.8, 16),  # 16 samples: 0.81
        (0.05, 0.8, 2),  # even 16 samples contrast with probability 0.56 < 0.8: settled for now, the smallest
        (0.97, 0.8, 2),  # (nearly) solved: the smallest
    ],
)
def test_wanted_g(p, target, wanted):
    probability = informative_probability([p], CANDIDATES)
    assert wanted_num_generations(probability, CANDIDATES, target).tolist() == [wanted]


@pytest.mark.parametrize(
    "moments, prior",
    [
        (FLAT_MOMENTS, (1.0, 1.0)),  # before any observation
        ((0.5, 0.5, 0.25), (0.1, 0.1)),  # every group all 0 or all 1 (4 samples): as U-shaped as allowed
        ((0.5, 0.25 + 0.25 / 4, 0.25), (25.0, 25.0)),  # exactly the binomial noise of p = 1/2: concentrated (clipped)
        ((0.5, 0.3, 0.125), (16 / 3, 16 / 3)),
    ],
)
def test_beta_prior_from_population_moments(moments, prior):
    assert beta_prior(moments) == pytest.approx(prior, rel=1e-6)


def test_estimates_follow_the_population():
    a = allocator(size=40)
    a.stats.smoothing = 1.0  # the population is the last round's
    assert a.stats.success_rate([39]).tolist() == [0.5] and a.wanted(39) == 4  # before any observation: Beta(1, 1)
    # Two thirds of the groups settled (8 of 8 right, or 8 of 8 wrong), a third mixed: a U-shaped prior, which barely
    # pulls the prompts seen once: settled ones get the smallest, the mixed ones what they need for a contrast.
    a.stats.observe(range(30), [8] * 10 + [0] * 10 + [4] * 10, [8] * 30, [True] * 20 + [False] * 10)
    assert sum(beta_prior(a.stats.moments)) < 1
    assert (a.wanted(0), a.wanted(15), a.wanted(25)) == (2, 2, 4)
    # A population of alike prompts (success 3/8 to 5/8) pulls a prompt seen once at 1 of 8 towards one half.
    b = allocator(size=40)
    b.stats.smoothing = 1.0
    b.stats.observe(range(30), [4, 3, 5] * 10, [8] * 30, [False] * 30)
    for stats in (a.stats, b.stats):  # prompt 39 was seen once: 1 success in 8
        stats.successes[39], stats.failures[39] = 1, 7
    assert sum(beta_prior(b.stats.moments)) > 10
    assert b.stats.success_rate([39])[0] > 0.35 and a.stats.success_rate([39])[0] < 0.2
    assert (b.wanted(39), a.wanted(39)) == (4, 16)  # p 0.125: 16 samples contrast with probability 0.88


def test_single_candidate_without_deferral_is_trl_layout():
    a = allocator(candidates=(4,), defer=False)
    plan = a.plan(range(64), epoch=1)
    assert plan.sizes == (4, 4, 4, 4) and plan.offsets == (0, 1, 2, 3) and plan.consumed == 4 and plan.deferred == 0


@pytest.mark.parametrize("candidates, budget", [((2, 4, 8, 16), 16), ((3, 4), 16), ((2, 3), 7), ((4, 6), 24), ((5, 7), 12)])
@pytest.mark.parametrize("seed", range(5))
def test_every_round_is_exactly_the_budget_in_candidates(candidates, budget, seed):
    rng = random.Random(seed)
    a = allocator(size=200, candidates=candidates, budget=budget, revisit=0.5)
    for slot in range(200):  # random histories: unseen, mixed, solved, hopeless, zero-std streaks
        a.stats.successes[slot], a.stats.failures[slot] = rng.choice([0, 1, 5, 20]), rng.choice([0, 1, 5, 20])
        a.stats.zero_streak[slot] = rng.choice([0, 0, 1, 3])
    start = 0
    for _ in range(20):
        plan = a.plan(range(start, 200), epoch=1)
        assert sum(plan.sizes) == budget and set(plan.sizes) <= set(candidates)
        assert list(plan.offsets) == sorted(set(plan.offsets)) and plan.consumed == plan.offsets[-1] + 1
        assert plan.deferred == plan.consumed - len(plan.offsets)
        start += plan.consumed


def test_prompts_get_the_g_they_want_until_the_budget_binds():
    a = allocator(size=8)  # flat prior: Beta(1, 1) + the counts
    a.stats.successes[:4] = [7, 2, 1, 1]
    a.stats.failures[:4] = [7, 14, 14, 14]  # rates 0.5, 0.17, 0.12, 0.12: want 4, 8, 16, 16
    plan = a.plan(range(8), epoch=1)
    # 4 + 8 fit; 16 does not fit in the 4 left: the largest candidate that keeps the rest fillable.
    assert plan.sizes == (4, 8, 4) and plan.offsets == (0, 1, 2)


def test_deferral_draws_are_deterministic_and_follow_revisit():
    draws = [uniform_draw(0, slot, 1) for slot in range(2000)]
    assert draws == [uniform_draw(0, slot, 1) for slot in range(2000)]
    assert abs(np.mean(draws) - 0.5) < 0.03 and draws != [uniform_draw(1, slot, 1) for slot in range(2000)]
    for revisit, lower, upper in [(0.0, 2000, 2000), (1.0, 0, 0), (0.2, 1500, 1700)]:
        a = allocator(size=2000, revisit=revisit)
        a.stats.zero_streak[:] = 1  # every prompt's last group had zero std
        deferred = sum(a.deferred(slot, epoch=1) for slot in range(2000))
        assert lower <= deferred <= upper, (revisit, deferred)
        assert not any(allocator(size=2000, defer=False).deferred(slot, 1) for slot in range(10))


def test_deferred_prompts_are_counted_and_skipped_for_the_pass():
    a = allocator(size=16, candidates=(2,), budget=4, revisit=0.0)
    a.stats.zero_streak[[1, 2]] = 1
    plan = a.plan(range(16), epoch=1)
    assert plan.offsets == (0, 3) and plan.consumed == 4 and plan.deferred == 2
    # A pass that runs out before the budget is filled gives no plan; without deferral the same prompts fill it.
    assert a.plan([1, 2, 3], epoch=1) is None
    assert a.plan([1, 2, 3], epoch=1, defer=False).offsets == (0, 1)


def test_prompt_stats_observe_decay_streak_and_population():
    stats = PromptStats(4, CANDIDATES, decay=0.5, smoothing=1.0)
    stats.observe([0, 1, 2], [4, 0, 2], [4, 4, 4], [True, True, False])
    np.testing.assert_allclose(stats.moments, [(1 + 0 + 0.5) / 3, (1 + 0 + 0.25) / 3, 1 / 4])
    stats.observe([0, 3], [2, 0], [2, 0], [True, False])  # slot 3: no finite reward, nothing learned
    assert stats.successes.tolist() == [4.0, 0.0, 2.0, 0.0] and stats.failures.tolist() == [0.0, 4.0, 2.0, 0.0]
    assert stats.zero_streak.tolist() == [2, 1, 0, 0]
    np.testing.assert_allclose(stats.moments, [1, 1, 1 / 2])  # the last round's groups (smoothing 1)
    a, b = beta_prior(stats.moments)
    np.testing.assert_allclose(stats.success_rate([3, 0]), [a / (a + b), (a + 4) / (a + b + 4)])
    assert stats.successes.nbytes + stats.failures.nbytes + stats.zero_streak.nbytes == 9 * 4  # 9 bytes a prompt


def test_prompt_stats_state_round_trip_and_shape_check():
    stats = PromptStats(6, CANDIDATES, decay=0.5, smoothing=0.3)
    stats.observe([1, 5], [1, 0], [2, 2], [False, True])
    copy = PromptStats(6, CANDIDATES, decay=0.5, smoothing=0.3)
    copy.load_state_dict({k: np.array(v) for k, v in stats.state_dict().items()})
    for name in PromptStats.ARRAYS:
        np.testing.assert_array_equal(getattr(copy, name), getattr(stats, name))
    with pytest.raises(ValueError, match="shape"):
        PromptStats(7, CANDIDATES, decay=0.5, smoothing=0.3).load_state_dict(stats.state_dict())


def test_allocator_refuses_a_budget_the_candidates_cannot_fill():
    with pytest.raises(ValueError, match="no sum"):
        allocator(candidates=(4, 8), budget=6)


# --- the per_prompt policy -----------------------------------------------------------------------------------------


def per_prompt_policy(**knobs):
    policy = make_policy(Adaptive(CANDIDATES, policy="per_prompt", **knobs), 2, 1.0)
    policy.bind(budget=16, slots=PromptSlots(32, indexed=True), seed=0)
    return policy


def test_per_prompt_policy_learns_from_rounds_and_restores():
    policy = per_prompt_policy(temperature=(0.7, 1.2))
    rewards = [1.0] * 4 + [0.0] * 4 + [1.0, 0.0] * 4  # prompt 3: solved, prompt 7: hopeless, prompt 9: mixed
    policy.observe(round_stats(rewards, (4, 4, 8), prompt_keys=["3", "7", "9"], completion_keys=list(range(16))))
    stats = policy.allocator.stats
    assert (stats.successes[[3, 7, 9]].tolist(), stats.failures[[3, 7, 9]].tolist()) == ([4, 0, 4], [0, 4, 4])
    assert stats.zero_streak[[3, 7, 9]].tolist() == [1, 1, 0]
    decision = policy.decide()
    assert decision.temperature == 1.0 and "num_generations" not in policy.metrics()

    state = json.loads(json.dumps({k: v for k, v in policy.state_dict().items() if k != "stats"}))
    restored = per_prompt_policy(temperature=(0.7, 1.2))
    restored.load_state_dict({**state, "stats": policy.state_dict()["stats"]})
    for name in PromptStats.ARRAYS:
        np.testing.assert_array_equal(getattr(restored.allocator.stats, name), getattr(stats, name))
    assert restored.decide() == decision
    assert [restored.allocator.plan(range(32), epoch=2)] == [policy.allocator.plan(range(32), epoch=2)]


def test_per_prompt_policy_keys_iterable_prompts_by_hash_bucket():
    policy = make_policy(Adaptive(CANDIDATES, policy="per_prompt"), 2, 1.0)
    policy.bind(budget=16, slots=PromptSlots(1024), seed=0)
    slots = [policy.slot_of(f"{i:016x}") for i in range(200)]
    assert slots == [PromptSlots(1024).slot_of(f"{i:016x}") for i in range(200)] and 0 <= min(slots) < max(slots) < 1024
    with pytest.raises(ValueError, match="prompt keys"):
        policy.observe(round_stats([1.0, 0.0], 2))


@pytest.mark.parametrize("decay", [0.5, 0.99, 0.9999])
@pytest.mark.parametrize("p, visits", [(0.05, 20_000), (0.5, 20_000), (0.95, 3_000)])
def test_counts_neither_overflow_nor_saturate(decay, p, visits):
    """Visits of 8 samples with `8 p` successes: the discounted counts and the estimate match exact float64 sums."""
    stats = PromptStats(1, CANDIDATES, decay=decay, smoothing=0.3)
    successes, failures = 0.0, 0.0
    for _ in range(visits):
        stats.observe([0], [8 * p], [8], [False])
        successes, failures = decay * successes + 8 * p, decay * failures + 8 * (1 - p)
    assert float(stats.successes[0]) == pytest.approx(successes, rel=1e-3)
    assert float(stats.failures[0]) == pytest.approx(failures, rel=1e-3)
    assert stats.success_rate([0])[0] == pytest.approx(p, abs=0.005)
