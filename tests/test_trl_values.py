"""
Values of TRL and transformers fields that `check` once accepted and `train` then failed on, mid-run or after the
model loaded (issue 35, item 4): each is one message naming the key, the value, the rule and the fix, exit status 2,
from both commands, before any model loads. The rules are pure (the snapshot's derived choices and keywords,
[`~config.trl_ranges.related_problems`], [`~config.environment.environment_problems`] with its probes replaced); one
end-to-end test runs `check` and `train` over every value.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from grpo_curriculum.config import environment
from grpo_curriculum.config.recipe import parse_recipe, run_geometry, starting_num_generations
from grpo_curriculum.config.trl_fields import compared_constants, trl_fields
from grpo_curriculum.core.errors import CurriculumError

ROOT = Path(__file__).resolve().parent.parent
DEMO = yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text())

# key, value, what the one problem's line says (after `key = value: `)
PURE = [
    ("loss_type", "bogus", "must be one of ['luspo', 'vespo', 'bnpo', 'dr_grpo', 'dapo', 'cispo', 'grpo', 'sapo']"),
    ("importance_sampling_level", "bogus", "must be one of ['sequence', 'token']"),
    ("scale_rewards", "bogus", "must be one of ['group', 'none', 'batch']"),
    ("multi_objective_aggregation", "bogus", "must be one of ['sum_then_normalize', 'normalize_then_sum']"),
    ("include_num_input_tokens_seen", "bogus", "is read as a boolean by TRL's parser"),
    ("include_num_input_tokens_seen", "non_padding", "a string here must be one of yes, true, t, y, 1, no, false"),
    ("torch_compile_backend", "bogus", "must be one of ['no', 'eager', 'aot_eager', 'inductor'"),
    ("torch_compile_backend", "induktor", "must be one of ['no', 'eager', 'aot_eager', 'inductor'"),
    ("cache_implementation", "bogus", "must be one of ['static', 'offloaded_static'"),
    ("report_to", ["none", "none"], "lists `none` with other names: `none` is only read alone"),
    ("report_to", ["all", "wandb"], "lists `all` with other names"),
    ("reward_weights", [1.0, 2.0], "has 2 weights for 1 reward function: one weight each"),
    ("lr_scheduler_kwargs", {"foo": 1}, "names 'foo', which the `linear` scheduler does not take (it takes "
                                        "'last_epoch')"),
    ("lr_scheduler_kwargs", "{foo", "is not JSON (Expecting property name"),
    ("lr_scheduler_kwargs", "[1]", "is not a JSON object: a string here must be a JSON object"),
    ("lr_scheduler_kwargs", "foo=1", "is not JSON"),
    ("accelerator_config", "{oops", "is not JSON"),
    ("activation_checkpointing_kwargs", "{oops", "is not JSON"),
    ("optim_args", "garbage", "must be comma-separated `key=value` pairs ('garbage' is not one)"),
    ("optim_args", "a=1,b", "must be comma-separated `key=value` pairs ('b' is not one)"),
    ("debug", "bogus", "names 'bogus', not one of 'underflow_overflow', 'tpu_metrics_debug'"),
    ("debug", "underflow_overflow tpu_metrics_debug", "(a string is one of them; several: a list)"),
    ("debug", "", "names ''"),
    ("debug", ["underflow_overflow", "bogus"], "names 'bogus'"),
    ("output_dir", "", "is empty: it must name the folder the run writes"),
]
ACCEPTED = [  # the same fields at values TRL and transformers take
    ("loss_type", "grpo"), ("importance_sampling_level", "sequence"), ("scale_rewards", "batch"),
    ("multi_objective_aggregation", "normalize_then_sum"), ("include_num_input_tokens_seen", True),
    ("include_num_input_tokens_seen", "no"), ("include_num_input_tokens_seen", "Yes"),
    ("torch_compile_backend", "inductor"),
    ("cache_implementation", "static"), ("report_to", ["none"]), ("report_to", "all"), ("reward_weights", [2.0]),
    ("lr_scheduler_kwargs", {"last_epoch": -1}), ("lr_scheduler_kwargs", '{"last_epoch": -1}'),
    ("optim_args", "betas=0.9,weight_decay=0.01"), ("optim_args", ""), ("debug", "underflow_overflow"),
    ("debug", ["underflow_overflow", "tpu_metrics_debug"]), ("output_dir", "runs/x"),
]  # fmt: skip


def _problems(values: dict):
    try:
        parse_recipe({**DEMO, **values})
    except CurriculumError as error:
        return error.problems
    return []


@pytest.mark.parametrize(("key", "value", "rule"), PURE, ids=lambda v: str(v)[:30])
def test_a_bad_value_is_one_problem_naming_key_value_rule_and_fix(key, value, rule):
    (problem,) = _problems({key: value})
    assert (problem.key, problem.value) == (key, value) and rule in problem.rule and problem.fix


@pytest.mark.parametrize(("key", "value"), ACCEPTED, ids=lambda v: str(v)[:30])
def test_the_values_trl_takes_pass(key, value):
    assert _problems({key: value}) == []


@pytest.mark.parametrize(("scheduler", "kwargs", "refused"), [
    ("cosine", {"num_cycles": 2}, None), ("cosine", {"min_lr_rate": 0.1}, "'min_lr_rate'"),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1, "num_cycles": 1}, None),
    ("warmup_stable_decay", {"num_decay_steps": 5, "num_warmup_steps": 2}, "'num_warmup_steps'"),  # get_scheduler's
    ("reduce_lr_on_plateau", {"patience": 3}, None), ("reduce_lr_on_plateau", {"patiense": 3}, "'patiense'"),
    ("constant", {"anything": 1}, None),  # get_scheduler passes none of them to the constant schedules
])  # fmt: skip
def test_scheduler_keywords(scheduler, kwargs, refused):
    evaluates = {"eval_strategy": "steps", "eval_steps": 10} if scheduler == "reduce_lr_on_plateau" else {}
    problems = _problems({"lr_scheduler_type": scheduler, "lr_scheduler_kwargs": kwargs, **evaluates})
    assert [p.key for p in problems] == (["lr_scheduler_kwargs"] if refused else [])
    assert refused is None or refused in problems[0].rule and f"`{scheduler}` scheduler" in problems[0].rule


def test_bool_words_are_transformers_string_to_bool():
    from transformers.hf_argparser import string_to_bool

    from grpo_curriculum.config.trl_ranges import BOOL_WORDS

    assert [string_to_bool(word.upper()) for word in BOOL_WORDS] == [True] * 5 + [False] * 5
    with pytest.raises(Exception, match="Truthy value expected"):
        string_to_bool("non_padding")


def test_compared_constants_reads_the_comparisons_of_the_fields():
    source = '''
if self.loss_type == "a" or args.loss_type in ["b", "c"]:
    pass
elif self.args.loss_type != "d" and other == "x" and self.level not in ("t", "s"):
    pass
if "e" == self.loss_type and self.unrelated == "y" and loss_type == "z":
    self.loss_type = "w"
'''
    assert compared_constants(source, ["loss_type", "level", "nothing"]) == {
        "loss_type": ["a", "b", "c", "d", "e"], "level": ["t", "s"], "nothing": []}


def _environment(values: dict, monkeypatch=None):
    recipe = parse_recipe({**DEMO, **values})
    geometry = run_geometry(recipe)
    return environment.environment_problems(recipe, geometry, starting_num_generations(recipe, geometry))


def test_environment_dataset_and_files(tmp_path):
    assert _environment({}) == []
    (problem,) = _environment({"dataset_num_prompts": 7})  # 16 completions at G 2: 8 prompts a round
    assert problem.key == "dataset_num_prompts" and "takes 8 prompts" in problem.rule
    assert "256" in problem.fix and _environment({"dataset_num_prompts": 8}) == []
    stages = {"stages": [{"num_generations": 4, "temperature": 1.0, "until_fraction": 0.5},
                         {"num_generations": 2, "temperature": 1.0}]}  # fmt: skip
    (problem,) = _environment({"dataset_num_prompts": 3, "per_device_train_batch_size": 8, "curriculum": stages})
    assert "a round of 8 completions at stage 1 takes 4 prompts" in problem.rule  # the loader (G 4) takes only 2
    file = tmp_path / "config.json"
    file.write_text("{}")
    key = "accelerator_config"  # (a `deepspeed` file is read with its config: config/engines.py, test_engines.py)
    assert _environment({key: str(file)}) == [] and _environment({key: '{"a": 1}'}) == []
    for path, says in ((tmp_path / "missing.json", "names no file"), (tmp_path, "names a folder")):
        (problem,) = _environment({key: str(path)})
        assert (problem.key, problem.value) == (key, str(path)) and says in problem.rule


def test_environment_packages_hub_and_tf32(monkeypatch):
    import socket

    from huggingface_hub import constants

    monkeypatch.setattr(environment.importlib.util, "find_spec", lambda name: None)
    (problem,) = _environment({"use_liger_kernel": True})
    assert problem.key == "use_liger_kernel" and "needs `liger_kernel`" in problem.rule
    monkeypatch.setattr(environment.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(environment.importlib.metadata, "version", lambda name: "0.2.9")
    assert "0.3 or later" in _environment({"use_liger_kernel": True})[0].rule
    monkeypatch.setattr(environment.importlib.metadata, "version", lambda name: "0.6.1")
    assert _environment({"use_liger_kernel": True}) == []

    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "HF_HUB_OFFLINE is set" in _environment({"push_to_hub": True})[0].rule
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    assert "needs a Hugging Face token" in _environment({"push_to_hub": True})[0].rule

    def unreachable(address, timeout):
        raise OSError(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    (problem,) = _environment({"push_to_hub": True, "hub_token": "hf_x"})
    assert "huggingface.co:443 cannot be reached from here (Name or service not known)" in problem.rule
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: io.BytesIO())
    assert _environment({"push_to_hub": True, "hub_token": "hf_x"}) == []

    monkeypatch.setattr(environment, "_tf32_available", lambda: False)
    assert "Ampere" in _environment({"tf32": True})[0].rule and _environment({"tf32": False}) == []
    monkeypatch.setattr(environment, "_tf32_available", lambda: True)
    assert _environment({"tf32": True}) == []


def _run(argv: list[str]) -> tuple[object, str]:
    from grpo_curriculum.cli.main import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except BaseException as error:  # noqa: BLE001 - a traceback is the failure this test looks for
        return "traceback", f"{type(error).__name__}: {error}"
    return code, err.getvalue()


END_TO_END = [(key, value) for key, value, _ in PURE] + [
    ("dataset_num_prompts", 1), ("deepspeed", "/nonexistent/ds.json"), ("accelerator_config", "/nonexistent/a.json"),
    ("use_liger_kernel", True), ("push_to_hub", True), ("tf32", True)]  # fmt: skip


def test_check_and_train_give_one_verdict_before_any_model_loads(tmp_path, monkeypatch):
    """Every value: exit status 2 from both, the same one problem line naming the key, no traceback, no folder."""
    import importlib.util

    from huggingface_hub import constants

    import grpo_curriculum.cli.build as run

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # push_to_hub: the same verdict with or without a network
    monkeypatch.setattr(run, "build_run", lambda *args, **kwargs: pytest.fail("a model was built"))
    skip = {"use_liger_kernel"} if importlib.util.find_spec("liger_kernel") else set()
    skip |= {"tf32"} if environment._tf32_available() else set()  # an Ampere GPU takes it
    failures = []
    for i, (key, value) in enumerate(case for case in END_TO_END if case[0] not in skip):
        recipe = tmp_path / f"r{i}.yaml"
        recipe.write_text(yaml.safe_dump({**DEMO, key: value}))
        never = tmp_path / f"never{i}"
        (check, check_err), (train, train_err) = (_run(["check", str(recipe)]), _run(
            ["train", str(recipe), *(["--output_dir", str(never)] if key != "output_dir" else [])]))
        lines = [[line for line in err.splitlines() if line.startswith("  - ")] for err in (check_err, train_err)]
        if (check, train) != (2, 2) or lines[0] != lines[1] or len(lines[0]) != 1 or \
                not lines[0][0].startswith(f"  - {key} = ") or "Traceback" in check_err + train_err or never.exists():
            failures.append(f"{key}={value!r}: check {check} {check_err[-300:]!r}, train {train} {train_err[-300:]!r}")
    assert not failures, "\n".join(failures)
