"""
Recipes of `trainer: async_grpo` (TRL 1.16's asynchronous trainer, docs/async.md): their TRL keys checked against
`AsyncGRPOConfig`, what the asynchronous curriculum refuses said through `core.asynchronous.async_problems` (the one
place), the `curriculum.dynamic_sampling` switch, `check` without a generation batch, and `train` up to the trainer's
construction (the vLLM server waited for first). Training from a recipe against the real engine:
tests/test_async_real.py (`make test-vllm`).
"""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest
import yaml

from grpo_curriculum.cli.main import main
from grpo_curriculum.config import trainers
from grpo_curriculum.config.recipe import load_recipe, parse_recipe
from grpo_curriculum.core.errors import CurriculumError

ROOT = Path(__file__).resolve().parent.parent
BASE = {"model_name_or_path": "some-org/some-model", "dataset_name": "builtin:arithmetic",
        "reward_funcs": ["grpo_curriculum.demo.arithmetic:arithmetic_reward"], "trainer": "async_grpo",
        "max_steps": 10}  # fmt: skip


def problems(data: dict) -> list[str]:
    with pytest.raises(CurriculumError) as caught:
        parse_recipe(data)
    return [str(problem) for problem in caught.value.problems]


def _write(tmp_path, data: dict) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "out"), **data}))
    return str(path)


def test_async_demo_passes_check_and_builds_an_async_grpo_config(capsys):
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.config.arguments import trl_arguments

    assert main(["check", "async-demo"]) == 0
    out = capsys.readouterr().out
    assert "trainer async_grpo: AsyncGRPOConfig" in out and "no generation batch, so any G >= 2 fits" in out
    assert "micro-batches of up to the vLLM server's max_model_len tokens a process (token_budget unset" in out
    assert "http://127.0.0.1:8000" in out and "16 samples a step" not in out  # TRL batches by tokens by default
    assert "stage 0 (explore): G=4, temperature 1, until 0.5 of the run (steps 1-100 of 200): valid" in out
    assert "dynamic sampling (curriculum.dynamic_sampling)" in out and "result: OK, all 2 checks valid" in out
    recipe = load_recipe("async-demo")
    args, _ = trl_arguments(recipe, None, output_dir="unused", bf16=False)
    assert type(args) is AsyncGRPOConfig and args.num_generations == 4 and args.temperature == 1.0
    assert args.max_staleness == 4 and args.vllm_server_base_url == "http://127.0.0.1:8000" and args.max_steps == 200


@pytest.mark.parametrize(("token_budget", "said"), [
    (None, "micro-batches of up to the vLLM server's max_model_len tokens a process (token_budget unset: read when "
           "training starts), 1 a step: the samples a step vary with their lengths"),
    (512, "micro-batches of up to 512 tokens a process (token_budget), 1 a step"),
    (0, "16 samples a step (16 per-device batch x 1 accumulation x 1 process)"),  # TRL's FixedCountBatcher
])
def test_check_says_what_a_step_trains_on_as_trl_batches_it(tmp_path, capsys, token_budget, said):
    """Issue 51, item 1: TRL's asynchronous trainer batches by tokens (`token_budget`, unset: the server's
    `max_model_len`) unless `token_budget <= 0`; `check` said "16 samples a step" whatever it was."""
    data = yaml.safe_load(Path(load_recipe("async-demo").path).read_text())
    if token_budget is not None:
        data["token_budget"] = token_budget
    assert main(["check", _write(tmp_path, data), "--no-preflight"]) == 0
    assert f"the trainer takes from its queue {said}" in capsys.readouterr().out


def test_temperature_schedules_and_per_prompt_stages_pass_check(tmp_path, capsys):
    """What the asynchronous trainer supports is not refused by the recipe check: a ramp, a temperature schedule and
    a per-prompt stage (whose candidates need not divide anything: a round's completions need only be a sum of them)."""
    stages = [{"num_generations": 4, "temperature": 0.7, "temperature_end": 1.0, "until_fraction": 0.3},
              {"num_generations": 4, "temperature": 1.2, "until_fraction": 0.6},
              {"temperature": 1.0, "adaptive": {"policy": "per_prompt", "num_generations": [3, 5]}}]
    recipe = _write(tmp_path, {**BASE, "curriculum": {"dynamic_sampling": True, "stages": stages}})
    assert main(["check", recipe]) == 0
    out = capsys.readouterr().out
    assert "stage 0: G=4, temperature 0.7 -> 1 (linear)" in out and "stage 1: G=4, temperature 1.2" in out
    assert "stage 2: per-prompt G from [3, 5], temperature 1" in out and "result: OK, all 3 checks valid" in out
    from grpo_curriculum.config.recipe import starting_num_generations

    for top, start in ((None, 3), (5, 5), (4, 5)):  # a candidate is kept; else the largest: no batch to fit
        given = {} if top is None else {"num_generations": top}
        assert starting_num_generations(parse_recipe({**BASE, **given, "curriculum": {"stages": stages[2:]}}),
                                        None) == start


def test_a_per_prompt_round_the_candidates_cannot_fill_is_refused(tmp_path, capsys):
    """A per-prompt round plans per_device_train_batch_size x gradient_accumulation_steps x num_processes completions
    (`core.asynchronous.round_budget`): 6 x 1 x 1 is no sum of 4 and 8; 6 x 1 x 2 is."""
    stage = {"temperature": 1.0, "adaptive": {"policy": "per_prompt", "num_generations": [4, 8]}}
    data = {**BASE, "per_device_train_batch_size": 6, "curriculum": {"stages": [stage]}}
    assert main(["check", _write(tmp_path, data), "--no-preflight"]) == 2
    assert "per_device_train_batch_size = 6: a per-prompt round (curriculum.stages[0]) plans" in capsys.readouterr().err
    assert main(["check", _write(tmp_path, {**data, "num_processes": 2}), "--no-preflight"]) == 0


@pytest.mark.parametrize("stage", [
    {"temperature": 1.0, "adaptive": {"policy": "hysteresis", "num_generations": [2, 4]}},
    {"temperature": 1.0, "adaptive": {"policy": "success_rate", "num_generations": [2, 4]}},
    {"temperature": 1.0, "adaptive": {"policy": "top_up", "num_generations": [4, 8]}},
    {"temperature": 1.0, "adaptive": {"policy": "per_prompt", "num_generations": [2, 4], "temperature": [0.7, 1.0]}},
    {"num_generations": 4, "temperature": 1.0, "dynamic_sampling": {"max_rounds": 2}},
    {"num_generations": 4, "temperature": 1.0, "comparison": {"mode": "extremes"}},
], ids=["hysteresis", "success_rate", "top_up", "temperature_bounds", "stage_dynamic_sampling", "comparison"])
def test_refused_stages_are_said_by_async_problems_the_one_place(stage):
    """The recipe's refusal of a stage is exactly what `core.asynchronous.async_problems` says of it (its fix naming
    the recipe key for the trainer's `dynamic_sampling=True`), whether the rest of the curriculum is valid or not."""
    from grpo_curriculum import Stage
    from grpo_curriculum.core.asynchronous import async_problems

    expected = [str(trainers._in_recipe_words(p)).replace("curriculum.stages[0]", "curriculum.stages[1]")
                for p in async_problems([Stage(**stage)], max_steps=10, at="curriculum.stages")]
    assert expected
    fixed = {"num_generations": 2, "temperature": 1.0, "until_fraction": 0.5}
    assert problems({**BASE, "curriculum": {"stages": [fixed, stage]}}) == expected
    invalid = {"num_generations": 2, "temperature": -1.0, "until_fraction": 0.5}  # said first, by its own rule
    assert problems({**BASE, "curriculum": {"stages": [invalid, stage]}})[1:] == expected


def test_max_steps_is_required_with_a_curriculum_not_without():
    stages = [{"num_generations": 4, "temperature": 1.0}]
    data = {key: value for key, value in BASE.items() if key != "max_steps"}
    (found,) = problems({**data, "curriculum": {"stages": stages}})
    assert found.startswith("max_steps: is required with a curriculum on the asynchronous trainer")
    (found,) = problems({**data, "max_steps": -1, "curriculum": {"stages": stages}})
    assert found.startswith("max_steps = -1: must be set (> 0) with a curriculum on the asynchronous trainer")
    for value, said in ((0, "must be a positive number of steps, or -1"), ("ten", "must be an integer")):
        (found,) = problems({**data, "max_steps": value, "curriculum": {"stages": stages}})  # said once, by its rule
        assert said in found, found
    assert parse_recipe(data).trainer == "async_grpo"  # plain AsyncGRPOTrainer: TRL's epoch stop
    assert parse_recipe({**data, "max_steps": 5, "curriculum": {"stages": stages}}).training["max_steps"] == 5


def test_keys_of_another_trainers_config_name_the_trainer_and_the_fix():
    (found,) = problems({**BASE, "loss_type": "dapo"})
    assert found == ("loss_type = 'dapo': is a field of GRPOConfig, not of AsyncGRPOConfig (this recipe's `trainer: "
                     "async_grpo`)\n    fix: remove it, or use `trainer: grpo`")
    (found,) = problems({**BASE, "generation_batch_size": 32})
    assert "generation_batch_size = 32: is a field of GRPOConfig, not of AsyncGRPOConfig" in found
    grpo = {key: value for key, value in BASE.items() if key != "trainer"}
    (found,) = problems({**grpo, "max_staleness": 2})
    assert found.startswith("max_staleness = 2: is a field of AsyncGRPOConfig, not of GRPOConfig (`trainer: grpo`, "
                            "the default)") and "use `trainer: async_grpo`" in found
    (found,) = problems({**grpo, "trainer": "rloo", "weight_sync_steps": 2})
    assert "weight_sync_steps = 2: is a field of AsyncGRPOConfig, not of RLOOConfig" in found
    recipe = parse_recipe({**BASE, "dtype": "bfloat16", "max_staleness": 0, "weight_sync_steps": 2})
    assert recipe.training["dtype"] == "bfloat16" and "dtype" not in recipe.model  # AsyncGRPOConfig.dtype loads it


def test_curriculum_dynamic_sampling_is_the_async_trainers_switch_only(tmp_path):
    from grpo_curriculum.core.curriculum import load_curriculum

    stages = [{"num_generations": 4, "temperature": 1.0}]
    grpo = {key: value for key, value in BASE.items() if key != "trainer"}
    for trainer, name in (("grpo", "CurriculumGRPOTrainer"), ("rloo", "CurriculumRLOOTrainer")):
        (found,) = problems({**grpo, "trainer": trainer, "model_name_or_path": "builtin:tiny",
                             "curriculum": {"dynamic_sampling": True, "stages": stages}})
        assert found.startswith("curriculum.dynamic_sampling = True: is the asynchronous trainer's switch")
        assert f"{name} drops and refills them per stage" in found and "`dynamic_sampling: {max_rounds: 4}`" in found
    (found,) = problems({**BASE, "curriculum": {"dynamic_sampling": "yes", "stages": stages}})
    assert found.startswith("curriculum.dynamic_sampling = 'yes': must be true or false")
    assert parse_recipe({**BASE, "curriculum": {"dynamic_sampling": False, "stages": stages}}).trainer == "async_grpo"
    only = tmp_path / "curriculum.yaml"  # what `CurriculumCallback.from_yaml` reads: the synchronous trainers'
    only.write_text(yaml.safe_dump({"curriculum": {"dynamic_sampling": True, "stages": stages}}))
    with pytest.raises(CurriculumError, match=r"curriculum\.dynamic_sampling = True: is not a curriculum key"):
        load_curriculum(str(only))


def test_the_dynamic_sampling_switch_needs_no_stages_and_uncertain_prompts_gets_one_word(tmp_path, capsys):
    """Issue 51, item 6: `curriculum: {dynamic_sampling: true}` without stages was refused ("curriculum.stages: is
    required") although `CurriculumAsyncGRPOTrainer(dynamic_sampling=True)` takes no stages; `uncertain_prompts: true`
    got "is not used" and "must be an integer" at once."""
    recipe = parse_recipe({**BASE, "num_generations": 4, "curriculum": {"dynamic_sampling": True}})
    assert [stage.num_generations for stage in recipe.curriculum.stages] == [4]  # the recipe's G, as without one
    (found,) = problems({**BASE, "curriculum": {"dynamic_sampling": True}, "max_steps": -1})
    assert found.startswith("max_steps = -1: must be set (> 0) with a curriculum")
    (found,) = problems({**BASE, "curriculum": {"stages": [{"num_generations": 4, "temperature": 1.0}],
                                                "uncertain_prompts": True}})
    assert found.startswith("curriculum.uncertain_prompts = True: is not used by the asynchronous trainer")
    (found,) = problems({**BASE, "curriculum": {"dynamic_sampling": True, "stage": []}})  # a typo is still named
    assert found.startswith("curriculum.stage = []: is not a curriculum key")
    assert main(["check", _write(tmp_path, {**BASE, "curriculum": {"dynamic_sampling": True}}), "--no-preflight"]) == 0
    out = capsys.readouterr().out
    assert "G=8 (num_generations): valid" in out and "dynamic sampling (curriculum.dynamic_sampling)" in out


def test_trainer_async_grpo_needs_trl_1_16(monkeypatch, tmp_path, capsys):
    from grpo_curriculum.compat import async_trl_problem

    assert async_trl_problem("1.16.0") is None and async_trl_problem("1.16.3") is None
    assert async_trl_problem("1.14.2").endswith("the installed TRL is 1.14.2")
    assert async_trl_problem(None).endswith("the installed TRL is none")
    monkeypatch.setattr(trainers, "installed_version", lambda package: "1.14.2")
    (found,) = problems(BASE)
    assert found.startswith("trainer = 'async_grpo': needs TRL 1.16 (CurriculumAsyncGRPOTrainer extends the "
                            "asynchronous trainer of `trl.experimental.async_grpo`") and "trl==1.16.*" in found
    assert main(["check", "async-demo"]) == 2 and "needs TRL 1.16" in capsys.readouterr().err


@pytest.mark.parametrize(("edit", "key", "said"), [
    ({"model_name_or_path": "builtin:tiny"}, "model_name_or_path", "needs a model folder or Hub id"),
    ({"eval_strategy": "steps"}, "eval_strategy", "takes no eval dataset"),
    ({"use_liger_kernel": True}, "use_liger_kernel", "raises NotImplementedError once the model has loaded"),
    ({"max_inflight_tasks": 0}, "max_inflight_tasks", "would start no generation"),
    ({"accelerator_config": {"split_batches": False}}, "accelerator_config.split_batches", "is always true"),
    ({"attn_implementation": "sdpa"}, "attn_implementation", "its own prefix-tree attention"),
    ({"load_in_4bit": True}, "load_in_4bit", "takes no quantization config"),
    ({"use_peft": True, "lora_target_modules": ["q_proj", "lm_head"]}, "lora_target_modules", "must not hold"),
    ({"curriculum": {"uncertain_prompts": 10, "stages": [{"num_generations": 2, "temperature": 1.0}]}},
     "curriculum.uncertain_prompts", "is not used by the asynchronous trainer"),
    ({"max_staleness": -1}, "max_staleness", "must be an integer >= 0"),
    ({"weight_sync_steps": 0}, "weight_sync_steps", "must be a positive integer"),
])
def test_what_async_grpo_trainer_raises_after_loading_is_said_before(edit, key, said):
    found = problems({**BASE, **edit})
    assert len(found) == 1 and found[0].startswith(key) and said in found[0], found


def test_check_refuses_text_prompts_for_the_async_trainer(tmp_path, capsys):
    """TRL's rollout worker reads a prompt as a list of messages: text prompts are refused by the preflight."""
    recipe = _write(tmp_path, {**BASE, "dataset_name": "builtin:echo",
                               "reward_funcs": ["grpo_curriculum.demo.tasks:echo_reward"]})
    assert main(["check", recipe]) == 2
    err = capsys.readouterr().err
    assert "dataset_prompt_column = 'prompt': holds text prompts in dataset builtin:echo" in err
    assert "`trainer: async_grpo` takes conversations" in err and "Traceback" not in err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_train_without_vllm_stops_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["train", "async-demo", "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "trainer = 'async_grpo': needs `vllm`, which is not installed in this environment" in err
    assert "Traceback" not in err and not out.exists()


def test_an_unreachable_vllm_server_is_one_problem_before_any_model_loads(capsys):
    """`train` waits for the server as TRL's trainer would (its own client, `vllm_server_timeout`), before the model
    loads; nothing answering is one problem naming the URL and how to start a server."""
    from grpo_curriculum.cli.launch import vllm_server_problems

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    recipe = parse_recipe({**BASE, "vllm_server_base_url": f"http://127.0.0.1:{port}", "vllm_server_timeout": 1})
    (problem,) = vllm_server_problems(recipe)
    assert problem.key == "vllm_server_base_url" and problem.value == f"http://127.0.0.1:{port}"
    assert "has no vLLM server answering (GET /health): Timed out after 1s" in problem.rule
    assert "trl vllm-serve --model MODEL" in problem.fix
    assert "waiting for the vLLM server" in capsys.readouterr().err
    grpo = {key: value for key, value in BASE.items() if key != "trainer"}
    assert vllm_server_problems(parse_recipe(grpo)) == []  # the synchronous trainers: not waited for


@pytest.mark.parametrize("argv", [["sweep", "async-demo", "--max-steps", "2"], ["demo", "--recipe", "async-demo"]])
def test_sweep_and_demo_refuse_the_async_trainer(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"trainer = 'async_grpo': is not supported by `grpo-curriculum {argv[0]}`" in err
    assert "grpo-curriculum train" in err and "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_train_and_check_know_the_same_keys_for_async_grpo():
    from grpo_curriculum.config.arguments import RecipeParser
    from grpo_curriculum.config.recipe import RECIPE_KEYS, UNSUPPORTED
    from grpo_curriculum.config.trl_fields import trl_fields

    parsed = {action.dest for action in RecipeParser("async_grpo")._actions} - {"help"}
    assert parsed - set(UNSUPPORTED) == {*trl_fields("async_grpo"), *RECIPE_KEYS}


def test_build_trainer_makes_the_curriculum_async_trainer_of_a_recipe(tiny_model_dir, tmp_path, monkeypatch):
    """Everything of `train` up to the trainer (CPU shims and a no-op weight transfer, tests/async_cpu.py): the
    recipe's stages, its dynamic sampling switch, AsyncGRPOConfig from its keys, the model by name."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.cli.build import build_trainer
    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer, CurriculumRolloutLoop

    from .async_cpu import NoWeightTransfer, allow_async_grpo_on_cpu

    from trl.experimental.async_grpo import async_rollout_worker

    allow_async_grpo_on_cpu(monkeypatch)
    for name in ("is_vllm_available", "is_aiohttp_available"):  # the worker is not started: it needs neither here
        monkeypatch.setattr(async_rollout_worker, name, lambda: True)
    stages = [{"num_generations": 2, "temperature": 1.0, "until_step": 2}, {"num_generations": 4, "temperature": 1.0}]
    recipe = parse_recipe({**BASE, "model_name_or_path": tiny_model_dir, "max_steps": 4, "use_cpu": True,
                           "bf16": False, "activation_checkpointing": False, "report_to": [], "max_staleness": 2,
                           "vllm_server_base_url": "http://127.0.0.1:1", "dataset_num_prompts": 8,
                           "curriculum": {"dynamic_sampling": True, "stages": stages}})  # fmt: skip
    trainer = build_trainer(recipe, output_dir=str(tmp_path / "run"), async_options={
        "weight_transfer": NoWeightTransfer()})
    assert type(trainer) is CurriculumAsyncGRPOTrainer and type(trainer.args) is AsyncGRPOConfig
    args = trainer.args
    assert (args.num_generations, args.temperature, args.max_steps, args.max_staleness) == (2, 1.0, 4, 2)
    assert args.vllm_server_base_url == "http://127.0.0.1:1" and args.output_dir == str(tmp_path / "run")
    schedule = trainer.curriculum_schedule
    assert [schedule.setting_at(step).num_generations for step in range(4)] == [2, 2, 4, 4]
    assert trainer.dynamic_sampling is True
    worker = trainer.rollout_worker
    assert worker._loop_cls is CurriculumRolloutLoop and worker._loop_kwargs["schedule"] is schedule
    assert worker._loop_kwargs["dynamic_sampling"] is True
    assert len(trainer.train_dataset) == 8 and isinstance(trainer.train_dataset[0]["prompt"], list)
    plain = parse_recipe({**BASE, "model_name_or_path": tiny_model_dir, "use_cpu": True, "bf16": False,
                          "report_to": [], "num_generations": 3})  # no curriculum: TRL's loop, unchanged
    trainer = build_trainer(plain, output_dir=str(tmp_path / "plain"), async_options={
        "weight_transfer": NoWeightTransfer()})
    assert trainer.curriculum_schedule is None and trainer.dynamic_sampling is False
    assert trainer.args.num_generations == 3 and trainer.rollout_worker._loop_cls is not CurriculumRolloutLoop
    switch = parse_recipe({**BASE, "model_name_or_path": tiny_model_dir, "use_cpu": True, "bf16": False,
                           "report_to": [], "num_generations": 3, "max_steps": 4,
                           "curriculum": {"dynamic_sampling": True}})  # issue 51 item 6: as the Python API takes it
    trainer = build_trainer(switch, output_dir=str(tmp_path / "switch"), async_options={
        "weight_transfer": NoWeightTransfer()})
    assert trainer.curriculum_schedule is None and trainer.dynamic_sampling is True
    assert trainer.args.num_generations == 3 and trainer.rollout_worker._loop_kwargs["schedule"] is None


def test_an_async_recipe_on_the_installed_trl_is_checked_or_refused_in_one_problem(capsys, tmp_path):
    """On TRL 1.16 `async-demo` passes; on another release (the compatibility job's TRL 1.14, which has no
    `trl.experimental.async_grpo`), or where TRL 1.16's module does not import (the job on transformers 4.57), `check`
    and `train` say one problem, the release or the import, without a traceback."""
    import importlib.metadata

    from grpo_curriculum.compat import async_trl_problem
    from grpo_curriculum.config.trl_fields import has_fields

    release = async_trl_problem(importlib.metadata.version("trl")) is None
    supported = release and has_fields("async_grpo")
    said = "needs TRL 1.16" if not release else "needs `trl.experimental.async_grpo.AsyncGRPOConfig`, which does not"
    assert main(["check", "async-demo", "--no-preflight"]) == (0 if supported else 2)
    captured = capsys.readouterr()
    if not supported:
        assert captured.err.count("\n  - ") == 1 and f"trainer = 'async_grpo': {said}" in captured.err, captured.err
        assert main(["train", "async-demo", "--output_dir", str(tmp_path / "never")]) == 2
        assert said in capsys.readouterr().err and not (tmp_path / "never").exists()
    assert "Traceback" not in captured.err


def test_the_closing_line_reads_the_g_each_step_logs_of_its_samples():
    """The asynchronous trainer's samples record `curriculum/num_generations` (the synchronous trainers' key); each step
    logs their mean, which the closing line of `train` reports at the first and last step."""
    from grpo_curriculum.cli.summary import async_summary

    history = [{"loss": 0.1, "step": 1, "reward": 0.2, "curriculum/num_generations": 2.0},
               {"loss": 0.1, "step": 2, "reward": 0.4, "curriculum/num_generations": 3.5,
                "rollout/dropped_groups_total": 2.0},
               {"train_runtime": 1.0, "step": 2}]  # fmt: skip
    assert async_summary(history) == ("G of the samples trained on: 2 at step 1, 3.5 at step 2; mean reward 0.300; 2 "
                                      "zero-variance groups dropped before the queue")
    assert async_summary([{"loss": 0.1, "step": 1, "num_generations": 2.0}]) == "no step logged the G of its samples"
