"""
What `train` (and `demo`, `sweep`) check and set for this launch before anything is built or written: the recipe
against the world size the process was launched with and the libraries it asks for ([`validate_for_launch`]), the
launcher's variables, the command line's unused overrides, and the torch thread count.
"""

from __future__ import annotations

import importlib.util
import os

from ..config.recipe import BUILTIN, TINY_MODEL, starting_num_generations
from ..config.trainers import ASYNC
from ..core.errors import Problem, raise_if_any

REPORTERS = {  # `report_to` integrations of transformers: the packages it needs (any one) and how to install them
    "wandb": (("wandb",), "pip install 'wandb>=0.19'"),  # the `wandb` extra's pin (no release to install it from)
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install tensorboard"),
    **{name: ((name,), f"pip install {name}") for name in ("trackio", "mlflow", "comet_ml", "clearml", "swanlab",
                                                            "dvclive", "codecarbon")},
}


OPTIMIZER_PACKAGES = {  # `optim` values transformers builds from another package (import name, pip name)
    **{name: ("bitsandbytes", "bitsandbytes") for name in (
        "ademamix", "adamw_bnb_8bit", "adamw_8bit", "ademamix_8bit", "lion_8bit", "lion_32bit", "paged_adamw_32bit",
        "paged_adamw_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit",
        "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit")},
    **{name: ("galore_torch", "galore-torch") for name in (
        "galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
        "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise")},
    **{name: ("schedulefree", "schedulefree") for name in (
        "schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd")},
    **{name: ("apollo_torch", "apollo-torch") for name in ("apollo_adamw", "apollo_adamw_layerwise")},
    **{name: ("lomo_optim", "lomo-optim") for name in ("lomo", "adalomo")},
    **{name: ("torchao", "torchao") for name in ("adamw_torch_4bit", "adamw_torch_8bit")},
    "adamw_torch_xla": ("torch_xla", "torch_xla"), "adamw_torch_npu_fused": ("torch_npu", "torch_npu"),
    "adamw_anyprecision": ("torchdistx", "torchdistx"), "grokadamw": ("grokadamw", "grokadamw"),
    "stable_adamw": ("optimi", "torch-optimi"),
}


ASYNC_GEOMETRY = "the asynchronous trainer (samples from its rollout queue; no generation batch)"

NOT_ROUTED = {  # ScriptArguments fields TRL's GRPO script does not use either
    "ignore_bias_buffers": "it only applies to DDP with bias buffers in TRL's other scripts; GRPO training ignores it",
}


def validate_for_launch(recipe) -> None:
    """
    Check `recipe` for this launch before anything is built or written: every stage (and the eval G) against the world
    size this process was launched with (`WORLD_SIZE`, set by `torchrun` and `accelerate launch`; 1 otherwise), the
    libraries the recipe asks for (vLLM, PEFT, bitsandbytes, the `report_to` trackers) and the fields a GRPO run
    cannot use, and what the recipe needs from this machine ([`~config.environment.environment_problems`], which
    `check` runs too).

    Raises:
        [`CurriculumError`]: naming the key, the value, the rule and the fix of every problem; a [`GeometryError`]
        when the only problems are G values the geometry does not take.
    """
    from ..config.environment import environment_problems
    from ..core.errors import GeometryError

    geometry = launch_geometry(recipe)  # (`None` for the asynchronous trainer: no generation batch)
    misfits = [] if geometry is None else (recipe.curriculum.geometry_problems(geometry, key="curriculum.stages") +
                                           geometry.eval_problems())
    problems = []
    needs = [("use_vllm", recipe.training.get("use_vllm"), "vllm", "install it on a CUDA machine "
              "(`pip install 'vllm>=0.10'`, the `vllm` extra's pin), or set `use_vllm: false`"),
             ("use_peft", recipe.model.get("use_peft"), "peft", "`pip install peft`, or set `use_peft: false`"),
             ("deepspeed", recipe.training.get("deepspeed"), "deepspeed", "`DS_BUILD_OPS=0 pip install deepspeed` "
              "(its ops build when first used; docs/distributed.md), or remove `deepspeed`"),
             *((key, recipe.model.get(key), "bitsandbytes", f"`pip install bitsandbytes` (CUDA), or set `{key}: "
                "false`") for key in ("load_in_4bit", "load_in_8bit")),
             ("trainer", recipe.trainer if recipe.trainer == ASYNC else None, "vllm", "install vLLM where the trainer "
              "runs (TRL's weight transfer to the vLLM server imports it; docs/async.md), or use `trainer: grpo`")]
    optim = recipe.training.get("optim")
    if optim in OPTIMIZER_PACKAGES:
        package, pip_name = OPTIMIZER_PACKAGES[optim]
        needs.append(("optim", optim, package, f"`pip install {pip_name}`, or use `optim: adamw_torch`"))
    report_to = recipe.training.get("report_to")
    for name in [report_to] if isinstance(report_to, str) else report_to or []:
        packages, install = REPORTERS.get(name, ((), None))
        if packages and not any(importlib.util.find_spec(package) for package in packages):
            needs.append(("report_to", report_to, packages[0], f"`{install}`, or leave `{name}` out of `report_to` "
                          "(`--report_to none`: no tracking)"))
    for key, wanted, package, fix in needs:
        if wanted and importlib.util.find_spec(package) is None:
            problems.append(Problem(key, wanted, f"needs `{package}`, which is not installed in this environment",
                                    fix))
    problems += trl_device_problems(recipe)
    fsdp = recipe.training.get("fsdp")
    if fsdp and "LOCAL_RANK" not in os.environ and "ACCELERATE_USE_FSDP" not in os.environ:
        problems.append(Problem("fsdp", fsdp, "needs a distributed launch: transformers refuses FSDP in a process not "
                                "started by `accelerate launch` or `torchrun` (\"Using fsdp only works in distributed "
                                "training\")", "launch with `accelerate launch --config_file examples/distributed/"
                                "accelerate_fsdp2.yaml -m grpo_curriculum train ...` or `torchrun "
                                "--nproc_per_node N -m grpo_curriculum train ...`, or remove `fsdp`"))
    problems += environment_problems(recipe, geometry, 0 if geometry is None else
                                     starting_num_generations(recipe, geometry))
    for key, why in NOT_ROUTED.items():
        if key in recipe.script:
            problems.append(Problem(key, recipe.script[key], f"is not supported: {why}", f"remove `{key}`"))
    if recipe.script.get("dataset_streaming") and recipe.dataset_name.startswith(BUILTIN):
        problems.append(Problem("dataset_streaming", True, f"only applies to datasets loaded with `datasets` (not "
                                f"{recipe.dataset_name})", "remove `dataset_streaming`"))  # fmt: skip
    context = f"{recipe.path}: {ASYNC_GEOMETRY if geometry is None else geometry.describe()}"
    raise_if_any(problems and problems + misfits, context)
    if misfits:  # only misfits: the recipe is well-formed, and `check` says INVALID for it (exit status 1)
        raise GeometryError(misfits, context)


def trl_device_problems(recipe) -> list[Problem]:
    """TRL 1.15 on a machine where it cannot train (see [`~compat.cpu_trl_problem`]), said before any model loads."""
    import importlib.metadata

    from ..compat import cpu_trl_problem

    try:
        version = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return []
    if cpu_trl_problem(version, accelerator=False) is None:  # any other release: torch is not imported for this
        return []
    import torch

    accelerator = not recipe.training.get("use_cpu") and (
        torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()))
    why = cpu_trl_problem(version, accelerator)
    return [Problem("trl", version, why, "install TRL 1.16 or 1.14 in this environment")] if why else []


LAUNCH_VARIABLES = {  # set by `torchrun` and `accelerate launch`: (lowest, highest) value
    "WORLD_SIZE": (1, 1 << 20), "RANK": (0, (1 << 20) - 1), "LOCAL_WORLD_SIZE": (1, 1 << 20),
    "LOCAL_RANK": (0, (1 << 20) - 1), "NODE_RANK": (0, (1 << 20) - 1), "MASTER_PORT": (1, 65535),
}


def launch_problems(environ=os.environ) -> list[Problem]:
    """
    The launcher's variables ([`LAUNCH_VARIABLES`]) that are not integers in range, or a rank not below its world size:
    a hand-set or mistyped `WORLD_SIZE=abc` is named rather than ending in `int()`'s traceback.
    """
    values, problems = {}, []
    for name, (low, high) in LAUNCH_VARIABLES.items():
        text = environ.get(name)
        if text is None:
            continue
        try:
            values[name] = int(text.strip())
        except ValueError:
            values[name] = None
        if values[name] is None or not low <= values[name] <= high:
            values[name] = None
            problems.append(Problem(name, text, f"must be an integer from {low} to {high} (a launcher's variable, "
                                    "set by `torchrun` and `accelerate launch`)", f"unset it (`unset {name}`) for one "
                                    "process, or let the launcher set it"))  # fmt: skip
    for rank, size in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if values.get(rank) is not None and values.get(size) is not None and values[rank] >= values[size]:
            problems.append(Problem(rank, environ[rank], f"must be below {size} ({values[size]})",
                                    f"unset {rank} and {size} for one process, or let the launcher set them"))
    return problems


def launch_geometry(recipe):
    """The recipe's batch geometry on the processes this one was launched with (`WORLD_SIZE`; 1 otherwise); `None`
    for `trainer: async_grpo`, which has no generation batch (its rollout worker samples group by group)."""
    from ..config.recipe import run_geometry

    raise_if_any(launch_problems(), "the launch environment")
    if recipe.trainer == ASYNC:
        return None
    return run_geometry(recipe, num_processes=int(os.environ.get("WORLD_SIZE", "1")))


def vllm_server_problems(recipe) -> list[Problem]:
    """
    `trainer: async_grpo`: the vLLM server at `vllm_server_base_url`, waited for as TRL's trainer waits for it (up to
    `vllm_server_timeout` seconds), before any model loads or any folder is written: a server that never answers is one
    problem naming the URL and how to start one, not a traceback after the model has loaded.
    """
    if recipe.trainer != ASYNC:
        return []
    import sys

    from ..config.trl_fields import trl_fields
    from ..training.async_grpo import vllm_server_unready

    fields = trl_fields(ASYNC)
    url, timeout = (recipe.training.get(key, fields[key]["default"]) for key in ("vllm_server_base_url",
                                                                                 "vllm_server_timeout"))
    print(f"grpo-curriculum train: waiting for the vLLM server at {url} (up to {timeout:g} s: vllm_server_timeout)",
          file=sys.stderr, flush=True)
    why = vllm_server_unready(url, timeout)
    if why is None:
        return []
    return [Problem("vllm_server_base_url", url, f"has no vLLM server answering (GET /health): {why}",
                    "start one serving the recipe's model first, e.g. `trl vllm-serve --model MODEL --host 127.0.0.1 "
                    "--port 8000` (docs/async.md), or set `vllm_server_base_url` to where it runs")]


def synchronous_only(recipe, command: str) -> None:
    """Refuse a recipe of `trainer: async_grpo` in a command that runs the synchronous trainers only (`demo`,
    `sweep`): before anything is built or written."""
    if recipe.trainer == ASYNC:
        raise_if_any([Problem("trainer", recipe.trainer, f"is not supported by `grpo-curriculum {command}` (it "
                              "trains the synchronous GRPOTrainer and RLOOTrainer only)",
                              f"train it with `grpo-curriculum train {recipe.path}`")], f"recipe {recipe.path}")


def unused_override_problems(recipe, given: dict) -> list:
    """
    `--num_generations` and `--temperature` on `train`'s command line when the recipe has a `curriculum:`: its stages
    set G and the temperature, so the flag would change nothing (refused rather than ignored). Without a curriculum
    they are the run's one stage; a per-prompt first stage starts at the top-level `num_generations` (see
    [`~config.recipe.starting_num_generations`]), so that flag is used.
    """
    if "curriculum" not in recipe.raw:
        return []
    first = recipe.curriculum.stages[0]
    used = {"num_generations"} if first.adaptive is not None and first.adaptive.per_prompt else set()
    return [Problem(f"--{key}", given[key], f"is not used: the recipe's curriculum sets {what} (each stage's `{key}`)",
                    f"change `curriculum.stages[N].{key}` in the recipe (a flag cannot set a stage's), or remove "
                    f"`--{key}`" + ("; `grpo-curriculum sweep RECIPE --num-generations G` trains static G arms"
                                     if key == "num_generations" else ""))
            for key, what in (("num_generations", "G"), ("temperature", "the sampling temperature"))
            if key in given and key not in used]


def torch_threads(recipe, environ=os.environ, cpus: int | None = None, load: float | None = None,
                  default: int | None = None) -> tuple[int | None, str]:
    """
    The torch thread count `train` and `demo` set, and why.

    The built-in tiny model (2 layers, hidden size 32) gains nothing from intra-op threads: it runs on one. Another
    model gets the CPUs the machine has free (CPUs minus the 1-minute load average, shared among the processes launched
    on it), at most torch's default (one per physical core): more threads than free CPUs oversubscribe them, which on
    a busy machine makes every step several times slower. `OMP_NUM_THREADS` in the environment keeps the user's count.

    Args:
        recipe ([`Recipe`]): The recipe to run.
        environ (`Mapping[str, str]`, *optional*): The environment (default: `os.environ`).
        cpus (`int`, *optional*): CPUs this process may use (default: its affinity mask).
        load (`float`, *optional*): The 1-minute load average (default: `os.getloadavg()`).
        default (`int`, *optional*): torch's default thread count (default: `torch.get_num_threads()`).

    Returns:
        `tuple[int | None, str]`: The number of threads to set (`None`: keep the current count), and the reason.
    """
    if "OMP_NUM_THREADS" in environ:
        return None, "OMP_NUM_THREADS"
    if recipe.model_name_or_path == TINY_MODEL:
        return 1, "the built-in tiny model runs fastest on one; set OMP_NUM_THREADS to choose"
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if default is None:
        import torch

        default = torch.get_num_threads()
    local = max(1, int(environ.get("LOCAL_WORLD_SIZE", "1")))
    free = max(1, int(cpus - load + 0.5))
    threads = max(1, min(default, free) // local)
    return threads, (f"{cpus} CPUs, load average {load:.1f}: {free} free, at most torch's default {default}"
                     + (f", shared by {local} processes" if local > 1 else "") + "; set OMP_NUM_THREADS to choose")


def set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)

