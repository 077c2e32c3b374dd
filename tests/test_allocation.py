"""Tests for `grpo_curriculum.allocation`: the per-prompt G rule, deferral and the exact fill of a round's budget."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from grpo_curriculum.adaptive import Adaptive, make_policy
from grpo_curriculum.allocation import (
    PerPromptAllocator,
    PromptStats,
    informative_probability,
    reachable_sums,
    uniform_draw,
    wanted_num_generations,
)
from grpo_curriculum.signals import round_stats

CANDIDATES = (2, 4, 8, 16)


def allocator(size=64, candidates=CANDIDATES, budget=16, target=0.8, defer=True, revisit=0.2, decay=0.5, seed=0):
    stats = PromptStats(size, candidates, decay=decay, smoothing=0.3)
    return PerPromptAllocator(candidates, budget, stats, target, defer, revisit, seed)


@pytest.mark.parametrize(
    "successes, failures, expected",
    [
        (0, 0, [1 / 3, 3 / 5, 7 / 9, 15 / 17]),  # unseen, Beta(1, 1): (G - 1) / (G + 1)
        (1, 1, [1 - 2 * 6 / 20, 1 - 2 * (2 * 3 * 4 * 5) / (4 * 5 * 6 * 7), None, None]),  # Beta(2, 2)
        (1000, 1000, [0.5, 0.875, 1 - 2 * 0.5**8, 1 - 2 * 0.5**16]),  # p known to be 1/2: 1 - 2 * 0.5^G
    ],
)
def test_informative_probability_closed_forms(successes, failures, expected):
    got = informative_probability([successes], [failures], CANDIDATES)[0]
    for value, want in zip(got, expected, strict=True):
        if want is not None:
            assert value == pytest.approx(want, abs=2e-3 if successes == 1000 else 1e-12)


def test_informative_probability_grows_with_g_and_is_symmetric():
    rng = np.random.default_rng(0)
    s, f = rng.uniform(0, 20, 50), rng.uniform(0, 20, 50)
    p = informative_probability(s, f, CANDIDATES)
    assert np.all(np.diff(p, axis=1) >= 0) and np.all((p >= 0) & (p <= 1))
    np.testing.assert_allclose(p, informative_probability(f, s, CANDIDATES))


@pytest.mark.parametrize(
    "candidates, budget, reachable",
    [
        ((2, 4, 8), 8, [0, 2, 4, 6, 8]),
        ((3, 4), 11, [0, 3, 4, 6, 7, 8, 9, 10, 11]),
        ((4, 8), 6, [0, 4]),
        ((5,), 5, [0, 5]),
    ],
)
def test_reachable_sums(candidates, budget, reachable):
    assert np.flatnonzero(reachable_sums(candidates, budget)).tolist() == reachable


@pytest.mark.parametrize(
    "successes, failures, target, wanted",
    [
        (0, 0, 0.8, 16),  # unseen (flat prior before any observation): only 16 reaches 0.8
        (0, 0, 0.95, 16),  # ... nothing reaches 0.95, but 16 reaches half of it: the largest
        (8, 8, 0.8, 4),  # mixed outcome, p near 1/2: 4 samples give a contrast with probability ~0.87
        (3, 13, 0.8, 8),  # p near 0.2: rare successes need more samples
        (1, 15, 0.8, 16),  # p near 0.1: 16 gives a contrast with probability 0.74, short of 0.8: still the largest
        (0, 32, 0.8, 2),  # hopeless: even 16 samples rarely contrast (0.35 < 0.4), the smallest
        (32, 0, 0.8, 2),  # solved: the smallest
    ],
)
def test_wanted_g(successes, failures, target, wanted):
    probability = informative_probability([successes], [failures], CANDIDATES)
    assert wanted_num_generations(probability, CANDIDATES, target).tolist() == [wanted]


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
    a = allocator(size=8)
    a.stats.successes[:4] = [8, 3, 1, 0]
    a.stats.failures[:4] = [8, 13, 15, 0]  # wants 4, 8, 16, and unseen (flat prior: 16)
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
    stats.observe([0, 3], [2, 0], [2, 0], [True, False])  # slot 3: no finite reward, nothing learned
    assert stats.successes.tolist() == [4.0, 0.0, 2.0, 0.0] and stats.failures.tolist() == [0.0, 4.0, 2.0, 0.0]
    assert stats.zero_streak.tolist() == [2, 1, 0, 0]
    # The population (prior of unseen prompts) is the mean informative probability of the prompts just observed.
    np.testing.assert_allclose(stats.population, informative_probability([4.0], [0.0], CANDIDATES)[0])
    np.testing.assert_allclose(stats.informative([3])[0], stats.population)
    assert stats.successes.nbytes + stats.failures.nbytes + stats.zero_streak.nbytes == 5 * 4  # 5 bytes a prompt


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
    policy.bind(budget=16, num_slots=32, seed=0, indexed=True)
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
    policy.bind(budget=16, num_slots=1024, seed=0, indexed=False)
    assert policy.slot_of("00000000000004d2") == 1234 % 1024
    with pytest.raises(ValueError, match="prompt keys"):
        policy.observe(round_stats([1.0, 0.0], 2))
