"""
What `train` and `demo` print while a run trains: a progress bar (on a terminal) or a progress line every tenth of the
run (in a log file), with the step, G, temperature and reward; the curriculum's stages and switches above it as they
happen (see [`curriculum_output`]); TRL's per-step log dicts only when asked (`train --log-every N`, or
`--verbose` for TRL's own output). Nothing here changes what is logged: `trainer_state.json` and the `report_to`
trackers get every log line at the recipe's `logging_steps`, as without it.

Imports no torch: `transformers` (for `TrainerCallback`) and `tqdm` load when a callback is built.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import warnings

from ..core.errors import MISSING, CurriculumError, Problem

logger = logging.getLogger("grpo_curriculum")

LINES_PER_RUN = 10  # progress lines of a run written to something that is not a terminal
PER_PROMPT_PREFIX = "curriculum/prompts_at_g"


def split_output_flags(overrides: list[str], log_every: int | None = None, verbose: bool = False):
    """
    Take `train`'s own output flags (`--log-every N`, `--log-every=N`, `--verbose`) out of its `--key value` overrides
    (where they land when given after the recipe).

    Returns:
        `tuple[list[str], int | None, bool]`: The other overrides, `log_every` and `verbose`.

    Raises:
        [`CurriculumError`]: for `--log-every` without a positive integer, or with `--verbose`.
    """
    rest, found = take_flags(overrides, {"log_every": _positive, "verbose": None})
    log_every, verbose = found.get("log_every", log_every), found.get("verbose", verbose)
    if log_every is not None and verbose:
        raise CurriculumError([Problem("--log-every", log_every, "cannot be combined with --verbose (which prints "
                                       "TRL's own output: every log line, at the recipe's logging_steps)",
                                       "give one of them")], "train")  # fmt: skip
    return rest, log_every, verbose


def take_flags(overrides: list[str], flags: dict) -> tuple[list[str], dict]:
    """
    Take a command's own flags out of its `--key value` overrides (where they land when given after the recipe).

    Args:
        overrides (`list[str]`): The words after the recipe.
        flags (`dict`): Each flag's name (`log_every`: `--log-every N`, `--log_every N` or `--log-every=N`) and the
            function reading its value's text (`None` when the value is missing), or `None` for a switch (`--verbose`).

    Returns:
        `tuple[list[str], dict]`: The other overrides, in order, and `{name: value}` of the flags given.
    """
    rest, found, i = [], {}, 0
    while i < len(overrides):
        word = overrides[i]
        name, equals, inline = word.partition("=")
        flag = name[2:].replace("-", "_") if name.startswith("--") else None
        if flag in flags and flags[flag] is None and not equals:
            found[flag] = True
        elif flag in flags and flags[flag] is not None:
            if equals:
                text = inline
            elif i + 1 < len(overrides):
                text, i = overrides[i + 1], i + 1
            else:
                text = None
            found[flag] = flags[flag](text)
        else:
            rest.append(word)
        i += 1
    return rest, found


def _positive(text) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = None
    if value is None or value < 1:
        raise CurriculumError([Problem("--log-every", MISSING if text is None else text,
                                       "must be a positive number of optimizer steps: TRL's log dict is printed at "
                                       "every N-th step", "e.g. `--log-every 50`")], "train")  # fmt: skip
    return value


def describe_g(logs: dict) -> str:
    """G of a log line: `"8"`, or where prompts got their own G (per-prompt, top-up) `"2-12 (mean 6.5)"`."""
    sizes = {int(key[len(PER_PROMPT_PREFIX) :]): value for key, value in logs.items()
             if key.startswith(PER_PROMPT_PREFIX) and value}  # fmt: skip
    g = logs["curriculum/num_generations"]
    if len(sizes) > 1:
        return f"{min(sizes)}-{max(sizes)} (mean {g:.3g})"
    return f"{g:.3g}" if isinstance(g, float) else str(g)


def postfix(logs: dict) -> dict[str, str]:
    """What the progress bar shows of a log line: G, temperature, reward, and the completions sampled per trained one
    (a stage that samples in increments: top-up, dynamic sampling) when more were sampled than trained."""
    shown = {"G": describe_g(logs), "T": f"{logs['curriculum/temperature']:.2f}"}
    if logs.get("reward") is not None:
        shown["reward"] = f"{logs['reward']:.3f}"
    generated, dropped = logs.get("curriculum/generated"), logs.get("curriculum/dropped")
    if generated and dropped:  # the same log line's: trained = generated less the dropped groups' completions
        trained = generated - dropped * logs["curriculum/num_generations"]
        if trained > 0:
            shown["generated/trained"] = f"{generated / trained:.2f}"
    return shown


def format_logs(logs: dict) -> str:
    """One log dict as transformers' printer shows it (floats to 4 significant digits)."""
    return str({key: f"{value:.4g}" if isinstance(value, float) else value for key, value in logs.items()})


def progress_callback(log_every: int | None = None, stream=None, terminal: bool | None = None):
    """
    The callback that shows a run's progress (see the module's docstring).

    Args:
        log_every (`int`, *optional*): Also print TRL's log dict of every `log_every`-th optimizer step (and the last).
        stream (*optional*): Where to write (default: standard output).
        terminal (`bool`, *optional*): A progress bar (default: when `stream` is a terminal), else progress lines.
    """
    from transformers import TrainerCallback

    stream = sys.stdout if stream is None else stream
    if terminal is None:
        terminal = bool(getattr(stream, "isatty", lambda: False)())

    class CurriculumProgress(TrainerCallback):
        bar = None

        def __init__(self):
            self.shown, self.next_line, self.total, self.last_printed = {}, None, 0, -1
            self.rewards = []  # since the last progress line
            self.sizes: dict[int, int] = {}  # prompts trained at each G since the last progress line (per prompt)

        def on_train_begin(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            self.total = state.max_steps
            if terminal:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=state.max_steps, dynamic_ncols=True, desc="train", file=stream,
                                initial=state.global_step)  # fmt: skip
            self.next_line = _next_mark(state.global_step, self.total)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            if log_every is not None and ("loss" in logs or "train_runtime" in logs) and (
                    state.global_step % log_every == 0 or state.global_step == state.max_steps
                    or "train_runtime" in logs):  # fmt: skip
                self.write(format_logs(logs))
            elif any(key.startswith("eval_") for key in logs):  # evaluations are rare: always shown
                self.write(f"evaluation at step {state.global_step}: {format_logs(logs)}")
            if "curriculum/num_generations" in logs and "curriculum/temperature" in logs:
                self.shown = postfix(logs)
                if logs.get("reward") is not None and math.isfinite(logs["reward"]):
                    self.rewards.append(logs["reward"])
                for key, value in logs.items():
                    if key.startswith(PER_PROMPT_PREFIX) and value:
                        g = int(key[len(PER_PROMPT_PREFIX) :])
                        self.sizes[g] = self.sizes.get(g, 0) + int(value)
            if self.bar is not None:
                self.bar.set_postfix(self.shown, refresh=False)
                self.bar.update(state.global_step - self.bar.n)
            elif not terminal and self.next_line is not None and state.global_step >= self.next_line:
                self.line(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()
                self.bar = None
                return
            if not terminal and state.is_world_process_zero and self.shown and self.last_printed != state.global_step:
                self.line(state.global_step)

        def line(self, step: int) -> None:
            shown = dict(self.shown)
            if len(self.rewards) > 1:  # a line stands for several steps: their mean reward
                mean = sum(self.rewards) / len(self.rewards)
                shown["reward"] = f"{mean:.3f} (mean of {len(self.rewards)} logged steps)"
            if len(self.sizes) > 1:  # prompts got their own G: the range and mean since the last line
                prompts = sum(self.sizes.values())
                mean = sum(g * n for g, n in self.sizes.items()) / prompts
                shown["G"] = f"{min(self.sizes)}-{max(self.sizes)} (mean {mean:.3g})"
            self.rewards, self.sizes = [], {}
            shown = ", ".join(f"{key} {value}" for key, value in shown.items())
            percent = f" ({100 * step / self.total:.0f}%)" if self.total else ""
            self.write(f"step {step}/{self.total}{percent}" + (f": {shown}" if shown else ""))
            self.last_printed = step
            self.next_line = _next_mark(step, self.total)

        def write(self, text: str) -> None:
            if self.bar is not None:
                self.bar.write(text, file=stream)
            else:
                print(text, file=stream, flush=True)

    return CurriculumProgress()


def _next_mark(step: int, total: int) -> int | None:
    """The next step, after `step`, at which a progress line is written: every tenth of the run, and the last."""
    if not total or step >= total:
        return None
    every = max(1, math.ceil(total / LINES_PER_RUN))
    return min(total, (step // every + 1) * every)


HEAVY_LIBRARIES = "torch, transformers and TRL"


def announce(command: str, what: str = HEAVY_LIBRARIES, stream=None) -> None:
    """
    `grpo-curriculum COMMAND: loading torch, transformers and TRL ...` on standard error, before a command's slow
    imports (10 s and more on a busy machine), so that every command says something within a second. Only on the
    first process of a launch (`RANK` 0 or unset).
    """
    import os

    if os.environ.get("RANK", "0") != "0":
        return
    print(f"grpo-curriculum {command}: loading {what} ...", file=sys.stderr if stream is None else stream, flush=True)


class _TqdmHandler(logging.Handler):
    """Log records written above the progress bar (`tqdm.write`) on standard output, so they never break it."""

    def emit(self, record):
        from tqdm.auto import tqdm

        tqdm.write(self.format(record), file=sys.stdout)


@contextlib.contextmanager
def curriculum_output(quiet: bool):
    """
    While `train` or `demo` runs: `grpo_curriculum` INFO logs (the stages, each switch, the resume) on standard output
    above the progress bar. With `quiet` (the demo), only transformers errors. Restored afterwards.
    """
    from transformers.utils import logging as hf_logging

    handler, level, propagate = _TqdmHandler(), logger.level, logger.propagate
    handler.setFormatter(logging.Formatter("%(message)s"))
    hf_level = hf_logging.get_verbosity()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if quiet:
        hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            if quiet:  # transformers 5 renamed model methods TRL 1.16 calls in every round; `train` shows the warnings
                renamed = r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)`"
                warnings.filterwarnings("ignore", message=renamed + " is deprecated", category=FutureWarning)
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        hf_logging.set_verbosity(hf_level)

