"""
What the sweep's child processes (its runs, and the memory plan's probes) share: the recipe of an arm, the imports done
once before forking, dying with the sweep, and the peak memory of a run. [`~cli.sweep.command`] and
[`~cli.sweep.memory`] both import this module, and neither imports the other's helpers: `command` -> `memory` -> `child`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .table import Arm

def arm_recipe(path: str, raw: dict, arm: Arm, seed: int | None = None, output_dir: str | None = None):
    """The recipe an arm trains: `raw` (the user's recipe with its overrides) with the arm's stages (and seed)."""
    from ...config.recipe import parse_recipe
    from ...core.curriculum import curriculum_options

    overrides = {"curriculum": {**curriculum_options(raw.get("curriculum") or {}), "stages": arm.stages}}
    if seed is not None:
        overrides["seed"] = seed
    if output_dir is not None:
        overrides["output_dir"] = output_dir
    return parse_recipe(raw, path, overrides)


def peak_memory(model) -> tuple[int, str]:
    import resource

    import torch

    if model.device.type == "cuda":
        return torch.cuda.max_memory_allocated(model.device), "cuda"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024), "rss"  # bytes on macOS, KiB on Linux


def die_with_parent(parent: int) -> None:
    """In a child process of the sweep: be killed with the sweep (Linux; elsewhere a run stops at its next step), or
    exit at once if the sweep died before this."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(3)


FORK = "fork" in multiprocessing.get_all_start_methods()


def import_once() -> None:
    """Import torch, transformers and TRL in the sweep process before forking its runs: each run inherits them."""
    if FORK:
        from ...training import trainer  # noqa: F401  (CurriculumGRPOTrainer: TRL's GRPOTrainer, transformers, torch)
        from ..build import build_run  # noqa: F401
