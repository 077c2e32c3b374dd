"""The `train`, `demo` and `plot` commands: build a run from a recipe, train it, summarise and plot it."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from .errors import CurriculumError, Problem
from .recipe import BUILTIN, TINY_MODEL

logger = logging.getLogger("grpo_curriculum")

DEMO_RECIPE = Path(__file__).resolve().parent / "recipes" / "demo.yaml"  # shipped in the package (recipes/ links it)


# --- building a run ----------------------------------------------------------------------------------------------


def build_run(recipe):
    """
    Model (an instance for the built-in tiny model, else a name or path TRL loads), tokenizer, train and eval datasets
    and reward functions for a [`Recipe`], as TRL's `trl grpo` script builds them.
    """
    from .recipe import import_reward
    from .tasks import TASKS, build_model, build_tokenizer, warm_start

    seed = recipe.training.get("seed", 42)
    evaluates = recipe.training.get("eval_strategy", "no") != "no"
    if recipe.dataset_name.startswith(BUILTIN):
        make_dataset, _ = TASKS[recipe.dataset_name.removeprefix(BUILTIN)]
        dataset = make_dataset(recipe.dataset_num_prompts or 256, seed=seed)
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
    if recipe.model_name_or_path == TINY_MODEL:
        model, tokenizer = build_model(seed=seed), build_tokenizer()
        warm_start(model, tokenizer, dataset, steps=recipe.warm_start_steps, seed=seed)
    elif recipe.model_name_or_path.startswith(BUILTIN):  # a pretrained model fetched without the Hub
        from transformers import AutoTokenizer

        from .models import fetch_model

        model = str(fetch_model(recipe.model_name_or_path.removeprefix(BUILTIN)))  # a path: TRL loads it
        tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left", truncation_side="left")  # as TRL would
    else:
        model, tokenizer = recipe.model_name_or_path, None
    rewards = [import_reward(path) for path in recipe.reward_funcs]
    return model, tokenizer, dataset, eval_dataset, rewards


NOT_ROUTED = {  # ScriptArguments fields TRL's GRPO script does not use either
    "ignore_bias_buffers": "it only applies to DDP with bias buffers in TRL's other scripts; GRPO training ignores it",
}


def validate_for_launch(recipe) -> None:
    """
    Check `recipe` for this launch before anything is built or written: every stage against the world size this
    process was launched with (`WORLD_SIZE`, set by `torchrun` and `accelerate launch`; 1 otherwise), the libraries
    the recipe asks for (vLLM, PEFT, bitsandbytes) and the fields a GRPO run cannot use.

    Raises:
        [`CurriculumError`]: naming the key, the value, the rule and the fix of every problem.
    """
    from .errors import raise_if_any

    geometry = launch_geometry(recipe)
    problems = recipe.curriculum.geometry_problems(geometry, key="curriculum.stages")
    needs = [("use_vllm", recipe.training.get("use_vllm"), "vllm", "install it on a CUDA machine "
              "(`pip install 'grpo-curriculum[vllm]'`), or set `use_vllm: false`"),
             ("use_peft", recipe.model.get("use_peft"), "peft", "`pip install peft`, or set `use_peft: false`"),
             *((key, recipe.model.get(key), "bitsandbytes", f"`pip install bitsandbytes` (CUDA), or set `{key}: false`")
               for key in ("load_in_4bit", "load_in_8bit"))]  # fmt: skip
    for key, wanted, package, fix in needs:
        if wanted and importlib.util.find_spec(package) is None:
            problems.append(Problem(key, wanted, f"needs `{package}`, which is not installed in this environment", fix))
    for key, why in NOT_ROUTED.items():
        if key in recipe.script:
            problems.append(Problem(key, recipe.script[key], f"is not supported: {why}", f"remove `{key}`"))
    if recipe.script.get("dataset_streaming") and recipe.dataset_name.startswith(BUILTIN):
        problems.append(Problem("dataset_streaming", True, f"only applies to datasets loaded with `datasets` (not "
                                f"{recipe.dataset_name})", "remove `dataset_streaming`"))  # fmt: skip
    raise_if_any(problems, context=f"{recipe.path}: {geometry.describe()}")


def launch_geometry(recipe):
    """The recipe's batch geometry on the processes this one was launched with (`WORLD_SIZE`; 1 otherwise)."""
    from .recipe import geometry_of

    return geometry_of(recipe, num_processes=int(os.environ.get("WORLD_SIZE", "1")))


def grpo_config(recipe, output_dir: str | None = None):
    """
    `GRPOConfig` for the recipe. G and temperature start at the first stage's values (a per-prompt first stage: the
    recipe's `num_generations` if the generation batch takes it, else the largest candidate, or valid G, that it does:
    TRL checks it when the config is built and its data loader reads prompts by it).
    """
    from trl import GRPOConfig

    kwargs = dict(recipe.training)
    first = recipe.curriculum.stages[0]
    kwargs["num_generations"] = first.num_generations
    if first.adaptive is not None and first.adaptive.per_prompt:
        valid = launch_geometry(recipe).valid_num_generations()
        fitting = [g for g in first.adaptive.num_generations if g in valid] or valid
        given = recipe.training.get("num_generations")
        kwargs["num_generations"] = given if given in valid else fitting[-1]
    kwargs["temperature"] = first.temperature_at(0.0)
    kwargs.pop("resume_from_checkpoint", None)  # an argument of `train()` (`true` is not a path GRPOConfig takes)
    if "gradient_checkpointing" not in kwargs:  # TRL's default (on), under transformers 5's name: no FutureWarning
        kwargs.setdefault("activation_checkpointing", True)
    if output_dir is not None:
        kwargs["output_dir"] = output_dir
    return GRPOConfig(**kwargs)


def model_arguments(recipe, args, loads_model: bool) -> dict:
    """
    What `CurriculumGRPOTrainer` gets from the recipe's `ModelConfig` fields, as TRL's `trl grpo` script routes them:
    `peft_config` (LoRA) and, when TRL loads the model (`loads_model`: a name or path, not an instance), `args`'
    `model_init_kwargs` (revision, trust_remote_code, attn_implementation, dtype; the recipe's own `model_init_kwargs`
    on top) and `quantization_config`.
    """
    from trl import ModelConfig, get_peft_config, get_quantization_config

    model_args = ModelConfig(model_name_or_path=recipe.model_name_or_path, **recipe.model)
    if not loads_model:
        args.model_init_kwargs = None  # an instance: nothing to load
        return {"peft_config": get_peft_config(model_args)}
    kwargs = {"revision": model_args.model_revision, "trust_remote_code": args.trust_remote_code,
              "attn_implementation": model_args.attn_implementation, "dtype": model_args.dtype}  # fmt: skip
    args.model_init_kwargs = {**kwargs, **(args.model_init_kwargs or {})}
    return {"quantization_config": get_quantization_config(model_args), "peft_config": get_peft_config(model_args)}


def build_trainer(recipe, output_dir: str | None = None, extra_callbacks=()):
    from .callback import CurriculumCallback
    from .recipe import curriculum_options
    from .trainer import CurriculumGRPOTrainer

    args = grpo_config(recipe, output_dir)
    model, tokenizer, dataset, eval_dataset, rewards = build_run(recipe)
    routed = model_arguments(recipe, args, loads_model=isinstance(model, str))
    return CurriculumGRPOTrainer(
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


# --- progress and summary ------------------------------------------------------------------------------------------


def progress_callback():
    """A progress bar that shows the current G, temperature and reward."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class CurriculumProgress(TrainerCallback):
        bar = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.bar = tqdm(total=state.max_steps, dynamic_ncols=True, desc="train", file=sys.stdout)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.bar is None or not logs or "curriculum/num_generations" not in logs:
                return
            g = logs["curriculum/num_generations"]  # a mean over the log line's prompts: fractional when G varies
            postfix = {"G": f"{g:.3g}", "T": f"{logs['curriculum/temperature']:.2f}"}
            if logs.get("reward") is not None:
                postfix["reward"] = f"{logs['reward']:.3f}"
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(state.global_step - self.bar.n)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()

    return CurriculumProgress()


def stage_summary(log_history: list[dict], generation_batch_size: int, stages: list | None = None) -> list[dict]:
    """
    Per-stage rows from a run's `log_history`.

    Args:
        log_history (`list[dict]`):
            The Trainer's `state.log_history` (entries without a reward, such as switch records, are skipped).
        generation_batch_size (`int`):
            Completions per generation round, for completions per second.
        stages (`list[Stage]`, *optional*):
            The curriculum's stages: their names label the rows, and a per-prompt stage's G reads "per prompt".

    Returns:
        `list[dict]`: One row a stage: optimizer steps, G (each value logged; a per-prompt stage: the range of the
        prompts' G and their mean, see [`per_prompt_g`]), the temperature range, mean reward, mean zero-std fraction
        and completions per second (generation batch completions per logged step over TRL's `step_time`).
    """
    rows: dict[int, dict] = {}
    for entry in log_history:
        if "curriculum/stage" not in entry or "reward" not in entry:
            continue
        row = rows.setdefault(
            int(entry["curriculum/stage"]),
            {"steps": 0, "G": [], "T": [], "reward": [], "zero_std": [], "time": 0.0, "entries": []},
        )
        row["entries"].append(entry)
        row["steps"] += 1
        if entry.get("curriculum/num_generations") is not None:
            row["G"].append(entry["curriculum/num_generations"])
        row["T"].append(entry["curriculum/temperature"])
        if entry.get("reward") is not None:
            row["reward"].append(entry["reward"])
        if entry.get("frac_reward_zero_std") is not None:
            row["zero_std"].append(entry["frac_reward_zero_std"])
        row["time"] += entry.get("step_time") or 0.0
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
                "completions/s": row["steps"] * generation_batch_size / row["time"] if row["time"] else float("nan"),
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
    change (at the first step trained at the new setting), to `output` (PNG); return `output`.

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
    steps = [e["step"] for e in entries]
    series = [
        ("num_generations (G)", [e.get("curriculum/num_generations") for e in entries], "steps-post"),
        ("temperature", [e["curriculum/temperature"] for e in entries], "steps-post"),
        ("reward", [e.get("reward") for e in entries], "default"),
        ("zero-std group fraction", [e.get("frac_reward_zero_std") for e in entries], "default"),
    ]
    boundaries = switch_steps(log_history)
    figure, axes = plt.subplots(len(series), 1, figsize=(8, 8), sharex=True)
    for axis, (label, values, style) in zip(axes, series, strict=True):
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
    axes[-1].annotate("dashed: switches and stage changes (the first step at the new setting)", xy=(1, -0.35),
                      xycoords="axes fraction", ha="right", fontsize=7)  # fmt: skip
    figure.tight_layout()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def read_log_history(run_dir: str) -> list[dict]:
    path = Path(run_dir) / "trainer_state.json"
    if not path.is_file():
        candidates = sorted(Path(run_dir).glob("checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            raise FileNotFoundError(f"no trainer_state.json in {run_dir} (nor in a checkpoint-* folder below it)")
        path = candidates[-1]
    return json.loads(path.read_text())["log_history"]


# --- commands ------------------------------------------------------------------------------------------------------


def _overrides(args) -> dict:
    return dict(getattr(args, "overrides", None) or {})


def train_main(args) -> int:
    """`grpo-curriculum train RECIPE [--key value ...]`: run a recipe with `CurriculumGRPOTrainer`."""
    from .recipe import load_recipe

    recipe = load_recipe(args.recipe, overrides=_overrides(args))
    validate_for_launch(recipe)
    trainer = build_trainer(recipe)  # validates every stage against the real world size before any step
    trainer.train(resume_from_checkpoint=recipe.training.get("resume_from_checkpoint"))
    trainer.save_state()
    if trainer.accelerator.is_main_process:
        trainer.save_model()
    return 0


def demo_threads(recipe, environ=os.environ) -> tuple[int | None, str]:
    """
    The torch thread count `grpo-curriculum demo` sets, and why.

    The built-in tiny model (2 layers, hidden size 32) gains nothing from intra-op threads, and on a busy machine their
    oversubscription makes every step many times slower, so the demo runs it on one thread. `OMP_NUM_THREADS` in the
    environment, and any other model, keep the user's (or torch's default) count.

    Args:
        recipe ([`Recipe`]): The recipe the demo runs.
        environ (`Mapping[str, str]`, *optional*): The environment (default: `os.environ`).

    Returns:
        `tuple[int | None, str]`: The number of threads to set (`None`: keep the current count), and the reason.
    """
    if "OMP_NUM_THREADS" in environ:
        return None, "OMP_NUM_THREADS"
    if recipe.model_name_or_path == TINY_MODEL:
        return 1, "the built-in tiny model runs fastest on one; set OMP_NUM_THREADS to choose"
    return None, "torch's default; set OMP_NUM_THREADS to choose"


class _TqdmHandler(logging.Handler):
    """Log records written above the progress bar (`tqdm.write`) on standard output, so they never break it."""

    def emit(self, record):
        from tqdm.auto import tqdm

        tqdm.write(self.format(record), file=sys.stdout)


@contextlib.contextmanager
def _demo_output():
    """
    While the demo trains: `grpo_curriculum` INFO logs (the stages, each switch) on standard output above the
    progress bar, and only transformers errors. Restored afterwards.
    """
    from transformers.utils import logging as hf_logging

    from . import _trl

    handler, level, propagate = _TqdmHandler(), logger.level, logger.propagate
    handler.setFormatter(logging.Formatter("%(message)s"))
    hf_level = hf_logging.get_verbosity()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    hf_logging.set_verbosity_error()
    try:
        with _trl.hide_renamed_method_warnings():  # the demo only; the `train` command and the library show them
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        hf_logging.set_verbosity(hf_level)


def _plural(n: int, word: str, plural: str) -> str:
    return f"{n} {word if n == 1 else plural}"


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
    from .callback import SWITCHES_FILE, is_stage_change_only

    counts = per_prompt_g(log_history)
    per_prompt = f"\n{describe_per_prompt_g(counts)}" if counts else ""
    if not switches:
        if counts:
            return f"no switch of stage or temperature: the curriculum chose G per prompt{per_prompt}"
        return "no switch: the curriculum kept one setting"
    stage_only = sum(map(is_stage_change_only, switches))
    counts = _plural(len(switches) - stage_only, "switch", "switches")
    if stage_only:
        counts += " and " + _plural(stage_only, "stage change", "stage changes")
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
    run directory (`trainer_state.json`, `switches.jsonl`, `curriculum.png`). The run is written to `DIR.partial` and
    renamed to `DIR` once complete.
    """
    import torch
    from transformers import PrinterCallback

    from .recipe import load_recipe

    recipe_path = getattr(args, "recipe", None) or str(DEMO_RECIPE)
    overrides = {}
    if getattr(args, "max_steps", None):
        overrides["max_steps"] = args.max_steps
    recipe = load_recipe(recipe_path, overrides=overrides)
    validate_for_launch(recipe)
    require_matplotlib()  # before training: the run ends with its plot
    out = getattr(args, "out", None) or "runs/demo"
    recipe.training.update(disable_tqdm=True, logging_steps=1)
    threads, why = demo_threads(recipe)
    if threads is not None:
        torch.set_num_threads(threads)

    staging = f"{out}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    with _demo_output():
        trainer = build_trainer(recipe, output_dir=staging, extra_callbacks=[progress_callback()])
        trainer.remove_callback(PrinterCallback)  # the progress bar shows G, temperature and reward instead
        print(f"recipe: {recipe_path}")
        print(f"geometry: {_describe_geometry(trainer)}")
        print(f"torch threads: {torch.get_num_threads()} ({why})")
        start = time.perf_counter()
        trainer.train()  # logs the stages, then each switch as it happens
        elapsed = time.perf_counter() - start
    trainer.save_state()
    history = trainer.state.log_history
    steps = trainer.state.global_step
    print(f"\ntrained {steps} steps in {elapsed:.1f} s ({1000 * elapsed / max(steps, 1):.0f} ms a step)")
    print(switch_summary(trainer._curriculum.switches, out, history))
    print()
    print(format_table(stage_summary(history, trainer.args.generation_batch_size, recipe.curriculum.stages)))
    plot_run(history, os.path.join(staging, "curriculum.png"), title=f"demo: {Path(recipe_path).name}")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(staging, out)
    print(f"\nrun directory: {out} ({', '.join(sorted(os.listdir(out)))})")
    return 0


def _describe_geometry(trainer) -> str:
    from .geometry import BatchGeometry

    return BatchGeometry.from_args(trainer.args).describe()


def plot_main(args) -> int:
    """`grpo-curriculum plot RUN_DIR [-o FILE.png]`."""
    output = getattr(args, "output", None) or os.path.join(args.run_dir, "curriculum.png")
    plot_run(read_log_history(args.run_dir), output, title=f"{args.run_dir}")
    print(output)
    return 0
