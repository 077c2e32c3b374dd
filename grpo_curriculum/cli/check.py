"""
The `check` command's report (`grpo-curriculum check [RECIPE] [--num-processes N] [...]`): the batch geometry, every
valid `num_generations`, and a verdict with fixes for each stage, before anything is loaded; for a recipe, also what
`train` checks before it trains (the output folder, the preflight). [`~cli.main`] wires its flags and exit status.
"""

from __future__ import annotations

import argparse

from ..config.trainers import ASYNC
from ..core.errors import list_text, plural, raise_if_any
from ..core.rules import is_int
from ..core.sampling import DynamicSampling, TopUp
from ..core.skipping import Skip

# The batch geometry's flags of `check` (and their help), each overriding the recipe's value.
GEOMETRY_FLAGS = {
    "num_processes": "world size (default: the recipe's `num_processes`, else 1)",
    "per_device_train_batch_size": "completions per process per micro-step (TRL's default: 8)",
    "gradient_accumulation_steps": "micro-steps per optimizer step (TRL's default: 1)",
    "steps_per_generation": "micro-steps served by one generation round (default: gradient_accumulation_steps)",
    "generation_batch_size": "completions per generation round (instead of steps_per_generation)",
}


def _stage_rows(schedule, max_steps=None) -> list[tuple[str, object]]:
    """
    `(label, what)` for every stage of a schedule (with their steps when `max_steps` is given): `what` is the G to
    check, the candidates of a per-prompt stage (a tuple), or a top-up stage's [`TopUp`]; a stage with dynamic sampling
    gives `(G, DynamicSampling)`.
    """
    stages = schedule.stages
    resolved = schedule.resolve(max_steps) if is_int(max_steps) and max_steps > 0 else None
    rows = []
    for i, stage in enumerate(stages):
        temperature = f"{stage.temperature:g}"
        if stage.temperature_end is not None:
            temperature += f" -> {stage.temperature_end:g} ({stage.temperature_ramp})"
        ends = stage.end_description
        if resolved is not None:
            ends += f" ({resolved.steps_text(i)} of {max_steps})"
        if stage.comparison is not None:
            ends = f"{stage.comparison.describe()}, {ends}"
        label = f"stage {i}" + (f" ({stage.name})" if stage.name else "")
        if stage.adaptive is None and stage.dynamic_sampling is not None:
            rows.append((f"{label}: G={stage.num_generations} with dynamic sampling (max_rounds "
                         f"{stage.dynamic_sampling.max_rounds}, on_limit {stage.dynamic_sampling.on_limit}), "
                         f"temperature {temperature}, {ends}",
                         (stage.num_generations, stage.dynamic_sampling)))
            continue
        if stage.skip is not None:  # one G, checked as a fixed one, with the study's warning
            g = stage.num_generations  # with pilot groups: both sizes must fill the round, as per-prompt candidates
            rows.append((f"{label}: G={g}, {stage.skip.describe()}, temperature {temperature}, {ends}",
                         (g if stage.skip.pilot is None else stage.adaptive.num_generations, stage.skip)))
            continue
        if stage.adaptive is None:
            g = stage.num_generations
            rows.append((f"{label}: G={g}, temperature {temperature}, {ends}", g))
            continue
        if stage.top_up is not None:  # the stage's temperature: a top-up stage adapts none
            top_up = stage.top_up
            rows.append((f"{label}: top-up from pilot {top_up.pilot} to {top_up.largest}, temperature {temperature}, "
                         f"{ends}", top_up))
            continue
        bounds = stage.adaptive.temperature
        temperature = f"{bounds[0]:g}-{bounds[1]:g}" if bounds else temperature
        if stage.adaptive.per_prompt:  # the candidates together must fill the round
            rows.append((f"{label}: per-prompt G from [{list_text(stage.adaptive.num_generations)}], temperature "
                         f"{temperature}, {ends}", stage.adaptive.num_generations))
            continue
        for g in stage.adaptive.num_generations:  # every candidate must fit the geometry
            rows.append((f"{label}: adaptive ({stage.adaptive.policy}) candidate G={g}, temperature {temperature}, "
                         f"{ends}", g))
    return rows


TOP_UP_WARNING = (
    "warning: top-up lost to the best static G where many prompts are settled (the study's prefix_settled, "
    "docs/study.md: -0.031 AUC and 1.59x the completions to 90% of its gain on seeds 500-515) and with partial "
    "credit (prefix_graded): it keeps no memory of a prompt and grows the all-equal pilots of solved and impossible "
    "prompts first. Do not use it where many prompts are solved or impossible (most real RLVR data); use "
    "`policy: per_prompt` there. It was level with the best static G only where every prompt is learnable with "
    "0/1 rewards (prefix_levels, prefix_tail, prefix_noisy)")
"""The line `check` prints under every top-up stage (issue 42 demoted top-up: the study's numbers)."""

SKIP_WARNING = (
    "note: skipping gained where many prompts are solved or impossible (the study's prefix_settled: +0.026 mean AUC "
    "over G 4 on 48 seeds, docs/study.md) and was level within the study's noise where most are hard but learnable "
    "(prefix_tail, 80 seeds: mean -0.011 to -0.001 by seed set, where G 4 reseeded moved -0.016 to +0.014); it pays "
    "where many prompts are settled")
"""The line `check` prints under every stage that skips (issue 50: the study's numbers)."""
PILOT_WARNING = (
    "warning: pilot groups gained less than skipping alone on the study's prefix_settled (+0.010 median AUC over G 4 "
    "with pilot 2 on 48 seeds, against +0.021 without; measured exploring from 0.5, not at today's 0.05) and lost most "
    "on prefix_tail (12 seeds, mean -0.031 AUC, one seed -0.27): docs/study.md, Study 5")
"""The line `check` adds under a skipping stage with pilot groups."""


def _top_up_plan(top_up: TopUp, batch: int) -> str:
    """A valid top-up stage's round in words, for a generation batch of `batch` completions."""
    prompts = top_up.prompts_for(batch)
    pilots, left = prompts * top_up.pilot, batch - prompts * top_up.pilot
    sizes = list_text(top_up.sizes, last=" or ")
    how = "given" if top_up.prompts is not None else "the default rule"
    text = f"a round: {plural(prompts, 'prompt')} ({how}) x pilot {top_up.pilot} = {pilots} completions first"
    if not left:
        return text + f", the whole generation batch {batch}: no increment"
    return (text + f"; the other {left} of the generation batch {batch} go {top_up.pilot} at a time to the groups "
            f"whose rewards are all equal, then to the lowest-variance ones; a group holds {sizes} completions; at "
            f"most {plural(top_up.max_increments, 'increment')} (generation calls) after the pilots")


def _dynamic_plan(dynamic: DynamicSampling, g: int, batch: int) -> str:
    """A dynamic-sampling stage's training batch in words."""
    rounds = dynamic.max_rounds
    text = (f"dynamic sampling: groups whose rewards are all equal are dropped and refilled from further rounds of "
            f"{plural(batch // g, 'prompt')} ({batch} completions each), ")
    short = {"mask": "trains on its informative groups only (the all-equal groups filling it up are out of the loss)",
             "error": "stops training with an error",
             "fill": "trains on what it holds (all-equal groups filling it up count in the loss normalisation)"}
    return text + (f"at most {plural(rounds, 'round')} ({rounds * batch} completions) a training batch; a batch still "
                   f"short after them {short[dynamic.on_limit]} (on_limit {dynamic.on_limit})")


def assumed_geometry(given: dict) -> str | None:
    """
    The line `check` adds when the geometry comes from flags alone (no recipe, or a curriculum-only file): the TRL
    defaults it assumed for the batch fields no flag gave, and how to check the run's own.
    """
    from ..config.trl_fields import trl_fields

    fields = trl_fields()
    names = ("per_device_train_batch_size", "gradient_accumulation_steps")
    assumed = [(name, fields[name]["default"]) for name in names if name not in given]
    if not assumed:
        return None
    what = ", ".join(f"{name} {value}" for name, value in assumed)
    flags = " ".join(f"--{name.replace('_', '-')} N" for name, _ in assumed)
    return (f"assumed: {what} (TRL's defaults; no flag gave {'it' if len(assumed) == 1 else 'them'}): pass your "
            f"run's, e.g. `{flags}`, or check its recipe")


def check_report(args: argparse.Namespace) -> tuple[list[str], bool]:
    """
    The `check` subcommand's output.

    Returns:
        `tuple[list[str], bool]`: The lines to print, and whether every checked value is valid.

    Raises:
        [`CurriculumError`]: for a malformed recipe or geometry.
    """
    from ..config.engines import engine_notes
    from ..config.environment import environment_problems
    from ..config.recipe import load_recipe, run_geometry, starting_num_generations, training_geometry
    from ..config.trl_fields import TRAINERS
    from ..core.curriculum import is_curriculum_file, load_curriculum

    overrides = {name: getattr(args, name) for name in [*GEOMETRY_FLAGS, "num_generations"]}
    overrides = {name: value for name, value in overrides.items() if value is not None}
    if "generation_batch_size" in overrides:  # a flag replaces the recipe's choice of the other one
        overrides.setdefault("steps_per_generation", None)
    elif "steps_per_generation" in overrides:
        overrides["generation_batch_size"] = None
    lines, unused, schedule, max_steps, recipe = [], None, None, None, None
    if args.recipe and is_curriculum_file(args.recipe):  # what `CurriculumCallback.from_yaml` reads
        schedule, num_processes = load_curriculum(args.recipe), overrides.pop("num_processes", None)
        geometry = training_geometry(overrides, num_processes)
        lines.append(f"curriculum file: {args.recipe} (its only key is `curriculum:`, as "
                     "`CurriculumCallback.from_yaml` reads it; the geometry comes from the flags)")
    elif args.recipe:
        recipe = load_recipe(args.recipe, overrides)
        if recipe.trainer == ASYNC:
            return async_check_report(recipe, args)
        schedule, num_processes, max_steps = recipe.curriculum, recipe.num_processes, recipe.training.get("max_steps")
        geometry = run_geometry(recipe)  # as `train` runs it: evaluating at the G GRPOConfig gets
        start, top = starting_num_generations(recipe, geometry), recipe.training.get("num_generations")
        raise_if_any(environment_problems(recipe, geometry, start), f"{recipe.path}: {geometry.describe()}")
        if "num_generations" in recipe.raw and args.num_generations is None and top != start:
            unused = (f"top-level num_generations: {top} is not used (the curriculum sets G; "
                      f"{TRAINERS[recipe.trainer]} gets the first stage's, {start}): remove it")
        trainer = "" if recipe.trainer == "grpo" else f", trainer {recipe.trainer}: {TRAINERS[recipe.trainer]}"
        lines.append(f"recipe: {recipe.path} ({recipe.model_name_or_path}, dataset {recipe.dataset_name}{trainer})")
        lines += engine_notes(recipe.training)
    else:
        num_processes = overrides.pop("num_processes", None)
        geometry = training_geometry(overrides, num_processes)
    from_flags = not args.recipe or is_curriculum_file(args.recipe)  # the geometry: the flags' (and TRL's defaults)
    source = ("--num-processes" if args.num_processes else "the recipe's num_processes" if num_processes else
              "assumed: neither --num-processes nor the recipe's num_processes is given")
    lines.append(f"num_processes: {geometry.num_processes} ({source})")
    lines.append(f"geometry: {geometry.describe()}")
    lines += [assumed_geometry(overrides)] if from_flags and assumed_geometry(overrides) else []
    valid = geometry.valid_num_generations()
    lines.append(f"valid num_generations: {list_text(valid) or 'none (no divisor >= 2)'}")
    lines += [unused] if unused else []

    if schedule is None or args.num_generations is not None:
        G = args.num_generations or 8
        rows = [(f"G={G} ({'--num-generations' if args.num_generations else 'TRL default num_generations'})", G)]
    else:
        rows = _stage_rows(schedule, max_steps)
    invalid = 0
    batch = geometry.generation_batch_size
    for label, G in rows:
        if isinstance(G, TopUp):
            problems = geometry.top_up_problems(G)
            invalid += bool(problems)
            lines += ([f"{label}: INVALID: {str(problems[0]).replace(chr(10) + '    ', chr(10) + '  ')}"] if problems
                      else [f"{label}: valid", f"  {_top_up_plan(G, batch)}", f"  {TOP_UP_WARNING}"])
            continue
        if isinstance(G, tuple) and isinstance(G[-1], DynamicSampling):
            G, dynamic = G
            plan = [f"  {_dynamic_plan(dynamic, G, batch)}"] if geometry.is_valid(G) else []
        elif isinstance(G, tuple) and isinstance(G[-1], Skip):
            G, plan = G[0], [f"  {SKIP_WARNING}"] + ([f"  {PILOT_WARNING}"] if G[-1].pilot is not None else [])
        else:
            plan = []
        if isinstance(G, tuple):
            problems = geometry.per_prompt_problems(G)
            invalid += bool(problems)
            if problems:
                lines += [f"{label}: INVALID ({problems[0].rule})", f"  {problems[0].fix}"]
            else:
                lines.append(f"{label}: valid (each prompt gets its own G: the candidates need not divide the "
                             f"generation batch {batch}, only fill it together)")
                lines += plan
        elif geometry.is_valid(G):
            lines.append(f"{label}: valid ({batch} / {G} = {plural(batch // G, 'prompt')} per "
                         "generation round)")
            note = geometry.per_step_note(G)
            lines += [f"  {note}"] if note else []
            lines += plan
        else:
            invalid += 1
            lines.append(f"{label}: INVALID ({batch} / {G} leaves a remainder: num_generations "
                         f"must divide the generation batch {batch})")
            lines += [f"  {line}" for line in geometry.fixes(G).lines(geometry)]
    checked = len(rows)
    if geometry.num_generations_eval is not None:
        checked += 1
        e, n, G = geometry.per_device_eval_batch_size, geometry.num_processes, geometry.num_generations_eval
        problems = geometry.eval_problems()
        if problems:
            lines += [f"eval: num_generations_eval {G}: INVALID ({problems[0].rule})", f"  {problems[0].fix}"]
        else:
            lines.append(f"eval: num_generations_eval {G}: valid (global eval batch: {e} per-device eval batch x "
                         f"{plural(n, 'process')} = {e * n})")
        invalid += bool(problems)
    if recipe is not None and not invalid:  # as `train` checks it once the geometry fits (else its verdict is that)
        _checks_as_train(recipe, args)
    where = f"on {plural(geometry.num_processes, 'process')}"
    lines.append(f"result: INVALID, {invalid} of {checked} checks fail {where}" if invalid else
                 f"result: OK, all {checked} checks valid {where}")
    return lines, not invalid


def async_check_report(recipe, args: argparse.Namespace) -> tuple[list[str], bool]:
    """
    `check` of a recipe of `trainer: async_grpo` (already validated: what the asynchronous trainer refuses was said
    by [`~config.recipe.load_recipe`]): its stages, each group sampled whole at its stage's G, and what a step trains
    on. No generation batch (the rollout worker samples group by group), so no G misfits; the same folder check and
    preflight as `train`.
    """
    from ..config.environment import environment_problems
    from ..config.engines import engine_notes
    from ..config.trl_fields import TRAINERS, trl_fields
    from ..core.asynchronous import step_size
    from .launch import ASYNC_GEOMETRY

    training, defaults = recipe.training, trl_fields(ASYNC)
    value = lambda key: training.get(key, defaults[key]["default"])  # noqa: E731
    raise_if_any(environment_problems(recipe, None, 0), f"{recipe.path}: {ASYNC_GEOMETRY}")
    n = args.num_processes or recipe.num_processes or 1
    source = ("--num-processes" if args.num_processes else "the recipe's num_processes" if recipe.num_processes else
              "assumed: neither --num-processes nor the recipe's num_processes is given")
    per_step = step_size(value("per_device_train_batch_size"), value("gradient_accumulation_steps"), n,
                         value("token_budget"))
    lines = [f"recipe: {recipe.path} ({recipe.model_name_or_path}, dataset {recipe.dataset_name}, trainer {ASYNC}: "
             f"{TRAINERS[ASYNC]})", *engine_notes(training), f"num_processes: {n} ({source})",
             "asynchronous: a rollout worker samples each prompt's group whole, at its stage's G, from the vLLM "
             f"server at {value('vllm_server_base_url')}; the trainer takes from its queue {per_step}, none more "
             f"than {value('max_staleness')} policy versions old: no generation batch, so any G >= 2 fits"]
    if "stages" in (recipe.raw.get("curriculum") or {}) and args.num_generations is None:
        rows = [label for label, _ in _stage_rows(recipe.curriculum, training.get("max_steps"))]
    else:
        g = args.num_generations or recipe.curriculum.stages[0].num_generations
        rows = [f"G={g} ({'--num-generations' if args.num_generations else 'num_generations'})"]
    lines += [f"{label}: valid" for label in rows]
    if (recipe.raw.get("curriculum") or {}).get("dynamic_sampling") is True:
        lines.append("dynamic sampling (curriculum.dynamic_sampling): a group whose rewards are all equal is dropped "
                     "in the rollout worker, before the queue, and the worker samples on (logged as "
                     "rollout/dropped_groups_total and frac_reward_zero_std)")
    _checks_as_train(recipe, args)
    lines.append(f"result: OK, all {len(rows)} checks valid on {plural(n, 'process')}")
    return lines, True


def _checks_as_train(recipe, args: argparse.Namespace) -> None:
    """What `train` checks before it trains, for `check`: the output folder (refused as `train` refuses it) and,
    unless `--no-preflight`, the preflight (the dataset, the reward functions)."""
    from .folders import folder_problems

    raise_if_any(folder_problems(recipe.training.get("output_dir") or "trainer_output", "output_dir"),
                 f"recipe {recipe.path}")  # fmt: skip
    from .preflight import preflight_unless_skipped

    preflight_unless_skipped(recipe, args)
