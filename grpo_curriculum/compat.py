"""
The TRL releases this version of grpo-curriculum is tested with, checked when the package is imported.

The seam, `grpo_curriculum.training._trl`, adapts to the differences between them by feature (it looks the method or
attribute up); this module only states the range, read from the installed TRL's metadata without importing it
(importing TRL takes seconds and pulls in torch; `grpo-curriculum check` imports neither). A TRL outside the range
fails at once, with one message naming the range, rather than deep in a training round (uncaught: that one line and
exit status 2, not a traceback; in an interactive session, the line). `GRPO_CURRICULUM_ANY_TRL=1` (or `true`,
`yes`, `on`) turns that into a warning, to try a newer TRL at one's own risk: `_trl/settings.py` then raises
[`UnsupportedTRLError`] where an internal it relies on is missing.

Keep `TRL_RANGE` equal to the `trl` requirement in `pyproject.toml` (a test compares them).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import warnings

TRL_RANGE = ((1, 14), (1, 17))
"""The supported TRL releases, `[lowest, highest)` as (major, minor): every 1.14, 1.15 and 1.16 release."""

ANY_TRL_VARIABLE = "GRPO_CURRICULUM_ANY_TRL"


def trl_requirement() -> str:
    """The range as a pip requirement, e.g. `trl>=1.14,<1.17`."""
    (low_major, low_minor), (high_major, high_minor) = TRL_RANGE
    return f"trl>={low_major}.{low_minor},<{high_major}.{high_minor}"


def _releases() -> str:
    """The supported minor releases in words, e.g. `1.14, 1.15 and 1.16`."""
    (major, low), (_, high) = TRL_RANGE
    names = [f"{major}.{minor}" for minor in range(low, high)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def release_of(version: str) -> tuple[int, int] | None:
    """`(major, minor)` of a version string (`"1.16.0"` -> `(1, 16)`), `None` for one that does not start so."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def unsupported_trl_message(version: str) -> str | None:
    """The one-line message for an installed TRL `version` outside [`TRL_RANGE`], or `None` when it is inside."""
    release = release_of(version)
    if release is not None and TRL_RANGE[0] <= release < TRL_RANGE[1]:
        return None
    return (f"grpo-curriculum supports {trl_requirement()} (TRL {_releases()}); the installed TRL is {version}. "
            f"Install a supported one: pip install '{trl_requirement()}' (or set {ANY_TRL_VARIABLE}=1 to try this one "
            "at your own risk).")  # fmt: skip


RLOO_TRL = (1, 16)
"""The TRL release `CurriculumRLOOTrainer` (a recipe's `trainer: rloo`) is built and tested against."""


def rloo_trl_problem(version: str | None) -> str | None:
    """Why `CurriculumRLOOTrainer` cannot run on TRL `version` (`None`: not installed), or `None` when it can."""
    return _release_problem(version, RLOO_TRL, "CurriculumRLOOTrainer relies on RLOOTrainer's internals as TRL {} "
                            "has them")


ASYNC_TRL = (1, 16)
"""The TRL release `CurriculumAsyncGRPOTrainer` (a recipe's `trainer: async_grpo`) is built and tested against: the
first with `trl.experimental.async_grpo`."""


def async_trl_problem(version: str | None) -> str | None:
    """Why `CurriculumAsyncGRPOTrainer` cannot run on TRL `version` (`None`: not installed), or `None` when it can."""
    return _release_problem(version, ASYNC_TRL, "CurriculumAsyncGRPOTrainer extends the asynchronous trainer of "
                            "`trl.experimental.async_grpo` as TRL {} has it")


def _release_problem(version: str | None, release: tuple[int, int], why: str) -> str | None:
    """`needs TRL <release> (<why>); the installed TRL is <version>`, or `None` when `version` is of `release`."""
    wanted = ".".join(map(str, release))
    if version is not None and release_of(version) == release:
        return None
    return f"needs TRL {wanted} ({why.format(wanted)}); the installed TRL is {version or 'none'}"


TRUTHY = ("1", "true", "yes", "on", "y", "t")
"""Values of [`ANY_TRL_VARIABLE`] that allow any TRL (case-insensitive), as most tools read a boolean variable."""


def allows_any_trl(value: str | None) -> bool:
    """Whether `value` (of [`ANY_TRL_VARIABLE`]) is one of [`TRUTHY`]."""
    return value is not None and value.strip().lower() in TRUTHY


def cpu_trl_problem(version: str, accelerator: bool) -> str | None:
    """
    Why TRL `version` cannot train here, or `None`: TRL 1.15's `GRPOTrainer` computes the training log-probs with a
    fused LM head built on Triton's GPU kernels, so on a machine without an accelerator (`accelerator`: CUDA or XPU,
    and the recipe does not ask for `use_cpu`) every step fails deep in a round.
    """
    if release_of(version) != (1, 15) or accelerator:
        return None
    return (f"TRL {version} cannot train on a CPU (its GRPOTrainer's fused LM head needs Triton's GPU kernels); "
            "TRL 1.14 and 1.16 can: pip install 'trl==1.16.*' (or 'trl==1.14.*'), or train on a GPU")


class TRLRangeError(ImportError):
    """The installed TRL is outside [`TRL_RANGE`] (see [`check_trl`])."""


def _one_line(previous):
    """A `sys.excepthook` that ends the program with one line and exit status 2 when [`TRLRangeError`] reaches
    the top level uncaught (a script, the `grpo-curriculum` command), instead of the import's traceback; in an
    interactive session it prints the line and the session goes on."""

    def hook(kind, value, traceback):
        if not isinstance(value, TRLRangeError):
            return previous(kind, value, traceback)
        print(f"grpo-curriculum: error: {value}", file=sys.stderr)
        if hasattr(sys, "ps1") or sys.flags.interactive:  # a REPL goes on after an uncaught exception: so does it here
            return None
        sys.stderr.flush()
        os._exit(2)  # as the commands exit for malformed input; nothing was started yet

    return hook


def check_trl() -> None:
    """
    Raise [`TRLRangeError`] (an `ImportError`) with [`unsupported_trl_message`] when the installed TRL is outside
    the supported range; uncaught, it ends the program with that one line and exit status 2. With
    `GRPO_CURRICULUM_ANY_TRL` set to a true value (`1`, `true`, `yes`, `on`), a warning instead.
    """
    try:
        version = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return  # importing the trainer says that TRL is missing; `check` works without it
    message = unsupported_trl_message(version)
    if message is None:
        return
    if allows_any_trl(os.environ.get(ANY_TRL_VARIABLE)):
        warnings.warn(message, stacklevel=2)
        return
    sys.excepthook = _one_line(sys.excepthook)
    raise TRLRangeError(message)
