"""Stage schedules as pure functions of the optimizer step: tables, validation, resolution."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_curriculum import CurriculumError, Stage, StageSchedule
from grpo_curriculum.core.geometry import BatchGeometry

ROOT = Path(__file__).resolve().parent.parent

SEEDS_SCHEDULE = StageSchedule([Stage(4, 0.7, until_fraction=0.5), Stage(8, 0.9)])


@pytest.mark.parametrize(
    ("step", "expected"),
    [(0, (0, 4, 0.7)), (49, (0, 4, 0.7)), (50, (1, 8, 0.9)), (99, (1, 8, 0.9)), (100, (1, 8, 0.9)), (500, (1, 8, 0.9))],
)
def test_setting_at(step, expected):
    setting = SEEDS_SCHEDULE.resolve(100).setting_at(step)
    assert (setting.stage, setting.num_generations, setting.temperature) == expected


@pytest.mark.parametrize(
    ("stages", "total", "ends"),
    [
        ([Stage(2, 1.0, until_step=3), Stage(4, 1.0)], 10, (3, 10)),
        ([Stage(2, 1.0, until_fraction=0.25), Stage(4, 1.0, until_fraction=1.0)], 10, (3, 10)),  # 2.5 -> 3
        ([Stage(2, 1.0, until_fraction=0.3), Stage(4, 1.0, until_step=7), Stage(8, 1.0)], 20, (6, 7, 20)),
        ([Stage(2, 1.0)], 5, (5,)),
    ],
)
def test_resolve_ends(stages, total, ends):
    assert StageSchedule(stages).resolve(total).ends == ends


@pytest.mark.parametrize(
    ("stage", "progress", "expected"),
    [
        (Stage(4, 0.5, temperature_end=1.0), 0.0, 0.5),
        (Stage(4, 0.5, temperature_end=1.0), 0.5, 0.75),
        (Stage(4, 0.5, temperature_end=1.0, temperature_ramp="cosine"), 0.5, 0.75),
        (Stage(4, 0.5, temperature_end=1.0, temperature_ramp="cosine"), 0.25, 0.5 + 0.5 * (1 - math.cos(math.pi / 4)) / 2),
        (Stage(4, 0.5, temperature_end=1.0), 2.0, 1.0),  # clamped
        (Stage(4, 0.5), 0.7, 0.5),
    ],
)
def test_temperature_ramp(stage, progress, expected):
    assert stage.temperature_at(progress) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "key", "rule"),
    [
        (dict(num_generations=1, temperature=1.0), "Stage.num_generations", "integer >= 2"),
        (dict(num_generations=True, temperature=1.0), "Stage.num_generations", "integer >= 2"),
        (dict(num_generations=4, temperature=0.0), "Stage.temperature", "finite number >= 0.01"),
        (dict(num_generations=4, temperature=1e-40), "Stage.temperature", "finite number >= 0.01"),
        (dict(num_generations=4, temperature=float("nan")), "Stage.temperature", "finite number >= 0.01"),
        (dict(num_generations=4, temperature=1.0, until_step=0), "Stage.until_step", "positive integer"),
        (dict(num_generations=4, temperature=1.0, until_step=2.5), "Stage.until_step", "positive integer"),
        (dict(num_generations=4, temperature=1.0, until_fraction=1.5), "Stage.until_fraction", "(0, 1]"),
        (dict(num_generations=4, temperature=1.0, until_fraction=0.0), "Stage.until_fraction", "(0, 1]"),
        (dict(num_generations=4, temperature=1.0, until_step=2, until_fraction=0.5), "Stage.until_step", "one unit"),
        (dict(num_generations=4, temperature=1.0, temperature_ramp="cosine"), "Stage.temperature_ramp", "only applies"),
        (dict(num_generations=4, temperature=1.0, temperature_end=1.5, temperature_ramp="step"), "Stage.temperature_ramp",
         "must be one of"),
        (dict(num_generations=5, temperature=1.0, adaptive={"num_generations": [4, 8]}), "Stage.num_generations",
         "adaptive candidates"),
        (dict(temperature=2.0, adaptive={"num_generations": [4, 8], "temperature": [0.5, 1.0]}), "Stage.temperature",
         "within the adaptive bounds"),
        (dict(num_generations=4, temperature=1.0, temperature_end=1.2, adaptive={"num_generations": [4, 8]}),
         "Stage.temperature_end", "cannot be combined"),
    ],
)  # fmt: skip
def test_stage_rejects(kwargs, key, rule):
    with pytest.raises(CurriculumError) as error:
        Stage(**kwargs)
    assert any(p.key == key and rule in p.rule for p in error.value.problems), error.value


def test_adaptive_stage_defaults_to_smallest_candidate_and_lower_bound():
    stage = Stage(adaptive={"num_generations": [4, 8, 16], "temperature": [0.7, 1.2]})
    assert (stage.num_generations, stage.temperature, stage.num_generations_values) == (4, 0.7, (4, 8, 16))


@pytest.mark.parametrize(
    ("stages", "total", "message"),
    [
        ([Stage(2, 1.0, until_step=12), Stage(4, 1.0)], 10, "after the run's last optimizer step (10)"),
        ([Stage(2, 1.0, until_fraction=0.5), Stage(4, 1.0, until_step=5), Stage(8, 1.0)], 10, "not after the previous"),
        ([Stage(2, 1.0, until_step=4)], 10, "the last stage ends at step 4"),
        ([Stage(2, 1.0, until_fraction=0.01), Stage(4, 1.0)], 10, "not after the previous stage's end (step 0)"),
    ],
)
def test_resolve_rejects(stages, total, message):
    with pytest.raises(CurriculumError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StageSchedule(stages).resolve(total)


def test_schedule_reports_every_problem_at_once():
    with pytest.raises(CurriculumError) as error:
        StageSchedule([Stage(2, 1.0), Stage(4, 1.0, until_step=5), Stage(8, 1.0, until_step=3), Stage(8, 1.0)])
    keys = [p.key for p in error.value.problems]
    assert keys == ["stages[0]", "stages[2].until_step"]
    with pytest.raises(CurriculumError, match="at least one stage"):
        StageSchedule([])


def test_geometry_problems_cover_every_reachable_g():
    schedule = StageSchedule([Stage(4, 1.0, until_step=2), Stage(adaptive={"num_generations": [2, 6, 8]}, temperature=1)])
    problems = schedule.geometry_problems(BatchGeometry.from_values(num_processes=2, per_device_train_batch_size=4))
    assert [p.key for p in problems] == ["stages[1].adaptive.num_generations[1]"]
    assert schedule.num_generations_values == [2, 4, 6, 8]


def test_schedule_module_imports_no_torch():
    code = (
        "import sys, types; pkg = types.ModuleType('grpo_curriculum'); pkg.__path__ = [%r]; "
        "sys.modules['grpo_curriculum'] = pkg; import grpo_curriculum.core.schedule; "
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)"
    ) % str(ROOT / "grpo_curriculum")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_stage_fields_are_checked_by_one_table():
    """Every field's own rule is in `STAGE_RULES`; null counts as not given (the required fields then say so)."""
    from grpo_curriculum.core.schedule import STAGE_RULES, stage_problems

    assert set(STAGE_RULES) == {"num_generations", "temperature", "temperature_end", "temperature_ramp", "until_step",
                                "until_fraction"}
    problems = stage_problems({"num_generations": None, "temperature": None, "until_step": 2**40}, key="s")
    assert [(p.key, p.rule) for p in problems] == [
        ("s.num_generations", "is required"), ("s.temperature", "is required"),
        ("s.until_step", "must be at most 2147483647 (a bound on the input)")]
    assert [p.key for p in stage_problems({"num_generations": 1, "temperature": 1}, key="")] == ["num_generations"]
    with pytest.raises(CurriculumError, match="max_steps"):
        SEEDS_SCHEDULE.resolve(2**40)
