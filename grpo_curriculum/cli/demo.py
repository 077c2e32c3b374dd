"""The `demo` command: a few-minute CPU run of a recipe (the built-in tiny model by default) into a new folder,
written whole: staged beside it and renamed once complete, with its plot."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from ..core.errors import CurriculumError, Problem, raise_if_any
from .build import build_trainer
from .folders import folder_problems, hold_folder, new_folder, output_dir_problems, writable_problems
from .launch import set_threads, synchronous_only, torch_threads, validate_for_launch
from .plot import plot_run, require_matplotlib
from .progress import curriculum_output, progress_callback
from .summary import print_end, print_start

DEMO_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"  # shipped (recipes/ links it)


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
    synchronous_only(recipe, "demo")
    validate_for_launch(recipe)
    announce("demo")
    from transformers import PrinterCallback
    require_matplotlib()  # before training: the run ends with its plot
    out = getattr(args, "out", None) or new_folder(recipe.training.get("output_dir") or "runs/demo")
    raise_if_any(folder_problems(out, "--out"), context="demo")  # before the lock creates anything
    hold_folder(out, "--out", "demo")  # until the command ends: a second command into `out` is refused
    target = os.path.realpath(out) if os.path.islink(out) and os.path.isdir(out) else out  # a link to a folder:
    # the run goes where it leads, as `sweep` writes through it
    raise_if_any(output_dir_problems(target, "--out", "choose a new folder, or leave out `--out`: the demo then "
                                     "writes a new one (runs/demo, runs/demo-2, ...)")
                 or writable_problems(target, "--out"), context="demo")  # fmt: skip
    threads, why = torch_threads(recipe)
    set_threads(threads)

    from ..demo.models import mark_finished, partial_folder

    staging = str(partial_folder(Path(target).absolute()))  # ours: removed if the run fails (or by the next demo)
    try:
        with curriculum_output(quiet=True):
            trainer = build_trainer(recipe, output_dir=staging, extra_callbacks=[progress_callback()],
                                    disable_tqdm=True, logging_steps=1)
            trainer.remove_callback(PrinterCallback)  # the progress bar shows G, temperature and reward instead
            print_start(recipe.path, trainer, why)
            start = time.perf_counter()
            trainer.train()  # logs the stages, then each switch as it happens
            elapsed = time.perf_counter() - start
        trainer.save_state()
        print_end(trainer, recipe, elapsed, out)
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

