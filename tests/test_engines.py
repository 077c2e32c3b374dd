"""
Engines beyond DDP: `check` and `train` agree on every `fsdp` / `fsdp_config` / `deepspeed` form transformers takes,
and `grpo-curriculum train` under real FSDP2 (two CPU processes, gloo; tests/fsdp_cpu.py's test-only shim of
accelerate's device check) through stages of every kind (static, adaptive G, per-prompt G, top-up, dynamic sampling)
switches on both ranks together, checkpoints, saves a final model `from_pretrained` loads, and resumes exactly as two "nodes" (two torchrun launchers on 127.0.0.1, `--nnodes 2 --nproc_per_node 1`).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.config.recipe import load_recipe
from grpo_curriculum.core.errors import CurriculumError

ROOT = Path(__file__).resolve().parent.parent

# (overrides of the demo recipe, whether transformers and accelerate take them)
FSDP_FORMS = [
    ({"fsdp": True}, True),  # transformers 5's form
    ({"fsdp": False}, True),
    ({"fsdp": "full_shard auto_wrap"}, True),  # the deprecated string
    ({"fsdp": ["full_shard", "offload"]}, True),  # the deprecated list
    ({"fsdp": True, "fsdp_config": {"fsdp_version": 2, "fsdp_state_dict_type": "SHARDED_STATE_DICT"}}, True),
    ({"fsdp": True, "fsdp_config": {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 10}}, True),
    ({"fsdp": False, "fsdp_config": "missing.json"}, True),  # read only with FSDP on
    ({"fsdp": "bogus"}, False),
    ({"fsdp": "true"}, False),  # `--fsdp true` on a command line: the string (`--fsdp` alone is `true`)
    ({"fsdp": "hybrid_shard"}, False),  # FSDP1 only
    ({"fsdp": True, "fsdp_config": {"version": 2, "state_dict_type": "LOCAL_STATE_DICT"}}, False),
    ({"fsdp": True, "fsdp_config": {"auto_wrap_policy": "EVERY_LAYER"}}, False),
    ({"fsdp": True, "fsdp_config": {"reshard_after_forward": "maybe"}}, False),
    ({"fsdp": True, "fsdp_config": "missing.json"}, False),
]


def _transformers_takes(overrides: dict, tmp_path) -> bool:
    """Whether `GRPOConfig` and accelerate's FSDP plugin are built from these values without an error."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    from .conftest import grpo_args

    try:
        args = grpo_args(tmp_path, **overrides)
        if args.fsdp_plugin_args is not None:
            FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)
    except (ValueError, OSError):
        return False
    return True


@pytest.mark.parametrize("overrides, takes", FSDP_FORMS, ids=[str(o) for o, _ in FSDP_FORMS])
def test_check_and_transformers_agree_on_every_fsdp_form(overrides, takes, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `missing.json`: relative to the working directory, as transformers reads it
    assert _transformers_takes(dict(overrides), tmp_path) is takes
    if takes:
        assert load_recipe("demo", overrides).training.get("fsdp") == overrides["fsdp"]
        return
    with pytest.raises(CurriculumError) as error:
        load_recipe("demo", overrides)
    key = next(iter(overrides)) if len(overrides) == 1 else "fsdp_config"
    assert f"- {key}" in str(error.value) and "fix:" in str(error.value)


def test_fsdp_config_file_and_deepspeed_forms(tmp_path):
    fsdp_file, ds_file = tmp_path / "fsdp.json", tmp_path / "ds.json"
    fsdp_file.write_text(json.dumps({"fsdp_version": 2, "fsdp_state_dict_type": "FULL_STATE_DICT"}))
    ds_file.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    assert load_recipe("demo", {"fsdp": True, "fsdp_config": str(fsdp_file)}).training["fsdp"] is True
    for deepspeed in (str(ds_file), {"zero_optimization": {"stage": 2}}, '{"zero_optimization": {"stage": 1}}',
                      str(ROOT / "examples" / "distributed" / "zero3.json")):
        assert load_recipe("demo", {"deepspeed": deepspeed}).training["deepspeed"] == deepspeed
    (tmp_path / "list.json").write_text("[1]")
    for overrides, expected in [
        ({"deepspeed": "nowhere.json"}, "deepspeed = 'nowhere.json': is neither an existing file nor JSON"),
        ({"deepspeed": {"zero_optimization": {"stage": 4}}}, "deepspeed.zero_optimization.stage = 4: must be 0, 1, 2"),
        ({"deepspeed": {"zero_optimization": {"stage": 2}}, "fsdp": True}, "cannot be combined with `fsdp`"),
        ({"fsdp": True, "fsdp_config": str(tmp_path / "list.json")}, "must hold a JSON object, not a list"),
        # TRL turns activation checkpointing on; transformers refuses it with FSDP's own under FSDP
        ({"fsdp": True, "fsdp_config": {"activation_checkpointing": True}, "activation_checkpointing": None},
         "fsdp_config.activation_checkpointing = True: cannot be combined"),
    ]:  # fmt: skip
        with pytest.raises(CurriculumError, match="fix:") as error:
            load_recipe("demo", overrides)
        assert expected in str(error.value)


def test_engine_constants_are_the_installed_libraries():
    from accelerate.utils.constants import FSDP2_STATE_DICT_TYPE, FSDP_AUTO_WRAP_POLICY, FSDP_STATE_DICT_TYPE
    from transformers.trainer_utils import FSDPOption

    from grpo_curriculum.config import engines

    assert set(engines.FSDP_OPTIONS) == {option.value for option in FSDPOption}
    assert list(engines.AUTO_WRAP_POLICIES) == FSDP_AUTO_WRAP_POLICY
    assert set(engines.STATE_DICT_TYPES[1]) == set(FSDP_STATE_DICT_TYPE)
    assert set(engines.STATE_DICT_TYPES[2]) == set(FSDP2_STATE_DICT_TYPE)


def test_check_warns_that_fsdp_on_cpu_trains_ddp(capsys, tmp_path):
    recipe = tmp_path / "fsdp.yaml"
    recipe.write_text((ROOT / "recipes" / "demo.yaml").read_text() + "fsdp: true\n")  # the demo has use_cpu: true
    assert main(["check", str(recipe)]) == 0
    assert "warning: fsdp with use_cpu: true trains plain DDP" in capsys.readouterr().out
    assert main(["check", "demo"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_train_refuses_deepspeed_when_it_is_not_installed(hide_package):
    from grpo_curriculum.cli.launch import validate_for_launch

    hide_package("deepspeed")  # installed or not
    with pytest.raises(CurriculumError, match="DS_BUILD_OPS=0 pip install deepspeed") as error:
        validate_for_launch(load_recipe("demo", {"deepspeed": {"zero_optimization": {"stage": 3}}}))
    assert "deepspeed = {'zero_optimization': {'stage': 3}}: needs `deepspeed`" in str(error.value)


def test_train_refuses_fsdp_without_a_distributed_launch(monkeypatch):
    """transformers refuses FSDP in a process no launcher started: `train` says so before building anything."""
    from grpo_curriculum.cli.launch import validate_for_launch

    for name in ("LOCAL_RANK", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CurriculumError, match="fix: launch with `accelerate launch --config_file") as error:
        validate_for_launch(load_recipe("demo", {"fsdp": True}))
    assert "fsdp = True: needs a distributed launch" in str(error.value)
    monkeypatch.setenv("LOCAL_RANK", "0")
    validate_for_launch(load_recipe("demo", {"fsdp": True}))


# --- real FSDP2 and ZeRO-3, two processes ----------------------------------------------------------------------------

RECIPE = """\
model_name_or_path: builtin:tiny
dataset_name: builtin:echo
dataset_num_prompts: 64
reward_funcs: [grpo_curriculum.demo.tasks:echo_reward]
use_cpu: true
bf16: false
activation_checkpointing: false
report_to: []
seed: 0
per_device_train_batch_size: 4   # 2 processes: generation batch 8, G 2 then 8 (groups spanning both processes)
max_completion_length: 4
learning_rate: 2.0e-3
max_steps: 12
logging_steps: 1
save_strategy: steps
save_steps: 2
curriculum:   # every kind of stage, two steps each
  stages:
    - {num_generations: 2, temperature: 0.7, until_step: 2}
    - {num_generations: 8, temperature: 1.2, until_step: 4}
    - {temperature: 1.0, until_step: 6, adaptive: {policy: success_rate, num_generations: [2, 4, 8], cooldown: 1,
                                                     target: 0.6, success_threshold: 0.5}}
    - {temperature: 1.0, until_step: 8, adaptive: {policy: per_prompt, num_generations: [2, 4, 8],
                                                     success_threshold: 0.5}}
    - {temperature: 1.0, until_step: 10, adaptive: {policy: top_up, num_generations: [2, 4]}}
    - {num_generations: 2, temperature: 1.0, dynamic_sampling: {max_rounds: 2}}
"""
# Sharded checkpoints (one shard a process): the final save switches to a whole-weight gather, the same collective as
# under FULL_STATE_DICT (the shipped config's), and the checkpoints need the documented consolidation step.
FSDP2 = "fsdp: true\nfsdp_config: {version: 2, state_dict_type: SHARDED_STATE_DICT}\n"
ZERO3 = f"deepspeed: {ROOT / 'examples' / 'distributed' / 'zero3.json'}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_and_resume(root: Path, engine: str, two_nodes: bool) -> dict:
    """
    Run A: `torchrun --nproc_per_node 2 tests/fsdp_cpu.py train` (the CLI's `main`, FSDP allowed on CPU) with the
    `engine` lines added to [`RECIPE`]: stages of every kind, a switch every two steps, a checkpoint every two steps. Run B resumes A's
    checkpoint-2 into a new folder: with `two_nodes`, as two launchers (`--nnodes 2 --nproc_per_node 1`, static
    rendezvous on 127.0.0.1), else as A was launched. Each process writes its records (tests/fsdp_cpu.py).
    """
    recipe = root / "recipe.yaml"
    recipe.write_text(RECIPE + engine)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    launcher = [sys.executable, "-m", "torch.distributed.run"]
    train = [str(ROOT / "tests" / "fsdp_cpu.py"), "train", str(recipe)]
    one_node = launcher + ["--nproc_per_node", "2", "--standalone"]
    runs = {}
    for name in ("a", "b"):
        (root / name).mkdir()
        command = train + ["--output_dir", str(root / name / "out")]
        if name == "a":
            commands = [one_node + command]
        else:
            command += ["--resume_from_checkpoint", str(root / "a" / "out" / "checkpoint-2")]
            nodes = ["--nnodes", "2", "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port",
                     str(_free_port())]  # fmt: skip
            commands = ([launcher + nodes + ["--node_rank", str(node)] + command for node in (0, 1)] if two_nodes
                        else [one_node + command])  # fmt: skip
        processes = [subprocess.Popen(command, env={**env, "FSDP_CPU_RECORD": str(root / name)}, cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for command in commands]  # fmt: skip
        outputs = [process.communicate(timeout=600) for process in processes]
        runs[name] = {"returncodes": [process.returncode for process in processes],
                      "stdout": [out for out, _ in outputs], "stderr": [err[-4000:] for _, err in outputs],
                      "out": root / name / "out",
                      "ranks": [json.loads(p.read_text()) if p.exists() else None
                                for p in (root / name / f"rank{r}.json" for r in range(2))]}  # fmt: skip
        if runs[name]["returncodes"] != [0] * len(commands):
            break
    return runs


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory):
    """FSDP2 (test-only shim): run A on one launcher, run B resuming it as two nodes."""
    return train_and_resume(tmp_path_factory.mktemp("fsdp"), FSDP2, two_nodes=True)


def _log(folder: Path) -> list[dict]:
    return [h for h in json.loads((folder / "trainer_state.json").read_text())["log_history"] if "loss" in h]


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def _checkpoint_weights(folder: Path) -> dict:
    """A checkpoint's model weights; an FSDP sharded one consolidated as docs/distributed.md says (`accelerate
    merge-weights`, here its function)."""
    if not (folder / "model.safetensors").exists():
        from accelerate.utils import merge_fsdp_weights

        merge_fsdp_weights(str(folder / "pytorch_model_fsdp_0"), str(folder.parent / "merged"))
        folder = folder.parent / "merged"
    return _weights(folder / "model.safetensors")


def check_switches_sharding_and_final_model(run: dict, engine: str) -> None:
    """Run A of [`train_and_resume`]: sharded on both ranks, switching together, a final model that loads."""
    import torch
    from transformers import AutoModelForCausalLM

    assert run["returncodes"] == [0], run["stderr"][0]
    assert f"engine: {engine}" in run["stdout"][0] and "warning: FSDP was requested" not in run["stderr"][0]
    ranks = run["ranks"]
    for rank in ranks:  # real sharding: each process holds half of the parameters
        assert rank["engine"] == engine and rank["sharded"] and rank["local"] < rank["full"]
    assert abs(ranks[0]["local"] + ranks[1]["local"] - ranks[0]["full"]) <= 2  # (ZeRO pads to an even split)
    # Both ranks: the same G and temperature at every round, the same switches, through every kind of stage.
    assert ranks[0]["rounds"] == ranks[1]["rounds"] and len(ranks[0]["rounds"]) == 12
    assert [(step, g, t) for step, g, t, _ in ranks[0]["rounds"][:4]] == [(0, 2, 0.7), (1, 2, 0.7), (2, 8, 1.2),
                                                                          (3, 8, 1.2)]  # fmt: skip
    assert ranks[0]["switches"] == ranks[1]["switches"]
    assert [s["to"]["stage"] for s in ranks[0]["switches"] if s["to"]["stage"] != s["from"]["stage"]] == [1, 2, 3, 4, 5]
    log = _log(run["out"])
    assert [h["curriculum/stage"] for h in log] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [h["curriculum/num_generations"] for h in log][:4] == [2, 2, 8, 8]
    # The final model (written by the first process after the gathering collective) loads, and is step 12's weights.
    out = run["out"]
    assert (out / "checkpoint-2" / "curriculum_state.json").exists() and (out / "checkpoint-12").is_dir()
    model = AutoModelForCausalLM.from_pretrained(out)
    final, checkpoint = _weights(out / "model.safetensors"), _checkpoint_weights(out / "checkpoint-12")
    assert final.keys() == checkpoint.keys() and all(torch.equal(final[k], checkpoint[k]) for k in final)
    assert sum(p.numel() for p in model.parameters()) == ranks[0]["full"]


def check_exact_resume(a: dict, b: dict) -> None:
    """Run B of [`train_and_resume`] (from A's checkpoint-2): steps 3-12 and the final model are A's, bit for bit."""
    import torch

    assert a["returncodes"] == [0], a["stderr"][0]
    assert set(b["returncodes"]) == {0}, b["stderr"]
    assert b["ranks"][0]["rounds"] == b["ranks"][1]["rounds"] == a["ranks"][0]["rounds"][2:]
    assert b["ranks"][0]["switches"] == b["ranks"][1]["switches"] == a["ranks"][0]["switches"]
    keys = ("step", "loss", "reward", "curriculum/num_generations", "curriculum/temperature")
    assert [[h[k] for k in keys] for h in _log(b["out"])] == [[h[k] for k in keys] for h in _log(a["out"])]
    final_a, final_b = _weights(a["out"] / "model.safetensors"), _weights(b["out"] / "model.safetensors")
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)


def test_fsdp2_train_switches_on_both_ranks_checkpoints_and_saves_a_loadable_model(fsdp_runs):
    check_switches_sharding_and_final_model(fsdp_runs["a"], "FSDP2 (SHARDED_STATE_DICT checkpoints)")
    assert (fsdp_runs["a"]["out"] / "checkpoint-12" / "pytorch_model_fsdp_0").is_dir()  # one shard a process


def test_two_nodes_resume_an_fsdp2_checkpoint_exactly(fsdp_runs):
    """Two launchers (one process each) resume run A's checkpoint-2."""
    a, b = fsdp_runs["a"], fsdp_runs["b"]
    check_exact_resume(a, b)
    # The first process of the first node writes the run; the other node prints nothing of it.
    assert "trained to step 12" in b["stdout"][0] and "trained to step" not in b["stdout"][1]


@pytest.mark.deepspeed
def test_zero3_train_switches_checkpoints_saves_and_resumes_exactly(tmp_path):
    """DeepSpeed ZeRO-3 (`make test-deepspeed`: installs DeepSpeed, whose CPU ops build on first use, minutes)."""
    pytest.importorskip("deepspeed")
    runs = train_and_resume(tmp_path, ZERO3, two_nodes=False)
    check_switches_sharding_and_final_model(runs["a"], "DeepSpeed ZeRO-3")
    check_exact_resume(runs["a"], runs["b"])
