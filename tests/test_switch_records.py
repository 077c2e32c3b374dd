"""Switch records: steps as in the log lines, saved to switches.jsonl and trainer_state.json, no no-op switch."""

from __future__ import annotations

import json
import logging

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.training.switches import SWITCHES_FILE, describe_switch, is_stage_change_only
from grpo_curriculum.core.schedule import StageSchedule

from .test_trainer import make_trainer, train_history


def first_steps_of_each_setting(trainer) -> list[int]:
    """The logged step of each training log line whose (stage, G, temperature) differs from the line before."""
    history = train_history(trainer)
    key = lambda h: (h["curriculum/stage"], h["curriculum/num_generations"], h["curriculum/temperature"])  # noqa: E731
    return [b["step"] for a, b in zip(history, history[1:]) if key(a) != key(b)]


def test_records_match_the_log_lines_and_are_saved(tmp_path, caplog):
    stages = [
        Stage(num_generations=2, temperature=0.7, until_step=2, name="small"),
        Stage(num_generations=2, temperature=0.7, until_step=4, name="same"),  # a stage change alone
        Stage(num_generations=4, temperature=0.9),
    ]
    trainer, _ = make_trainer(tmp_path, stages, max_steps=6)
    with caplog.at_level(logging.INFO, logger="grpo_curriculum"):
        trainer.train()
    switches = trainer._curriculum.switches
    assert [(s["step"], s["round"], s["reason"]) for s in switches] == [
        (3, 3, "stage 1 (same) starts"),
        (5, 5, "stage 2 starts"),
    ]
    assert [is_stage_change_only(s) for s in switches] == [True, False]
    assert first_steps_of_each_setting(trainer) == [3, 5]  # stage 1, then G 4: the same numbers as the records

    # trainer_state.json's log history: each record just before the log line of its step.
    history = trainer.state.log_history
    positions = [i for i, entry in enumerate(history) if "curriculum/switch" in entry]
    assert [{"step": history[i]["step"], **history[i]["curriculum/switch"]} for i in positions] == switches
    assert all(history[i + 1]["step"] == history[i]["step"] and "loss" in history[i + 1] for i in positions)
    lines = (tmp_path / SWITCHES_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == switches

    # Printed once each; the stage change is not printed as a switch "G 2 -> 2".
    messages = [r.getMessage() for r in caplog.records if "at step" in r.getMessage()]
    assert messages == [
        "curriculum stage change at step 3 (round 3): G 2 and temperature 0.7 unchanged (stage 1 (same) starts)",
        "curriculum switch at step 5 (round 5): G 2 -> 4, temperature 0.7 -> 0.9 (stage 2 starts)",
    ]
    assert sum("stage 2: steps 5-6, G 4, temperature 0.9" in r.getMessage() for r in caplog.records) == 1


def test_rounds_of_several_steps_switch_at_the_first_step_of_a_round(tmp_path):
    # steps_per_generation 4 with 2 accumulation steps: a round serves 2 optimizer steps (rounds start after 0, 2, 4).
    stages = [Stage(num_generations=2, temperature=0.7, until_step=3), Stage(num_generations=4, temperature=0.7)]
    trainer, _ = make_trainer(tmp_path, stages, max_steps=6, per_device_train_batch_size=4,
                                     gradient_accumulation_steps=2, steps_per_generation=4)  # fmt: skip
    trainer.train()
    (switch,) = trainer._curriculum.switches
    assert switch["step"] == 5 and switch["round"] == 3
    assert switch["reason"] == "stage 1 starts (scheduled from step 4; settings change only between generation rounds)"
    assert first_steps_of_each_setting(trainer) == [5]


def test_describe_switch_and_stages_per_prompt():
    switch = {"step": 7, "round": 4, "from": {"stage": 0, "num_generations": 4, "temperature": 1.0},
              "to": {"stage": 1, "num_generations": None, "temperature": 1.0}, "reason": "stage 1 starts"}  # fmt: skip
    assert describe_switch(switch) == "switch at step 7 (round 4): G 4 -> per prompt at temperature 1 (stage 1 starts)"
    adaptive = Adaptive(num_generations=(2, 4, 8), policy="per_prompt")
    resolved = StageSchedule([Stage(4, 1.0, until_step=6), Stage(temperature=1.0, adaptive=adaptive)]).resolve(10)
    assert resolved.describe() == [
        "stage 0: steps 1-6, G 4, temperature 1",
        "stage 1: steps 7-10, G per prompt from [2, 4, 8], temperature 1",
    ]
    assert resolved.step_range(1) == (7, 10) and resolved.setting_at(6).stage == 1  # the round after 6 steps: step 7


def test_describe_stages_that_the_run_ends_before_or_at():
    schedule = StageSchedule([Stage(2, 1.0, until_fraction=0.5), Stage(8, 1.0)])
    assert schedule.resolve(1).describe() == [  # "steps 2-1" before
        "stage 0: step 1, G 2, temperature 1",
        "stage 1: no step (the run ends first), G 8, temperature 1",
    ]
    assert schedule.resolve(4).describe() == ["stage 0: steps 1-2, G 2, temperature 1",
                                              "stage 1: steps 3-4, G 8, temperature 1"]


def test_a_top_up_stage_switches_once_and_its_temperature_ramp_is_not_a_switch():
    """A top-up stage keeps no policy: its rounds carry the plan, and its ramp is the stage's, as in a fixed stage."""
    from grpo_curriculum import CurriculumCallback, DynamicSampling
    from grpo_curriculum.core.sampling import TopUp

    top_up = {"policy": "top_up", "num_generations": [4, 8, 16]}
    callback = CurriculumCallback([
        Stage(num_generations=8, temperature=1.0, until_step=4, dynamic_sampling={"max_rounds": 2}),
        Stage(temperature=1.0, temperature_end=0.6, adaptive=top_up, name="top-up"),
    ])  # fmt: skip
    callback.resolve(8)
    settings = [callback.setting_for_round(step) for step in range(8)]
    assert callback.initial_setting() == settings[0]
    assert {s.dynamic_sampling for s in settings[:4]} == {DynamicSampling(2)}
    assert {(s.num_generations, s.top_up) for s in settings[4:]} == {(None, TopUp(4, 16))}
    assert [s.temperature for s in settings[4:]] == [1.0, 0.9, 0.8, 0.7]
    assert callback.policy is None and callback.evaluation_temperature(6) == 0.8
    assert [describe_switch(s) for s in callback.switches] == [
        "switch at step 5 (round 5): G 8 -> by top-up at temperature 1 (stage 1 (top-up) starts)"]
