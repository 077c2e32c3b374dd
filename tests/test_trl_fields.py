"""The snapshot of TRL's config fields: what the installed TRL generates, read without importing TRL, else live."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_curriculum.config import trl_fields as module
from grpo_curriculum.config.trl_fields import SNAPSHOT, describe_trl, main, render, trl_fields

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_snapshot_is_what_the_installed_trl_generates():
    """A TRL (or transformers) upgrade fails here until `python -m grpo_curriculum.config.trl_fields` rewrites it."""
    assert render(describe_trl()) == SNAPSHOT.read_text(encoding="utf-8")


def test_make_test_installs_the_releases_the_snapshot_is_generated_from():
    """`make test` pins TRL and transformers (tests/constraints.txt): a release on the registry newer than the
    snapshot's turned a fresh clone's CI red (transformers 5.25.0 against a 5.24.0 snapshot) with no change at all."""
    import json
    import re

    pins = dict(re.findall(r"^(trl|transformers)==(\S+)$", (ROOT / "tests" / "constraints.txt").read_text(), re.M))
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert pins == {"trl": snapshot["trl"], "transformers": snapshot["transformers"]}


def test_snapshot_is_read_without_importing_trl():
    code = ("import sys; from grpo_curriculum.config.trl_fields import trl_fields; fields = trl_fields(); "
            "assert fields['per_device_train_batch_size'] == {'owner': 'GRPOConfig', 'type': ['int'], 'default': 8}; "
            "heavy = {'trl', 'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_other_versions_introspect_the_live_classes(monkeypatch):
    monkeypatch.setattr(module, "installed_version", lambda package: "0.0.0")
    trl_fields.cache_clear()
    try:
        live, live_rloo = trl_fields(), trl_fields("rloo")
    finally:
        trl_fields.cache_clear()
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert "trl" in sys.modules and live == snapshot["fields"] and live_rloo == snapshot["rloo_fields"]


def test_regenerate_and_check(tmp_path, monkeypatch, capsys):
    target = tmp_path / "trl_fields.json"
    monkeypatch.setattr(module, "SNAPSHOT", target)
    assert main([]) == 0 and target.read_text() == SNAPSHOT.read_text()
    assert main(["--check"]) == 0 and "up to date" in capsys.readouterr().out
    target.write_text(target.read_text().replace('"default": 8,', '"default": 4,', 1))
    assert main(["--check"]) == 1 and "differs from the installed TRL" in capsys.readouterr().out


@pytest.mark.parametrize(
    "trainer, name, owner, types, default",
    [
        ("grpo", "eval_strategy", "GRPOConfig", [{"choice": ["no", "steps", "epoch"]}], "no"),  # an enum | str
        ("grpo", "report_to", "GRPOConfig", ["null", "str", "list[str]"], "none"),
        ("grpo", "num_generations", "GRPOConfig", ["int", "null"], 8),
        ("grpo", "beta", "GRPOConfig", ["float"], 0.0),
        ("grpo", "accelerator_config", "GRPOConfig", ["dict", "str", "null"], None),
        ("grpo", "dtype", "ModelConfig", [{"choice": ["auto", "bfloat16", "float16", "float32"]}, "null"], "float32"),
        ("grpo", "dataset_train_split", "ScriptArguments", ["str"], "train"),
        ("rloo", "num_generations", "RLOOConfig", ["int", "null"], 2),  # RLOOConfig's own defaults
        ("rloo", "beta", "RLOOConfig", ["float"], 0.05),
        ("rloo", "normalize_advantages", "RLOOConfig", ["bool"], False),
        ("rloo", "reward_clip_range", "RLOOConfig", ["list[float]", "null"], None),  # `tuple[float, float] | None`
        ("rloo", "eval_strategy", "RLOOConfig", [{"choice": ["no", "steps", "epoch"]}], "no"),
        ("rloo", "dtype", "ModelConfig", [{"choice": ["auto", "bfloat16", "float16", "float32"]}, "null"], "float32"),
    ],
)
def test_field_types(trainer, name, owner, types, default):
    assert trl_fields(trainer)[name] == {"owner": owner, "type": types, "default": default}


def test_each_trainer_has_only_its_config_class_fields():
    """GRPO's loss options are not RLOOConfig fields, RLOO's are not GRPOConfig's; the shared ones are both's."""
    grpo, rloo = trl_fields("grpo"), trl_fields("rloo")
    assert {"loss_type", "scale_rewards", "delta"} <= set(grpo) - set(rloo)
    assert set(rloo) - set(grpo) == {"normalize_advantages", "reward_clip_range"}
    assert all(spec["owner"] != "GRPOConfig" for spec in rloo.values())
    assert trl_fields() is grpo and rloo["learning_rate"]["owner"] == "RLOOConfig"


def test_a_renamed_field_reads_as_the_installed_transformers_names_it(monkeypatch):
    """
    transformers 5.23 renamed `gradient_checkpointing` to `activation_checkpointing`: the shipped recipes' new name
    reads as the old one on an older transformers (4.57 to 5.22, whose fields lack it), and as itself on a newer one.
    """
    from grpo_curriculum.config import recipe as recipe_module
    from grpo_curriculum.config.recipe import load_recipe
    from grpo_curriculum.config.trl_fields import field_name

    fields = trl_fields()
    renamed = "activation_checkpointing" in fields
    assert field_name("activation_checkpointing", fields) == ("activation_checkpointing" if renamed
                                                              else "gradient_checkpointing")  # fmt: skip
    assert load_recipe("demo").training[field_name("activation_checkpointing", fields)] is False
    older = {name: spec for name, spec in fields.items() if not name.startswith("activation_checkpointing")}
    assert field_name("activation_checkpointing_kwargs", older) == "gradient_checkpointing_kwargs"
    assert field_name("per_device_train_batch_size", older) == "per_device_train_batch_size"
    monkeypatch.setattr(recipe_module, "trl_fields", lambda trainer="grpo": older)
    recipe = load_recipe("demo")
    assert recipe.training["gradient_checkpointing"] is False and "activation_checkpointing" not in recipe.raw
