"""
`check` and `train` agree on every value of a generated corpus of the TRL and transformers fields a recipe may set:
each numeric field at and just past each bound of its range ([`~config.trl_ranges.RANGES`]), NaN, inf, -inf and values
of the wrong type; each enum field at every choice and one it does not have.

- A value `check` refuses: `train` refuses it with the same problem line and exit status, and writes nothing.
- A value `check` accepts: `train` gets past every check it makes before loading a model (the recipe, the launch, TRL's
  own config classes), unless the environment lacks what the value needs (a package an optimizer comes from, a
  distributed launch for `ddp_backend`), which `check`, run anywhere, does not judge; then it trains a real step of
  the built-in model: the values are run in groups (one value per field, so a group is a few runs in all; a group
  that fails is run value by value to name the culprit), each stopped after its first optimizer step.

The upper bounds that are only bounds on the input (`MAX_COUNT`, `MAX_STEPS`: a 2**20 completion length, 2**20 data
loader workers) are checked just past the bound, not trained at it.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pytest
import yaml

from grpo_curriculum.cli.main import main
from grpo_curriculum.config.trl_fields import trl_fields
from grpo_curriculum.config.trl_ranges import RANGES, REPORT_TO, SEED_MAX

ROOT = Path(__file__).resolve().parent.parent
BASE = {**yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text()), "max_steps": 1, "warm_start_steps": 0,
        "max_completion_length": 2, "report_to": "none", "save_strategy": "no", "logging_steps": 1,
        "dataset_num_prompts": 32}
GEOMETRY = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
            "generation_batch_size", "num_generations", "num_generations_eval", "per_device_eval_batch_size")
"""Batch geometry: its values are checked against the curriculum by tests of their own (test_geometry, ...)."""
ENVIRONMENT = ("which is not installed in this environment", "Default process group has not been initialized")
"""What `train` may refuse that `check` accepts: the environment, not the value."""
NOT_TRAINED = ("torch_compile_backend", "cache_implementation")
"""Choices checked but not trained: each backend needs its compiler (TVM, TensorRT, XLA, a GPU), each cache its model
architecture or package (quantized: optimum-quanto)."""


def _past(bound, direction):
    return bound + direction if isinstance(bound, int) and not isinstance(bound, bool) else \
        math.nextafter(bound, direction * math.inf)


def corpus() -> list[tuple[str, object, bool]]:
    """`(field, value, train it if accepted)` for every settable numeric and enum field."""
    values = []
    for name, spec in trl_fields().items():
        if name in GEOMETRY or name == "temperature":  # a curriculum's stages set G and the temperature
            continue
        choices = [c for t in spec["type"] if isinstance(t, dict) for c in t["choice"]]
        if choices:
            values += [(name, c, name not in NOT_TRAINED) for c in choices] + [(name, "bogus", False)]
            continue
        rule = RANGES.get(name)
        if rule is None:
            continue
        integer = rule.kind == "int"
        cases = [("x", False), (True, False), ([1], False)]
        if rule.low is not None:
            low = int(rule.low) if integer else float(rule.low)
            at = _past(low, 1) if rule.open_low else low
            cases += [(at, True), (low if rule.open_low else _past(low, -1), False)]
        if rule.high is not None:
            high = int(rule.high) if integer else float(rule.high)
            at = _past(high, -1) if rule.open_high else high
            real = not integer or rule.high_is_rule
            cases += [(at, real), (high if rule.open_high else _past(high, 1), False)]
        if not integer:
            cases += [(math.nan, False), (math.inf, False), (-math.inf, False), (1e300, False), (-1e300, False)]
        values += [(name, value, train) for value, train in cases]
    return values


def _run(argv: list[str]) -> tuple[int | str, str]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except BaseException as error:  # noqa: BLE001 - the point: a traceback is a failure, recorded as one
        return "traceback", f"{type(error).__name__}: {error}"
    return code, err.getvalue()


def _problems(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("  - ")]


def _recipe(path: Path, values: dict) -> str:
    path.write_text(yaml.safe_dump({**BASE, **values}))
    return str(path)


def _dry_train(path: str) -> str | None:
    """What `train` refuses before any model loads (its message), or `None`."""
    from grpo_curriculum.cli.launch import launch_geometry, unused_override_problems, validate_for_launch
    from grpo_curriculum.config.arguments import trl_arguments
    from grpo_curriculum.config.recipe import load_recipe
    from grpo_curriculum.core.errors import CurriculumError

    try:
        recipe = load_recipe(path)
        unused_override_problems(recipe, {})
        validate_for_launch(recipe)
        trl_arguments(recipe, launch_geometry(recipe), output_dir="unused")
    except CurriculumError as error:
        return str(error)
    return None


@pytest.fixture
def one_step(monkeypatch):
    """`train` stops after its first optimizer step (a `max_steps` of 2**31 - 1, or -1 for epochs, trains one)."""
    from transformers import TrainerCallback

    import grpo_curriculum.cli.train as run

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = True

    build = run.build_trainer
    monkeypatch.setattr(run, "build_trainer", lambda recipe, output_dir=None, extra_callbacks=(), split=None, **kw:
                        build(recipe, output_dir, [*extra_callbacks, Stop()], split, **kw))


def test_the_corpus_covers_every_ranged_and_enum_field():
    fields = {name for name, _, _ in corpus()}
    numeric = {name for name, spec in trl_fields().items() if any(t in ("int", "float") for t in spec["type"])}
    assert numeric - set(RANGES) - set(GEOMETRY) - {"temperature"} == set()  # every numeric field has a range
    assert set(RANGES) - numeric == set() and "temperature" not in RANGES  # and every range a field
    assert fields >= (set(RANGES) - set(GEOMETRY) - {"temperature"}) and "optim" in fields and "seed" in fields
    assert ("seed", SEED_MAX, True) in corpus() and ("seed", SEED_MAX + 1, False) in corpus()
    assert ("learning_rate", 0.0, True) in corpus() and ("learning_rate", -5e-324, False) in corpus()


def test_report_to_lists_transformers_integrations():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    assert set(REPORT_TO) == set(INTEGRATION_TO_CALLBACK)


def test_check_and_train_agree_on_the_corpus(tmp_path, one_step):
    disagreements, accepted = [], []
    for i, (name, value, train) in enumerate(corpus()):
        path = _recipe(tmp_path / f"r{i}.yaml", {name: value})
        code, err = _run(["check", path])
        if code == "traceback":
            disagreements.append(f"check {name}={value!r}: {err}")
        elif code != 0:
            never = tmp_path / f"never{i}"
            train_code, train_err = _run(["train", path, "--output_dir", str(never)])
            if (train_code, _problems(train_err)) != (code, _problems(err)) or never.exists():
                disagreements.append(f"{name}={value!r}: check {code} {_problems(err)}, train {train_code} "
                                     f"{_problems(train_err) or train_err[-300:]}")
            if len(_problems(err)) != 1:  # one value, one problem
                disagreements.append(f"{name}={value!r}: not one short message: {err!r}")
        else:
            refused = _dry_train(path)
            if refused is not None and not any(reason in refused for reason in ENVIRONMENT):
                disagreements.append(f"{name}={value!r}: check accepts, train refuses: {refused}")
            elif refused is None and train:
                accepted.append((name, value))
    assert not disagreements, "\n".join(disagreements)
    groups: list[dict] = []
    for name, value in accepted:  # one value per field a group
        group = next((g for g in groups if name not in g), None)
        group = group if group is not None else groups.append({}) or groups[-1]
        group[name] = value
    assert 5 <= len(groups) <= 60 and len(accepted) > 100
    failures = []
    for i, group in enumerate(groups):
        code, err = _run(["train", _recipe(tmp_path / f"g{i}.yaml", group), "--output_dir", str(tmp_path / f"o{i}")])
        if code == 0:
            continue
        for name, value in group.items():  # name the culprit
            code, err = _run(["train", _recipe(tmp_path / f"v{i}.yaml", {name: value}), "--output_dir",
                              str(tmp_path / f"o{i}-{name}")])
            if code != 0:
                failures.append(f"{name}={value!r}: check accepts, train {code}: {err[-400:]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("setting", "message"), [
    ("seed: 99999999999999999999999999", "seed = 99999999999999999999999999: must be an integer in [0, 4294967295]"),
    ("seed: -1", "seed = -1: must be an integer in [0, 4294967295] (numpy's and torch's seed range)"),
    ("learning_rate: .nan", "learning_rate = nan: must be a finite number >= 0"),
    ("learning_rate: -1.0", "learning_rate = -1.0: must be a finite number >= 0"),
    ("report_to: [bogus]", "report_to = ['bogus']: names 'bogus', not one of transformers' integrations"),
    ("beta: .nan", "beta = nan: must be a finite number >= 0 (the KL coefficient; 0: no reference model)"),
    ("max_completion_length: 0", "max_completion_length = 0: must be a positive integer"),
    ("max_steps: -5", "max_steps = -5: must be an integer >= -1 (-1, transformers' default: train"),
    ("max_steps: 0", "max_steps = 0: must be a positive number of steps, or -1"),
])
def test_the_reported_values_are_one_message_from_check_and_train(tmp_path, capsys, setting, message):
    recipe = tmp_path / "r.yaml"
    key = setting.split(":")[0]
    kept = [line for line in (ROOT / "recipes" / "demo.yaml").read_text().splitlines() if not line.startswith(key)]
    recipe.write_text("\n".join(kept) + f"\n{setting}\n")
    for argv in (["check", str(recipe)], ["train", str(recipe), "--output_dir", str(tmp_path / "never")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"  - {message}" in err and "1 problem" in err and "Traceback" not in err
    assert not (tmp_path / "never").exists()


def test_a_seed_on_the_command_line_is_read_as_an_integer(tmp_path, capsys):
    never = tmp_path / "never"
    assert main(["train", "demo", "--seed", "1e26", "--output_dir", str(never)]) == 2
    err = capsys.readouterr().err
    assert "argument --seed: invalid int value: '1e26'" in err and "Traceback" not in err and not never.exists()
    assert main(["train", "demo", "--seed", str(2**32), "--output_dir", str(never)]) == 2
    assert "seed = 4294967296: must be an integer in [0, 4294967295]" in capsys.readouterr().err


@pytest.mark.parametrize(("values", "message"), [
    ({"fp16": True, "bf16": True}, "fp16 = True: cannot be combined with `bf16: true`"),
    ({"fp16_full_eval": True, "bf16_full_eval": True}, "fp16_full_eval = True: cannot be combined with"),
    ({"load_best_model_at_end": True, "save_strategy": "steps", "eval_strategy": "no"},
     "load_best_model_at_end = True: needs `save_strategy` (steps) and `eval_strategy` (no) to match"),
    ({"load_best_model_at_end": True, "save_strategy": "steps", "eval_strategy": "steps", "save_steps": 15,
      "eval_steps": 10}, "load_best_model_at_end = True: needs `save_steps` (15) to be a multiple of `eval_steps`"),
    ({"load_best_model_at_end": True, "save_strategy": "steps", "eval_strategy": "steps", "save_steps": 10,
      "eval_steps": 0.3}, "load_best_model_at_end = True: needs `save_steps` (10) to be a multiple"),
])  # fmt: skip
def test_combinations_transformers_refuses_are_one_message_from_check_and_train(tmp_path, values, message):
    """Each combination is refused by `GRPOConfig` itself; `check` and `train` name it before anything loads."""
    from trl import GRPOConfig

    with pytest.raises(ValueError):
        GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, **values)
    path = _recipe(tmp_path / "r.yaml", values)
    for argv in (["check", path], ["train", path, "--output_dir", str(tmp_path / "never")]):
        code, err = _run(argv)
        assert code == 2 and f"  - {message}" in err and len(_problems(err)) == 1, err
    assert not (tmp_path / "never").exists()


def test_combinations_transformers_accepts_pass_check(tmp_path):
    for values in ({"fp16": False, "bf16": True}, {"load_best_model_at_end": True, "save_strategy": "best",
                                                   "eval_strategy": "no", "metric_for_best_model": "reward"},
                   {"load_best_model_at_end": True, "save_strategy": "steps", "eval_strategy": "steps",
                    "save_steps": 20, "eval_steps": 10},
                   {"load_best_model_at_end": True, "save_strategy": "steps", "eval_strategy": "steps",
                    "save_steps": 10, "eval_steps": 0.5}):  # fmt: skip
        from trl import GRPOConfig

        GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, **values)  # TRL accepts it
        code, err = _run(["check", _recipe(tmp_path / "r.yaml", values)])
        assert code == 0, (values, err)
