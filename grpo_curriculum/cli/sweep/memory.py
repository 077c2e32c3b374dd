"""
`grpo-curriculum sweep RECIPE --plan-memory`: the batch geometry of the sweep's G values that fits a memory budget,
measured (see [`~cli.memory_plan.plan_memory`] for the plan itself).

Each probe is one real training step of the recipe (its model, data and reward functions) in a child process, as the
sweep trains its arms: at G, per-device batch B and S steps per generation, with `gradient_accumulation_steps` 1 (one
micro-batch is trained; accumulating more adds no memory) and no evaluation, every completion generated to
`max_completion_length` (the most memory generation takes; not with vLLM, which generates outside the trainer). Its
peak memory is the CUDA max allocated memory on a GPU, else the peak RSS of the child (which includes the libraries it
inherits from the sweep process); a probe that runs out of CUDA memory, raises `MemoryError` or is killed by SIGKILL
(the kernel's out-of-memory killer) does not fit. A probe the recipe refuses at that geometry (e.g. a generation batch
that needs more prompts than the dataset holds) does not fit either; the first probe's refusal is the user's to fix.

The plan does not train the arms: it writes `OUT/memory_plan.md`, `OUT/memory_plan.json`, and `OUT/planned.yaml` (the
recipe with the planned per-device batch and `gradient_accumulation_steps` = the planned steps per generation, so
that each optimizer step trains one whole generation batch, as TRL does by default), and prints the `sweep` command
of it. The sweep compares arms with everything but G fixed; G values each at its own largest generation batch would
differ in the completions and prompts per step as well, so the plan's recipe is the geometry every fitting G takes.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import shutil
import signal
from pathlib import Path

from ...core.errors import CurriculumError, Problem, raise_if_any
from ...training.files import atomic_json, atomic_write, read_json
from ..memory_plan import SAFETY_FRACTION, mib, plan_memory, plan_rows
from .table import DEFAULT_SEEDS, Arm

PROBE_FILE = "probe.json"
_GEOMETRY_KEYS = ("per_device_train_batch_size", "steps_per_generation", "generation_batch_size",
                  "gradient_accumulation_steps")  # fmt: skip


def probe_recipe(path: str, raw: dict, num_generations: int, temperature, batch: int, steps: int, folder: str):
    """The recipe one probe trains: one step of `raw` at G, per-device batch `batch`, `steps` steps per generation."""
    from .child import arm_recipe

    raw = {key: value for key, value in raw.items() if key not in _GEOMETRY_KEYS}
    raw.update(per_device_train_batch_size=batch, steps_per_generation=steps, gradient_accumulation_steps=1,
               max_steps=1, logging_steps=1, save_strategy="no", eval_strategy="no", log_completions=False,
               report_to=[])  # fmt: skip
    if "warm_start_steps" in raw:  # the built-in tiny model's supervised warm start is no part of GRPO's memory
        raw["warm_start_steps"] = 0
    arm = Arm("probe", [{"num_generations": num_generations, "temperature": temperature}], num_generations)
    return arm_recipe(path, raw, arm, output_dir=folder)


def _probe(recipe, folder: str, held_out: int | None = None) -> dict:
    """
    Train the probe's one step; its peak memory (bytes, `None`: out of memory), its kind and the device's total. With
    `held_out`, on the rows the sweep trains on (its held-out prompts kept out, see
    [`~cli.sweep.held_out.held_out_split`]).
    """
    import torch
    from transformers import PrinterCallback

    from ...training.evaluation import full_length_completions
    from ..build import build_trainer
    from ..launch import set_threads, torch_threads
    from ..progress import curriculum_output
    from .child import peak_memory
    from .held_out import held_out_split

    set_threads(torch_threads(recipe)[0])
    with curriculum_output(quiet=True):
        split = held_out_split(recipe, held_out, {}) if held_out else None
        trainer = build_trainer(recipe, output_dir=folder, split=split)
        trainer.remove_callback(PrinterCallback)
        full_length = full_length_completions(trainer)
        device = trainer.model.device
        total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
        try:
            trainer.train()
        except (torch.OutOfMemoryError, MemoryError):
            return {"peak": None, "kind": device.type if device.type == "cuda" else "rss", "total": total}
    peak, kind = peak_memory(trainer.model)
    lengths = [entry["completions/mean_length"] for entry in trainer.state.log_history
               if "completions/mean_length" in entry]  # fmt: skip
    return {"peak": peak, "kind": kind, "total": total, "full_length": full_length,
            "mean_length": lengths[0] if lengths else None}  # fmt: skip


def _probe_child(recipe, folder: str, parent: int, held_out: int | None = None) -> None:
    from .child import die_with_parent

    die_with_parent(parent)
    try:
        result = _probe(recipe, folder, held_out)
    except CurriculumError as error:  # e.g. a generation batch the dataset is too small for: the parent decides
        result = {"peak": None, "kind": None, "total": None, "refused": str(error)}
    atomic_json(os.path.join(folder, PROBE_FILE), result)


class Prober:
    """
    Measures probes of a recipe into `out/probes/`, one child process at a time, and remembers each one's result.

    Args:
        out (`str`): The plan's folder.
        path (`str`), raw (`dict`): The recipe (its file and its mapping with the command's overrides).
        temperature (`float`): The probes' temperature (the recipe's first stage's).
        held_out (`int`, *optional*): The sweep's held-out prompts, kept out of the probes' data as out of its runs'.
    """

    def __init__(self, out: str, path: str, raw: dict, temperature, held_out: int | None = None):
        from .child import FORK, import_once

        import_once()
        self.out, self.path, self.raw, self.temperature, self.held_out = out, path, raw, temperature, held_out
        self.context = multiprocessing.get_context("fork" if FORK else "spawn")
        self.results: dict[tuple[int, int, int], dict] = {}

    def measure(self, batch: int, steps: int, num_generations: int) -> float | None:
        """The peak memory in bytes of one step at this geometry (`None`: it ran out of memory)."""
        from ..launch import validate_for_launch

        key = (batch, steps, num_generations)
        if key not in self.results:
            folder = os.path.join(self.out, "probes", f"b{batch}-s{steps}-g{num_generations}")
            recipe = probe_recipe(self.path, self.raw, num_generations, self.temperature, batch, steps, folder)
            try:
                validate_for_launch(recipe)
            except CurriculumError as error:  # a built-in dataset too small for this batch: refused, as by the trainer
                if any(problem.key != "dataset_num_prompts" for problem in error.problems):
                    raise
                result = {"peak": None, "kind": None, "total": None, "refused": str(error)}
            else:
                result = self._run(recipe, folder, f"probe G {num_generations}, per-device batch {batch}, {steps} "
                                   "steps per generation")
            name = f"probe G {num_generations}, per-device batch {batch}, {steps} step{'s' if steps > 1 else ''} per "
            if result.get("refused") and not self.results:  # the recipe itself fails: the user's to fix
                raise CurriculumError([Problem(name + "generation", "refused", result["refused"], "fix the recipe")],
                                      "sweep --plan-memory")  # fmt: skip
            self.results[key] = result
            print(name + f"generation: {note(result)}", flush=True)
        return self.results[key]["peak"]

    def _run(self, recipe, folder: str, name: str) -> dict:
        """One probe in a child process: what it measured (or its refusal), or `killed` for a SIGKILL."""
        Path(folder).mkdir(parents=True)
        process = self.context.Process(target=_probe_child, args=(recipe, folder, os.getpid(), self.held_out),
                                       name="sweep-probe")
        process.start()
        process.join()
        result_path = os.path.join(folder, PROBE_FILE)
        if os.path.exists(result_path):
            return read_json(result_path, "re-run the plan in a new --out folder")
        if process.exitcode == -signal.SIGKILL:  # the kernel's out-of-memory killer (or a user's kill -9)
            return {"peak": None, "kind": "rss", "total": None, "killed": True}
        raise CurriculumError([Problem(name, f"exit code {process.exitcode}", "failed (its error is above)",
                                       "fix it and re-run the command in a new --out folder")], "sweep --plan-memory")


def note(result: dict) -> str:
    """What a probe measured, in words."""
    if result.get("refused"):
        lines = [line.strip() for line in result["refused"].splitlines()]
        return "not run: " + next((line[2:] for line in lines if line.startswith("- ")), lines[0])
    return f"peak {mib(result['peak'])}" + (" (killed: SIGKILL)" if result.get("killed") else "")


def default_budget(first: dict, available: float | None) -> tuple[float, str]:
    """The budget without `--memory-budget`, and where it comes from, after the first probe (`first`)."""
    if first["kind"] == "cuda":
        return first["total"] * SAFETY_FRACTION, f"{SAFETY_FRACTION:.0%} of the CUDA device's {mib(first['total'])}"
    if available is None:
        raise CurriculumError([Problem("--memory-budget", None, "is needed on CPU when the available RAM cannot be "
                                       "read (psutil is not installed)", "pass `--memory-budget GIB`, or "
                                       "`pip install psutil`")], "sweep --plan-memory")  # fmt: skip
    return available * SAFETY_FRACTION, f"{SAFETY_FRACTION:.0%} of the {mib(available)} of RAM available at the start"


def _available_ram() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return float(psutil.virtual_memory().available)


def _write_planned(path: str, recipe_path: str, raw: dict, batch: int, steps: int, command: str) -> None:
    import yaml

    data = {key: value for key, value in raw.items() if key not in _GEOMETRY_KEYS}
    data.update(per_device_train_batch_size=batch, gradient_accumulation_steps=steps)
    header = (f"# The geometry `grpo-curriculum sweep --plan-memory` planned for {recipe_path}: per-device batch "
              f"{batch},\n# {steps} micro-batch{'es' if steps > 1 else ''} an optimizer step (one generation batch "
              f"each).\n#\n#   {command}\n")  # fmt: skip
    atomic_write(path, lambda f: f.write(header + yaml.safe_dump(data, sort_keys=False)))


def plan_main(args, recipe, arms: list[Arm], held_out: int | None = None) -> int:
    """
    `sweep --plan-memory`: probe, write and print the memory plan of the sweep's G values (see the module), on the
    rows the sweep trains on (`held_out` prompts kept out).
    """
    from ..folders import hold_folder, new_folder, output_dir_problems
    from ..launch import launch_geometry
    from ..summary import format_table

    problems = []
    if args.curriculum:
        problems.append(Problem("--curriculum", True, "does not apply with --plan-memory (the plan probes the "
                                "static G values)", "leave it out; add it to the sweep of the planned recipe"))
    adaptive = [arm.name for arm in arms if arm.num_generations is None]
    if adaptive:
        problems.append(Problem("--arms", adaptive, "do not apply with --plan-memory (the plan probes the static G "
                                "values)", "list only gN arms; sweep the planned recipe with the adaptive arms"))
    if args.jobs != 1:
        problems.append(Problem("--jobs", args.jobs, "does not apply with --plan-memory (probes run one at a time, "
                                "so that each has the memory to itself)", "leave it out"))  # fmt: skip
    out = args.out or new_folder("runs/memory-plan")
    hold_folder(out, "--out", "sweep --plan-memory")  # until the command ends
    problems += output_dir_problems(out, "--out", "choose a new folder, or leave out --out (the plan then writes a "
                                    "new one: runs/memory-plan, runs/memory-plan-2, ...)")
    raise_if_any(problems, "sweep --plan-memory")
    num_generations = [arm.num_generations for arm in arms]
    processes = launch_geometry(recipe).num_processes
    available = _available_ram()
    created = not os.path.lexists(out)
    os.makedirs(out, exist_ok=True)
    from .held_out import held_out_source

    kept_out = held_out if held_out_source(recipe)[1] else None  # held out of the train split: not trained on
    prober = Prober(out, recipe.path, recipe.raw, arms[0].temperature, kept_out)
    smallest = min(num_generations)
    first = smallest // math.gcd(smallest, processes)
    print(f"memory plan of {recipe.path} for G {', '.join(map(str, num_generations))}, into {out}", flush=True)
    try:
        prober.measure(first, 1, smallest)
        kind = prober.results[(first, 1, smallest)]
        if args.memory_budget is not None:
            budget, source = args.memory_budget, "--memory-budget"
        else:
            budget, source = default_budget(kind, available)
        print(f"budget: {mib(budget)} ({source})", flush=True)
        plan = plan_memory(num_generations, processes, budget, prober.measure)
    except BaseException:  # no plan: nothing of ours is left half-written in `out`
        shutil.rmtree(os.path.join(out, "probes"), ignore_errors=True)
        if created:
            os.rmdir(out)
        raise
    what = "CUDA max allocated" if kind["kind"] == "cuda" else "the peak RSS of the probe's process"
    lines = [f"# grpo-curriculum sweep --plan-memory: {recipe.path}", "",
             f"budget: {mib(budget)} ({source}); peak: {what}, one training step (a generation batch, one "
             f"micro-batch trained); {len(plan.probes)} probes",
             f"largest per-device batch at G {smallest} (1 step per generation): {plan.per_device_train_batch_size}; "
             f"largest steps per generation with it: {plan.steps_per_generation}"
             + (f" (searches capped at their last probe: {', '.join(plan.capped)}; larger may fit)"
                if plan.capped else ""), ""]  # fmt: skip
    table = format_table(plan_rows(plan))
    probes = format_table([{"G": p.num_generations, "per_device_train_batch_size": p.per_device_train_batch_size,
                            "steps_per_generation": p.steps_per_generation, "fits": "yes" if p.fits else "no",
                            "measured": note(prober.results[(p.per_device_train_batch_size, p.steps_per_generation,
                                                             p.num_generations)])}
                           for p in plan.probes])  # fmt: skip
    if plan.common_steps:
        planned = os.path.join(out, "planned.yaml")
        given = {key: getattr(args, key) for key in ("temperatures", "max_steps", "seeds", "held_out", "eval_every",
                                                     "target")}  # the sweep's own flags, as given
        given["seeds"] = None if given["seeds"] == DEFAULT_SEEDS else given["seeds"]
        if given["temperatures"] and len(given["temperatures"]) > 1:  # paired with the G values: the fitting ones'
            given["temperatures"] = [t for g, t in zip(num_generations, given["temperatures"]) if g in plan.fitting]
        flags = " ".join(f"--{key.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                         for key, v in given.items() if v is not None)  # fmt: skip
        command = (f"grpo-curriculum sweep {planned} --num-generations {' '.join(map(str, plan.fitting))}"
                   f"{' ' + flags if flags else ''} --out {os.path.join(out, 'sweep')}")  # fmt: skip
        _write_planned(planned, recipe.path, recipe.raw, plan.per_device_train_batch_size, plan.common_steps, command)
        next_line = (f"planned: per_device_train_batch_size {plan.per_device_train_batch_size}, "
                     f"gradient_accumulation_steps {plan.common_steps} (generation batch "
                     f"{plan.per_device_train_batch_size * plan.common_steps * processes}, which every fitting G "
                     f"divides), in {planned}; sweep it with:\n  {command}")  # fmt: skip
    else:
        next_line = ("no G of the sweep fits the budget with a whole generation batch: nothing planned"
                     if not plan.fitting else f"G {', '.join(map(str, plan.fitting))} fit, but no one generation "
                     "batch within the budget takes them all: sweep them separately, each with its row's geometry")
    text = "\n".join([*lines, table, "", "probes:", probes, "", next_line, ""])
    atomic_write(os.path.join(out, "memory_plan.md"), lambda f: f.write(text))
    atomic_json(os.path.join(out, "memory_plan.json"), {
        "recipe": recipe.path, "budget": budget, "budget_source": source, "memory_kind": kind["kind"],
        "num_processes": processes, "per_device_train_batch_size": plan.per_device_train_batch_size,
        "steps_per_generation": plan.steps_per_generation, "capped": plan.capped, "common_steps": plan.common_steps,
        "rows": plan.rows, "probes": [{**vars(p), **{k: v for k, v in prober.results[
            (p.per_device_train_batch_size, p.steps_per_generation, p.num_generations)].items() if k != "peak"}}
            for p in plan.probes]})  # fmt: skip
    print("\n".join([table, "", next_line]))
    return 0
