"""Top-up increments and dynamic sampling: the pure rules (no torch)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from grpo_curriculum import Adaptive, DynamicSampling, Setting, Stage, StageSchedule
from grpo_curriculum.core.errors import CurriculumError, Problem
from grpo_curriculum.core.sampling import TopUp, top_up_increment

NAN = math.nan

# --- top_up_increment ----------------------------------------------------------------------------------------------

INCREMENTS = {  # name: (rewards per group, pilot, largest, budget_left, expected)
    "only the all-equal groups grow": ([[1, 1], [0, 1], [0, 0]], 2, 8, 8, [2, 0, 2]),
    "budget smaller than the all-equal groups: lowest index first": ([[1, 1], [0, 1], [0, 0]], 2, 8, 2, [2, 0, 0]),
    "budget of one increment and a half": ([[0, 0], [1, 1], [0, 0]], 2, 8, 5, [2, 2, 0]),
    "none all-equal: lowest variance first": ([[1, 0, 0, 0], [0, 1], [1, 1, 0, 0]], 2, 8, 2, [2, 0, 0]),
    "none all-equal, room for all": ([[1, 0, 0, 0], [0, 1], [1, 1, 0, 0]], 2, 8, 6, [2, 2, 2]),
    "variance ties broken by index": ([[0, 1], [1, 0], [0, 1]], 2, 8, 4, [2, 2, 0]),
    "an all-equal group at the largest size is passed over": ([[0, 0, 0, 0], [1, 0], [1, 1]], 2, 4, 8, [0, 0, 2]),
    "every group at the largest size": ([[0, 0, 0, 0], [1, 0, 1, 0]], 2, 4, 8, [0, 0]),
    "no budget left": ([[0, 0], [1, 1]], 2, 8, 0, [0, 0]),
    "budget below one increment": ([[0, 0], [1, 1]], 4, 8, 3, [0, 0]),
    "NaN rewards are left out: [1, NaN] is all-equal": ([[1, NAN], [0, 1]], 2, 8, 4, [2, 0]),
    "a group without a finite reward counts as all-equal": ([[NAN, None], [0, 1]], 2, 8, 4, [2, 0]),
    "NaN does not make a group informative": ([[NAN, 0, 1, NAN], [NAN, NAN, 0, 1]], 4, 8, 4, [4, 0]),
    "all-equal within 1e-6": ([[0.3] * 4, [0.3, 0.3, 0.3, 0.3000001], [0, 1, 0, 1]], 4, 8, 4, [4, 0, 0]),
    "infinite rewards are missing": ([[math.inf, 1], [0, 1]], 2, 8, 2, [2, 0]),
    "no groups": ([], 2, 8, 8, []),
}


@pytest.mark.parametrize("name", sorted(INCREMENTS))
def test_top_up_increment(name):
    rewards, pilot, largest, budget_left, expected = INCREMENTS[name]
    sizes = [len(r) for r in rewards]
    added = top_up_increment(rewards, sizes, pilot, largest, budget_left)
    assert added == expected
    assert sum(added) <= budget_left
    assert all(size + a <= largest for size, a in zip(sizes, added))


def test_top_up_increment_is_order_independent_within_a_tier():
    """The order of groups only breaks ties: permuting groups permutes the answer (ties aside)."""
    rewards = [[0, 1, 1, 1], [0, 0, 1, 1], [0, 1], [1, 1, 1, 0]]  # std 0.433, 0.5, 0.5, 0.433
    assert top_up_increment(rewards, [4, 4, 2, 4], 2, 8, 4) == [2, 0, 0, 2]
    assert top_up_increment(rewards[::-1], [4, 2, 4, 4], 2, 8, 4) == [2, 0, 0, 2]


def test_a_round_filled_by_increments_stays_within_the_bounds():
    """Repeated increments on groups that never learn (always 0) and one coin: the round ends within the bound."""
    top_up = TopUp(pilot=2, largest=8)
    budget = 24
    prompts = top_up.prompts_for(budget)
    outcomes = [[0] * 8, [0] * 8, [1, 0, 1, 1, 0, 0, 1, 0], [1] * 8, [0, 0, 0, 1, 0, 0, 0, 0], [1] * 8]
    sizes, left, increments = [2] * prompts, budget - 2 * prompts, 0
    while left:
        added = top_up_increment([o[:s] for o, s in zip(outcomes, sizes)], sizes, 2, 8, left)
        if not any(added):
            break
        sizes, left, increments = [s + a for s, a in zip(sizes, added)], left - sum(added), increments + 1
    assert prompts == 6 and left == 0 and sum(sizes) == budget
    assert increments <= top_up.max_increments
    assert sizes[2] == 2  # the coin was informative from its pilot: it never grows while others are all-equal


def test_every_valid_top_up_round_fills_exactly_within_its_increments():
    """Random success rates and geometries: a round the geometry accepts always ends holding exactly its budget,
    within its increments."""
    import random

    from grpo_curriculum import BatchGeometry

    rng = random.Random(0)
    checked = 0
    for _ in range(400):
        pilot = rng.choice([2, 4, 8])
        top_up = TopUp(pilot, pilot * rng.choice([1, 2, 3, 4, 8]), rng.choice([None, None, 1, 3, 8]))
        geometry = BatchGeometry(rng.choice([1, 2, 4]), rng.choice([2, 4, 8, 16]), rng.choice([1, 2, 4]))
        if geometry.top_up_problems(top_up):
            continue
        budget, checked = geometry.generation_batch_size, checked + 1
        p = [rng.choice([0.0, 1.0, rng.random()]) for _ in range(top_up.prompts_for(budget))]
        rewards = [[float(rng.random() < q) for _ in range(pilot)] for q in p]
        left, increments = budget - pilot * len(p), 0
        while left:
            added = top_up_increment(rewards, [len(r) for r in rewards], pilot, top_up.largest, left)
            assert any(added), (top_up, geometry)
            rewards = [r + [float(rng.random() < q) for _ in range(a)] for r, q, a in zip(rewards, p, added)]
            left, increments = left - sum(added), increments + 1
        assert sum(map(len, rewards)) == budget and max(map(len, rewards)) <= top_up.largest
        assert increments <= top_up.max_increments
    assert checked > 100


def test_top_up_increment_rejects_inconsistent_input():
    with pytest.raises(ValueError, match="2 groups of rewards, but 1 sizes"):
        top_up_increment([[0, 1], [1, 1]], [2], 2, 8, 4)
    with pytest.raises(ValueError, match="group 0 holds 2 rewards, but its size is 4"):
        top_up_increment([[0, 1]], [4], 2, 8, 4)


# --- TopUp ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pilot", "largest", "budget", "expected"), [
    # budget // max(2 * pilot, largest // 2), clamped to [ceil(budget / largest), budget // pilot]
    (2, 16, 128, 16),  # the study's geometry: half of 16 prompts could reach 16 (the earlier rule: 128 // 4 = 32)
    (2, 16, 16, 2),  # 16 // 8 (the earlier rule: 4)
    (2, 32, 128, 8),  # 128 // 16 (the earlier rule: 32)
    (4, 64, 16, 1),  # 16 // 32 = 0, clamped to ceil(16 / 64) = 1 (the earlier rule: 2)
    (4, 16, 64, 8),  # max(8, 8): the same as the earlier rule, half the budget in pilots
    (2, 8, 64, 16),  # max(4, 4): the same as the earlier rule
    (4, 16, 16, 2),
    (4, 4, 16, 4),  # one size: every prompt at the pilot, no increment
    (8, 16, 64, 4),
    (4, 8, 64, 8),  # ceil(64 / 8) = 8 = 64 // 8
    (2, 4, 6, 2),  # ceil(6 / 4) = 2 > 6 // 4
])
def test_prompts_for_default_rule(pilot, largest, budget, expected):
    top_up = TopUp(pilot=pilot, largest=largest)
    prompts = top_up.prompts_for(budget)
    assert prompts == expected
    assert prompts * pilot <= budget <= prompts * largest


def test_prompts_given_win():
    assert TopUp(pilot=4, largest=16, prompts=5).prompts_for(64) == 5


def test_top_up_sizes_and_bounds():
    top_up = TopUp(pilot=4, largest=16)
    assert top_up.sizes == (4, 8, 12, 16)
    assert top_up.max_increments == 6
    assert TopUp(pilot=4, largest=4).max_increments == 0


@pytest.mark.parametrize(("kwargs", "key", "text"), [
    ({"pilot": 1, "largest": 8}, "TopUp.pilot", "must be an integer >= 2"),
    ({"pilot": 4, "largest": 10}, "TopUp.largest", "must be a multiple of the pilot (4)"),
    ({"pilot": 4, "largest": 8, "prompts": 0}, "TopUp.prompts", "must be a positive integer"),
    ({"pilot": True, "largest": 8}, "TopUp.pilot", "must be an integer >= 2"),
])
def test_top_up_validation(kwargs, key, text):
    error = pytest.raises(CurriculumError, TopUp, **kwargs).value
    assert any(p.key == key and text in p.rule for p in error.problems), str(error)


# --- DynamicSampling -----------------------------------------------------------------------------------------------


def test_dynamic_sampling_defaults_and_validation():
    assert (DynamicSampling().max_rounds, DynamicSampling().on_limit) == (2, "mask")  # the study's default (issue 25)
    assert DynamicSampling(3).at_limit(3) and not DynamicSampling(3).at_limit(2)
    assert DynamicSampling(1).at_limit(1) and DynamicSampling(1024).max_rounds == 1024
    for bad in (0, -1, 2.5, True, "4", None, 1025):
        error = pytest.raises(CurriculumError, DynamicSampling, max_rounds=bad).value
        (problem,) = error.problems
        assert problem.key == "DynamicSampling.max_rounds" and "must be" in problem.rule and problem.fix
    error = pytest.raises(CurriculumError, DynamicSampling, on_limit="drop").value
    (problem,) = error.problems
    assert problem.key == "DynamicSampling.on_limit" and "mask" in problem.rule and "error" in problem.fix


def test_dynamic_sampling_from_mapping():
    assert DynamicSampling.from_mapping({"max_rounds": 3}) == (DynamicSampling(3), [])
    _, problems = DynamicSampling.from_mapping({"max_round": 3}, key="stages[0].dynamic_sampling")
    assert [p.key for p in problems] == ["stages[0].dynamic_sampling.max_round"]
    assert problems[0].fix == "did you mean `max_rounds`?"
    _, problems = DynamicSampling.from_mapping(4)
    assert "must be a mapping" in problems[0].rule


# --- stages and settings -------------------------------------------------------------------------------------------


def test_top_up_stage_and_its_settings():
    adaptive = Adaptive(policy="top_up", num_generations=(4, 8, 16))
    assert adaptive.top_up == TopUp(pilot=4, largest=16, prompts=None)
    assert Adaptive(policy="top_up", num_generations=[4, 8, 16], pilot=2, prompts=6).top_up == TopUp(2, 16, 6)
    assert Adaptive(num_generations=(4, 8)).top_up is None
    stage = Stage(temperature=1.0, temperature_end=0.5, adaptive={"policy": "top_up", "num_generations": [4, 8, 16]})
    resolved = StageSchedule([Stage(num_generations=8, temperature=0.9, until_step=10), stage]).resolve(20)
    assert resolved.setting_at(0) == Setting(0, 8, 0.9)
    assert resolved.setting_at(15) == Setting(1, None, 0.75, top_up=TopUp(4, 16))
    assert "G by top-up: pilot 4 a prompt, then 4 more at a time up to 16 (groups of 4, 8, 12 or 16)" in (
        resolved.describe()[1])


def test_dynamic_sampling_stage_and_its_settings():
    stage = Stage(num_generations=4, temperature=1.0, dynamic_sampling={"max_rounds": 3})
    assert stage.dynamic_sampling == DynamicSampling(3)
    resolved = StageSchedule([stage]).resolve(10)
    assert resolved.setting_at(0) == Setting(0, 4, 1.0, dynamic_sampling=DynamicSampling(3))
    assert resolved.describe() == ["stage 0: steps 1-10, G 4 with dynamic sampling, at most 3 generation rounds a "
                                   "training batch, temperature 1"]


def test_setting_rebuilds_its_parts_from_mappings():
    """A checkpoint stores `asdict(setting)`; `Setting(**saved)` gives the same setting back."""
    for setting in (Setting(1, None, 0.7, top_up=TopUp(4, 16, 8)), Setting(0, 4, 1.0, None, DynamicSampling(2)),
                    Setting(0, 8, 1.0)):
        assert Setting(**dataclasses.asdict(setting)) == setting
    assert Setting(**{"stage": 0, "num_generations": 8, "temperature": 1.0}) == Setting(0, 8, 1.0)  # older checkpoints


@pytest.mark.parametrize(("kwargs", "key", "text"), [
    ({"num_generations": 4, "adaptive": {"policy": "top_up", "num_generations": [4, 8]},
      "dynamic_sampling": {"max_rounds": 2}}, "Stage.dynamic_sampling", "cannot be combined with `adaptive`"),
    ({"num_generations": 4, "dynamic_sampling": {"max_rounds": -1}}, "Stage.dynamic_sampling.max_rounds",
     "must be a positive integer"),
    ({"num_generations": 4, "dynamic_sampling": {"rounds": 2}}, "Stage.dynamic_sampling.rounds",
     "is not a dynamic-sampling setting"),
    ({"num_generations": 4, "dynamic_sampling": 4}, "Stage.dynamic_sampling", "must be a mapping"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 6, 16]}}, "Stage.adaptive.num_generations",
     "the pilot 4 must divide every candidate G [4, 6, 16]"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "pilot": 3}}, "Stage.adaptive.pilot",
     "the pilot 3 must divide every candidate G [4, 8]"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "pilot": 1}}, "Stage.adaptive.pilot",
     "must be an integer >= 2"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "prompts": 0}}, "Stage.adaptive.prompts",
     "must be a positive integer"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "temperature": [0.7, 1.0]}},
     "Stage.adaptive.temperature", "cannot be adapted in a top-up stage"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "patience": 5}}, "Stage.adaptive.patience",
     "only applies with `policy: hysteresis` or `policy: success_rate` or `policy: per_prompt`"),
    ({"adaptive": {"policy": "hysteresis", "num_generations": [4, 8], "pilot": 4}}, "Stage.adaptive.pilot",
     "only applies with `policy: top_up`"),
    ({"num_generations": 8, "adaptive": {"policy": "top_up", "num_generations": [4, 8]}}, "Stage.num_generations",
     "does not apply to a top-up stage: every group starts at the pilot (4) and grows up to 8"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "decay": 0.9}}, "Stage.adaptive.decay",
     "only applies with `policy: per_prompt`"),
    ({"adaptive": {"policy": "top_up", "num_generations": [4, 8], "success_threshold": 1.0}},
     "Stage.adaptive.success_threshold", "only applies with `policy: success_rate` or `policy: per_prompt`"),
])
def test_stage_refuses(kwargs, key, text):
    kwargs.setdefault("temperature", 1.0)
    error = pytest.raises(CurriculumError, Stage, **kwargs).value
    assert any(p.key == key and text in p.rule and p.fix for p in error.problems), str(error)


def test_a_top_up_stage_starts_at_its_pilot():
    stage = Stage(temperature=1.0, adaptive=Adaptive(policy="top_up", num_generations=(4, 8), pilot=2))
    assert stage.num_generations == stage.top_up.pilot == 2  # the G GRPOConfig gets when the run starts here
    assert Stage(num_generations=2, temperature=1.0, adaptive=stage.adaptive).top_up == stage.top_up


def test_top_up_has_no_history_policy():
    from grpo_curriculum.core.policies import make_policy

    with pytest.raises(ValueError, match="keeps no policy state"):
        make_policy(Adaptive(policy="top_up", num_generations=(4, 8)), 4, 1.0)


# --- the removed top-up rule ----------------------------------------------------------------------------------------

ONE_RULE = ("removed: top-up has one rule (the groups whose rewards are all equal grow first, then the lowest-variance "
            "ones)")  # fmt: skip
REMOVED_RULE = {  # value: (rule, fix)
    "value": (f"{ONE_RULE}; `value` won on no task of the study (docs/study.md)", "drop `rule`"),
    "flat_first": (f"{ONE_RULE}, and `flat_first` is that rule", "drop `rule`: `flat_first` is what top-up does"),
    "values": (ONE_RULE, "drop `rule`"),
}


@pytest.mark.parametrize("value", sorted(REMOVED_RULE))
def test_a_top_up_rule_is_one_problem_with_every_other(value):
    """`rule` left `Adaptive` with the `value` rule: setting it (YAML or constructor) is one problem naming why and
    the fix, reported with the block's other problems (not an unknown key with a did-you-mean, nor a TypeError)."""
    rule, fix = REMOVED_RULE[value]
    block = {"policy": "top_up", "num_generations": [4, 8], "rule": value}
    adaptive, problems = Adaptive.from_mapping(block, key="stages[0].adaptive")
    assert adaptive is None and problems == [Problem("stages[0].adaptive.rule", value, rule, fix)]
    _, problems = Adaptive.from_mapping({**block, "pilot": 3, "window": 4})  # two more problems: all three at once
    assert [p.key for p in problems] == ["adaptive.rule", "adaptive.pilot", "adaptive.window"]
    error = pytest.raises(CurriculumError, Adaptive, num_generations=(4, 8), policy="top_up", rule=value).value
    assert error.problems == [Problem("Adaptive.rule", value, rule, fix)]
    assert f"Adaptive.rule = {value!r}: {rule}\n    fix: {fix}" in str(error)
    error = pytest.raises(CurriculumError, Adaptive, num_generations=(4, 6), policy="top_up", rule=value).value
    assert [p.key for p in error.problems] == ["Adaptive.rule", "Adaptive.num_generations"]
    error = pytest.raises(CurriculumError, Stage, temperature=1.0, adaptive=block).value
    assert [(p.key, p.rule) for p in error.problems] == [("Stage.adaptive.rule", rule)]
    assert "rule" not in {f.name for f in dataclasses.fields(Adaptive)} | {f.name for f in dataclasses.fields(TopUp)}


def test_a_top_up_rule_in_any_policy_is_the_same_problem():
    _, problems = Adaptive.from_mapping({"policy": "per_prompt", "num_generations": [4, 8], "rule": "value"})
    assert [(p.key, p.fix) for p in problems] == [("adaptive.rule", "drop `rule`")]


def _state_of_the_old_code(callback: dict, round_priors=None) -> dict:
    """A curriculum state as grpo-curriculum wrote it before the top-up rule `value` was removed (version 5)."""
    from grpo_curriculum.core.slots import PromptSlots
    from grpo_curriculum.training.report import PromptReport

    return {"global_step": 2, "micro_step": 2, "geometry": {"generation_batch_size": 8, "num_processes": 1},
            "callback": callback, "stream": {"epoch": 0, "position": 8}, "round_start_stream": None,
            "round_plan": None, "round_priors": round_priors,
            "prompt_report": PromptReport(PromptSlots(16, indexed=True), size=4).state_dict()}  # fmt: skip


OLD_TOP_UP = {"pilot": 2, "largest": 4, "prompts": None, "rule": "flat_first"}  # `asdict(TopUp(2, 4))` of the old code
OLD_FLAT_FIRST = {  # static G 4 for a step, then top-up: the callback state the old code wrote (taken from it)
    "stages": [{"num_generations": 4}, {"policy": "top_up", "num_generations": [2, 4]}],
    "current": {"stage": 1, "num_generations": None, "temperature": 1.0, "top_up": OLD_TOP_UP,
                "dynamic_sampling": None},
    "rounds": 2,
    "switches": [{"step": 2, "round": 2, "reason": "stage 1 starts",
                  "from": {"stage": 0, "num_generations": 4, "temperature": 0.8, "top_up": None,
                           "dynamic_sampling": None},
                  "to": {"stage": 1, "num_generations": None, "temperature": 1.0, "top_up": OLD_TOP_UP,
                         "dynamic_sampling": None}}],
    "policy_stage": None, "policy": None, "deferred_total": 0,
}  # fmt: skip


def _two_stages():
    from grpo_curriculum import CurriculumCallback

    callback = CurriculumCallback([Stage(num_generations=4, temperature=0.8, until_step=1),
                                   Stage(temperature=1.0, adaptive=Adaptive(policy="top_up", num_generations=(2, 4)))])
    callback.resolve(10)
    return callback


def test_an_older_flat_first_top_up_checkpoint_reads_as_one_written_now(tmp_path):
    """A state written before the rule was removed names `rule: flat_first` in each top-up setting (and a null
    `round_priors`): it is read as the state written now, and the run continues where it stopped."""
    import copy

    from grpo_curriculum.training.state import read_state, write_state

    write_state(str(tmp_path), _state_of_the_old_code(copy.deepcopy(OLD_FLAT_FIRST)))
    state = read_state(str(tmp_path), global_step=2)
    assert "round_priors" not in state
    callback = _two_stages()
    callback.load_state_dict(state["callback"])
    assert callback.current == Setting(1, None, 1.0, top_up=TopUp(2, 4))
    now = _two_stages()
    now.setting_for_round(0), now.setting_for_round(1)
    written = json.loads(json.dumps(now.state_dict()))
    assert written.pop("defaults") == {"lookahead": 0, "defer": True, "max_rounds": 2,  # recorded since version 6
                                       "top_up_prompts": "largest_half",  # (pilot 2, largest 4: the same rounds)
                                       "weight": "hard", "skip_target": 0.05}  # skip_target: since issue 37
    assert written.pop("comparisons") == ["comparisons: all completions"] * 2  # recorded since issue 35
    assert state["callback"] == written  # as written now, switch records included
    assert callback.setting_for_round(2) == now.setting_for_round(2)


@pytest.mark.parametrize("where", ["stage", "policy", "round_priors"])
def test_a_checkpoint_of_a_value_top_up_stage_is_refused_naming_the_file_and_the_fix(tmp_path, where):
    """A run with `rule: value` kept each prompt's history in its checkpoints; this version has no such rule and
    cannot continue it: one error naming the file, the rule and what to do, before any of it is applied."""
    import copy

    import numpy as np

    from grpo_curriculum.training.checkpoint import check_checkpoint
    from grpo_curriculum.training.files import CurriculumStateError
    from grpo_curriculum.training.state import read_state, write_state

    callback = copy.deepcopy(OLD_FLAT_FIRST)
    value_top_up = {**OLD_TOP_UP, "rule": "value"}
    callback["current"]["top_up"] = callback["switches"][0]["to"]["top_up"] = value_top_up
    priors = None
    if where == "stage":  # the whole state of the old code, as written by a value stage
        callback["stages"][1]["rule"] = "value"
        stats = {"successes": np.zeros(16, np.float32), "failures": np.zeros(16, np.float32),
                 "zero_streak": np.zeros(16, np.int8), "moments": np.array([0.5, 1 / 3, 0.0])}  # fmt: skip
        callback["policy_stage"], callback["policy"] = 1, {
            "policy": "top_up", "version": 1, "num_generations": 2, "temperature": 1.0, "round": 1,
            "last_g_change": None, "last_t_change": None, "zero_std_ema": 0.5, "distinct_ema": None, "reward_ema": 0.5,
            "best_reward": 0.5, "stale": 0, "clamped_from": None, "g_direction": 0, "g_reversals": 0,
            "t_direction": 0, "t_reversals": 0, "decision": None, "stats": stats}  # fmt: skip
        priors, expected = [[1.0, 1.0]] * 4, "stage 1"
    elif where == "policy":  # (parts of it: each is enough)
        callback["policy_stage"], callback["policy"], expected = 1, {"policy": "top_up"}, "callback.policy"
    else:
        priors, expected = [[1.0, 1.0]] * 4, "round_priors"
    write_state(str(tmp_path), _state_of_the_old_code(callback, priors))
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": []}))
    path = tmp_path / "curriculum_state.json"
    for read in (lambda: read_state(str(tmp_path), global_step=2), lambda: check_checkpoint(tmp_path)):
        message = str(pytest.raises(CurriculumStateError, read).value)
        assert message.startswith(f"{path} holds the per-prompt history of a top-up stage with `rule: value` "
                                  f"({expected}); that rule was removed from grpo-curriculum (it won on no task of "
                                  "the study, docs/study.md), so this version cannot continue it")
        assert message.endswith("Fix: resume with the grpo-curriculum version that wrote it, or start a new run from "
                                "the model weights in it (without `rule` in the recipe).")


# --- geometry ------------------------------------------------------------------------------------------------------

GEOMETRIES = {  # name: (top-up, processes, per-device batch, steps per generation, key, rule text or None)
    "default rule fits": (TopUp(4, 16), 1, 16, 4, None, None),
    "two processes, 8 prompts": (TopUp(4, 16), 2, 8, 4, None, None),
    "batch not a multiple of the pilot": (TopUp(4, 16), 1, 6, 1, "a.pilot", "must divide the generation batch"),
    "pilots exceed the batch": (TopUp(4, 16, prompts=5), 1, 16, 1, "a.prompts", "must be at most 4: 5 prompts x "
                                "pilot 4 = 20 completions in pilots exceed the generation batch"),
    "largest cannot fill the batch": (TopUp(4, 8, prompts=2), 1, 32, 1, "a.prompts",
                                      "must be at least 4: 2 prompts x largest 8 = 16 completions cannot fill"),
    "prompts need not split over processes": (TopUp(4, 16, prompts=3), 2, 8, 2, None, None),
    "pilot not a multiple of the processes": (TopUp(2, 16), 4, 4, 1, "a.pilot", "must be a multiple of the 4 "
                                              "processes: every increment adds a pilot to some of the groups"),
}


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_top_up_geometry(name):
    from grpo_curriculum import BatchGeometry

    top_up, n, b, s, key, text = GEOMETRIES[name]
    problems = BatchGeometry(n, b, s).top_up_problems(top_up, key="a")
    if text is None:
        assert problems == []
        return
    (problem,) = problems
    assert problem.key == key and text in problem.rule and problem.fix, problem


def test_an_invalid_top_up_block_is_its_only_problem():
    # A top-up stage may ramp its temperature: an invalid knob in its `adaptive` block is the one problem reported
    # (it also reported `temperature_end ... cannot be combined with adaptive`, since the block did not build).
    from grpo_curriculum.core.schedule import stage_problems

    problems = stage_problems({"temperature": 1.0, "temperature_end": 0.5, "adaptive": {
        "policy": "top_up", "num_generations": [4, 8], "decay": 0.9}})
    assert [p.key for p in problems] == ["stage.adaptive.decay"], problems
