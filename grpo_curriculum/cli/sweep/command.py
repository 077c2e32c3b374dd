"""
`grpo-curriculum sweep RECIPE`: the `num_generations` experiment protocol in one command.

The recipe is trained once per arm (and seed) with everything else fixed: a static arm is the recipe with one stage at
its G (and temperature), `--curriculum` adds the recipe's own schedule as an arm. Every arm is validated before
anything runs, as `train` validates a recipe. Each run evaluates the same held-out prompts (the recipe's eval split,
else rows carved from the end of its train split and kept out of training) with one greedy completion each, scored by
the recipe's reward functions, at step 0, every `--eval-every` steps and at the end.

Each run trains in a child process (forked where the platform can, so nothing is imported twice; `--jobs N` runs N at
once), into `OUT/arms/<arm>/seed-<seed>/`, and writes a validated `sweep_result.json` there atomically once done.
`OUT/sweep_manifest.json` records the command's settings: re-running the same command after a crash or a kill skips
the finished runs and restarts the first unfinished one; other settings are refused. Once every run is done: the table
(`OUT/sweep.md`, `OUT/sweep.json`), the plot (`OUT/sweep.png`), the recommendation and `OUT/recommended.yaml`.

With `--plan-memory` no arm is trained: the batch geometry that fits a memory budget is measured instead, and written
as a recipe to sweep (see [`~cli.sweep.memory`]).
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

from ...config.trl_ranges import SEED_MAX
from ...core.errors import CurriculumError, GeometryError, Problem, raise_if_any
from ...training.files import CurriculumStateError, atomic_json, atomic_write, read_json
from ...training.schema import problems_of, state_error
from ..folders import hold_folder
from .arms import build_arms
from .child import FORK, import_once, peak_memory, arm_recipe, die_with_parent
from .held_out import held_out_split, resolve_held_out
from .table import RESULT_SCHEMA, RESULT_VERSION, Arm, recommend, recommended_stages, summarise, table_rows

MANIFEST_FILE = "sweep_manifest.json"
RESULT_FILE = "sweep_result.json"
DEFAULT_NUM_GENERATIONS = (4, 8, 16)


# --- arms --------------------------------------------------------------------------------------------------------


def validate_arms(path: str, raw: dict, arms: list[Arm], named: bool = False) -> None:
    """
    Validate every arm as `train` validates a recipe ([`~cli.launch.validate_for_launch`]), before anything runs
    (`named`: the arms came from `--arms`, which the messages then name).

    Raises:
        [`GeometryError`]: when the only problems are G values the batch geometry does not take (exit status 1);
        [`CurriculumError`] otherwise. Each problem names its arm and the flag that made it.
    """
    from ..launch import validate_for_launch

    problems, geometry_only = [], True
    for arm in arms:
        flag = (f"--arms {arm.name}" if named else "--curriculum" if arm.num_generations is None
                else f"--num-generations {arm.num_generations}")  # fmt: skip
        leave = f"leave {arm.name} out of --arms" if named else f"leave G {arm.num_generations} out of --num-generations"
        try:
            validate_for_launch(arm_recipe(path, raw, arm))
        except CurriculumError as error:
            geometry_only = geometry_only and isinstance(error, GeometryError)
            problems += [Problem(f"arm {arm.name} ({flag}): {p.key}", p.value, p.rule,
                                 p.fix and f"{p.fix}; or {leave}"
                                 if (named or arm.num_generations is not None) and "num_generations" in p.key
                                 else p.fix)
                         for p in error.problems]  # fmt: skip
    if problems:
        refused = len({p.key.split(" ", 2)[1] for p in problems})
        context = f"sweep of {path}: {refused} of {len(arms)} arms refused, nothing was run"
        raise (GeometryError if geometry_only else CurriculumError)(problems, context)


# --- the output folder -------------------------------------------------------------------------------------------


def open_out(out: str, settings: dict) -> bool:
    """
    Start the sweep in `out` (new or empty: its manifest is written), or resume the sweep of the same settings there.

    Returns:
        `bool`: Whether a sweep of these settings was there (resuming).

    Raises:
        [`CurriculumError`]: for a folder holding other files, or a sweep of other settings.
    """
    from ..folders import output_dir_problems, writable_problems

    manifest = os.path.join(out, MANIFEST_FILE)
    if os.path.isdir(out) and os.path.lexists(manifest):
        fix = "choose a new --out folder (this one holds another sweep)"
        old = read_json(manifest, fix)
        if old != settings:
            keys = sorted(k for k in {*settings, *(old if isinstance(old, dict) else {})}
                          if not isinstance(old, dict) or old.get(k) != settings.get(k))  # fmt: skip
            raise CurriculumError([Problem("--out", out, f"holds a sweep of other settings ({', '.join(keys)} "
                                           f"differ from this command's; see {manifest})", "re-run the command that "
                                           "started it to resume it, or choose a new --out folder")], "sweep")
        return True
    raise_if_any(output_dir_problems(out, "--out", "choose a new folder, or leave out `--out` (the sweep then writes "
                                     "a new one: runs/sweep, runs/sweep-2, ...)")
                 or writable_problems(out, "--out"), context="sweep")
    os.makedirs(out, exist_ok=True)
    atomic_json(manifest, settings)
    return False


def default_out(settings: dict, base: str = "runs/sweep") -> str:
    """
    The output folder without `--out`: the first of `base`, `base-2`, `base-3`, ... that holds a sweep of these
    settings (re-running the command resumes it) or is free.
    """
    for path in itertools.chain([base], (f"{base}-{n}" for n in itertools.count(2))):
        if not os.path.lexists(path):
            return path
        try:
            if read_json(os.path.join(path, MANIFEST_FILE), "") == settings:
                return path
        except CurriculumStateError:  # not a sweep's folder (or not this one's): the next
            continue


def read_result(folder: str) -> dict | None:
    """A finished run's validated result in `folder`, or `None` when there is none (the run did not finish)."""
    path = os.path.join(folder, RESULT_FILE)
    if not os.path.lexists(path):
        return None
    fix = "delete the run's folder; re-running the sweep trains it again"
    result = read_json(path, fix)
    problems = problems_of(RESULT_SCHEMA, result)
    if problems:
        raise state_error(path, problems, fix)
    return result


def _run_folder(out: str, arm: Arm, seed: int) -> str:
    return os.path.join(out, "arms", arm.name, f"seed-{seed}")


# --- one run (in a child process) --------------------------------------------------------------------------------


def _evaluation(trainer, rows: list, every: int, parent: int):
    """A callback recording the held-out reward at step 0, every `every` steps and at the end (training time only)."""
    from transformers import TrainerCallback

    from ...training.evaluation import greedy_rewards
    from .table import finite_mean

    per_step = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps
    per_step *= trainer.accelerator.num_processes

    class HeldOutReward(TrainerCallback):
        def __init__(self):
            self.points, self.train_time, self.clock = [], 0.0, None

        def record(self, step, model):
            reward = finite_mean(greedy_rewards(trainer, model, rows))
            self.points.append({"step": step, "completions": step * per_step, "time": self.train_time,
                                "reward": reward})  # fmt: skip

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.record(0, model)
            self.clock = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if os.getppid() != parent:  # the sweep was killed: stop without a result (re-running it restarts us)
                os._exit(3)
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                self.train_time += time.perf_counter() - self.clock
                self.record(state.global_step, model)
                self.clock = time.perf_counter()

    return HeldOutReward(), per_step


def add_generated(points: list[dict], history: list[dict], per_step: int) -> None:
    """
    Give each held-out point the completions generated up to its step (`generated`): a log line's
    `curriculum/generated` where a stage samples in increments (dynamic sampling generates more than it trains), else
    the completions its steps trained. The sweep logs every step (`logging_steps` 1).
    """
    done, total, entries = 0, 0.0, sorted(history, key=lambda entry: entry["step"])
    for point in sorted(points, key=lambda point: point["step"]):
        while done < len(entries) and entries[done]["step"] <= point["step"]:
            entry, previous = entries[done], entries[done - 1]["step"] if done else 0
            generated = entry.get("curriculum/generated")
            total += generated if generated is not None else (entry["step"] - previous) * per_step
            done += 1
        point["generated"] = total


def train_run(out: str, index: int, seed: int, parent: int) -> None:
    """Train one run of the sweep in `out` (arm `index` of its manifest, `seed`) and write its result file."""
    from transformers import PrinterCallback

    from ..build import build_trainer
    from ..launch import set_threads, torch_threads
    from ..progress import curriculum_output

    started = time.perf_counter()
    manifest = read_json(os.path.join(out, MANIFEST_FILE), "re-run the sweep in a new --out folder")
    arm = Arm(**manifest["arms"][index])
    folder = _run_folder(out, arm, seed)
    recipe = arm_recipe(manifest["recipe"], manifest["raw"], arm, seed, folder)
    recipe.training.update(disable_tqdm=True, logging_steps=1)  # a reward every step, for the fluctuation
    set_threads(torch_threads(recipe)[0])
    held: dict = {}
    with curriculum_output(quiet=True):
        trainer = build_trainer(recipe, output_dir=folder, split=held_out_split(recipe, manifest["held_out"], held))
        trainer.remove_callback(PrinterCallback)
        evaluation, per_step = _evaluation(trainer, held["rows"], manifest["eval_every"], parent)
        trainer.add_callback(evaluation)
        trainer.train()
    history = [entry for entry in trainer.state.log_history if "reward" in entry and "curriculum/stage" in entry]
    add_generated(evaluation.points, history, per_step)
    tokens = [entry["num_tokens"] for entry in trainer.state.log_history if "num_tokens" in entry]
    memory, kind = peak_memory(trainer.model)
    result = {"version": RESULT_VERSION, "arm": arm.name, "seed": seed, "steps": trainer.state.global_step,
              "completions_per_step": per_step, "train_time": evaluation.train_time,
              "num_tokens": float(tokens[-1]) if tokens else 0.0, "peak_memory": memory, "memory_kind": kind,
              "held_out": held["name"], "points": evaluation.points, "train_reward": [e["reward"] for e in history],
              "zero_std": [e.get("frac_reward_zero_std") for e in history],
              "wall_time": time.perf_counter() - started}  # fmt: skip
    if os.getppid() == parent:
        atomic_json(os.path.join(folder, RESULT_FILE), result)


def _child(out: str, index: int, seed: int, parent: int) -> None:
    die_with_parent(parent)
    try:
        train_run(out, index, seed, parent)
    except (CurriculumError, CurriculumStateError) as error:
        print(f"grpo-curriculum sweep: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)


def run_all(out: str, arms: list[Arm], seeds: list[int], jobs: int = 1) -> dict[str, list[dict]]:
    """
    Train every run of the sweep in `out` that has no result yet, `jobs` child processes at a time (forked when the
    platform can), and return every run's result, by arm, in seed order.

    Raises:
        [`CurriculumError`]: naming a run that failed (the ones still running are stopped; re-running resumes).
    """
    from multiprocessing.connection import wait

    import_once()
    context = multiprocessing.get_context("fork" if FORK else "spawn")
    todo, running = [], {}
    for index, arm in enumerate(arms):
        for seed in seeds:
            folder = _run_folder(out, arm, seed)
            if read_result(folder) is not None:
                print(f"arm {arm.name}, seed {seed}: finished earlier ({folder})", flush=True)
                continue
            if os.path.lexists(folder):  # an unfinished run of this sweep (ours, and no other command runs it: we
                shutil.rmtree(folder)  # hold the folder's lock): trained again from the start
            todo.append((index, arm, seed, folder))
    try:
        while todo or running:
            while todo and len(running) < jobs:
                index, arm, seed, folder = todo.pop(0)
                Path(folder).mkdir(parents=True)
                print(f"arm {arm.name} ({arm.label}), seed {seed}: training into {folder}", flush=True)
                process = context.Process(target=_child, args=(out, index, seed, os.getpid()), name="sweep-run")
                process.start()
                running[process.sentinel] = (process, arm, seed, folder)
            for sentinel in wait(list(running)):
                process, arm, seed, folder = running.pop(sentinel)
                process.join()
                result = read_result(folder) if process.exitcode == 0 else None
                if result is None:
                    raise CurriculumError([Problem(f"arm {arm.name}, seed {seed}", f"exit code {process.exitcode}",
                                                   "failed (its error is above)", "fix it and re-run the same "
                                                   "command: the finished runs are kept")], "sweep")  # fmt: skip
                print(f"arm {arm.name}, seed {seed}: done in {result['wall_time']:.1f} s, held-out reward "
                      f"{result['points'][0]['reward']:.3f} -> {result['points'][-1]['reward']:.3f}", flush=True)
    finally:
        for process, *_ in running.values():  # ours, after a failure or an interrupt: left unfinished
            process.kill()
            process.join()
    return {arm.name: [read_result(_run_folder(out, arm, seed)) for seed in seeds] for arm in arms}


# --- outputs -----------------------------------------------------------------------------------------------------


def plot_sweep(rows: list[dict], target: float, output: str) -> str:
    """Held-out reward against optimizer steps, completions and training seconds, an arm a line; return `output`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .table import generates_more

    panels = [("step", "optimizer step"), ("time", "training time (s)")]
    if generates_more(rows):  # else completions are steps times the (fixed) batch: the steps panel again
        panels.insert(1, ("generated", "completions generated"))
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), sharey=True)
    for axis, (key, label) in zip(axes, panels):
        for i, row in enumerate(rows):
            axis.plot([p.get(key, p["completions"]) for p in row["curve"]], [p["reward"] for p in row["curve"]],
                      marker=".", label=row["arm"].name)  # fmt: skip
            if key == "step" and row.get("interval") is not None:  # the final's 95% interval over the seeds
                low, high = row["interval"]
                last = row["curve"][-1]["step"]
                offset = (i - (len(rows) - 1) / 2) * 0.012 * max(last, 1)  # side by side, not on top of each other
                axis.errorbar([last + offset], [row["final"][0]], yerr=[[row["final"][0] - low],
                              [high - row["final"][0]]], color=axis.lines[-1].get_color(), capsize=3)  # fmt: skip
        axis.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xlabel(label)
    axes[0].set_ylabel("held-out reward (greedy)")
    axes[0].legend(fontsize=8)
    bars = any(row.get("interval") is not None for row in rows)
    axes[-1].annotate(f"dashed: the target {target:.3f}" + ("; bars: the final's 95% interval over the seeds" if bars
                                                            else ""), xy=(1, -0.2), xycoords="axes fraction",
                      ha="right", fontsize=7)  # fmt: skip
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def _write_recommended(path: str, recipe_path: str, raw: dict, stages: list, line: str, out: str) -> None:
    import yaml

    data = {key: value for key, value in raw.items() if key not in ("num_generations", "temperature")}
    data["curriculum"] = {**(raw.get("curriculum") or {}), "stages": stages}
    data["output_dir"] = os.path.join(out, "recommended-run")
    header = (f"# Recommended by `grpo-curriculum sweep` of {recipe_path} (in {out}):\n# {line}\n"
              f"#\n#   grpo-curriculum train {path}\n")  # fmt: skip
    atomic_write(path, lambda f: f.write(header + yaml.safe_dump(data, sort_keys=False)))


def report(out: str, settings: dict, arms: list[Arm], results: dict, target: float | None = None) -> str:
    """Write the table, the plot, the recommendation and the recommended recipe; return the text printed."""
    from ..summary import format_table

    rows, target = summarise(arms, results, target)
    recommendation = recommend(rows, target)
    first = results[arms[0].name][0]
    seeds = settings["seeds"]
    wall = sum(run["wall_time"] for runs in results.values() for run in runs)
    head = [f"# grpo-curriculum sweep: {settings['recipe']}", "",
            f"held-out reward: the mean over {first['held_out']} ({settings['held_out']} prompts), one greedy "
            f"completion each (no sampling noise), scored by the recipe's reward functions, at step 0, every "
            f"{settings['eval_every']} steps and step {settings['max_steps']}; final and best: that reward at the "
            "last evaluation and its highest",
            f"target: {target:.3f}" + (" (90% of the way from the step-0 reward to the best arm's final)"
                                       if settings["target"] is None else " (--target)"),
            "steps, completions to target: the first evaluation at which the arm's mean curve reaches the target "
            "(completions generated: dynamic sampling generates more than it trains)",
            "fluctuation: the std of the step-to-step differences of the training reward; samples/s, tokens/s: "
            "completions trained and tokens (prompt and completion, as TRL's num_tokens counts them) per second of "
            "training (evaluation excluded); peak "
            "memory: " + ("CUDA max allocated" if first["memory_kind"] == "cuda" else "the peak RSS of the run's "
                          "process (with the libraries it inherits from the sweep)") +
            "; zero-std: mean share of groups whose rewards are all equal; reward/hour: held-out reward gained over "
            "step 0 per hour of training ('no gain' where the final is not above step 0)",
            f"{seeds} seed{'s' if seeds > 1 else ''} an arm" + (" (final: mean [95% t-interval of the mean]; the "
                                                                 "others: mean ± std)" if seeds > 1 else
                                                                 " (no interval: one run measures no noise)") +
            f"; the sweep's runs took {wall:.0f} s in all", ""]  # fmt: skip
    table = format_table(table_rows(rows))
    line = f"recommendation: {recommendation['line']}"
    stages = recommended_stages(recommendation)
    recommended = os.path.join(out, "recommended.yaml")
    if recommendation.get("recommended", True):  # none from noise: no recipe of it either
        _write_recommended(recommended, settings["recipe"], settings["raw"], stages, recommendation["line"], out)
    plot_sweep(rows, target, os.path.join(out, "sweep.png"))
    text = "\n".join([*head, table, "", line, ""])
    atomic_write(os.path.join(out, "sweep.md"), lambda f: f.write(text))
    summary = {"target": target, "recommendation": recommendation["line"],
               "recommended_stages": stages if recommendation.get("recommended", True) else None,
               "wall_time": wall, "arms": [{"name": row["arm"].name, "num_generations": row["arm"].num_generations,
                                            "temperature": row["arm"].temperature, "stages": row["arm"].stages,
                                            "curve": row["curve"], "to_target": row["to_target"],
                                            "final_interval": row.get("interval"),
                                            **{key: list(value) for key, value in row.items()
                                               if isinstance(value, tuple)}} for row in rows]}  # fmt: skip
    atomic_json(os.path.join(out, "sweep.json"), _json_safe(summary))
    return "\n".join([table, "", line])


def _json_safe(value):
    """NaN and infinities as `null` (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


# --- the command -------------------------------------------------------------------------------------------------


def _arms_of(args, recipe) -> list[Arm]:
    """The arms of `--arms NAME ...` (see [`~cli.sweep.arms`]), else of `--num-generations` and `--curriculum`."""
    names = getattr(args, "arms", None)
    if not names:
        return build_arms(recipe, args.num_generations or list(DEFAULT_NUM_GENERATIONS), args.temperatures,
                          args.curriculum)  # fmt: skip
    given = [flag for flag, value in (("--num-generations", args.num_generations), ("--curriculum", args.curriculum))
             if value]  # fmt: skip
    if given:
        raise CurriculumError([Problem(given[0], getattr(args, given[0][2:].replace("-", "_")), "cannot be combined "
                                       "with --arms, which names every arm", "name them in --arms instead, e.g. "
                                       "`--arms g4 g8 recipe`")], "sweep")  # fmt: skip
    from .arms import named_arms

    return named_arms(recipe, list(names), args.temperatures)


def sweep_main(args) -> int:
    """`grpo-curriculum sweep RECIPE [--num-generations G ...] [...]`: run, resume and report a sweep."""
    import json

    from ...config.recipe import load_recipe
    from ..plot import require_matplotlib

    overrides = {"max_steps": args.max_steps} if args.max_steps else {}
    recipe = load_recipe(args.recipe, overrides=overrides)
    from ..launch import synchronous_only

    synchronous_only(recipe, "sweep")
    arms = _arms_of(args, recipe)
    if args.memory_budget is not None and not args.plan_memory:
        raise CurriculumError([Problem("--memory-budget", args.memory_budget, "only applies with --plan-memory",
                                       "add --plan-memory, or leave --memory-budget out")], "sweep")  # fmt: skip
    if not args.plan_memory:  # planning: each G is checked at the geometry the plan finds, by its probe
        validate_arms(recipe.path, recipe.raw, arms, named=bool(getattr(args, "arms", None)))
    from ..preflight import run_preflight

    run_preflight(recipe, command="sweep")  # the dataset and reward functions, as `train` checks them: before folders
    held_out = resolve_held_out(recipe, args.held_out)  # before anything is written
    if args.plan_memory:
        from ..progress import announce
        from .memory import plan_main

        announce("sweep --plan-memory")
        return plan_main(args, recipe, arms, held_out)
    require_matplotlib()
    max_steps, problems = recipe.training.get("max_steps"), []
    if not isinstance(max_steps, int) or max_steps <= 0:
        problems.append(Problem("max_steps", max_steps, "must be a positive number of steps for a sweep (every arm "
                                "trains the same steps)", "set `--max-steps N`"))
    if args.target is not None and not math.isfinite(args.target):
        problems.append(Problem("--target", args.target, "must be a finite held-out reward", "e.g. `--target 0.8`"))
    raise_if_any(problems, "sweep")
    base_seed = recipe.training.get("seed", 42)
    last_seed = base_seed + args.seeds - 1
    if last_seed > SEED_MAX:  # the recipe's own seed was checked; the runs' seed + 1, ... before the first one trains
        raise CurriculumError([Problem("--seeds", args.seeds, f"runs each arm at seeds {base_seed} to {last_seed}, "
                                       f"past numpy's and torch's largest seed {SEED_MAX}", "lower the recipe's "
                                       f"`seed` to at most {SEED_MAX - args.seeds + 1}, or ask for fewer --seeds")],
                              "sweep")  # fmt: skip
    settings = {"recipe": recipe.path, "raw": recipe.raw, "arms": [vars(arm) for arm in arms],
                "seeds": args.seeds, "base_seed": base_seed, "max_steps": max_steps, "held_out": held_out,
                "eval_every": args.eval_every or max(1, max_steps // 10), "target": args.target}  # fmt: skip
    settings = json.loads(json.dumps(settings, default=str))  # as the manifest reads back
    out = args.out or default_out(settings)
    hold_folder(out, "--out", "sweep")  # until the command ends: a second sweep, demo or train into `out` is refused
    resuming = open_out(out, settings)
    print(f"sweep of {recipe.path}: {len(arms)} arm{'s' if len(arms) > 1 else ''} ({', '.join(a.name for a in arms)}) "
          f"x {args.seeds} seed{'s' if args.seeds > 1 else ''}, {max_steps} steps each, into {out}"
          + (" (resuming: finished runs are kept)" if resuming else ""), flush=True)  # fmt: skip
    from ..progress import announce

    announce("sweep")  # before the runs' imports
    results = run_all(out, arms, list(range(base_seed, base_seed + args.seeds)), args.jobs)
    print()
    print(report(out, settings, arms, results, args.target))
    written = "recommended.yaml, " if os.path.lexists(os.path.join(out, "recommended.yaml")) else ""
    print(f"\nsweep directory: {out} (sweep.md, sweep.json, sweep.png, {written}arms/)")
    return 0
