"""Tests for the `grpo-curriculum` command: `check` reproduces the seed documents' cases; the others dispatch."""

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.core.errors import CurriculumError, Problem

ROOT = Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "recipes" / "demo.yaml")
BAD = ROOT / "tests" / "data" / "bad_recipes"


def check(capsys, *argv):
    code = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def flags(n, b, acc=None, G=None):
    argv = ["--num-processes", n, "--per-device-train-batch-size", b]
    argv += ["--gradient-accumulation-steps", acc] if acc else []
    return argv + (["--num-generations", G] if G else [])


# Seeds: every number below is from /work/shared/SEEDS.md.
@pytest.mark.parametrize(
    "n, b, acc, G, code, batch, valid",
    [
        (2, 2, None, 8, 1, 4, "2, 4"),  # table row 1: 4 is not divisible by 8
        (2, 3, None, 3, 0, 6, "2, 3, 6"),  # table row 2: 6 / 3 = 2
        (2, 4, None, 5, 1, 8, "2, 4, 8"),  # table row 3: 8 / 5 leaves a remainder
        (2, 3, None, 8, 1, 6, "2, 3, 6"),  # worked case
        (1, 1, 4, 4, 0, 4, "2, 4"),  # 004: 1 GPU, batch 1, accumulation 4
        (2, 3, 2, 5, 1, 12, "2, 3, 4, 6, 12"),  # pitfall (1)
    ],
)
def test_seed_cases(capsys, n, b, acc, G, code, batch, valid):
    got, out, err = check(capsys, *flags(n, b, acc, G))
    assert got == code and err == ""
    assert f"= generation batch {batch}\n" in out and f"valid num_generations: {valid}\n" in out
    assert f"G={G} (--num-generations): {'valid' if code == 0 else 'INVALID'}" in out
    assert ("result: OK" if code == 0 else "result: INVALID, 1 of 1 checks fail") in out


def test_worked_case_fixes(capsys):
    """2 x 3 = 6 with G 8 fails; fix 1: G in {2, 3, 6}; fix 2: per-device 4 -> 8, keep G 8."""
    code, out, _ = check(capsys, *flags(2, 3, G=8))
    assert code == 1
    assert "6 / 8 leaves a remainder" in out and "valid num_generations: 2, 3, 6" in out
    assert "  use num_generations 6 (nearest valid)" in out
    assert "  or per_device_train_batch_size 4 -> generation batch 8" in out


def test_per_step_note(capsys):
    """004's rule (accumulation counts) holds, 000's per-step rule does not: TRL accepts, the note explains."""
    code, out, _ = check(capsys, *flags(1, 1, 4, 4))
    assert code == 0 and "note: 1 x 1 = 1 completions per micro-step" in out and "TRL allows this" in out
    code, out, _ = check(capsys, *flags(2, 4, G=4))  # 2 x 4 = 8: whole groups per step, no note
    assert code == 0 and "note:" not in out


def test_two_gpus_times_four(capsys):
    """000: 2 GPUs x 4 per device = 8, so G can only be 2, 4 or 8."""
    code, out, _ = check(capsys, *flags(2, 4))
    assert code == 0 and "valid num_generations: 2, 4, 8\n" in out and "G=8 (TRL default num_generations)" in out


def test_underscore_flags_match_dashes(capsys):
    dashes = check(capsys, *flags(2, 3, 2, 5))
    underscores = check(capsys, "--num_processes", 2, "--per_device_train_batch_size", 3,
                        "--gradient_accumulation_steps", 2, "--num_generations", 5)
    assert dashes == underscores and dashes[0] == 1


def test_generation_batch_and_steps_flags(capsys):
    code, out, _ = check(capsys, "--per-device-train-batch-size=2", "--generation_batch_size=8", "--num-generations=4")
    assert code == 0 and "1 process x 2 per-device batch x 4 steps per generation = generation batch 8" in out
    code, out, _ = check(capsys, "--per_device_train_batch_size=2", "--steps_per_generation", 3, "--num-generations=4")
    assert code == 1 and "generation batch 6" in out
    assert "assumed: neither --num-processes nor the recipe's num_processes is given" in out


def test_recipe_check_output(capsys):
    code, out, err = check(capsys, ROOT / "recipes" / "2gpu.yaml", "--no-preflight")  # a Hub dataset: no network
    assert code == 0 and err == ""
    assert "num_processes: 2 (the recipe's num_processes)" in out
    assert "geometry: 2 processes x 3 per-device batch x 1 steps per generation = generation batch 6" in out
    assert "stage 0 (warmup): G=3, temperature 0.7, until 0.3 of the run: valid" in out
    assert "stage 1 (main): G=6, temperature 0.9, until the end: valid" in out


def test_recipe_flags_override(capsys):
    recipe = ROOT / "recipes" / "2gpu.yaml"
    code, out, _ = check(capsys, recipe, "--num-processes", 1, "--no-preflight")  # 1 x 3 = 3: G 6 no longer fits
    assert code == 1 and "stage 1 (main): G=6" in out and "INVALID" in out and "use num_generations 3" in out
    code, out, _ = check(capsys, recipe, "--num_generations", 8)  # the seeds' worked case, from the recipe
    assert code == 1 and "G=8 (--num-generations): INVALID" in out and "stage 0" not in out
    code, out, _ = check(capsys, DEMO)
    assert code == 0 and "(steps 1-300 of 600)" in out and "temperature 0.8" in out


def test_eval_constraint(capsys, tmp_path):
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(Path(DEMO).read_text() + "eval_strategy: steps\nper_device_eval_batch_size: 3\n")
    code, out, _ = check(capsys, recipe)  # eval G is the run's num_generations: the first stage's, 2
    assert code == 1 and "eval: num_generations_eval 2: INVALID" in out and "per_device_eval_batch_size 4" in out
    code, out, _ = check(capsys, recipe, "--num-processes", 2)  # 3 x 2 = 6
    assert code == 0 and "eval: num_generations_eval 2: valid (global eval batch: 3 per-device eval batch x 2 " \
                         "processes = 6)" in out


PER_PROMPT_RECIPE = """
model_name_or_path: builtin:tiny
dataset_name: builtin:echo
reward_funcs: [grpo_curriculum.demo.tasks:echo_reward]
per_device_train_batch_size: 12
num_generations: 4
curriculum:
  stages:
    - adaptive: {policy: per_prompt, num_generations: CANDIDATES, defer: false}
      temperature: 1.0
"""


@pytest.mark.parametrize("candidates, code", [("[3, 5, 8]", 0), ("[5, 7]", 0), ("[5, 8]", 1), ("[2, 16]", 1)])
def test_per_prompt_stage_needs_its_candidates_to_fill_the_batch_not_divide_it(capsys, tmp_path, candidates, code):
    recipe = tmp_path / "per_prompt.yaml"
    recipe.write_text(PER_PROMPT_RECIPE.replace("CANDIDATES", candidates))
    got, out, _ = check(capsys, recipe)
    assert got == code, out
    assert f"stage 0: per-prompt G from {candidates}" in out
    if code == 0:  # 5 and 7 do not divide 12; 5 + 7 does make it
        assert "valid (each prompt gets its own G: the candidates need not divide the generation batch 12" in out
    else:
        assert "INVALID" in out and ("cannot fill the generation batch" in out or "larger than the generation" in out)


def test_top_level_num_generations_is_not_used_with_a_curriculum(capsys, tmp_path):
    """`train` gives GRPOConfig the first stage's G, so a top-level G that does not fit is no error (it was INVALID)."""
    recipe = tmp_path / "top.yaml"
    recipe.write_text((ROOT / "recipes" / "2gpu.yaml").read_text() + "num_generations: 8\n")
    code, out, _ = check(capsys, recipe, "--no-preflight")
    assert code == 0 and "top-level num_generations: 8 is not used" in out and "INVALID" not in out


def test_curriculum_only_file_is_checked_against_the_flags(capsys, tmp_path):
    """What `CurriculumCallback.from_yaml` reads (it was refused: model_name_or_path, dataset_name... required)."""
    curriculum = tmp_path / "curriculum.yaml"
    curriculum.write_text("curriculum:\n  stages:\n    - {num_generations: 2, temperature: 0.8, until_fraction: 0.5}\n"
                          "    - {num_generations: 8, temperature: 1.0}\n")
    code, out, _ = check(capsys, curriculum)
    assert code == 0 and "curriculum file:" in out and "result: OK, all 2 checks valid" in out
    code, out, _ = check(capsys, curriculum, "--per-device-train-batch-size", 6)
    assert code == 1 and "stage 1: G=8, temperature 1, until the end: INVALID" in out


def test_generation_kwargs_temperature_is_refused_as_train_refuses_it(capsys, tmp_path):
    recipe = tmp_path / "pinned.yaml"
    recipe.write_text(Path(DEMO).read_text() + "generation_kwargs: {temperature: 0.5}\n")
    code, out, err = check(capsys, recipe)  # it said OK
    assert code == 2 and "generation_kwargs.temperature = 0.5: would override the curriculum's temperature" in err


def test_shipped_recipes_by_name_from_any_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the clone: recipes/ is not here
    assert main(["recipes"]) == 0
    listed = capsys.readouterr().out
    assert all(f"{name}: " in listed for name in ("demo", "adaptive-demo", "smollm2-arithmetic"))
    code, out, _ = check(capsys, "adaptive-demo")
    assert code == 0 and "grpo_curriculum/recipes/adaptive-demo.yaml (builtin:tiny" in out
    code, _, err = check(capsys, "recipes/adaptive-demo.yaml")
    assert code == 2 and "does not exist" in err and "by its name, `adaptive-demo`" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([BAD / "many_problems.yaml"], "7 problems"),
        ([BAD / "yaml_syntax_error.yaml"], "yaml_syntax_error.yaml:7"),
        ([BAD / "empty.yaml"], "is empty"),
        ([BAD / "top_level_list.yaml"], "must be a YAML mapping"),
        (["no/such/recipe.yaml"], "does not exist"),
        (["--num-generations", 1], "must be an integer >= 2"),
        (["--num-processes", 0], "must be a positive integer"),
        (["--per-device-train-batch-size", "four"], "must be a positive integer"),
        (["--per-device-train-batch-size", "9" * 26], "must be at most 1048576 (a bound on the input), got '9999"),
        (["--num-generations", "9" * 5000], "got '999999999999999999999999999...9999999999999999999999999999'"),
        (["--num-processes", 1000003, "--per-device-train-batch-size", 1000033], "more than the 1048576"),
        (["--bogus-flag", 1], "unrecognized arguments"),
        (["--num-processes", 2, "--per-device-train-batch-size", 3, "--generation-batch-size", 8],
         "must be a multiple of the global batch"),
        (["--steps-per-generation", 2, "--generation-batch-size", 16], "must not be set together"),
        ([DEMO, "--generation-batch-size", 20], "must be a multiple of the global batch"),
    ],
)
def test_malformed_input_exits_2_without_traceback(capsys, argv, message):
    code, out, err = check(capsys, *argv)
    assert code == 2 and out == "" and message in err


def test_help_exits_0(capsys):
    assert main(["check", "--help"]) == 0 and "--num_processes" in capsys.readouterr().out
    assert main([]) == 2 and "required" in capsys.readouterr().err


def run_check(*argv, timeout=60):
    """`python -m grpo_curriculum check ...` in a subprocess (a hang fails the test at `timeout`)."""
    return subprocess.run([sys.executable, "-m", "grpo_curriculum", "check", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--per-device-train-batch-size", "9" * 26], "must be at most 1048576"),  # hung on divisors() before
        (["--num-processes", 1000003, "--per-device-train-batch-size", 1000033], "more than the 1048576"),  # 8 s
        ([BAD / "hostile_alias_bomb.yaml"], "expands to more than 10000 values"),  # hung on the message's repr
        ([BAD / "hostile_latin1.yaml"], "hostile_latin1.yaml: is not UTF-8 text (byte 0xe9"),  # a traceback, exit 1
        (["BINARY"], "is not UTF-8 text (byte 0x80 at offset 128"),  # a traceback, exit 1
        (["BIG"], "is larger than 65536 bytes"),  # 21 s before
    ],
)
def test_hostile_input_exits_2_at_once(tmp_path, argv, message):
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "big.yaml").write_text("x: 1\n" + "#" * 10_000_000 + "\n")
    argv = [{"BINARY": tmp_path / "binary.yaml", "BIG": tmp_path / "big.yaml"}.get(a, a) for a in argv]
    done = run_check(*argv)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert message in done.stderr and len(done.stderr) < 1000, done.stderr
    assert all(str(a) in done.stderr for a in argv if isinstance(a, Path))  # the message names the file


HEAVY = {"torch", "transformers", "trl", "numpy", "accelerate", "datasets"}


@pytest.mark.parametrize("argv", [["--num-processes", 2, "--per-device-train-batch-size", 3, "--num-generations", 8],
                                  [DEMO], [ROOT / "recipes" / "adaptive-demo.yaml"], ["PER_PROMPT"]])
def test_check_imports_no_torch_transformers_or_trl(tmp_path, argv):
    """`check` answers from the shipped TRL field snapshot: `-X importtime` lists every module the command imports
    (with `--no-preflight`: the preflight reads the dataset with `datasets` and runs the reward code)."""
    recipe = tmp_path / "per_prompt.yaml"
    recipe.write_text(PER_PROMPT_RECIPE.replace("CANDIDATES", "[3, 5, 8]"))
    argv = [recipe if a == "PER_PROMPT" else a for a in argv]
    argv += ["--no-preflight"] if len(argv) == 1 else []
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "grpo_curriculum", "check", *map(str, argv)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1) and "result:" in done.stdout, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "grpo_curriculum" in imported and "yaml" in imported and not imported & HEAVY, imported & HEAVY


def test_module_runs_as_a_script():
    done = subprocess.run([sys.executable, "-m", "grpo_curriculum", "check", "recipes/demo.yaml"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "result: OK, all 2 checks valid on 1 process" in done.stdout


def test_the_module_train_help_tells_to_launch_runs_the_command(capsys):
    assert main(["train", "--help"]) == 0
    module = re.search(r"launch -m (\S+) train", " ".join(capsys.readouterr().out.split())).group(1)
    done = subprocess.run([sys.executable, "-m", module, "check", "recipes/demo.yaml"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "result: OK" in done.stdout, (module, done.returncode, done.stderr)  # not a silent exit 0


# --- train, demo, plot dispatch ----------------------------------------------------------------------------------


@pytest.fixture
def fake_run(monkeypatch):
    calls = []

    def entry(name):
        def function(args):
            calls.append((name, args))
            if getattr(args, "recipe", None) == "raise-curriculum":
                raise CurriculumError([Problem("max_steps", 0, "must be positive")])
            if getattr(args, "run_dir", None) == "raise-missing":
                raise FileNotFoundError(2, "No such file or directory", "raise-missing/log.jsonl")
            return 0

        return function

    for name in ("train", "demo", "plot"):
        module = types.ModuleType(f"grpo_curriculum.cli.{name}")
        setattr(module, f"{name}_main", entry(f"{name}_main"))
        monkeypatch.setitem(sys.modules, f"grpo_curriculum.cli.{name}", module)
    return calls


def test_train_passes_the_overrides_on(fake_run):  # read by TRL's parser: see test_train_command.py
    argv = ["train", "r.yaml", "--max-steps", "10", "--learning_rate=1e-5", "--bf16", "true", "--seed", "-1"]
    assert main(argv) == 0
    (name, args), = fake_run
    assert name == "train_main" and args.recipe == "r.yaml" and args.overrides == argv[2:]


def test_demo_and_plot_arguments(fake_run):
    assert main(["demo", "--out", "d", "--max_steps", "5", "--recipe", "r.yaml"]) == 0
    assert main(["demo"]) == 0
    assert main(["plot", "runs/demo", "-o", "f.png"]) == 0
    assert main(["plot", "runs/demo"]) == 0
    (_, demo), (_, bare), (_, plot), (_, plain) = fake_run
    assert (demo.out, demo.max_steps, demo.recipe) == ("d", 5, "r.yaml")
    assert (bare.out, bare.max_steps, bare.recipe) == (None, None, None)
    assert (plot.run_dir, plot.output, plain.output) == ("runs/demo", "f.png", None)


def test_dispatch_errors_exit_2_without_traceback(fake_run, capsys):
    assert main(["train", "raise-curriculum"]) == 2
    assert main(["plot", "raise-missing"]) == 2
    assert main(["train"]) == 2
    assert main(["demo", "--max-steps", "0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "max_steps = 0: must be positive" in err
    assert "No such file or directory: raise-missing/log.jsonl" in err


SAMPLING = """\
model_name_or_path: builtin:tiny
dataset_name: builtin:echo
reward_funcs: [grpo_curriculum.demo.tasks:echo_reward]
per_device_train_batch_size: 16
gradient_accumulation_steps: 4
curriculum:
  stages:
    - {adaptive: {policy: top_up, num_generations: [4, 8, 16], pilot: 4}, temperature: 1.0, temperature_end: 0.8,
       until_fraction: 0.5}
    - {adaptive: {policy: top_up, num_generations: [16]}, temperature: 1.0, until_fraction: 0.7}
    - {num_generations: 4, temperature: 1.0, dynamic_sampling: {max_rounds: 4}}
"""


def test_check_prints_the_top_up_and_dynamic_sampling_plans(tmp_path, capsys):
    recipe = tmp_path / "sampling.yaml"
    recipe.write_text(SAMPLING)
    code, out, _ = check(capsys, recipe)
    assert code == 0 and "result: OK, all 3 checks valid on 1 process" in out
    assert ("stage 0: top-up from pilot 4 to 16, temperature 1 -> 0.8 (linear), until 0.5 of the run: valid\n"
            "  a round: 8 prompts (the default rule) x pilot 4 = 32 completions first; the other 32 of the generation "
            "batch 64 go 4 at a time to the groups whose rewards are all equal, then to the lowest-variance ones; a "
            "group holds 4, 8, 12 or 16 completions; at most 6 increments (generation calls) after the pilots\n"
            "  warning: top-up lost to the best static G where many prompts are settled") in out
    assert out.count("Do not use it where many prompts are solved or impossible") == 2  # under each top-up stage
    assert "x pilot 16 = 64 completions first, the whole generation batch 64: no increment" in out
    assert ("stage 2: G=4 with dynamic sampling (max_rounds 4, on_limit mask), temperature 1, until the end: valid "
            "(64 / 4 = 16 prompts per generation round)\n  dynamic sampling: groups whose rewards are all equal are "
            "dropped and refilled from further rounds of 16 prompts (64 completions each), at most 4 rounds (256 "
            "completions) a training batch; a batch still short after them trains on its informative groups only "
            "(the all-equal groups filling it up are out of the loss) (on_limit mask)") in out
    recipe.write_text(SAMPLING.replace("max_rounds: 4", "max_rounds: 0"))  # no limit: a round could never end
    code, _, err = check(capsys, recipe)
    assert code == 2 and ("curriculum.stages[2].dynamic_sampling.max_rounds = 0: must be a positive integer "
                          "(generation rounds drawn at most to fill one training batch; 0, no limit, is refused: a "
                          "round of too few informative prompts would never end)\n"
                          "    fix: e.g. `max_rounds: 2`") in err
    recipe.write_text(SAMPLING.replace("pilot: 4}", "pilot: 4, decay: 0.9}"))
    code, _, err = check(capsys, recipe)
    assert code == 2 and "adaptive.decay = 0.9: only applies with `policy: per_prompt`" in err
    recipe.write_text(SAMPLING)
    code, out, _ = check(capsys, recipe, *flags(3, 4, 1))  # a generation batch of 12 on 3 processes
    assert code == 1 and "result: INVALID, 2 of 3 checks fail on 3 processes" in out
    assert ("stage 0: top-up from pilot 4 to 16, temperature 1 -> 0.8 (linear), until 0.5 of the run: INVALID: "
            "adaptive.pilot = 4: must be a multiple of the 3 processes") in out
    assert "  fix: use `pilot: 12` (if it divides every candidate)\n" not in out  # 12 does not divide 16
    assert "stage 1: top-up from pilot 16 to 16, temperature 1, until 0.7 of the run: INVALID: adaptive.pilot = 16" \
        in out


def test_a_removed_top_up_rule_is_refused_with_every_other_problem_before_any_step(tmp_path, capsys):
    """`rule` left top-up with the `value` rule: a recipe still setting it (either value) exits 2, each stage's `rule`
    one problem with the recipe's other problems, and `train` writes nothing."""
    recipe = tmp_path / "sampling.yaml"
    recipe.write_text(SAMPLING.replace("pilot: 4}", "pilot: 4, rule: value}")
                      .replace("[16]}", "[16], rule: flat_first}") + "learning_rate: -1\n")  # fmt: skip
    one_rule = ("removed: top-up has one rule (the groups whose rewards are all equal grow first, then the "
                "lowest-variance ones)")  # fmt: skip
    problems = [
        "  - learning_rate = -1: must be a finite number >= 0",
        f"  - curriculum.stages[0].adaptive.rule = 'value': {one_rule}; `value` won on no task of the study "
        "(docs/study.md)\n    fix: drop `rule`\n",
        f"  - curriculum.stages[1].adaptive.rule = 'flat_first': {one_rule}, and `flat_first` is that rule\n"
        "    fix: drop `rule`: `flat_first` is what top-up does\n",
    ]  # fmt: skip
    code, out, err = check(capsys, recipe)
    assert code == 2 and out == "" and f"3 problems (recipe {recipe}):" in err and all(p in err for p in problems)
    never = tmp_path / "never"
    assert main(["train", str(recipe), "--output_dir", str(never)]) == 2
    err = capsys.readouterr().err
    assert all(p in err for p in problems) and "Traceback" not in err and not never.exists()


TOP_UP_RECIPE = """model_name_or_path: builtin:tiny
dataset_name: builtin:echo
reward_funcs: [grpo_curriculum.demo.tasks:echo_reward]
per_device_train_batch_size: {batch}
curriculum:
  stages:
    - {{temperature: 1.0, adaptive: {{policy: top_up, num_generations: {candidates}}}}}
"""


@pytest.mark.parametrize("candidates, largest", [("[4, 32]", 32), ("[4, 8, 1048576]", 1048576)])
def test_top_up_candidates_larger_than_the_batch_are_refused_like_per_prompt_ones(tmp_path, capsys, candidates,
                                                                                   largest):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TOP_UP_RECIPE.format(batch=16, candidates=candidates))
    code, out, _ = check(capsys, recipe)
    rule = (f"adaptive.num_generations: holds {largest}, larger than the generation batch (1 process x 16 per-device "
            "batch x 1 steps per generation = generation batch 16): such a group never fits in a round")
    assert code == 1 and rule in out and "result: INVALID, 1 of 1 checks fail" in out
    never = tmp_path / "never"
    assert main(["train", str(recipe), "--output_dir", str(never)]) == 1
    err = capsys.readouterr().err
    assert f"curriculum.stages[0].{rule}" in err and "Traceback" not in err and not never.exists()
    recipe.write_text(TOP_UP_RECIPE.format(batch=16, candidates=candidates).replace("top_up", "per_prompt"))
    code, out, _ = check(capsys, recipe)  # the per-prompt policy refuses the same candidates
    assert code == 1 and f"holds [{largest}], larger than the generation batch" in out


def test_check_caps_every_printed_list(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TOP_UP_RECIPE.format(batch=1048576, candidates="[2, 1048576]") + "dataset_num_prompts: 524288\n")
    code, out, _ = check(capsys, recipe)  # (a round at G 2 takes 524288 prompts: the dataset holds them)
    assert code == 0 and max(map(len, out.splitlines())) < 600
    assert "a group holds 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, ... or 1048576 (524288 in all) completions" in out
    assert "valid num_generations: 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, ..., 1048576 (20 in all)" in out


def test_check_and_train_exit_1_for_top_up_rounds_that_cannot_fill(tmp_path, capsys):
    code, out, _ = check(capsys, BAD / "top_up_cannot_fill.yaml")
    assert code == 1 and "result: INVALID, 3 of 3 checks fail on 4 processes" in out
    assert "  fix: use `pilot: 4` (if it divides every candidate); or run on 2 processes\n" in out
    never = tmp_path / "never"
    assert main(["train", str(BAD / "top_up_cannot_fill.yaml"), "--output_dir", str(never)]) == 1  # on 1 process
    err = capsys.readouterr().err
    assert "3 problems in the curriculum" in err  # a generation batch of 4: stage 2's pilot 6 does not fit,
    for i, largest in ((0, 8), (1, 16)):  # and stages 0 and 1 hold groups larger than the batch
        assert f"curriculum.stages[{i}].adaptive.num_generations: holds {largest}, larger than the generation" in err
    assert "curriculum.stages[2].adaptive.pilot = 6: must divide the generation batch" in err
    assert "Traceback" not in err and not never.exists()


def test_check_imports_a_reward_function_only_in_its_preflight_and_the_readme_says_so(tmp_path, capsys, monkeypatch):
    (tmp_path / "marker_reward.py").write_text("open(__file__ + '.imported', 'w').close()\n"
                                               "def reward(completions, **kwargs):\n    return [0.0] * len(completions)\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(Path(DEMO).read_text().replace("grpo_curriculum.demo.tasks:echo_reward", "marker_reward:reward"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = check(capsys, recipe, "--no-preflight")
    assert code == 0 and not (tmp_path / "marker_reward.py.imported").exists()
    code, out, _ = check(capsys, recipe)
    assert code == 0 and (tmp_path / "marker_reward.py.imported").exists()
    sys.modules.pop("marker_reward", None)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert ("`train`, `demo` and `sweep` import the modules `reward_funcs` names and run their code, as TRL's `trl "
            "grpo` does (`check` too, in its preflight; `check --no-preflight` imports none)") in readme


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`grpo-curriculum check recipe | head -1`: the pipe closes before the report is written; exit 141 (SIGPIPE's),
    quietly (it was a `BrokenPipeError` traceback)."""
    recipe = Path(__file__).resolve().parent.parent / "recipes" / "qwen2.5-0.5b-gsm8k.yaml"
    process = subprocess.Popen([sys.executable, "-m", "grpo_curriculum", "check", str(recipe), "--no-preflight"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    process.stdout.close()  # before the command has printed anything
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_a_skipping_stage_is_checked_as_its_one_g(tmp_path, capsys):
    """A stage that skips settled prompts says so, and is checked as a stage of its one G (G 16 cannot divide 8)."""
    recipe = tmp_path / "skip.yaml"
    text = Path(DEMO).read_text()
    text = text[: text.index("curriculum:")].replace("per_device_train_batch_size: 16", "per_device_train_batch_size: 8")
    recipe.write_text(text + "curriculum:\n  stages:\n"
                      "    - {num_generations: 4, temperature: 0.9, skip: evidence, until_fraction: 0.5}\n"
                      "    - {num_generations: 16, temperature: 1.0, skip: {rule: greso, target: 0.1}}\n")  # fmt: skip
    code, out, _ = check(capsys, recipe, "--no-preflight")
    assert "stage 0: G=4, skips settled prompts (evidence, target 0.05), temperature 0.9" in out
    assert "valid (8 / 4 = 2 prompts per generation round)" in out
    assert "  note: skipping gained where many prompts are solved or impossible" in out
    assert "stage 1: G=16, skips settled prompts (greso, target 0.1)" in out and code == 1


def test_a_skipping_stage_with_pilot_groups_is_checked_as_its_two_sizes(tmp_path, capsys):
    """Pilot groups of 2 at G 4: the two sizes must fill the generation batch together (per-prompt candidates), and
    the study's pilot warning follows the skipping one; a pilot that is not below G is refused, naming the key."""
    recipe = tmp_path / "pilot.yaml"
    text = Path(DEMO).read_text()
    text = text[: text.index("curriculum:")].replace("per_device_train_batch_size: 16", "per_device_train_batch_size: 8")
    recipe.write_text(text + "curriculum:\n  stages:\n"
                      "    - {num_generations: 4, temperature: 0.9, skip: {pilot: 2}}\n")  # fmt: skip
    code, out, _ = check(capsys, recipe, "--no-preflight")
    assert "stage 0: G=4, skips settled prompts (pooled, target 0.05, pilot groups of 2), temperature 0.9" in out
    assert "valid (each prompt gets its own G" in out and code == 0
    assert "  warning: pilot groups gained less than skipping alone" in out
    recipe.write_text(text + "curriculum:\n  stages:\n    - {num_generations: 4, temperature: 0.9, skip: {pilot: 4}}\n")
    code, out, err = check(capsys, recipe, "--no-preflight")
    assert code != 0 and "skip.pilot" in out + err and "must be below the stage's G (4)" in out + err
