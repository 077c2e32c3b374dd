"""Tests for `grpo_curriculum.core.adaptive` and `core.policies`: adaptive G and temperature policies on synthetic
reward streams."""

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_curriculum.core.adaptive import Adaptive
from grpo_curriculum.core.policies import Decision, HysteresisPolicy, SuccessRatePolicy, compared, make_policy
from grpo_curriculum.training.schema import join_arrays, split_arrays
from grpo_curriculum.core.errors import CurriculumError
from grpo_curriculum.core.signals import round_stats


PACKAGE_DIR = Path(__file__).resolve().parents[1] / "grpo_curriculum"
ROUND_POLICIES = ("hysteresis", "success_rate")  # one G a round (per_prompt: tests/test_allocation.py)
BATCH = 48  # completions a round: divisible by every candidate below
CANDIDATES = (4, 8, 16)


def round_data(kind, G, r, keys="fresh", completions=None):
    """
    One synthetic round. kind: `equal` (all 1.0), `zero` (all 0.0), `half` (half of each group succeeds), `nan` (all
    None), `some_nan` (`half` with every third reward missing). keys: `fresh` (new prompts every round), `repeat` (the
    same prompts), or None. completions: `distinct` (all differ), `same` (one completion per group), or None.
    """
    groups = BATCH // G
    rewards = {
        "equal": [1.0] * BATCH,
        "zero": [0.0] * BATCH,
        "half": ([1.0] * (G // 2) + [0.0] * (G - G // 2)) * groups,
        "nan": [None] * BATCH,
        "some_nan": [None if i % 3 == 0 else float(i % 2) for i in range(BATCH)],
    }[kind]
    prompt_keys = {"fresh": [f"r{r}g{i}" for i in range(groups)], "repeat": [f"p{i}" for i in range(groups)],
                   None: None}[keys]
    completion_keys = {"distinct": list(range(BATCH)), "same": [i // G for i in range(BATCH)], None: None}[completions]
    return round_stats(rewards, G, prompt_keys, completion_keys)


def run(policy, kinds, **kwargs):
    """decide() then observe() for each round; returns the decisions."""
    decisions = []
    for r, kind in enumerate(kinds):
        decision = policy.decide()
        assert policy.decide() is decision  # decide() is stable until the next observe()
        decisions.append(decision)
        policy.observe(round_data(kind, decision.num_generations, r, **kwargs))
    return decisions


def changes(decisions, field="num_generations"):
    """{round: new value} for every round whose value differs from the round before."""
    values = [getattr(d, field) for d in decisions]
    return {r: values[r] for r in range(1, len(values)) if values[r] != values[r - 1]}


def policy(policy="hysteresis", G=4, T=1.0, **knobs):
    return make_policy(Adaptive(CANDIDATES, policy=policy, **knobs), G, T)


# --- G follows the zero-std signal -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, patience, cooldown, expected",
    [
        ("equal", 3, 5, {3: 8, 8: 16}),  # defaults: patience 3 observed rounds, then 5 rounds of cooldown
        ("zero", 3, 5, {3: 8, 8: 16}),
        ("equal", 1, 1, {1: 8, 2: 16}),
        ("equal", 2, 4, {2: 8, 6: 16}),
        ("equal", 3, 0, {3: 8, 6: 16}),  # no cooldown: patience alone spaces the changes (counters restart)
        ("equal", 6, 2, {6: 8, 12: 16}),
    ],
)
def test_hysteresis_all_equal_rewards_raise_G_at_exact_rounds(kind, patience, cooldown, expected):
    decisions = run(policy(patience=patience, cooldown=cooldown), [kind] * 25)
    assert changes(decisions) == expected
    assert decisions[0] == Decision(4, 1.0, None)
    for r, d in enumerate(decisions):
        assert (d.reason is not None) == (r in expected)
    first = min(expected)
    rounds = "1 round" if patience == 1 else f"{patience} rounds"
    assert decisions[first].reason == f"zero-std fraction 1.000 > 0.500 for {rounds}: G 4 -> 8"


@pytest.mark.parametrize("keys", ["fresh", "repeat", None])
@pytest.mark.parametrize("kind", ["equal", "zero"])
@pytest.mark.parametrize("start", [4, 8])
def test_success_rate_all_equal_rewards_go_to_the_top(keys, kind, start):
    decisions = run(policy("success_rate", G=start), [kind] * 20, keys=keys)
    # One observed round is enough for the model: no candidate but the largest reaches the target.
    assert changes(decisions) == {1: 16}
    assert "G %d -> 16" % start in decisions[1].reason and "expected informative fraction" in decisions[1].reason


@pytest.mark.parametrize(
    "name, keys, expected",
    [
        ("hysteresis", "fresh", {3: 8, 8: 4}),  # one candidate at a time, cooldown 5
        ("success_rate", "fresh", {1: 4}),  # p = 0.5: 1 - 2 * 0.5^4 = 0.875 >= target + margin at G 4
        ("success_rate", "repeat", {1: 4}),
        ("success_rate", None, {1: 4}),
    ],
)
def test_half_rewards_at_large_G_bring_G_down(name, keys, expected):
    decisions = run(policy(name, G=16), ["half"] * 20, keys=keys)
    assert changes(decisions) == expected
    assert all(d.num_generations == 4 for d in decisions[max(expected) :])


@pytest.mark.parametrize(
    "target, margin, start, expected",
    [
        (0.8, 0.05, 8, {1: 4}),  # f(4) = 1 - 2 * 0.5^4 = 0.875 >= 0.85 = target + margin
        (0.8, 0.1, 4, {}),  # f(4) = 0.875 >= target: stay (no raise), even though lowering needs 0.9
        (0.8, 0.1, 16, {1: 8}),  # f(4) = 0.875 < 0.9 = target + margin, f(8) = 0.992: lower to 8, not 4
        (0.95, 0.05, 4, {1: 8}),  # f(4) = 0.875 < 0.95 - 0.05: raise to the smallest candidate reaching the target
        (0.999, 0.0, 4, {1: 16}),
    ],
)
def test_success_rate_target_and_margin(target, margin, start, expected):
    decisions = run(policy("success_rate", G=start, target=target, margin=margin), ["half"] * 12)
    assert changes(decisions) == expected


# --- safety: candidates, cooldown, determinism -------------------------------------------------------------------


def adversarial(period, rounds=80):
    """Blocks of `period` rounds, alternating between 'all equal' and 'half', to make G flap."""
    return ["equal" if (r // period) % 2 == 0 else "half" for r in range(rounds)]


def shuffled(seed, rounds=80):
    rng = random.Random(seed)
    return [rng.choice(["equal", "half", "zero", "nan", "some_nan"]) for _ in range(rounds)]


def check_safe(decisions, cooldown, bounds):
    assert all(d.num_generations in CANDIDATES for d in decisions)
    if bounds:
        assert all(bounds[0] <= d.temperature <= bounds[1] for d in decisions)
    g_rounds, t_rounds = sorted(changes(decisions)), sorted(changes(decisions, "temperature"))
    for rounds in (g_rounds, t_rounds):
        assert all(b - a >= max(cooldown, 1) for a, b in zip(rounds, rounds[1:])), rounds
    assert not set(g_rounds) & set(t_rounds)  # at most one knob changes in a round
    return len(g_rounds) + len(t_rounds)


@pytest.mark.parametrize("name", ROUND_POLICIES)
@pytest.mark.parametrize("cooldown", [0, 1, 3, 5])
@pytest.mark.parametrize("stream", ["period1", "period2", "period4", "period7", "seed0", "seed1"])
def test_never_outside_candidates_and_never_faster_than_cooldown(name, cooldown, stream):
    kinds = adversarial(int(stream[6:])) if stream.startswith("period") else shuffled(int(stream[4:]))
    bounds = (0.6, 1.2)
    completions = "same" if stream == "period2" else "distinct"
    p = policy(name, G=8, patience=1, cooldown=cooldown, smoothing=1.0, temperature=bounds)
    decisions = run(p, kinds, completions=completions)
    count = check_safe(decisions, cooldown, bounds)
    if stream.startswith("period") and stream != "period2":
        assert count >= 2  # the stream does move G, so the cooldown is what holds it back


@pytest.mark.parametrize("name", ROUND_POLICIES)
@pytest.mark.parametrize("period", [1, 2, 3, 5])
@pytest.mark.parametrize("cooldown", [1, 3])
def test_a_signal_oscillating_around_the_target_does_not_thrash(name, period, cooldown):
    # The deciding signal swings across both thresholds every `period` rounds: each swing alone would justify a
    # switch, yet G must not follow it every time (a reversal waits twice as long as the one before).
    decisions = run(policy(name, G=8, patience=1, cooldown=cooldown, smoothing=1.0, window=1) if name == "success_rate"
                    else policy(name, G=8, patience=1, cooldown=cooldown, smoothing=1.0), adversarial(period, 200))
    # Reversals wait 2, 4, 8, ... times the cooldown: at most log2(200 / cooldown) + 1 of them, each followed by at
    # most one more step in the same direction (3 candidates).
    assert 2 <= len(changes(decisions)) <= 2 * (math.log2(200 / cooldown) + 1), changes(decisions)  # was 40 to 199


@pytest.mark.parametrize(
    "name, cooldown, expected",
    [
        # The signal flips every round, so it points back every other round: each reversal comes at the first such
        # round once it has waited 2, 4, 8, ... times the cooldown (6, 12, 24, 48, 96 rounds with cooldown 3).
        ("success_rate", 3, {1: 16, 8: 4, 21: 16, 46: 4, 95: 16, 192: 4}),
        ("success_rate", 5, {1: 16, 12: 4, 33: 16, 74: 4, 155: 16}),
        # Moves in the same direction (4 -> 8 -> 16) only wait the cooldown.
        ("hysteresis", 1,
         {1: 4, 4: 8, 6: 16, 11: 8, 13: 4, 22: 8, 24: 16, 41: 8, 43: 4, 76: 8, 78: 16, 143: 8, 145: 4}),
        ("hysteresis", 3, {1: 4, 8: 8, 12: 16, 25: 8, 29: 4, 54: 8, 58: 16, 107: 8, 111: 4}),
    ],
)
def test_reversals_wait_twice_as_long_each_time(name, cooldown, expected):
    knobs = {"window": 1} if name == "success_rate" else {"patience": 1, "smoothing": 1.0}
    kinds = adversarial(1, 200) if name == "success_rate" else ["half", "equal"] * 100
    decisions = run(policy(name, G=8, cooldown=cooldown, **knobs), kinds)
    assert changes(decisions) == expected
    second = sorted(expected)[1]
    wait = 2 * cooldown
    assert decisions[second].reason.endswith(
        f"; reverses the previous G change after {second - 1} rounds (a reversal waits {wait}, the next {2 * wait})")


def test_temperature_reversals_wait_twice_as_long_each_time():
    # Completions collapse in even rounds (temperature up) and are diverse but uninformative in odd ones (down).
    p = policy(G=4, T=1.0, temperature=(0.9, 1.1), patience=1, cooldown=1, smoothing=1.0)
    decisions = []
    for r in range(100):
        decisions.append(p.decide())
        p.observe(round_data("half", 4, r, completions="same" if r % 2 == 0 else "distinct"))
    # Reversals at 4, 11, 22, 41, 76: after 3, 5, 9, 17, 33 rounds (waits 2, 4, 8, 16, 32); was 99 changes.
    assert changes(decisions, "temperature") == {1: 1.1, 4: 1.0, 6: 0.9, 11: 1.0, 13: 1.1, 22: 1.0, 24: 0.9, 41: 1.0,
                                                 43: 1.1, 76: 1.0, 78: 0.9}


@pytest.mark.parametrize(
    "target, start, expected",
    [
        (0.88, 4, {}),  # f(4) = 0.875: below the target, but inside the band: no switch
        (0.93, 4, {1: 8}),  # 0.875 < 0.93 - 0.05: raise
        (0.84, 8, {}),  # f(4) = 0.875 < 0.84 + 0.05: inside the band, stay at 8
    ],
)
def test_success_rate_holds_G_inside_the_band(target, start, expected):
    decisions = run(policy("success_rate", G=start, target=target, margin=0.05), ["half"] * 12)
    assert changes(decisions) == expected


def test_reasons_show_the_deciding_numbers():
    # At p = 0.5, f(4) = 1 - 2 * 0.5^4 = 0.875 and f(8) = 0.9921875: thresholds a hair away from f(4) must show it.
    decisions = run(policy("success_rate", G=4, target=0.9, margin=0.0248), ["half"] * 3)
    assert decisions[1].reason == (
        "expected informative fraction 0.8750 < 0.8752 (target 0.9 - margin 0.0248) at G 4; G 8 reaches the target "
        "(0.992 >= 0.900): G 4 -> 8")  # was "0.88 < target 0.9 at G 4, 0.99 at G 8"
    decisions = run(policy("success_rate", G=16, target=0.8249, margin=0.05), ["half"] * 3)
    assert decisions[1].reason == ("expected informative fraction 0.8750 >= 0.8749 (target 0.8249 + margin 0.05) "
                                   "at G 4: G 16 -> 4")  # was "0.88 >= 0.8749 (target + margin)"
    decisions = run(policy(patience=1, raise_above=0.9999), ["equal"] * 3)
    assert decisions[1].reason == "zero-std fraction 1.0000 > 0.9999 for 1 round: G 4 -> 8"  # was "1.00 > 0.9999"
    assert compared(0.7996, "<", 0.8) == "0.7996 < 0.8000" and compared(0.85, ">=", 0.85) == "0.850 >= 0.850"
    assert compared(1 - 2**-52, "<", 1.0) == "0.9999999999999998 < 1.0000000000000000"


STREAMS = [
    (name, kinds, keys, completions)
    for name in ROUND_POLICIES
    for kinds, keys, completions in [
        (shuffled(3, 60), "repeat", "distinct"),
        (adversarial(3, 60), "fresh", "same"),
        (["equal"] * 20 + ["half"] * 40, None, None),
    ]
]


@pytest.mark.parametrize("name, kinds, keys, completions", STREAMS)
def test_same_stream_same_decisions(name, kinds, keys, completions):
    make = lambda: policy(name, G=8, T=0.9, temperature=(0.5, 1.3), patience=2, cooldown=2)  # noqa: E731
    first = run(make(), kinds, keys=keys, completions=completions)
    second = run(make(), kinds, keys=keys, completions=completions)
    assert first == second


@pytest.mark.parametrize("name, kinds, keys, completions", STREAMS)
@pytest.mark.parametrize("split", [1, 7, 23, 41])
@pytest.mark.parametrize("after_decide", [False, True])
def test_restored_policy_continues_identically(name, kinds, keys, completions, split, after_decide):
    make = lambda G=8, T=0.9: policy(name, G=G, T=T, temperature=(0.5, 1.3), patience=2, cooldown=2)  # noqa: E731
    reference = run(make(), kinds, keys=keys, completions=completions)

    original = make()
    head = run(original, kinds[:split], keys=keys, completions=completions)
    if after_decide:
        original.decide()  # a checkpoint taken between decide() and observe()
    state, arrays = split_arrays(original.state_dict())  # as a checkpoint stores it: JSON and numpy arrays
    state = join_arrays(json.loads(json.dumps(state)), arrays)
    restored = make(G=4, T=1.0)
    restored.load_state_dict(state)
    assert split_arrays(restored.state_dict())[0] == split_arrays(original.state_dict())[0]
    tail = []
    for r, kind in enumerate(kinds[split:], start=split):  # same stream, from the same round
        tail.append(restored.decide())
        restored.observe(round_data(kind, tail[-1].num_generations, r, keys=keys, completions=completions))
    assert head + tail == reference


def test_a_state_saved_before_reversals_were_counted_loads():
    p = policy("success_rate", cooldown=1, window=1)
    run(p, adversarial(1, 6))
    state = p.state_dict()
    for key in ("g_direction", "g_reversals", "t_direction", "t_reversals"):
        del state[key]
    restored = policy("success_rate", cooldown=1, window=1)
    restored.load_state_dict(state)
    assert (restored.g_direction, restored.g_reversals, restored.num_generations) == (0, 0, p.num_generations)


def test_decisions_do_not_depend_on_the_hash_seed():
    code = (
        "import sys, types\n"
        "pkg = types.ModuleType('grpo_curriculum')\n"
        f"pkg.__path__ = [{str(PACKAGE_DIR)!r}]\n"
        "sys.modules['grpo_curriculum'] = pkg\n"
        "from grpo_curriculum.core.adaptive import Adaptive\n"
        "from grpo_curriculum.core.policies import make_policy\n"
        "from grpo_curriculum.core.signals import round_stats\n"
        "for name in ('success_rate', 'hysteresis'):\n"
        "    p = make_policy(Adaptive((2, 4, 8), (0.5, 1.5), name, patience=2, cooldown=2), 4, 1.0)\n"
        "    for r in range(40):\n"
        "        d = p.decide(); print(d)\n"
        "        G = d.num_generations\n"
        "        keys = ['prompt-%d' % ((i + r) % 9) for i in range(48 // G)]\n"
        "        rewards = [float(int(k[7:]) % 2 if r < 15 else j % 2) for k in keys for j in range(G)]\n"
        "        p.observe(round_stats(rewards, G, keys, [str(i % (1 + r % 4)) for i in range(48)]))\n"
        "    print(p.metrics())\n"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2", "12345")
    }
    assert len(outputs) == 1
    output = next(iter(outputs))
    assert "G 4 -> 8" in output and "G 8 -> 4" in output and "temperature 1 -> 1.1" in output  # things happen


# --- missing rewards ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kinds, expected",
    [
        # all-NaN rounds count as rounds (cooldown) but do not advance patience
        (["equal", "nan", "equal", "nan", "equal"] + ["equal"] * 10, {5: 8, 10: 16}),
        (["nan"] * 4 + ["equal"] * 10, {7: 8, 12: 16}),
        (["nan"] * 15, {}),
        (["some_nan"] * 15, {}),
    ],
)
def test_hysteresis_nan_rounds(kinds, expected):
    assert changes(run(policy(), kinds)) == expected


@pytest.mark.parametrize("keys", ["fresh", "repeat", None])
def test_success_rate_nan_rounds(keys):
    p = policy("success_rate")
    assert changes(run(p, ["nan"] * 6, keys=keys)) == {}
    assert p.metrics() == {"num_generations": 4.0, "temperature": 1.0}
    p = policy("success_rate", G=16)
    assert changes(run(p, ["nan", "some_nan", "nan"] + ["half"] * 5, keys=keys)) == {2: 4}


# --- temperature -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, g_changes",
    [
        ("hysteresis", {7: 8, 12: 16}),  # G waits until the temperature reaches its upper bound
        ("success_rate", {7: 16}),
    ],
)
def test_collapse_raises_temperature_before_G(name, g_changes):
    p = policy(name, T=0.7, temperature=(0.7, 0.9))
    decisions = run(p, ["equal"] * 20, completions="same")
    assert changes(decisions, "temperature") == {1: 0.8, 6: 0.9}
    assert changes(decisions) == g_changes
    assert decisions[6].reason == (
        "distinct fraction 0.250 < 0.500 (completions collapse): temperature 0.8 -> 0.9, before raising G"
    )


@pytest.mark.parametrize("name, g_changes", [("hysteresis", {2: 8}), ("success_rate", {2: 4})])
def test_one_change_a_round_temperature_first(name, g_changes):
    # Collapsed completions (temperature up) while G wants to go down: the temperature moves first, G a round later.
    decisions = run(policy(name, G=16, T=0.7, temperature=(0.7, 1.2), patience=1), ["half"] * 4, completions="same")
    assert changes(decisions, "temperature") == {1: 0.8}
    assert changes(decisions) == g_changes


def test_emas_restart_when_their_knob_changes():
    p = policy(T=0.7, temperature=(0.7, 1.2))
    run(p, ["equal"], completions="same")
    assert p.decide().temperature == 0.8 and "distinct_ema" not in p.metrics()  # distinct restarts with T
    p = policy(patience=1)
    run(p, ["equal"])
    assert p.decide().num_generations == 8 and "zero_std_ema" not in p.metrics()  # zero-std restarts with G
    p.observe(round_data("half", 8, 1))
    assert p.metrics()["zero_std_ema"] == 0.0


@pytest.mark.parametrize("name", ROUND_POLICIES)
@pytest.mark.parametrize("start, bounds, kind, completions, expected", [
    (0.95, (0.7, 1.0), "equal", "same", 1.0),  # collapse: 0.95 + 0.1 clamped to the upper bound, not 1.05
    (0.75, (0.7, 1.2), "half", "distinct", 0.7),  # diverse noise: 0.75 - 0.1 clamped to the lower bound, not 0.65
])
def test_a_temperature_step_past_a_bound_stops_at_the_bound(name, start, bounds, kind, completions, expected):
    """The boundary of the temperature steps: a step that would cross a bound lands on it, then stays there."""
    decisions = run(policy(name, T=start, temperature=bounds), [kind] * 20, completions=completions)
    assert set(changes(decisions, "temperature").values()) == {expected}
    assert decisions[-1].temperature == expected


def test_diverse_noise_lowers_temperature():
    p = policy(T=1.2, temperature=(0.7, 1.2))
    decisions = run(p, ["half"] * 20, completions="distinct")
    assert changes(decisions, "temperature") == {4: 1.1, 9: 1.0, 14: 0.9, 19: 0.8}
    assert decisions[4].reason.startswith("distinct fraction 1.000 >= 0.900 but zero-std fraction 0.000 < 0.100")
    assert changes(decisions) == {}  # already at the smallest candidate


@pytest.mark.parametrize(
    "temperature, completions",
    [(None, "same"), (None, "distinct"), ((0.7, 1.2), None)],
)
def test_temperature_stays_without_bounds_or_completion_keys(temperature, completions):
    decisions = run(policy(T=1.0, temperature=temperature), ["half"] * 15 + ["equal"] * 15, completions=completions)
    assert {d.temperature for d in decisions} == {1.0}


def test_start_temperature_is_clamped_and_start_G_must_be_a_candidate():
    p = policy(T=2.0, temperature=(0.7, 1.2))
    assert p.decide() == Decision(4, 1.2, "temperature 2 clamped to bounds [0.7, 1.2]")
    with pytest.raises(CurriculumError, match="must be one of the adaptive candidates"):
        policy(G=6)
    with pytest.raises(CurriculumError, match="positive finite"):
        policy(T=0.0)


def test_policies_and_metrics():
    assert isinstance(policy(), HysteresisPolicy) and isinstance(policy("success_rate"), SuccessRatePolicy)
    p = policy("success_rate", temperature=(0.5, 1.5))
    run(p, ["half"] * 2, completions="distinct")
    metrics = p.metrics()
    assert set(metrics) == {"num_generations", "temperature", "zero_std_ema", "distinct_ema", "reward_ema",
                            "expected_informative", "expected_informative_g4", "expected_informative_g8",
                            "expected_informative_g16"}
    assert metrics["expected_informative"] == pytest.approx(0.875)
    with pytest.raises(ValueError, match="policy 'success_rate'"):
        policy().load_state_dict(p.state_dict())


# --- configuration -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, expected",
    [
        ({}, [("adaptive.num_generations", "is required")]),
        ({"num_generations": []}, [("adaptive.num_generations", "non-empty list")]),
        ({"num_generations": 8}, [("adaptive.num_generations", "non-empty list")]),
        ({"num_generations": [1, 4, 2.5]},
         [("adaptive.num_generations[0]", "integer >= 2"), ("adaptive.num_generations[2]", "integer >= 2")]),
        ({"num_generations": [8, 4]}, [("adaptive.num_generations", "ascending without repeats")]),
        ({"num_generations": [4, 4, 8]}, [("adaptive.num_generations", "ascending without repeats")]),
        ({"num_generations": [4], "temperature": [1.2, 0.7]}, [("adaptive.temperature", "low must not exceed high")]),
        ({"num_generations": [4], "temperature": [0, 1]}, [("adaptive.temperature[0]", "finite number >= 0.01")]),
        ({"num_generations": [4], "temperature": [-1, float("inf")]},
         [("adaptive.temperature[0]", "finite number >= 0.01"), ("adaptive.temperature[1]", "finite number >= 0.01")]),
        ({"num_generations": [4], "temperature": 0.7}, [("adaptive.temperature", "[low, high]")]),
        ({"num_generations": [4], "pateince": 3}, [("adaptive.pateince", "not an adaptive setting")]),
        ({"num_generations": [4], "policy": "knapsack"}, [("adaptive.policy", "must be one of")]),
        ({"num_generations": [4], "policy": "succes-rate"}, [("adaptive.policy", "must be one of")]),
        ({"num_generations": [4], "target": 0.9}, [("adaptive.target", "only applies with `policy: success_rate`")]),
        ({"num_generations": [4], "policy": "success_rate", "raise_above": 0.4},
         [("adaptive.raise_above", "only applies with `policy: hysteresis`")]),
        ({"num_generations": [4], "collapse_below": 0.3},
         [("adaptive.collapse_below", "only applies with `temperature: [low, high]`")]),
        ({"num_generations": [4], "lower_below": 0.6}, [("adaptive.lower_below", "below `raise_above`")]),
        ({"num_generations": [4], "policy": "success_rate", "target": 0.3, "margin": 0.3},
         [("adaptive.margin", "must be below `target` (0.3): G rises below `target - margin`")]),
        ({"num_generations": [4], "patience": 0, "cooldown": -1, "smoothing": 0, "raise_above": 1.5},
         [("adaptive.raise_above", "in [0, 1]"), ("adaptive.patience", "positive integer"),
          ("adaptive.cooldown", "integer >= 0"), ("adaptive.smoothing", "in (0, 1]")]),
        ({"num_generations": [4], "policy": "success_rate", "target": 1, "window": 0, "margin": True},
         [("adaptive.target", "in (0, 1)"), ("adaptive.margin", "in [0, 1)"), ("adaptive.window", "positive integer")]),
        ({"num_generations": [4], "temperature": [0.5, 1], "temperature_step": 0, "collapse_below": 0.95},
         [("adaptive.temperature_step", "positive finite")]),
        ({"num_generations": [4], "temperature": [0.5, 1], "collapse_below": 0.95},
         [("adaptive.collapse_below", "must not exceed `diverse_above`")]),
        # every problem at once
        ({"num_generations": [8, 1], "temperature": [2, 1], "polcy": "x", "policy": "?"},
         [("adaptive.polcy", "not an adaptive setting"), ("adaptive.num_generations[1]", "integer >= 2"),
          ("adaptive.temperature", "low must not exceed high"), ("adaptive.policy", "must be one of")]),
    ],
)
def test_from_mapping_problems(values, expected):
    adaptive, problems = Adaptive.from_mapping(values)
    assert adaptive is None
    assert [p.key for p in problems] == [key for key, _ in expected]
    for (key, rule), problem in zip(expected, problems):
        assert rule in problem.rule, (problem, rule)


@pytest.mark.parametrize(
    "values, fix",
    [
        ({"num_generations": [4], "pateince": 3}, "did you mean `patience`?"),
        ({"num_generations": [4], "cool_down": 3}, "did you mean `cooldown`?"),
        ({"num_generations": [4], "policy": "succes-rate"}, "did you mean `success_rate`?"),
        ({"num_generations": [16, 8, 4, 8]}, "write `[4, 8, 16]`"),
        ({"num_generations": [4], "temperature": [1.2, 0.7]}, "write `[0.7, 1.2]`"),
    ],
)
def test_from_mapping_fixes(values, fix):
    assert Adaptive.from_mapping(values)[1][0].fix == fix


def test_from_mapping_valid_and_key_path():
    adaptive, problems = Adaptive.from_mapping(
        {"num_generations": [4, 8, 16], "temperature": [0.7, 1], "policy": "success_rate", "target": 0.7}
    )
    assert problems == []
    assert adaptive == Adaptive((4, 8, 16), temperature=(0.7, 1.0), policy="success_rate", target=0.7)
    assert adaptive.problems() == []
    _, problems = Adaptive.from_mapping({"num_generations": [3, 1]}, key="curriculum.stages[1].adaptive")
    assert [p.key for p in problems] == ["curriculum.stages[1].adaptive.num_generations[1]"]
    assert Adaptive.from_mapping([4, 8])[1][0].rule == "must be a mapping"


def test_adaptive_defaults_and_direct_construction():
    adaptive = Adaptive([4, 8])
    assert adaptive.num_generations == (4, 8)
    assert (adaptive.temperature, adaptive.policy, adaptive.raise_above, adaptive.lower_below, adaptive.patience,
            adaptive.cooldown, adaptive.smoothing) == (None, "hysteresis", 0.5, 0.1, 3, 5, 0.3)
    assert (adaptive.target, adaptive.margin, adaptive.window, adaptive.success_threshold) == (0.8, 0.05, 8, 0.5)
    assert (adaptive.temperature_step, adaptive.collapse_below, adaptive.diverse_above) == (0.1, 0.5, 0.9)
    with pytest.raises(CurriculumError, match=r"Adaptive\.num_generations"):
        Adaptive((8, 4))
    with pytest.raises(CurriculumError, match=r"2 problems"):
        Adaptive((4,), temperature=(1.0, 0.5), policy="greedy")


def test_modules_do_not_import_torch_or_numpy():
    code = (
        "import sys, types\n"
        "pkg = types.ModuleType('grpo_curriculum')\n"
        f"pkg.__path__ = [{str(PACKAGE_DIR)!r}]\n"
        "sys.modules['grpo_curriculum'] = pkg\n"
        "import grpo_curriculum.core.adaptive, grpo_curriculum.core.policies, grpo_curriculum.core.signals\n"
        "bad = sorted(m for m in ('torch', 'numpy', 'trl', 'transformers') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
