"""The `train` command: validate the recipe and the launch, hold the output folder, train, and on a stop name the
checkpoint and the command that resumes it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from ..core.errors import Problem, raise_if_any
from .build import build_trainer
from .folders import folder_problems, hold_folder, main_process, output_dir_problems, resumes_in, writable_problems
from .launch import set_threads, torch_threads, unused_override_problems, validate_for_launch, vllm_server_problems
from .preflight import PREFLIGHT_FLAGS, preflight_unless_skipped
from .progress import curriculum_output, progress_callback
from .summary import print_end, print_start


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
    `trainer: rloo`, `CurriculumRLOOTrainer`; for `trainer: async_grpo`, `CurriculumAsyncGRPOTrainer`, once its vLLM
    server answers)."""
    from ..training.checkpoint import CheckpointWriteError
    from .progress import announce, split_output_flags, take_flags

    args.overrides, args.log_every, args.verbose = split_output_flags(
        args.overrides, getattr(args, "log_every", None), getattr(args, "verbose", False))
    args.overrides, own = take_flags(args.overrides, PREFLIGHT_FLAGS)  # `--no-preflight` after the recipe
    vars(args).update(own)
    from ..core.loading import find_recipe, read_yaml

    data, _ = read_yaml(find_recipe(args.recipe))  # a missing or unreadable recipe is said at once, before the imports
    announce("train")
    from ..config.arguments import command_line_overrides
    from ..config.recipe import load_recipe

    given = command_line_overrides(args.overrides, data)  # read as `trl grpo` (`trl rloo`) reads them
    recipe = load_recipe(args.recipe, given)
    raise_if_any(unused_override_problems(recipe, given), context=f"recipe {recipe.path}")
    validate_for_launch(recipe)
    preflight_unless_skipped(recipe, args)  # the dataset, the reward functions: before any folder or model
    raise_if_any(vllm_server_problems(recipe), context=f"recipe {recipe.path}")  # (`trainer: async_grpo`)
    resume = recipe.training.get("resume_from_checkpoint")
    output_dir = recipe.training.get("output_dir") or "trainer_output"  # TRL's default
    problems = folder_problems(output_dir, "output_dir")
    if isinstance(resume, str) and os.path.isfile(resume):  # e.g. RUN/checkpoint-2/trainer_state.json
        problems.append(Problem("resume_from_checkpoint", resume, "names a file, not a checkpoint folder",
                                f"pass its folder: `--resume_from_checkpoint {os.path.dirname(resume) or '.'}`"))
    raise_if_any(problems, context=f"recipe {recipe.path}")  # before the lock creates anything
    if main_process():  # one lock a launch: the other processes write where the first does
        hold_folder(output_dir, "output_dir", "train")  # until the command ends
    fix = ("continue the run in it with `--resume_from_checkpoint true`, or choose a new folder: `--output_dir "
           "runs/NAME`") if not resume else (f"resume_from_checkpoint {resume} is not a checkpoint of this folder: "
           "choose a new or empty `--output_dir` (the run continues there from that checkpoint), or `--output_dir "
           f"{os.path.dirname(os.path.normpath(str(resume)))}` to continue that run in its own folder")  # fmt: skip
    # Every process checks the folder, and sees what the others see: only the first one probes it by writing (a probe
    # file, which the check of an empty folder ignores), so no process refuses what another one wrote (issue 45).
    raise_if_any(output_dir_problems(output_dir, "output_dir", fix, resuming=resumes_in(output_dir, resume))
                 or (writable_problems(output_dir, "output_dir") if main_process() else []),
                 context=f"recipe {recipe.path}")
    threads, why = torch_threads(recipe)
    set_threads(threads)
    from ..training.engines import fsdp_fallback, save_final_model

    with curriculum_output(quiet=False):
        trainer = build_trainer(recipe, **_train_output(args))  # validates every stage against the world size
        if not args.verbose:
            from transformers import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # the progress shows G, temperature and reward instead
        main = trainer.accelerator.is_main_process
        if main:
            print_start(recipe.path, trainer, why)
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
        print_end(trainer, recipe, elapsed, output_dir, resumed=bool(resume))
    return 0


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
    own = ["--no-preflight"] if getattr(args, "no_preflight", False) else []  # taken out of the overrides
    own += ["--preflight-timeout", f"{args.preflight_timeout:g}"] if getattr(args, "preflight_timeout", None) else []
    command = shlex.join(["grpo-curriculum", "train", args.recipe, *overrides, *own, "--output_dir", output_dir,
                          "--resume_from_checkpoint", "true"])
    return f"; the last complete checkpoint is {found}. Resume from it with:\n  {command}"

