"""The `plot` command: a run's G, temperature, reward and zero-std fraction over its optimizer steps."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from ..core.errors import CurriculumError, Problem

logger = logging.getLogger("grpo_curriculum")


def require_matplotlib() -> None:
    """
    Raises:
        [`CurriculumError`]: when matplotlib (a dependency, needed for the plots) cannot be imported.
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise CurriculumError([Problem("matplotlib", "not installed", "is needed to plot the run",
                                       "`pip install matplotlib` (a dependency of grpo-curriculum: reinstall it)")])


def switch_steps(log_history: list[dict]) -> list[int]:
    """
    The steps of the switches and stage changes in `log_history`: its `curriculum/switch` records (step `n` is the
    first optimizer step at the new setting) and, for runs written before those were recorded, the first logged step
    of each stage.
    """
    steps = {entry["step"] for entry in log_history if "curriculum/switch" in entry}
    entries = [e for e in log_history if "curriculum/stage" in e and "reward" in e]
    steps.update(b["step"] for a, b in zip(entries, entries[1:]) if a["curriculum/stage"] != b["curriculum/stage"])
    return sorted(steps)


def plot_run(log_history: list[dict], output: str, title: str = "") -> str:
    """
    Plot G, temperature, reward and zero-std fraction over optimizer steps, with a dashed line at each switch or stage
    change (at the first step trained at the new setting), to `output` (see [`save_figure`]); return the path written.
    Where prompts got their own G (per-prompt, top-up), the G panel shows the distribution of G trained; a run with
    stages that sample in increments gets two more panels: completions generated and trained, groups dropped and
    generation passes (see [`~cli.plot_panels`]).

    Raises:
        [`CurriculumError`]: when `log_history` holds no curriculum training step, or matplotlib is missing.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in log_history if "curriculum/stage" in e and "reward" in e]
    if not entries:
        raise CurriculumError([Problem("log_history", len(log_history), "holds no curriculum training steps to plot")])
    from .plot_panels import draw_g, draw_sampling, sampling_series

    steps = [e["step"] for e in entries]
    series = [
        ("num_generations (G)", None, "steps-post"),  # drawn by `draw_g`
        ("temperature", [e["curriculum/temperature"] for e in entries], "steps-post"),
        ("reward", [e.get("reward") for e in entries], "default"),
        ("zero-std group fraction", [e.get("frac_reward_zero_std") for e in entries], "default"),
    ]
    sampling = sampling_series(entries)
    panels = len(series) + (2 if sampling is not None else 0)
    boundaries = switch_steps(log_history)
    figure, axes = plt.subplots(panels, 1, figsize=(8, 2 * panels), sharex=True)
    if sampling is not None:
        draw_sampling(axes[-2], axes[-1], steps, sampling)
    for axis in axes[len(series) :]:
        for boundary in boundaries:
            axis.axvline(boundary, color="grey", linestyle="--", linewidth=0.8)
    for axis, (label, values, style) in zip(axes, series):
        if values is None:
            draw_g(axis, steps, entries)
        else:
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
    axes[-1].annotate("dashed: switches and stage changes (the first step at the new setting)",
                      xy=(1, -0.2 - 0.6 / panels), xycoords="axes fraction", ha="right", fontsize=7)  # fmt: skip
    figure.tight_layout()
    try:
        return save_figure(figure, output)
    finally:
        plt.close(figure)


def save_figure(figure, output: str, key: str = "-o") -> str:
    """
    Write `figure` to `output` and return the path written: `output/curriculum.png` when `output` is a folder, else
    `output` in the format its extension names (PNG, `.png` appended, when it has none, as matplotlib does; PNG into a
    device such as `/dev/stdout`, named as it is). The image is rendered in memory, then written through a temporary
    file and a rename (a device: directly), every write and the close checked (`savefig("/dev/full")` wrote
    `/dev/full.png` instead, and `plot` exited 0).

    Raises:
        [`CurriculumError`]: naming `key` and the path, for a format matplotlib cannot write or a failed write.
    """
    import io

    path = os.path.join(output, "curriculum.png") if os.path.isdir(output) else output
    device = os.path.exists(path) and not os.path.isfile(path)  # `/dev/stdout`, a pipe: written as it is named
    extension = os.path.splitext(path)[1][1:].lower()
    formats = figure.canvas.get_supported_filetypes()
    if device and extension not in formats:
        extension = "png"
    elif not extension:
        path, extension = path + ".png", "png"
    elif extension not in formats:
        raise CurriculumError([Problem(key, output, f"names a .{extension} file, a format the plot cannot be written "
                                       f"in ({', '.join(sorted(formats))})", "end it in .png")])
    buffer = io.BytesIO()
    figure.savefig(buffer, format=extension, dpi=100)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if device:  # no rename onto it
            with open(path, "wb") as file:
                file.write(buffer.getvalue())
        else:
            from ..training.files import atomic_write

            atomic_write(path, lambda file: file.write(buffer.getvalue()), binary=True)
    except OSError as error:
        raise CurriculumError([Problem(key, output, f"could not be written: {error.strerror or error}"
                                       + (f" ({path})" if path != output else ""),
                                       "choose a path on a file system with room that you can write to")]) from None
    return path


def read_log_history(run_dir: str) -> list[dict]:
    """
    The `log_history` of the `trainer_state.json` in `run_dir` (else in its newest `checkpoint-N` folder), read through
    the bounded loader ([`~grpo_curriculum.training.files.read_file`]) and checked: every value `plot_run` and
    `switch_steps` read has its type.

    Raises:
        [`CurriculumStateError`]: naming the file (missing, not a regular file, too large, not JSON, or holding a
        value of the wrong type) and the fix.
    """
    from ..core.rules import Rule
    from ..training.checkpoint import TRAINER_STATE_FILE, checkpoints, read_trainer_state
    from ..training.files import CurriculumStateError
    from ..training.schema import Nullable, problems_of, state_error
    from ..training.state import STEP

    fix = (f"pass the output directory of a grpo-curriculum run (it holds {TRAINER_STATE_FILE}, or checkpoint-N "
           "folders holding one)")  # fmt: skip
    path = Path(run_dir) / TRAINER_STATE_FILE
    if not os.path.lexists(path):
        found = [folder / TRAINER_STATE_FILE for folder in checkpoints(run_dir)
                 if os.path.lexists(folder / TRAINER_STATE_FILE)]  # fmt: skip
        if not found:
            where = "does not exist" if not os.path.exists(run_dir) else f"holds no {TRAINER_STATE_FILE}"
            raise CurriculumStateError(f"{run_dir} {where} (nor a checkpoint-N folder with one). Fix: {fix}.")
        errors = []
        for path in found:  # the newest whose state reads: a newer one may be cut short (killed while saving it)
            try:
                history = read_trainer_state(path, fix)["log_history"]
                break
            except CurriculumStateError as error:
                errors.append(error)
        else:
            raise errors[0]
        if errors:
            logger.warning("%s cannot be read (a checkpoint cut short?): plotting %s", found[0], path)
    else:
        history = read_trainer_state(path, fix)["log_history"]
    value = Nullable(Rule("number", finite=False))  # a logged metric may be NaN
    plotted = {"step": STEP, "curriculum/stage": STEP, "curriculum/temperature": value, "reward": value,
               "curriculum/num_generations?": value, "frac_reward_zero_std?": value, "curriculum/generated?": value,
               "curriculum/dropped?": value, "curriculum/increments?": value,
               "curriculum/informative_share?": value}  # fmt: skip
    problems = [problem for i, entry in enumerate(history)
                for problem in problems_of(plotted if "curriculum/stage" in entry and "reward" in entry else
                                           {"step": STEP} if "curriculum/switch" in entry else {},
                                           entry, f"log_history[{i}]")][:20]  # fmt: skip
    if problems:
        raise state_error(path, problems, fix, what="log lines that cannot be plotted")
    return history


def plot_main(args) -> int:
    """`grpo-curriculum plot RUN_DIR [-o FILE.png [--force]]`: an existing `-o` file is replaced only if `--force`."""
    from .progress import announce

    output = getattr(args, "output", None) or os.path.join(args.run_dir, "curriculum.png")
    if getattr(args, "output", None) and not getattr(args, "force", False):  # the default, curriculum.png, is ours
        path = os.path.join(output, "curriculum.png") if os.path.isdir(output) else output
        path += "" if os.path.splitext(path)[1] else ".png"
        if os.path.isfile(path):
            raise CurriculumError([Problem("-o", output, f"{path} exists: plot would replace it",
                                           "choose another file, or add `--force` to replace it")], context="plot")
    history = read_log_history(args.run_dir)
    announce("plot", "matplotlib")
    print(plot_run(history, output, title=f"{args.run_dir}"))
    return 0

