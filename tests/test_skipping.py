"""Skipping settled prompts in a stage of one G (`grpo_curriculum.core.skipping`, issue 50): the setting, the pass's
end, the temperature ramp and real training runs (GRPO and RLOO, resume)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from grpo_curriculum import CurriculumError, Stage
from grpo_curriculum.core.curriculum import load_curriculum
from grpo_curriculum.core.schedule import stage_signature
from grpo_curriculum.core.skipping import Skip

from .conftest import RoundRecorder, indexed_dataset
from .test_per_prompt import always_defer_settled, settled_or_mixed
from .test_trainer import make_trainer, train_history


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), (False, None), (True, Skip()), ("greso", Skip(rule="greso")),
    ({"rule": "evidence", "target": 0.2}, Skip(rule="evidence", target=0.2)), (Skip(rule="greso"), Skip(rule="greso")),
])  # fmt: skip
def test_a_skip_value_builds_its_setting(value, expected):
    assert Skip.from_value(value) == (expected, [])


@pytest.mark.parametrize(("value", "key", "says"), [
    ("sometimes", "skip.rule", "must be one of"),
    ({"rule": "evidence", "target": 1.5}, "skip.target", "zero-std groups"),
    ({"rule": "evidence", "targte": 0.1}, "skip.targte", "target"),
    (3, "skip", "must be a mapping"),
])  # fmt: skip
def test_a_bad_skip_value_is_named_with_its_key(value, key, says):
    setting, problems = Skip.from_value(value)
    assert setting is None and [p.key for p in problems] == [key] and says in str(problems[0])


def test_a_skipping_stage_runs_as_a_per_prompt_stage_of_its_one_g():
    stage = Stage(num_generations=4, temperature=0.9, skip="greso")
    assert stage.skip == Skip(rule="greso") and stage.num_generations == 4
    adaptive = stage.adaptive
    assert (adaptive.policy, adaptive.num_generations, adaptive.defer, adaptive.skip, adaptive.lookahead) == \
        ("per_prompt", (4,), True, "greso", 0)
    assert stage_signature([stage]) == [{"policy": "per_prompt", "num_generations": [4]}]


def test_skipping_off_is_the_stage_of_today():
    today = Stage(num_generations=4, temperature=0.9)
    assert Stage(num_generations=4, temperature=0.9, skip=False) == today == \
        Stage(num_generations=4, temperature=0.9, skip=None)
    assert today.adaptive is None and stage_signature([today]) == [{"num_generations": 4}]


def test_skip_with_adaptive_or_dynamic_sampling_is_refused_with_every_problem_at_once(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("curriculum:\n  stages:\n"
                      "    - {num_generations: 4, temperature: 0.9, skip: evidence, adaptive: {policy: per_prompt}}\n"
                      "    - {num_generations: 4, temperature: 0.9, skip: true, dynamic_sampling: {max_rounds: 2}}\n"
                      "    - {num_generations: 4, temperature: 0.9, skip: {rule: nope}}\n")  # fmt: skip
    with pytest.raises(CurriculumError) as error:
        load_curriculum(str(recipe))
    text = str(error.value)
    assert "stages[0].skip" in text and "cannot be combined with `adaptive`" in text
    assert "stages[1].skip" in text and "cannot be combined with `dynamic_sampling`" in text
    assert "stages[2].skip.rule" in text and "'nope'" in text


def test_a_recipe_stage_skips_with_a_rule_name(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("curriculum:\n  stages:\n    - {num_generations: 4, temperature: 0.9, skip: evidence}\n")
    (stage,) = load_curriculum(str(recipe)).stages
    assert stage.skip == Skip(rule="evidence") and stage.adaptive.num_generations == (4,)


def _driver(stages, dataset, budget):
    from grpo_curriculum.training.driver import CurriculumDriver
    from grpo_curriculum.training.stream import PromptStream, prompt_slots

    stream = PromptStream(dataset, shuffle=False, seed=0)
    driver = CurriculumDriver(stages)
    driver.round_context = {"budget": budget, "slots": prompt_slots(stream), "seed": 0}
    driver.resolve(100)
    return driver, stream


def _settle(driver, stream, settled):
    """Mark the prompts at dataset rows `settled` settled (an all-success streak) in the driver's policy."""
    from grpo_curriculum.training.stream import prompt_keys

    policy = driver.policy_for(0)
    for row in settled:
        policy.allocator.stats.zero_streak[policy.slot_of(prompt_keys(stream, [row])[0])] = 3


def test_a_skipped_prompt_leaves_the_pass_and_never_fills_its_end(monkeypatch):
    """
    20 prompts, rounds of 4 at G 2, the odd ones settled (always skipped): each pass trains 0, 2, 4, 6 and 8, 10, 12,
    14; 16 and 18 are too few for a round, so the next pass starts. The settled prompts never fill the pass's end (the
    rule of several candidates fills that round with 15, 16, 17, 18).
    """
    always_defer_settled(monkeypatch)
    driver, stream = _driver([Stage(num_generations=2, temperature=1.0, skip=True)], indexed_dataset(20), budget=8)
    _settle(driver, stream, range(1, 20, 2))
    rounds = [driver.new_round(stream, step, 8, "round") for step in range(6)]
    assert [sorted(r.prompts) for r in rounds] == [[0, 2, 4, 6], [8, 10, 12, 14]] * 3
    assert [r.start_stream["epoch"] for r in rounds] == [1, 1, 2, 2, 3, 3]  # (passes count from 1)
    assert all(r.sizes == [2] * 4 for r in rounds)
    assert driver.skipped == Counter({"solved": 21, "failed": 0, "value": 0})  # 1-13 in each of 3 passes


def test_a_pass_of_settled_prompts_only_still_trains_them_in_turn(monkeypatch):
    """Every prompt skipped: the first pass cannot fill a round, the next one is filled without skipping (the run
    moves on; none is trained twice in a pass)."""
    always_defer_settled(monkeypatch)
    driver, stream = _driver([Stage(num_generations=2, temperature=1.0, skip=True)], indexed_dataset(12), budget=8)
    _settle(driver, stream, range(12))
    trained = Counter()
    for step in range(9):
        trained.update(driver.new_round(stream, step, 8, "round").prompts)
    assert sorted(trained) == list(range(12)) and set(trained.values()) == {3}


def test_a_skipping_stage_follows_its_temperature_ramp_without_switch_records():
    stages = [Stage(num_generations=2, temperature=0.5, temperature_end=1.0, until_step=10, skip=True),
              Stage(num_generations=2, temperature=1.0)]  # fmt: skip
    driver, stream = _driver(stages, indexed_dataset(40), budget=8)
    temperatures = [driver.new_round(stream, step, 8, "round").setting.temperature for step in range(10)]
    assert temperatures == pytest.approx([0.5 + 0.05 * step for step in range(10)])
    assert driver.switches == []
    assert driver.evaluation_temperature(4) == pytest.approx(0.7)
    driver.new_round(stream, 10, 8, "round")
    assert [s["to"]["stage"] for s in driver.switches] == [1]


@pytest.mark.parametrize("trainer", ["grpo", "rloo"])
def test_a_skipping_stage_trains_skips_settled_prompts_and_logs_why(tmp_path, monkeypatch, trainer):
    """A real run at G 2: after the first pass, the solved (index % 3 == 0) and never-succeeding (== 1) prompts are
    skipped; every round keeps G 2; the log says what was skipped and why."""
    from grpo_curriculum import CurriculumRLOOTrainer
    from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

    always_defer_settled(monkeypatch)
    cls = CurriculumRLOOTrainer if trainer == "rloo" else CurriculumGRPOTrainer
    run, recorder = make_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0, skip=True)],
                                 recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(12), max_steps=6,
                                 shuffle_dataset=False, cls=cls)  # fmt: skip
    run.train()
    seen = [sorted(set(c["idx"])) for c in recorder.calls]
    assert seen[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert seen[3:] == [[2, 5, 8, 11]] * 3  # the mixed prompts only: a pass of one round
    assert all(c["sizes"] == [2] * 4 for c in recorder.calls)
    history = train_history(run)
    assert [h.get("curriculum/skipped/solved", 0) for h in history] == [0, 0, 0, 4, 4, 4]
    assert [h.get("curriculum/skipped/failed", 0) for h in history] == [0, 0, 0, 4, 4, 4]
    assert [h["curriculum/num_generations"] for h in history] == [2] * 6
    settled = [json.loads(line) for line in (tmp_path / "settled_prompts.jsonl").read_text().splitlines()]
    kinds = {int(row["prompt"]): row["kind"] for row in settled}  # the run folder names them, with their evidence
    assert kinds == {i: "solved" if i % 3 == 0 else "never succeeded" for i in range(12) if i % 3 != 2}
    assert all(row["text"].startswith("echo") and row["streak"] >= 1 for row in settled)


def _skipping_run(output_dir, monkeypatch, stage=None):
    always_defer_settled(monkeypatch)
    return make_trainer(output_dir, [stage or Stage(num_generations=2, temperature=1.0, skip=True)],
                        recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(48),
                        per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4,
                        max_steps=24, save_strategy="steps", save_steps=1)  # fmt: skip


@pytest.mark.parametrize("pilot", [False, True], ids=["g2", "g4-pilot2"])
def test_a_resumed_skipping_stage_trains_the_rounds_of_the_run_that_never_stopped(tmp_path, monkeypatch, pilot):
    """A checkpoint inside a round (2 steps a round, shuffled passes of 6 rounds, then of 2 once the settled prompts
    are skipped; with pilot groups, G 4 with pilots of 2): the resumed run regenerates that round and then skips and
    trains exactly what the run that never stopped did."""
    stage = Stage(num_generations=4, temperature=1.0, skip={"pilot": 2}) if pilot else None
    full, full_recorder = _skipping_run(tmp_path / "full", monkeypatch, stage)
    full.train()
    expected = [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in full_recorder.calls]
    assert full._curriculum.deferred_total > 0
    assert {g for c in full_recorder.calls for g in c["sizes"]} == ({2, 4} if pilot else {2})
    resumed, recorder = _skipping_run(tmp_path / "resumed", monkeypatch, stage)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-17"))
    got = [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in recorder.calls]
    first = max(i for i, r in enumerate(expected) if r[0] <= 17)
    assert got[0][1:] == expected[first][1:] and got[1:] == expected[first + 1 :]
    assert resumed._curriculum.deferred_total == full._curriculum.deferred_total


def test_a_state_saved_exploring_from_0_5_resumes_with_its_own_probabilities_under_today_s_default():
    """`Skip()` explores from 0.05 since issue 50's third round; a checkpoint written from 0.5 (and adapted since)
    continues with the probabilities it saved, not with today's start."""
    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.core.slots import PromptSlots

    def bound(skip):
        policy = make_policy(Stage(num_generations=4, temperature=0.9, skip=skip).adaptive, 4, 0.9)
        policy.bind(budget=8, slots=PromptSlots(16, indexed=True), seed=0)
        return policy

    assert Skip().explore == 0.05
    old = bound({"explore": 0.5})
    old.allocator.adapt(easy_share=0.5, hard_share=0.0)  # one round: easy 0.5 -> 0.49, hard 0.5 -> 0.51
    resumed = bound(True)
    assert resumed.skip_probabilities() == pytest.approx({"skip_p_easy": 0.95, "skip_p_hard": 0.95})
    resumed.load_state_dict(old.state_dict())
    assert resumed.skip_probabilities() == pytest.approx({"skip_p_easy": 0.51, "skip_p_hard": 0.49})


def test_skip_explore_sets_greso_s_start():
    """`explore`: the chance at the start that a prompt settled in one visit comes back (GRESO starts at 0.5)."""
    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.core.slots import PromptSlots

    stage = Stage(num_generations=4, temperature=0.9, skip={"explore": 0.2})
    assert stage.skip == Skip(explore=0.2) and stage.adaptive.skip_explore == 0.2
    policy = make_policy(stage.adaptive, 4, 0.9)
    policy.bind(budget=8, slots=PromptSlots(16, indexed=True), seed=0)
    assert policy.skip_probabilities() == pytest.approx({"skip_p_easy": 0.8, "skip_p_hard": 0.8})
    assert Skip.from_value({"explore": 1.5})[1][0].key == "skip.explore"


# --- issue 50, second round: the pooled point-mass rule and pilot groups -------------------------------------------


def test_the_point_mass_is_the_share_of_impossible_prompts_only_where_the_data_has_them():
    """25% of prompts never succeed in 12 trials beside rates of 0.2-0.9: the share is found and they are named
    impossible; all-fail groups that a Beta explains (every rate 0.3, 4 trials: 21% fail all) leave the share near 0,
    where the evidence rule would treat all of them alike."""
    import numpy as np

    from grpo_curriculum.core.allocation import point_mass

    rng = np.random.default_rng(0)
    rates = np.r_[np.zeros(50), rng.uniform(0.2, 0.9, 150)]
    successes = rng.binomial(12, rates).astype(float)
    share, probability = point_mass(successes, np.full(200, 12.0))
    assert share == pytest.approx(0.25, abs=0.03) and probability[:50].min() > 0.9
    assert probability[successes > 0].max() == 0
    successes = rng.binomial(4, 0.3, 200).astype(float)
    share, probability = point_mass(successes, np.full(200, 4.0))
    assert (successes == 0).mean() > 0.15 and share < 0.05 and probability.max() < 0.2
    assert point_mass(np.array([1.0, 0.0]), np.array([4.0, 0.0]))[0] == 0  # no all-fail prompt, one never seen


@pytest.mark.parametrize(("rule", "impossible", "deferred_share"), [
    ("evidence", True, (0.8, 0.95)), ("pooled", True, (0.75, 0.95)),  # impossible prompts: both skip them
    ("evidence", False, (0.4, 0.6)), ("pooled", False, (0.0, 0.3)),  # a Beta explains the failures: pooled keeps most
    ("solved", True, (0.0, 0.0)), ("solved", False, (0.0, 0.0)),  # `solved` never skips a failing prompt
])  # fmt: skip
def test_pooled_skips_failing_prompts_as_far_as_the_data_says_they_are_impossible(rule, impossible, deferred_share):
    """Impossible: 100 prompts failed 12 trials (three visits, keep 0.5^3) beside 300 of rates 0.3-0.9. Not: 400
    prompts of rates 0.02-0.3 seen once (4 trials), those that failed all four (keep 0.5). `evidence` skips the
    failing ones with GRESO's probability either way; `pooled` only where the counts say they are impossible."""
    import numpy as np

    from grpo_curriculum.core.allocation import PerPromptAllocator, PromptStats

    rng = np.random.default_rng(1)
    stats = PromptStats(400, (4,), decay=1.0, smoothing=0.3)
    if impossible:
        trials, streak, rates = 12, -3, np.r_[np.zeros(100), rng.uniform(0.3, 0.9, 300)]
    else:
        trials, streak, rates = 4, -1, rng.uniform(0.02, 0.3, 400)
    stats.successes[:] = rng.binomial(trials, rates)
    stats.failures[:] = trials - stats.successes
    failing = np.flatnonzero(stats.successes == 0)
    stats.zero_streak[failing] = streak
    allocator = PerPromptAllocator((4,), 16, 4, stats, defer=True, skip=rule, skip_target=0.05)
    allocator.plan([], iter(range(4)), epoch=1)  # fits the point mass (`pooled`)
    share = np.mean([allocator.deferred(int(slot), epoch) for slot in failing for epoch in range(1, 6)])
    assert len(failing) >= 100 and deferred_share[0] <= share <= deferred_share[1]


def test_pilot_groups_sample_unseen_and_settled_prompts_small_and_fill_the_budget_exactly():
    """G 4 with pilot 2, a budget of 16: unseen prompts get 2 (8 a round); once informative, 4; a settled prompt
    kept by its draw comes back at 2; the sizes always add up to the budget."""
    from grpo_curriculum.core.allocation import PerPromptAllocator, PromptStats

    stats = PromptStats(40, (2, 4), decay=0.5, smoothing=0.3)
    allocator = PerPromptAllocator((2, 4), 16, 5, stats, defer=True, skip="evidence", pilot=2)
    plan = allocator.plan([], iter(range(40)), epoch=1)
    assert (plan.taken, plan.sizes, plan.left, plan.read) == (tuple(range(8)), (2,) * 8, (), 8)
    stats.observe([0, 1, 5, 6, 7], [1, 1, 2, 2, 2], [2] * 5, [False] * 2 + [True] * 3)  # 0, 1 informative;
    allocator.deferred = lambda slot, epoch: slot == 5  # 5-7 solved at 2: 5 skipped, 6 kept by its draw; 2-4 unseen
    plan = allocator.plan([], iter(range(8)), epoch=2)
    assert plan.taken == (0, 1, 2, 3, 4, 6) and plan.sizes == (4, 4, 2, 2, 2, 2) and plan.read == 7
    assert plan.deferred == 1 and sum(plan.sizes) == 16
    mixed = PerPromptAllocator((2, 4), 14, 5, stats, defer=True, skip="evidence", pilot=2)
    mixed.deferred = lambda slot, epoch: False
    assert sum(mixed.plan([], iter(range(8)), epoch=2).sizes) == 14  # 4 + 4 + 2 + 2 + 2 = 14 exactly
    assert allocator.plan([], iter(range(2)), epoch=3) is None  # the pass's prompts left cannot fill a round


@pytest.mark.parametrize(("value", "key", "says"), [
    ({"pilot": 4}, "Stage.skip.pilot", "must be below the stage's G (4)"),
    ({"pilot": 1}, "Stage.skip.pilot", "2"),
])  # fmt: skip
def test_a_pilot_at_or_above_the_stage_s_g_is_refused(value, key, says):
    with pytest.raises(CurriculumError) as error:
        Stage(num_generations=4, temperature=0.9, skip=value)
    assert [p.key for p in error.value.problems] == [key] and says in str(error.value)


def test_a_pilot_stage_runs_as_a_per_prompt_stage_of_two_sizes():
    stage = Stage(num_generations=8, temperature=0.9, skip={"rule": "pooled", "pilot": 2})
    assert stage.skip == Skip(rule="pooled", pilot=2) and stage.num_generations == 8
    assert (stage.adaptive.num_generations, stage.adaptive.pilot, stage.adaptive.skip) == ((2, 8), 2, "pooled")
    assert Skip.from_value({"pilot": None}) == (Skip(), [])
    assert "pilot groups of 2" in stage.skip.describe()
    from grpo_curriculum import Adaptive

    with pytest.raises(CurriculumError) as error:
        Adaptive(num_generations=(2, 8), policy="per_prompt", pilot=8, defer=False)
    assert sorted(p.rule.split(" (")[0] for p in error.value.problems) == [
        "must be one of the candidates [2, 8] below the largest", "needs `defer: true`"]


@pytest.mark.parametrize("trainer", ["grpo", "rloo"])
def test_a_pilot_stage_trains_new_and_settled_prompts_at_the_pilot_and_the_others_at_its_g(tmp_path, monkeypatch,
                                                                                            trainer):  # fmt: skip
    """A real run at G 4 with pilot 2: the first pass samples every prompt at 2 (four a round); then the settled ones
    are skipped and the mixed ones (index % 3 == 2) get G 4, two a round."""
    from grpo_curriculum import CurriculumRLOOTrainer
    from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

    always_defer_settled(monkeypatch)
    cls = CurriculumRLOOTrainer if trainer == "rloo" else CurriculumGRPOTrainer
    run, recorder = make_trainer(tmp_path, [Stage(num_generations=4, temperature=1.0, skip={"pilot": 2})],
                                 recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(12), max_steps=6,
                                 shuffle_dataset=False, cls=cls)  # fmt: skip
    run.train()
    assert [(sorted(set(c["idx"])), c["sizes"]) for c in recorder.calls] == [
        ([0, 1, 2, 3], [2] * 4), ([4, 5, 6, 7], [2] * 4), ([8, 9, 10, 11], [2] * 4),
        ([2, 5], [4, 4]), ([8, 11], [4, 4]), ([2, 5], [4, 4])]
    history = train_history(run)
    assert [h.get("curriculum/skipped/solved", 0) for h in history] == [0, 0, 0, 2, 2, 2]
