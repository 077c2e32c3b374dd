"""The one validator (`grpo_curriculum.core.rules`): rule messages, the integer check, bounds and short value reprs."""

import json
import math

import numpy as np
import pytest

from grpo_curriculum import Adaptive, BatchGeometry, CurriculumError, Stage, StageSchedule
from grpo_curriculum.core.errors import MISSING, Problem, plural, shorten
from grpo_curriculum.config.recipe import geometry_of, parse_recipe
from grpo_curriculum.core.rules import (
    COUNT,
    MAX_COUNT,
    NUM_GENERATIONS,
    POSITIVE,
    Rule,
    check,
    fraction,
    integer,
    is_int,
    suggest,
    unknown_keys,
)


@pytest.mark.parametrize(
    "rule, value, message",
    [
        (COUNT, 3, None),
        (COUNT, 0, "must be a positive integer"),
        (COUNT, 2.0, "must be a positive integer"),
        (COUNT, True, "must be a positive integer"),
        (COUNT, "3", "must be a positive integer"),
        (COUNT, MAX_COUNT, None),
        (COUNT, MAX_COUNT + 1, f"must be at most {MAX_COUNT} (a bound on the input)"),
        (NUM_GENERATIONS, 1, "must be an integer >= 2 (GRPO needs at least 2 completions per prompt"),
        (integer(0, 10), -1, "must be an integer >= 0"),
        (POSITIVE, 0, "must be a positive finite number"),
        (POSITIVE, float("inf"), "must be a positive finite number"),
        (POSITIVE, float("nan"), "must be a positive finite number"),
        (POSITIVE, 1e300, None),
        (fraction(True, False), 0, "must be a number in (0, 1]"),
        (fraction(True, False), 1, None),
        (fraction(False, True), 1.0, "must be a number in [0, 1)"),
        (fraction(False, True), 0, None),
        (Rule("number"), float("inf"), "must be a finite number"),
        (Rule("number", finite=False), float("inf"), None),
        (Rule("bool"), 1, "must be true or false"),
        (Rule("choice", choices=("linear", "cosine")), "step", "must be one of ['linear', 'cosine']"),
        (Rule("choice", choices=(False,)), 0, "must be one of [False]"),  # 0 == False, but is not the choice
        (Rule("choice", choices=tuple(range(20))), 99, "one of [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ... (20 in all)"),
        (Rule("list", item=Rule("str")), ["a", 3], "must be a list of strings"),
        (Rule("list", low=1, high=2), [], "must be a non-empty list of values"),
        (Rule("list", low=1, high=2), [1, 2, 3], "must hold at most 2 values"),
        (Rule("str", low=1, why="a column name"), "", "must be a non-empty string (a column name)"),
        (Rule("any_of", options=(Rule("int"), Rule("null"))), None, None),
        (Rule("any_of", options=(Rule("int"), Rule("null")), why="X.y"), 1.5, "must be an integer or null (X.y)"),
        (Rule("any"), object(), None),
    ],
)  # fmt: skip
def test_rule_messages(rule, value, message):
    broken = rule.broken(value)
    assert broken is None if message is None else message in broken, broken


def test_integers_are_integral_minus_bool():
    assert all(map(is_int, (0, -3, np.int64(4), np.uint8(2), 10**30)))
    assert not any(map(is_int, (True, False, 4.0, np.float64(4), "4", None)))


def test_problems_check_and_fixes():
    assert Rule("choice", choices=("steps", "no")).problems("k", "step")[0].fix == "did you mean `steps`?"
    assert Rule("choice", choices=("steps", "no")).problems("k", "zzz")[0].fix == "use one of ['steps', 'no']"
    assert Rule("any_of", options=(Rule("choice", choices=("bfloat16",)),), fix="e.g.").problems("k", "bf16")[0].fix \
        == "did you mean `bfloat16`?"
    rules = {"a": COUNT, "b": POSITIVE, "c": COUNT}
    assert [p.key for p in check(rules, {"c": 0, "a": 0, "z": 0}, "s")] == ["s.a", "s.c"]  # table order, b absent
    found = unknown_keys({"tempreature": 1, "ok": 2}, ["temperature", "ok"], "x", "a field", "remove it")
    assert found == [Problem("x.tempreature", 1, "is not a field", "did you mean `temperature`?")]
    assert suggest("per-device-train-batch-size", ["per_device_train_batch_size"]) == "per_device_train_batch_size"
    assert suggest(3, ["a"]) is None and suggest("x" * 10_000, ["x"]) is None


def test_many_unknown_keys_stay_fast():
    many = {f"key_{i}": i for i in range(5000)}
    found = unknown_keys(many, [f"field_{i}" for i in range(250)], None, "a field", "remove it")
    assert len(found) == 5000 and all(p.fix == "remove it" for p in found[100:])


def test_one_pluraliser_for_every_message():
    assert [plural(1, "prompt"), plural(2, "prompt"), plural(0, "stage change")] == ["1 prompt", "2 prompts",
                                                                                     "0 stage changes"]
    assert [plural(1, "process"), plural(4, "process"), plural(3, "switch")] == ["1 process", "4 processes",
                                                                                 "3 switches"]


def test_messages_quote_any_value_briefly():
    values = [10**5000, "x" * 100_000, list(range(10**5)), {"a": [[[[[[1]]]]]]}, -(10**300)]
    recursive = []
    recursive.append(recursive)
    for value in [*values, recursive]:
        assert len(shorten(value)) < 120
    assert shorten(10**5000) == "<integer of about 5001 digits>" and shorten(1.5) == "1.5"
    assert str(Problem("k" * 1000, "v" * 1000, "must be short")).count("k") < 200
    assert str(Problem("num_generations", MISSING, "is required")) == "num_generations: is required"
    error = pytest.raises(CurriculumError, Stage, num_generations=10**5000, temperature=1.0).value
    assert "at most" in str(error) and len(str(error)) < 400


# --- one integer check, everywhere ---------------------------------------------------------------------------------


def test_numpy_integers_accepted_everywhere_and_stored_as_int():
    stage = Stage(num_generations=np.int64(4), temperature=np.float64(0.7), until_step=np.int32(5))
    adaptive = Adaptive(num_generations=[np.int64(2), np.int64(4)], patience=np.int64(2), policy="hysteresis")
    schedule = StageSchedule([stage, Stage(adaptive=adaptive, temperature=1.0)])
    geometry = BatchGeometry.from_values(num_processes=np.int64(2), per_device_train_batch_size=np.int64(2))
    assert schedule.geometry_problems(geometry) == [] and geometry.is_valid(np.int64(4))
    assert geometry.problems(np.int64(3)) and geometry.per_step_note(np.int64(4)) is None
    assert schedule.resolve(np.int64(10)).ends == (5, 10)
    for value in (stage.num_generations, stage.until_step, *adaptive.num_generations, adaptive.patience,
                  geometry.num_processes, geometry.generation_batch_size):
        assert type(value) is int
    json.dumps([stage.num_generations, stage.temperature, stage.until_step, list(adaptive.num_generations)])
    recipe = parse_recipe({"model_name_or_path": "builtin:tiny", "dataset_name": "builtin:echo", "reward_funcs": ["m:f"],
                           "per_device_train_batch_size": np.int64(4), "num_processes": np.int64(2),
                           "max_steps": np.int64(10), "curriculum": {"stages": [{"num_generations": np.int64(4),
                                                                                 "temperature": 1.0}]}})
    assert geometry_of(recipe).generation_batch_size == 8 and recipe.curriculum.stages[0].num_generations == 4


def test_numpy_floats_and_bools_rejected_everywhere():
    for bad in (np.float64(4.0), True):
        with pytest.raises(CurriculumError, match="integer >= 2"):
            Stage(num_generations=bad, temperature=1.0)
        with pytest.raises(CurriculumError, match="integer >= 2"):
            Adaptive(num_generations=[bad, 8])
        with pytest.raises(CurriculumError, match="positive integer"):
            BatchGeometry(1, bad, 1)
        assert not BatchGeometry(1, 8, 1).is_valid(bad)


@pytest.mark.parametrize("temperature", [float("nan"), math.inf, -0.0, 1e-40, 0.009])
def test_temperatures_must_be_finite_and_at_least_a_hundredth(temperature):
    with pytest.raises(CurriculumError, match="finite number >= 0.01"):  # 1e-40 passed and crashed at the first step
        Stage(num_generations=4, temperature=temperature)
