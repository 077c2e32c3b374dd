"""Tests for `grpo_curriculum.core.allocation`: the value-maximising per-prompt rule, GRESO deferral, exact budgets."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import random

import numpy as np
import pytest

from grpo_curriculum.core.adaptive import KNOBS, WEIGHTS, Adaptive
from grpo_curriculum.core.allocation import (
    FLAT_MOMENTS,
    KEEP_FLOOR,
    PerPromptAllocator,
    PromptStats,
    beta_prior,
    expected_value,
    knapsack,
    uniform_draw,
)
from grpo_curriculum.core.geometry import sums
from grpo_curriculum.core.policies import make_policy
from grpo_curriculum.core.signals import round_stats
from grpo_curriculum.core.slots import PromptSlots

CANDIDATES = (2, 4, 8, 16)


def allocator(size=64, candidates=CANDIDATES, budget=16, prompts=4, lookahead=2, defer=True, weight="knapsack",
              decay=0.5, seed=0):  # fmt: skip
    stats = PromptStats(size, candidates, decay=decay, smoothing=0.3)
    return PerPromptAllocator(candidates, budget, prompts, stats, weight=weight, lookahead=lookahead, defer=defer,
                              seed=seed)  # fmt: skip


def run_pass(a, slots, epoch=1, rounds=None, waiting=(), position=0):
    """Rounds over a pass of `slots` as the trainer's stream runs them: `(taken slots, sizes, deferred)` per round."""
    waiting, plans = list(waiting), []
    for _ in itertools.count() if rounds is None else range(rounds):
        plan = a.plan([slots[i] for i in waiting], iter(slots[position:]), epoch)
        if plan is None:
            break
        looked = waiting + list(range(position, position + plan.read))
        plans.append(([slots[looked[i]] for i in plan.taken], list(plan.sizes), plan.deferred))
        waiting, position = [looked[i] for i in plan.left], position + plan.read
    return plans, waiting, position


def kinds_stats(a, kinds):
    """Histories by kind: 1 always right, 0 always wrong, "coin" half right, "rare" right 1 time in 20."""
    counts = {1: (20, 0, 10), 0: (0, 20, -10), "coin": (10, 10, 0), "rare": (1, 19, 0)}
    for slot, kind in enumerate(kinds):
        a.stats.successes[slot], a.stats.failures[slot], a.stats.zero_streak[slot] = counts[kind]


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (2.5, 0.7), (0.3, 4.0), (30.0, 2.0)])
@pytest.mark.parametrize("weight", list(WEIGHTS))
def test_expected_value_is_the_beta_function_ratios_and_the_integral(a, b, weight):
    from math import exp, lgamma

    log_beta = lambda x, y: lgamma(x) + lgamma(y) - lgamma(x + y)  # noqa: E731
    moment = lambda i, j: exp(log_beta(a + i, b + j) - log_beta(a, b))  # noqa: E731  E[p^i (1-p)^j] under Beta(a, b)
    i, j = WEIGHTS[weight]
    values = expected_value([a], [b], CANDIDATES, weight)[0]
    for g, value in zip(CANDIDATES, values):
        assert value == pytest.approx(moment(i, j) - moment(i + g, j) - moment(i, j + g), rel=1e-10, abs=1e-15)
        if min(a, b) >= 1:  # a bounded density: integrate it numerically too
            p = np.linspace(0, 1, 200_001)
            density = p ** (a - 1) * (1 - p) ** (b - 1) / exp(log_beta(a, b))
            integrand = (1 - p**g - (1 - p) ** g) * p**i * (1 - p) ** j * density
            assert value == pytest.approx(np.trapezoid(integrand, p), rel=1e-4, abs=1e-12)


@pytest.mark.parametrize("g", CANDIDATES)
def test_expected_value_closed_forms(g):
    # Beta(1, 1): E[p^G] = 1 / (G + 1), so the expected informative probability is 1 - 2 / (G + 1).
    assert expected_value([1.0], [1.0], [g], "uniform")[0, 0] == pytest.approx(1 - 2 / (g + 1))
    # A posterior concentrated at p: the plug-in value [1 - p^G - (1-p)^G] w(p).
    for p in (0.05, 0.5, 0.9):
        for weight, (i, j) in WEIGHTS.items():
            plug_in = (1 - p**g - (1 - p) ** g) * p**i * (1 - p) ** j
            assert expected_value([p * 1e7], [(1 - p) * 1e7], [g], weight)[0, 0] == pytest.approx(plug_in, rel=1e-4)
    assert set(WEIGHTS) == set(KNOBS["weight"].choices)


@pytest.mark.parametrize("seed", range(20))
def test_knapsack_is_exact(seed):
    rng = np.random.default_rng(seed)
    candidates = sorted(rng.choice([2, 3, 4, 5, 8], size=rng.integers(1, 4), replace=False).tolist())
    n, budget = int(rng.integers(1, 5)), int(rng.integers(4, 20))
    values = rng.uniform(0, 1, (n, len(candidates)))
    totals = [sum(values[i, k] for i, k in enumerate(choice))
              for choice in itertools.product(range(len(candidates)), repeat=n)
              if sum(candidates[k] for k in choice) == budget]  # fmt: skip
    best = max(totals, default=None)
    sizes = knapsack(values, candidates, budget)
    if best is None:
        assert sizes is None
    else:
        assert sum(sizes) == budget
        assert sum(values[i, candidates.index(g)] for i, g in enumerate(sizes)) == pytest.approx(best)


@pytest.mark.parametrize("values", [np.zeros((3, 2)), np.tile([0.3, 0.6], (3, 1))])
def test_knapsack_ties_go_to_the_smaller_g_of_the_earlier_prompt(values):
    """Three equal prompts, candidates (2, 4), budget 10: [2, 4, 4], [4, 2, 4] and [4, 4, 2] tie; the documented rule
    takes [2, 4, 4] (a scan from the largest candidate would give [4, 4, 2])."""
    assert knapsack(values, (2, 4), 10) == [2, 4, 4]
    assert knapsack(values, (2, 4), 8) == [2, 2, 4]


def test_closed_form_kinds():
    """Settled prompts are deferred or get the minimum; rare successes get the largest G; budgets are exact."""
    kinds = [1, 0, "coin", "rare"] * 16
    a = allocator(budget=48, prompts=4)
    kinds_stats(a, kinds)
    plans, _, _ = run_pass(a, list(range(64)))
    assert len(plans) >= 8 and sum(d for _, _, d in plans) > 0
    rare = []
    for taken, sizes, _ in plans:
        assert sum(sizes) == 48 and len(sizes) == 4
        by_kind = {kind: [g for slot, g in zip(taken, sizes) if kinds[slot] == kind]
                   for kind in (0, 1, "coin", "rare")}  # fmt: skip
        assert all(g == min(sizes) for g in by_kind[0] + by_kind[1])  # settled: the least the exact budget allows
        assert min(by_kind["rare"], default=16) >= max(by_kind["coin"], default=0)
        rare += by_kind["rare"]
    assert sum(g == 16 for g in rare) >= 0.8 * len(rare) and len(rare) >= 12
    taken = [slot for t, _, _ in plans for slot in t]
    assert len(taken) == len(set(taken))  # each prompt at most once a pass
    # Without deferral the settled prompts are taken too, with the least G of their round.
    b = allocator(budget=24, prompts=4, defer=False)
    kinds_stats(b, kinds)
    for taken, sizes, deferred in run_pass(b, list(range(64)))[0]:
        assert deferred == 0 and sum(sizes) == 24
        assert all(g == min(sizes) < max(sizes) for slot, g in zip(taken, sizes) if kinds[slot] in (0, 1))


def test_a_fresh_run_explores_with_the_prior():
    """Never-seen prompts take the population prior's value: all alike, taken in stream order at the mean G."""
    a = allocator(size=64, budget=16, prompts=4)
    values = a.values(range(64))
    assert (values > 0).all() and (values == values[0]).all()
    plans, _, _ = run_pass(a, list(range(64)), rounds=3)
    assert [p[0] for p in plans] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert all(p[1] == [4] * 4 for p in plans)


def test_single_candidate_without_deferral_is_trl_layout():
    a = allocator(candidates=(4,), defer=False, lookahead=5)
    for slot in range(64):
        a.stats.successes[slot], a.stats.failures[slot] = slot % 7, slot % 5
    plans, _, _ = run_pass(a, list(range(64)))
    assert [p[0] for p in plans] == [list(range(i, i + 4)) for i in range(0, 64, 4)]


@pytest.mark.parametrize("candidates, budget", [((2, 4, 8, 16), 16), ((3, 4), 16), ((2, 3), 7), ((4, 6), 24), ((5, 7), 12)])
@pytest.mark.parametrize("seed", range(5))
def test_every_round_is_exactly_the_budget_in_candidates(candidates, budget, seed):
    rng = random.Random(seed)
    a = allocator(size=200, candidates=candidates, budget=budget, prompts=rng.choice([1, 2, 3, 4]),
                  lookahead=rng.choice([0, 2, 5]))  # fmt: skip
    for slot in range(200):  # random histories: unseen, mixed, solved, hopeless, zero-std streaks
        a.stats.successes[slot], a.stats.failures[slot] = rng.choice([0, 1, 5, 20]), rng.choice([0, 1, 5, 20])
        a.stats.zero_streak[slot] = rng.choice([0, 0, 1, 3, -1, -4])
    plans, _, _ = run_pass(a, list(range(200)))
    assert len(plans) > 5
    taken = [slot for t, _, _ in plans for slot in t]
    assert len(taken) == len(set(taken)) and taken  # no prompt twice in a pass
    for t, sizes, _ in plans:
        assert sum(sizes) == budget and set(sizes) <= set(candidates)


def test_prompts_left_waiting_are_taken_by_the_next_round():
    kinds = ["coin", "rare"] * 32
    a = allocator(budget=16, prompts=2, lookahead=2, defer=False)
    kinds_stats(a, kinds)
    plans, _, _ = run_pass(a, list(range(64)))
    for k, (taken, _, _) in enumerate(plans[:-1]):  # none waits more than one round
        assert set(range(max(taken) + 1)) <= {slot for t, _, _ in plans[: k + 2] for slot in t}
    taken = sorted(slot for t, _, _ in plans for slot in t)
    assert taken == list(range(len(taken)))  # the pass is taken in order, up to its tail


def test_deferral_draws_are_deterministic_and_follow_the_exploration_probability():
    draws = [uniform_draw(0, slot, 1) for slot in range(2000)]
    assert draws == [uniform_draw(0, slot, 1) for slot in range(2000)]
    assert abs(np.mean(draws) - 0.5) < 0.03 and draws != [uniform_draw(1, slot, 1) for slot in range(2000)]
    for streak, explore, kept in [(1, 0.5, 0.5), (3, 0.5, 0.125), (-2, 0.9, 0.81), (9, 0.05, KEEP_FLOOR)]:
        a = allocator(size=2000)
        a.stats.zero_streak[:] = streak
        a.explore["easy" if streak > 0 else "hard"] = explore
        deferred = sum(a.deferred(slot, epoch=1) for slot in range(2000))
        assert abs(deferred / 2000 - (1 - kept)) < 0.03, (streak, explore, deferred)
    assert not any(allocator(size=2000, defer=False).deferred(slot, 1) for slot in range(10))


def test_a_prompt_deferred_for_a_long_streak_still_comes_back():
    """GRESO's floor: however long a prompt's zero-variance streak (an exploration probability of 0.5^40 ~ 1e-12), it is
    kept in about `KEEP_FLOOR` (1%) of passes, so a prompt the policy outgrows is seen again and its streak can end."""
    a = allocator(size=1)
    a.stats.zero_streak[0] = 40
    kept = [epoch for epoch in range(1, 3001) if not a.deferred(0, epoch)]
    assert 15 <= len(kept) <= 50 and kept[0] < 400, (len(kept), kept[:3])  # 30 expected; the first within ~100


def test_greso_skip_probabilities_move_towards_the_target():
    a = allocator()
    assert a.skip_probabilities() == {"skip_p_easy": 0.5, "skip_p_hard": 0.5}
    for _ in range(100):
        a.adapt(easy_share=0.6, hard_share=0.0)  # many solved groups, no hopeless ones
    assert a.skip_probabilities() == pytest.approx({"skip_p_easy": 0.95, "skip_p_hard": 0.05})  # bounded
    for _ in range(10):
        a.adapt(easy_share=0.05, hard_share=0.5)
    assert a.skip_probabilities() == pytest.approx({"skip_p_easy": 0.85, "skip_p_hard": 0.15})


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


def test_prompt_stats_observe_decay_streak_and_population():
    stats = PromptStats(4, CANDIDATES, decay=0.5, smoothing=1.0)
    stats.observe([0, 1, 2], [4, 0, 2], [4, 4, 4], [True, True, False])
    np.testing.assert_allclose(stats.moments, [(1 + 0 + 0.5) / 3, (1 + 0 + 0.25) / 3, 1 / 4])
    stats.observe([0, 3], [2, 0], [2, 0], [True, False])  # slot 3: no finite reward, nothing learned
    assert stats.successes.tolist() == [4.0, 0.0, 2.0, 0.0] and stats.failures.tolist() == [0.0, 4.0, 2.0, 0.0]
    assert stats.zero_streak.tolist() == [2, -1, 0, 0]  # all right twice; all wrong once; mixed
    np.testing.assert_allclose(stats.moments, [1, 1, 1 / 2])  # the last round's groups (smoothing 1)
    a, b = beta_prior(stats.moments)
    np.testing.assert_allclose(stats.posterior([3, 0])[0], [a, a + 4])  # successes added to the prior
    np.testing.assert_allclose(stats.posterior([3, 0])[1], [b, b])
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
    assert stats.zero_streak[[3, 7, 9]].tolist() == [1, -1, 0]
    decision = policy.decide()
    metrics = policy.metrics()
    assert decision.temperature == 1.0 and "num_generations" not in metrics
    # A third of the groups all right, a third all wrong: both above half the target 0.25, both skip more.
    assert (metrics["skip_p_easy"], metrics["skip_p_hard"]) == pytest.approx((0.51, 0.51))

    state = json.loads(json.dumps({k: v for k, v in policy.state_dict().items() if k != "stats"}))
    restored = per_prompt_policy(temperature=(0.7, 1.2))
    restored.load_state_dict({**state, "stats": policy.state_dict()["stats"]})
    for name in PromptStats.ARRAYS:
        np.testing.assert_array_equal(getattr(restored.allocator.stats, name), getattr(stats, name))
    assert restored.decide() == decision and restored.metrics() == metrics
    assert restored.allocator.plan([], range(32), epoch=2) == policy.allocator.plan([], range(32), epoch=2)


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
    a, b = stats.posterior([0])
    assert (a / (a + b))[0] == pytest.approx(p, abs=0.005)  # the posterior mean


def _plans_in_a_process(seed):
    kinds = [1, 0, "coin", "rare"] * 16
    a = allocator(budget=48, prompts=4, seed=seed)
    kinds_stats(a, kinds)
    return run_pass(a, list(range(64)))[0]


def test_every_process_agrees():
    """Two fresh interpreters (as two ranks) compute the same rounds as this one."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(_plans_in_a_process, [3, 3]) == [_plans_in_a_process(3)] * 2


def test_resume_mid_pass_continues_identically():
    """Statistics, skip probabilities and the stream's waiting prompts restored mid-pass give the same next rounds."""
    rng = np.random.default_rng(0)
    truth = rng.choice([0.0, 1.0, 0.5, 0.05], size=96)

    def train(a, plans):  # feed each round's outcome (expected successes) to the statistics, as the trainer does
        for taken, sizes, _ in plans:
            s = [float(round(truth[t] * g)) for t, g in zip(taken, sizes)]
            a.stats.observe(taken, s, sizes, [x in (0, g) for x, g in zip(s, sizes)])
            a.adapt(sum(x == g for x, g in zip(s, sizes)) / len(s), sum(x == 0 for x in s) / len(s))

    full = allocator(size=96, budget=16, prompts=4)
    first, waiting, position = run_pass(full, list(range(96)), rounds=4)
    train(full, first)
    state = ({k: v.copy() for k, v in full.stats.state_dict().items()}, dict(full.explore), list(waiting), position)
    rest, _, _ = run_pass(full, list(range(96)), waiting=waiting, position=position)
    resumed = allocator(size=96, budget=16, prompts=4)
    resumed.stats.load_state_dict(state[0])
    resumed.explore = state[1]
    again, _, _ = run_pass(resumed, list(range(96)), waiting=state[2], position=state[3])
    assert again == rest and len(rest) > 3 and state[2]  # prompts were waiting at the checkpoint


# --- issue 42: skipping from evidence -----------------------------------------------------------------------------


def evidence(size=64, budget=16, prompts=4, lookahead=0, seed=0, skip="evidence", defer=True):
    stats = PromptStats(size, CANDIDATES, decay=0.5, smoothing=0.3)
    return PerPromptAllocator(CANDIDATES, budget, prompts, stats, weight="hard", lookahead=lookahead, defer=defer,
                              seed=seed, skip=skip)  # fmt: skip


@pytest.mark.parametrize("skip, streak, successes, kept", [
    ("evidence", -3, 0.0, 0.125),  # failed every visit: GRESO's keep probability (0.5 ** 3)
    ("evidence", -3, 0.25, 1.0),  # failing now, but it has succeeded: rare-success, never deferred for failing
    ("evidence", -40, 1e-6, 1.0),  # however long the streak, however faded the success
    ("evidence", 3, 12.0, 0.125),  # an all-success streak: deferred as before
    ("greso", -3, 0.25, 0.125),  # issue 37's rule: a past success does not count
    ("evidence", -40, 0.0, KEEP_FLOOR),  # a long failure streak still comes back (the floor)
])  # fmt: skip
def test_evidence_never_defers_a_prompt_that_has_succeeded_for_failing(skip, streak, successes, kept):
    a = evidence(size=4000, skip=skip)
    a.stats.zero_streak[:], a.stats.successes[:] = streak, successes
    deferred = sum(a.deferred(slot, epoch=1) for slot in range(4000))
    assert abs(deferred / 4000 - (1 - kept)) < 0.02, deferred


def test_evidence_takes_the_best_half_of_twice_the_round_and_skips_the_rest_for_the_pass():
    a = evidence(size=64, budget=32, prompts=4)
    kinds_stats(a, [1, 0, "coin", "rare"] * 16)
    a.stats.zero_streak[:] = 0  # no streak: only the value decides
    plans, waiting, position = run_pass(a, list(range(64)), rounds=3)
    assert waiting == [] and position == 24  # 8 prompts looked at a round, none left waiting
    for k, (taken, sizes, deferred) in enumerate(plans):
        window = range(8 * k, 8 * k + 8)
        assert len(taken) == 4 and deferred == 4 and sum(sizes) == 32
        assert {slot % 4 for slot in taken} == {2, 3} and set(taken) <= set(window)  # coins and rare ones
    greso = evidence(size=64, budget=32, prompts=4, skip="greso")
    kinds_stats(greso, [1, 0, "coin", "rare"] * 16)
    greso.stats.zero_streak[:] = 0
    assert [t for t, _, _ in run_pass(greso, list(range(64)), rounds=2)[0]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("skip, left, plan", [
    # 3 undeferred prompts left in the pass (a round takes 4), 16 completions a round of candidates up to 16
    ("greso", 3, None),  # the caller fills the round with the pass's deferred prompts, in turn
    ("evidence", 3, 3),  # the 3 take the round with larger G; the pass's deferred prompts are read past
    ("evidence", 1, 1),  # one prompt can fill 16 at G 16
])  # fmt: skip
def test_evidence_ends_a_pass_with_its_undeferred_prompts_not_the_deferred_ones(skip, left, plan):
    a = evidence(size=64, budget=16, prompts=4, skip=skip)
    a.stats.zero_streak[:] = 1  # settled, deferred whenever GRESO's draw allows (its exploration at 0)
    a.stats.zero_streak[:left] = 0
    a.explore = {"easy": 0.0, "hard": 0.0}
    settled = [s for s in range(left, 64) if uniform_draw(0, s, 1) >= KEEP_FLOOR][:12]  # none kept by the floor
    slots = list(range(left)) + settled  # 12 deferred: under the round's cap of deferrals (4 windows)
    got = a.plan([], iter(slots), epoch=1)
    if plan is None:
        assert got is None
        return
    assert len(got.taken) == plan and sum(got.sizes) == 16 and got.read == len(slots)
    assert got.deferred == len(slots) - left and got.left == ()


def test_without_deferral_evidence_changes_nothing():
    rng = random.Random(0)
    plans = []
    for skip in ("evidence", "greso"):
        a = evidence(size=200, budget=32, prompts=4, lookahead=2, skip=skip, defer=False)
        for slot in range(200):
            a.stats.successes[slot], a.stats.failures[slot] = rng.choice([0, 1, 5]), rng.choice([0, 1, 5])
            a.stats.zero_streak[slot] = rng.choice([0, 2, -2])
        rng = random.Random(0)
        plans.append(run_pass(a, list(range(200)))[0])
    assert plans[0] == plans[1]


def test_with_evidence_every_prompt_comes_back():
    """Solved and never-solved prompts skipped pass after pass (long streaks, low value) are still taken now and
    then: GRESO's floor (`KEEP_FLOOR`) and a new pass's fresh competition; none is dropped for good."""
    a = evidence(size=64, budget=32, prompts=4)
    kinds_stats(a, [1, 0, "coin", "coin"] * 16)
    a.stats.zero_streak[:] = [100 if k == 1 else -100 if k == 0 else 0 for k in [1, 0, "coin", "coin"] * 16]
    a.explore = {"easy": 0.05, "hard": 0.05}  # as low as GRESO goes
    seen = set()
    for epoch in range(400):
        order = list(range(64))
        random.Random(epoch).shuffle(order)
        seen |= {slot for taken, _, _ in run_pass(a, order, epoch=epoch)[0] for slot in taken}
    assert seen == set(range(64))
