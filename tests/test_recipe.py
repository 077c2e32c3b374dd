"""Tests for `grpo_curriculum.config.recipe`: every shipped recipe validates; each malformed one is explained."""

import json
import math
import time
from pathlib import Path

import pytest
import yaml

from grpo_curriculum.core import loading
from grpo_curriculum.cli.main import main
from grpo_curriculum.core.errors import CurriculumError
from grpo_curriculum.config.recipe import (
    Recipe,
    geometry_of,
    import_reward,
    load_curriculum,
    load_recipe,
    parse_recipe,
    run_geometry,
)
from grpo_curriculum.rewards import gsm8k_accuracy_reward, last_number
from grpo_curriculum.core.schedule import Stage, StageSchedule

ROOT = Path(__file__).resolve().parents[1]
BAD = ROOT / "tests" / "data" / "bad_recipes"
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
MINIMAL = {"model_name_or_path": "builtin:tiny", "dataset_name": "builtin:echo",
           "reward_funcs": ["grpo_curriculum.demo.tasks:echo_reward"]}


def problems_of(path, **kwargs):
    with pytest.raises(CurriculumError) as info:
        load_recipe(str(path), **kwargs)
    return info.value


def has(error, key, text):
    """`error` holds a problem at `key` whose rule or fix mentions `text`, and its message shows both."""
    found = [p for p in error.problems if p.key == key and text in f"{p.rule} {p.fix}"]
    return bool(found) and key in str(error) and text in str(error)


# --- the shipped recipes -----------------------------------------------------------------------------------------


def test_recipes_exist():
    names = {path.name for path in RECIPES}
    expected = {"1gpu.yaml", "2gpu.yaml", "4gpu.yaml", "memory-tight.yaml", "qwen2.5-0.5b-gsm8k.yaml", "demo.yaml"}
    assert expected <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_validates_and_passes_check(path, capsys):
    recipe = load_recipe(str(path))
    assert isinstance(recipe, Recipe) and recipe.num_processes is not None
    assert recipe.reward_funcs and not {"curriculum", "reward_funcs", "num_processes"} & set(recipe.training)
    if recipe.trainer != "async_grpo":  # (the asynchronous trainer has no generation batch for G to divide)
        geometry = geometry_of(recipe)
        assert all(geometry.is_valid(g) for g in recipe.curriculum.num_generations_values)
    assert path.read_text().startswith("#") and " train " in path.read_text().split("\n\n")[0]  # launch command
    hub = not recipe.dataset_name.startswith("builtin:")  # no network here: their dataset is not read
    assert main(["check", str(path), "--num-processes", str(recipe.num_processes),
                 *(["--no-preflight"] if hub else [])]) == 0
    assert "result: OK" in capsys.readouterr().out


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_builds_a_grpo_config(path, tmp_path):
    """TRL accepts every recipe's training kwargs (bf16 off: this machine may have no GPU), as its trainer's config
    (`GRPOConfig`, `RLOOConfig` for `trainer: rloo`, `AsyncGRPOConfig` for `trainer: async_grpo`)."""
    from grpo_curriculum.config.trl_fields import TRAINERS, config_class

    recipe = load_recipe(str(path))
    config = config_class(TRAINERS[recipe.trainer])(**{**recipe.training, "output_dir": str(tmp_path), "bf16": False})
    assert config.num_generations == recipe.curriculum.stages[0].num_generations


def test_seed_recipes_numbers():
    """The seeds' recipes: 1 GPU 4 x 8 with G 4; 2 GPUs per-device 3 with G 6; 4 GPUs 2 x 16, G 8, clip 0.5."""
    one, two, four = (load_recipe(str(ROOT / "recipes" / f"{n}gpu.yaml")) for n in (1, 2, 4))
    assert (one.training["per_device_train_batch_size"], one.training["gradient_accumulation_steps"]) == (4, 8)
    assert 4 in one.curriculum.num_generations_values and one.num_processes == 1
    assert two.training["per_device_train_batch_size"] == 3 and two.num_processes == 2
    assert two.curriculum.num_generations_values == [3, 6]
    assert four.training["max_grad_norm"] == 0.5 and four.training["gradient_accumulation_steps"] == 16
    assert 8 in four.curriculum.num_generations_values and four.num_processes == 4
    tight = load_recipe(str(ROOT / "recipes" / "memory-tight.yaml"))
    assert tight.training["use_vllm"] is True and tight.training["vllm_gpu_memory_utilization"] == 0.7
    assert tight.training["vllm_mode"] == "colocate" and tight.training["per_device_train_batch_size"] == 1


def test_demo_recipe_fields():
    recipe = load_recipe(str(ROOT / "recipes" / "demo.yaml"))
    assert (recipe.model_name_or_path, recipe.dataset_name) == ("builtin:tiny", "builtin:echo")
    assert recipe.reward_funcs == ["grpo_curriculum.demo.tasks:echo_reward"] and recipe.dataset_num_prompts == 256
    assert recipe.warm_start_steps == 20
    assert recipe.dataset_config is None and recipe.dataset_train_split == "train" and recipe.model == {}
    assert recipe.training["use_cpu"] is True and recipe.training["report_to"] == []
    assert recipe.training["learning_rate"] == pytest.approx(2e-3)
    # GRPOConfig gets the first stage's G and temperature, so it accepts the geometry the run starts in.
    assert (recipe.training["num_generations"], recipe.training["temperature"]) == (2, 0.8)
    assert [(s.num_generations, s.temperature) for s in recipe.curriculum.stages] == [(2, 0.8), (8, 1.0)]
    assert recipe.curriculum.resolve(recipe.training["max_steps"]).ends == (300, 600)


def test_gsm8k_recipe():
    recipe = load_recipe(str(ROOT / "recipes" / "qwen2.5-0.5b-gsm8k.yaml"))
    assert (recipe.dataset_name, recipe.dataset_config) == ("openai/gsm8k", "main")
    assert recipe.model == {"dtype": "bfloat16"}
    assert import_reward(recipe.reward_funcs[0]) is gsm8k_accuracy_reward


# --- malformed recipes -------------------------------------------------------------------------------------------

CASES = {
    "async_refusals": [("loss_type", "not of AsyncGRPOConfig"), ("generation_batch_size", "use `trainer: grpo`"),
                       ("model_name_or_path", "needs a model folder or Hub id"),
                       ("eval_strategy", "takes no eval dataset"), ("max_steps", "is required with a curriculum"),
                       ("curriculum.stages[2].adaptive.policy", "is not supported on the asynchronous trainer"),
                       ("curriculum.stages[3].comparison", "is not supported on the asynchronous trainer"),
                       ("curriculum.stages[4].dynamic_sampling", "set `curriculum.dynamic_sampling: true`")],
    "rloo_refusals": [("loss_type", "use `trainer: grpo`"), ("scale_rewards", "not of RLOOConfig"),
                      ("curriculum.stages[2].comparison.mode", "is not supported with RLOOTrainer"),
                      ("curriculum.stages[3].dynamic_sampling.on_limit", "on_limit")],
    "trainer_typo": [("trainer", "did you mean `rloo`?"), ("normalize_advantages", "use `trainer: rloo`")],
    "typo_top_level": [("num_generation", "did you mean `num_generations`?"),
                       ("learning_rat", "did you mean `learning_rate`?"),
                       ("per-device-train-batch-size", "did you mean `per_device_train_batch_size`?")],
    "wrong_types": [("per_device_train_batch_size", "must be an integer"), ("bf16", "must be true or false"),
                    ("learning_rate", "must be a number"), ("report_to", "a list of strings"),
                    ("max_steps", "must be an integer")],
    "nonpositive_temperature": [("curriculum.stages[0].temperature", "must be a finite number >= 0.01"),
                                ("curriculum.stages[1].temperature_end", "must be a finite number >= 0.01")],
    "nan_temperature": [("curriculum.stages[0].temperature", "must be a finite number >= 0.01")],
    "g_below_two": [("curriculum.stages[0].num_generations", "must be an integer >= 2"),
                    ("curriculum.stages[1].num_generations", "must be an integer >= 2")],
    "decreasing_ends": [("curriculum.stages[1].until_step", "stage ends must increase")],
    "fraction_above_one": [("curriculum.stages[0].until_fraction", "must be a number in (0, 1]")],
    "both_end_kinds": [("curriculum.stages[0].until_step", "cannot be combined with `until_fraction`")],
    "unknown_stage_key": [("curriculum.stages[0].temprature", "did you mean `temperature`?"),
                          ("curriculum.stages[0].temperature", "is required")],
    "bad_reward_path": [("reward_funcs[0]", "use `trl.rewards:accuracy_reward`"),
                        ("reward_funcs[1]", "must be an import path")],
    "reward_funcs_not_list": [("reward_funcs", "must be a non-empty list of import paths")],
    "unknown_curriculum_key": [("curriculum.stage", "did you mean `stages`?"), ("curriculum.stages", "is required")],
    "curriculum_not_mapping": [("curriculum", "must be a mapping holding a `stages:` list")],
    "stage_not_mapping": [("curriculum.stages[0]", "must be a mapping of stage fields")],
    "missing_required": [("model_name_or_path", "is required"), ("dataset_name", "is required"),
                         ("reward_funcs", "is required")],
    "enum_typo": [("eval_strategy", "did you mean `steps`?"), ("lr_scheduler_type", "did you mean `cosine`?"),
                  ("dtype", "did you mean `bfloat16`?")],
    "stage_ends_after_run": [("curriculum.stages[0].until_step", "after the run's last optimizer step (50)")],
    "middle_stage_without_end": [("curriculum.stages[0]", "only the last stage may omit its end")],
    "ramp_without_end": [("curriculum.stages[0].temperature_ramp", "only applies with `temperature_end`")],
    "duplicate_key": [("learning_rate", "is given more than once (lines 4, 5)")],
    "builtin_typo": [("model_name_or_path", "did you mean `builtin:tiny`?"),
                     ("dataset_name", "did you mean `builtin:echo`?")],
    "num_prompts_for_hub_dataset": [("dataset_num_prompts", "only applies to built-in datasets"),
                                    ("num_processes", "must be a positive integer")],
    "unsupported_key": [("reward_model_name_or_path", "is not supported")],
    "per_prompt_knobs": [("curriculum.stages[0].adaptive.defer", "must be true or false"),
                         ("curriculum.stages[0].adaptive.decay", "must be a number in [0, 1)"),
                         ("curriculum.stages[0].adaptive.mean_generations", "must be a positive integer"),
                         ("curriculum.stages[0].adaptive.lookahead", "must be an integer >= 0"),
                         ("curriculum.stages[0].adaptive.weight",
                          "must be one of ['hard', 'knapsack', 'variance', 'uniform']"),
                         ("curriculum.stages[0].adaptive.skip_target", "must be a number in [0, 1)"),
                         ("curriculum.stages[0].adaptive.window", "only applies with `policy: success_rate`"),
                         ("curriculum.stages[0].adaptive.target", "only applies with `policy: success_rate`")],
    "top_up_knobs": [("curriculum.stages[0].adaptive.prompts", "must be a positive integer"),
                     ("curriculum.stages[0].adaptive.temperature", "cannot be adapted in a top-up stage"),
                     ("curriculum.stages[0].adaptive.pilot", "the pilot 3 must divide every candidate G [4, 8, 16]"),
                     ("curriculum.stages[0].adaptive.patience", "only applies with `policy: hysteresis` or"),
                     ("curriculum.stages[0].adaptive.mean_generations", "only applies with `policy: per_prompt`"),
                     ("curriculum.stages[0].adaptive.rule", "`value` won on no task of the study (docs/study.md)"),
                     ("curriculum.stages[1].adaptive.num_generations", "use `pilot: 2`"),
                     ("curriculum.stages[1].adaptive.rule", "drop `rule`: `flat_first` is what top-up does")],
    "dynamic_sampling_settings": [("curriculum.stages[0].dynamic_sampling", "cannot be combined with `adaptive`"),
                                  ("curriculum.stages[1].dynamic_sampling.max_round", "did you mean `max_rounds`?"),
                                  ("curriculum.stages[1].dynamic_sampling.max_rounds", "must be a positive integer")],
    "comparison_settings": [("curriculum.stages[0].comparison.margin", "only applies with `mode: margin`"),
                            ("curriculum.stages[1].comparison.margin", "is required with `mode: margin`"),
                            ("curriculum.stages[2].comparison.margin_ed", "did you mean `margin_end`?"),
                            ("curriculum.stages[2].comparison.margin", "must be a number in [0, 64]")],
    "many_problems": [("per_device_train_batch_size", "must be an integer"),
                      ("gradient_accumulation_step", "did you mean `gradient_accumulation_steps`?"),
                      ("curriculum.stages[0].num_generations", "must be an integer >= 2"),
                      ("curriculum.stages[0].temperature", "must be a finite number >= 0.01"),
                      ("curriculum.stages[1].temperature", "must be a finite number >= 0.01"),
                      ("curriculum.stages[1].temperature_ramp", "must be one of ['linear', 'cosine']"),
                      ("curriculum.stages[2].warmup", "is not a stage field")],
}


GEOMETRY_CASES = {  # well-formed recipes that do not fit their batch geometry (`check` and `train` exit 1)
    "top_up_cannot_fill": [("curriculum.stages[0].adaptive.prompts", "must be at least 2: 1 prompt x largest 8 = 8 "
                            "completions cannot fill the generation batch (4 processes x 4 per-device batch"),
                           ("curriculum.stages[1].adaptive.pilot", "must be a multiple of the 4 processes"),
                           ("curriculum.stages[2].adaptive.pilot", "must divide the generation batch")],
}


def test_corpus_is_covered():
    files = {path.stem for path in BAD.glob("*.yaml")}
    assert len(files) >= 15
    unparsed = {"yaml_syntax_error", "empty", "top_level_list", "hostile_alias_bomb", "hostile_latin1"}
    assert files == set(CASES) | unparsed | set(GEOMETRY_CASES)


@pytest.mark.parametrize("name", sorted(GEOMETRY_CASES))
def test_bad_geometry_recipe(name):
    recipe = load_recipe(str(BAD / f"{name}.yaml"))
    problems = recipe.curriculum.geometry_problems(run_geometry(recipe), key="curriculum.stages")
    error = CurriculumError(problems)
    for key, text in GEOMETRY_CASES[name]:
        assert has(error, key, text), f"{key!r} / {text!r} not in:\n{error}"
    assert len(problems) == len(GEOMETRY_CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_recipe(name):
    error = problems_of(BAD / f"{name}.yaml")
    for key, text in CASES[name]:
        assert has(error, key, text), f"{key!r} / {text!r} not in:\n{error}"
    assert len(error.problems) == len(CASES[name]) + (name == "num_prompts_for_hub_dataset")  # every problem at once
    assert f"recipe {BAD / name}.yaml" in str(error)


def test_yaml_syntax_error_names_file_and_line():
    path = BAD / "yaml_syntax_error.yaml"
    message = str(problems_of(path))
    assert f"{path}:7" in message and "line 7, column 7" in message and "starts at line 6" in message


def test_empty_missing_and_list_files(tmp_path):
    assert "is empty" in str(problems_of(BAD / "empty.yaml"))
    assert "does not exist" in str(problems_of(tmp_path / "nope.yaml"))
    assert "is a directory" in str(problems_of(tmp_path))
    assert "is not a regular file" in str(problems_of("/dev/null"))
    assert "must be a YAML mapping" in str(problems_of(BAD / "top_level_list.yaml"))
    with pytest.raises(CurriculumError, match="not a str"):
        parse_recipe("model_name_or_path: x")


# --- parsing details ---------------------------------------------------------------------------------------------


def test_overrides_apply_over_the_file():
    recipe = load_recipe(str(ROOT / "recipes" / "demo.yaml"),
                         {"max-steps": 10, "per_device_train_batch_size": 8, "num_processes": 2})
    assert recipe.training["max_steps"] == 10 and recipe.raw["max_steps"] == 10
    assert geometry_of(recipe).generation_batch_size == 16 and geometry_of(recipe, 1).generation_batch_size == 8
    error = problems_of(ROOT / "recipes" / "demo.yaml", overrides={"max_stepz": 5, "learning_rate": "fast"})
    assert has(error, "max_stepz", "did you mean `max_steps`?") and has(error, "learning_rate", "must be a number")


def test_plain_recipe_has_one_stage_from_trl_defaults():
    recipe = parse_recipe(dict(MINIMAL))
    assert [(s.num_generations, s.temperature) for s in recipe.curriculum.stages] == [(8, 1.0)]
    geometry = geometry_of(recipe)  # TRL's defaults: per-device 8, accumulation 1, one process
    assert geometry.generation_batch_size == 8 and geometry.num_generations_eval is None
    recipe = parse_recipe({**MINIMAL, "num_generations": 4, "temperature": 0.7})
    assert recipe.curriculum.stages == (Stage(num_generations=4, temperature=0.7),)
    error = pytest.raises(CurriculumError, parse_recipe, {**MINIMAL, "temperature": -1}).value
    assert has(error, "temperature", "must be a finite number >= 0.01")


def test_geometry_of_reads_eval_and_generation_batch():
    recipe = parse_recipe({**MINIMAL, "per_device_train_batch_size": 3, "generation_batch_size": 12,
                           "eval_strategy": "steps", "per_device_eval_batch_size": 4, "num_generations": 6})
    geometry = geometry_of(recipe, num_processes=2)
    assert (geometry.steps_per_generation, geometry.generation_batch_size) == (2, 12)
    assert (geometry.per_device_eval_batch_size, geometry.num_generations_eval) == (4, 6)
    with pytest.raises(CurriculumError, match="per_device_train_batch_size"):
        geometry_of(parse_recipe({**MINIMAL, "per_device_train_batch_size": 0}))


def test_top_level_g_below_two_with_a_curriculum():
    data = {**MINIMAL, "num_generations": 1, "curriculum": {"stages": [{"num_generations": 2, "temperature": 1}]}}
    assert has(pytest.raises(CurriculumError, parse_recipe, data).value, "num_generations", "integer >= 2")


def test_yaml_floats_and_values():
    data, _ = loading.parse_yaml("[1e-5, -3E2, [], true, 10, runs/x, .nan]", "recipe")
    assert data[:6] == [1e-5, -300.0, [], True, 10, "runs/x"] and math.isnan(data[6])


def test_load_curriculum(tmp_path):
    schedule = load_curriculum(str(ROOT / "recipes" / "2gpu.yaml"))
    assert isinstance(schedule, StageSchedule) and schedule.num_generations_values == [3, 6]
    only = tmp_path / "curriculum.yaml"
    only.write_text("curriculum:\n  stages:\n    - {num_generations: 4, temperature: 0.7, until_step: 5}\n"
                    "    - {num_generations: 8, temperature: 0.9}\n")
    assert [s.until_step for s in load_curriculum(str(only)).stages] == [5, None]
    only.write_text("learning_rate: 1.0e-2\n")
    with pytest.raises(CurriculumError, match="no top-level `curriculum:`"):
        load_curriculum(str(only))
    error = pytest.raises(CurriculumError, load_curriculum, str(BAD / "many_problems.yaml")).value
    assert len(error.problems) == 5  # only the curriculum's problems


def test_callback_from_yaml():
    from grpo_curriculum import CurriculumCallback

    callback = CurriculumCallback.from_yaml(str(ROOT / "recipes" / "demo.yaml"))
    assert callback.schedule.num_generations_values == [2, 8]
    with pytest.raises(CurriculumError, match="temprature"):
        CurriculumCallback.from_yaml(str(BAD / "unknown_stage_key.yaml"))


def test_import_reward():
    from grpo_curriculum.demo.tasks import echo_reward

    assert import_reward("grpo_curriculum.demo.tasks:echo_reward") is echo_reward
    assert import_reward("grpo_curriculum.demo.tasks.echo_reward") is echo_reward
    with pytest.raises(CurriculumError, match="cannot be imported"):
        import_reward("grpo_curriculum.demo.tasks:nope")
    with pytest.raises(CurriculumError, match="cannot be imported"):
        import_reward("no_such_module_xyz.reward")
    with pytest.raises(CurriculumError, match="is not callable"):
        import_reward("grpo_curriculum.demo.tasks:WORDS")


def test_gsm8k_reward():
    assert last_number("so she pays 1,200 + 35 = 1,235 dollars.") == 1235.0 and last_number("none") is None
    answers = ["Natalia sold 48/2 = 24 clips in May.\n#### 72", "#### 1,235", "#### 5"]
    completions = ["48 + 24 = 72", [{"role": "assistant", "content": "The answer is 1235."}], "I don't know"]
    assert gsm8k_accuracy_reward(completions, answers) == [1.0, 1.0, 0.0]


def test_split_batches_is_refused(tmp_path):
    """TRL's grouping assumes accelerate's default sharding: `split_batches` would cut groups across processes."""
    split = {**MINIMAL, "accelerator_config": {"split_batches": True}}
    error = pytest.raises(CurriculumError, parse_recipe, split).value
    assert has(error, "accelerator_config.split_batches", "default sharding") and len(error.problems) == 1
    config = tmp_path / "accelerate.json"
    config.write_text(json.dumps({"split_batches": True, "dispatch_batches": None}))
    error = pytest.raises(CurriculumError, parse_recipe, {**MINIMAL, "accelerator_config": str(config)}).value
    assert has(error, f"accelerator_config ({config}).split_batches", "remove `split_batches`")
    config.write_text(json.dumps({"split_batches": False}))
    for value in ({"split_batches": False, "even_batches": True}, str(config), str(tmp_path / "missing.json")):
        assert parse_recipe({**MINIMAL, "accelerator_config": value}).training["accelerator_config"] == value


# --- hostile files: a message naming the file, never a traceback or a hang ---------------------------------------

HEAD = "model_name_or_path: builtin:tiny\ndataset_name: builtin:echo\nreward_funcs: [m:f]\n"


def alias_bomb() -> str:
    """A 404-byte recipe whose `learning_rate` expands to 9^9 = 387,420,489 strings through nested aliases."""
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    lines += [f"{n}: &{n} [{','.join(['*' + p] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]
    return HEAD + "\n".join(lines) + "\nlearning_rate: *i\n"


def refused(path, *texts, within=2.0):
    """`load_recipe(path)` fails within `within` seconds of CPU time (typically 0.1 s or less; CPU time, which a busy
    machine does not stretch as it does the wall clock) with one problem naming the file and each of `texts`."""
    start = time.process_time()
    error = problems_of(path)
    elapsed = time.process_time() - start
    assert elapsed < within, elapsed
    assert len(error.problems) == 1 and str(path) in str(error) and len(str(error)) < 600, str(error)
    for text in texts:
        assert text in str(error), str(error)


@pytest.mark.parametrize(
    "content, texts",
    [
        (alias_bomb(), ["expands to more than 10000 values through its YAML aliases"]),
        (HEAD + "learning_rate: &a [1, *a]\n", ["holds a YAML alias (`*name`) inside the value it refers to"]),
        (HEAD + "x:\n" + "- 1\n" * 11_000, ["holds more than 10000 values"]),
        (HEAD + "max_steps: " + "9" * 5000 + "\n", [":4 = '9999", "is an integer of 5000 characters"]),
        (HEAD + "x: " + "[" * 5000 + "]" * 5000 + "\n", ["is not valid YAML at line 4", "nesting depth"]),
        (HEAD + "x: " + "- " * 5000 + "1\n", ["is not valid YAML at line 4"]),
        ("a: 1\n\x00\x01binary", [":2 = '\\x00\\x01binary'", "at line 2: holds the character #x0000"]),
        ((HEAD + "#" * 100 + "\n") * 700, ["is larger than 65536 bytes"]),
        (b"model_name_or_path: caf\xe9\n", ["is not UTF-8 text (byte 0xe9 at offset 23, line 1)"]),
        (bytes(range(256)) * 40, ["is not UTF-8 text (byte 0x80 at offset 128"]),
    ],
    ids=["alias_bomb", "recursive_alias", "too_many_values", "huge_integer", "deep_flow", "deep_block", "nul_bytes",
         "large_file", "latin1", "binary"],
)  # fmt: skip
def test_hostile_files(tmp_path, content, texts):
    assert len(alias_bomb()) <= 430
    path = tmp_path / "hostile.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    refused(path, *texts)


@pytest.mark.parametrize(
    "content, text",
    [
        (alias_bomb(), "expands to more than 10000 values"),
        (HEAD + "max_steps: " + "9" * 5000 + "\n", "is an integer of 5000 characters"),
        (HEAD + "x: " + "[" * 3000 + "]" * 3000 + "\n", "nests lists or mappings too deeply to read"),
        ("a: 1\n\x00\x01binary", "at line 2: holds the character #x0000"),
        ((BAD / "yaml_syntax_error.yaml").read_text(), "at line 7, column 7: expected ',' or '}', but got '{' (while "
         "parsing a flow mapping that starts at line 6, column 7)"),
    ],
)
def test_hostile_files_without_libyaml(tmp_path, monkeypatch, content, text):
    """PyYAML built without libyaml falls back to its pure-Python parser: the same problems, never a traceback."""
    monkeypatch.setattr(loading, "_Loader", loading._loader_class(yaml.SafeLoader))
    path = tmp_path / "hostile.yaml"
    path.write_text(content)
    refused(path, text, within=10.0)  # the pure-Python parser needs about 1 s to reach Python's recursion limit
    assert loading.parse_yaml("[1e-5, [1, 2]]", "recipe")[0] == [1e-5, [1, 2]]


def test_ten_megabyte_recipe_is_refused_at_once(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(HEAD + "".join(f"key_{i}: {i}\n" for i in range(800_000)))
    assert path.stat().st_size > 10_000_000
    refused(path, "is larger than 65536 bytes", within=0.5)  # only 64 KiB are read: about a millisecond


def test_a_recipe_of_exactly_the_byte_limit_is_read_and_one_byte_more_is_refused(tmp_path):
    """`MAX_BYTES` is the largest recipe read: a file of exactly that many bytes is accepted, one more is refused."""
    head = "x: 1\n"
    path = tmp_path / "limit.yaml"
    path.write_bytes((head + "#" * (loading.MAX_BYTES - len(head) - 1) + "\n").encode())
    assert path.stat().st_size == loading.MAX_BYTES
    assert loading.read_yaml(str(path)) == ({"x": 1}, [])
    path.write_bytes((head + "#" * (loading.MAX_BYTES - len(head)) + "\n").encode())
    assert path.stat().st_size == loading.MAX_BYTES + 1
    refused(path, "is larger than 65536 bytes")


def test_largest_accepted_recipe_is_validated_quickly(tmp_path):
    """Just under both limits, with a problem in every stage: all reported, in bounded time (about 0.1 s here)."""
    stage = "    - {num_generations: 1, temperature: -1, until_step: 0}\n"
    path = tmp_path / "large.yaml"
    path.write_text(HEAD + "curriculum:\n  stages:\n" + stage * 1100)
    assert path.stat().st_size < 65536
    start = time.process_time()  # CPU time: a busy machine stretches the wall clock, not this
    error = problems_of(path)
    assert time.process_time() - start < 3.0 and len(error.problems) == 3 * 1100


def test_curriculum_options_reach_the_callback(tmp_path):
    from grpo_curriculum.training.callback import CurriculumCallback

    recipe = tmp_path / "report.yaml"
    demo = (ROOT / "recipes" / "demo.yaml").read_text()
    recipe.write_text(demo.replace("curriculum:\n", "curriculum:\n  uncertain_prompts: 7\n"))
    assert CurriculumCallback.from_yaml(str(recipe)).uncertain_prompts == 7
    assert CurriculumCallback.from_yaml(str(recipe), uncertain_prompts=0).uncertain_prompts == 0
    recipe.write_text(recipe.read_text().replace("uncertain_prompts: 7", "uncertain_prompts: -1"))
    error = problems_of(recipe)
    assert has(error, "curriculum.uncertain_prompts", "must be an integer >= 0")
