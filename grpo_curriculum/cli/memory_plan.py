"""
The memory plan of `grpo-curriculum sweep --plan-memory`: the batch geometry that fits a memory budget, found with
measured probes. Pure logic: the measurements come from a `measure` function (the sweep runs each probe as one real
training step in a child process).

In TRL 1.16 each process generates its `generation_batch_size / num_processes` = `per_device_train_batch_size x
steps_per_generation` completions at once, then trains on them in micro-batches of `per_device_train_batch_size`.
Activation memory grows with the per-device batch B; generation memory grows with the per-process generation batch
B x S, not with G at a fixed generation batch (G only sets how many of its completions share a prompt). The plan:

1. the largest B that fits at the smallest G of the sweep with S = 1 (the generation batch is the micro-batch):
   doubling from the smallest B that G takes, then bisecting between the last fit and the first misfit;
2. with that B, the largest S that fits at the smallest G (doubling from 2, then bisecting);
3. for each G of the sweep, the largest S up to that one at which G divides the generation batch (B x S x processes),
   measured once: a G that divides the largest generation batch keeps it, whole, for fewer prompts; one that does
   not gets a smaller one, or none when even its smallest (B x S x processes a multiple of G) is larger.

Each search makes at most `max_probes` probes; when the last one still fit, the plan says the search was capped (a
larger value may fit too). A probe fits when its measured peak is at most the budget; a probe that ran out of memory
(`None`) does not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.errors import CurriculumError, Problem

MAX_PROBES = 8
SAFETY_FRACTION = 0.9
_UNITS = {"": 2**30, "g": 2**30, "gb": 10**9, "gib": 2**30, "m": 2**20, "mb": 10**6, "mib": 2**20}


def parse_size(text: str) -> float:
    """
    A memory size in bytes from `--memory-budget`: a number of GiB (`40`, `0.5`), or with a unit (`900MiB`, `1.5GiB`,
    `80GB`).

    Raises:
        [`ValueError`]: for anything else, or a size that is not positive and finite.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*", str(text), re.IGNORECASE)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a memory size (e.g. 40 for 40 GiB, 900MiB, 1.5GiB)")
    size = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not (math.isfinite(size) and size > 0):
        raise ValueError(f"{text!r} is not a positive memory size")
    return size


def mib(size: float | None) -> str:
    """A size in bytes as MiB, for messages and tables (`out of memory` for `None`)."""
    return "out of memory" if size is None else f"{size / 2**20:.0f} MiB"


@dataclass(frozen=True)
class Probe:
    """
    One measured geometry.

    Args:
        per_device_train_batch_size (`int`): B.
        steps_per_generation (`int`): S.
        num_generations (`int`): G.
        peak (`float` or `None`): The measured peak memory in bytes (`None`: the probe ran out of memory).
        fits (`bool`): Whether the peak is within the budget.
    """

    per_device_train_batch_size: int
    steps_per_generation: int
    num_generations: int
    peak: float | None
    fits: bool


@dataclass
class MemoryPlan:
    """
    The outcome of [`plan_memory`].

    Args:
        budget (`float`): The budget in bytes.
        num_processes (`int`): The processes of the run.
        per_device_train_batch_size (`int`): The largest B that fit at the smallest G (S = 1).
        steps_per_generation (`int`): The largest S that fit with that B at the smallest G.
        capped (`list[str]`): The searches stopped by `max_probes` while still fitting.
        rows (`list[dict]`): One a G: `num_generations`, `steps_per_generation` (0: none fits), `needs` (the
            smallest S that G takes), `generation_batch_size`, `prompts` (per generation), `divides` (whether G divides
            the largest generation batch), `peak`, `fits`.
        common_steps (`int`): The largest S up to `steps_per_generation` that every fitting G divides (0: none).
        probes (`list[Probe]`): Every probe, in the order it ran.
    """

    budget: float
    num_processes: int
    per_device_train_batch_size: int
    steps_per_generation: int
    capped: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    common_steps: int = 0
    probes: list = field(default_factory=list)

    @property
    def fitting(self) -> list[int]:
        """The G values that fit, each with its own generation batch."""
        return [row["num_generations"] for row in self.rows if row["fits"]]


def largest_fitting(start: int, unit: int, fits: Callable[[int], bool], max_probes: int = MAX_PROBES):
    """
    The largest multiple of `unit` from `start` on for which `fits` holds, assuming it holds up to some value and not
    above: `start`, `2 start`, `4 start`, ... until one does not fit, then bisection between the last fit and it.

    Returns:
        `tuple[int | None, bool]`: The largest value found to fit (`None`: not even `start`), and whether `max_probes`
        stopped the search before it settled (a larger value may fit).
    """
    low = high = None
    value = start
    for _ in range(max_probes):
        if fits(value):
            low = value
        else:
            high = value
        if low is None:
            return None, False
        if high is None:
            value *= 2
            continue
        value = (low + high) // 2 // unit * unit
        if value <= low:
            return low, False
    return low, True


def plan_memory(num_generations, num_processes: int, budget: float, measure, max_probes: int = MAX_PROBES):
    """
    Plan the batch geometry of a sweep's G values within a memory budget (see the module's docstring).

    Args:
        num_generations (`list[int]`): The sweep's G values.
        num_processes (`int`): The run's processes.
        budget (`float`): Bytes a process may use at its peak.
        measure (`Callable[[int, int, int], float | None]`): The peak memory in bytes of one training step with
            `(per_device_train_batch_size, steps_per_generation, num_generations)`, `None` when it ran out of memory.
        max_probes (`int`, *optional*, defaults to `MAX_PROBES`): The most probes a search makes.

    Returns:
        [`MemoryPlan`]

    Raises:
        [`CurriculumError`]: when the budget is below the smallest probe's peak.
    """
    probes, seen = [], {}

    def fits(batch, steps, g):
        key = (batch, steps, g)
        if key not in seen:
            peak = measure(batch, steps, g)
            seen[key] = Probe(batch, steps, g, peak, peak is not None and peak <= budget)
            probes.append(seen[key])
        return seen[key].fits

    smallest = min(num_generations)
    unit = smallest // math.gcd(smallest, num_processes)  # B x processes a multiple of G
    batch, capped_batch = largest_fitting(unit, unit, lambda b: fits(b, 1, smallest), max_probes)
    if batch is None:
        first = probes[0]
        raise CurriculumError([Problem(
            "--memory-budget", mib(budget), f"is below the smallest probe's peak: G {smallest}, per-device batch "
            f"{unit}, 1 step per generation measured {mib(first.peak)}", "raise --memory-budget above that peak, or "
            "shrink what one completion costs (max_completion_length, a smaller model) or the smallest G")],
            "sweep --plan-memory")  # fmt: skip
    steps, capped_steps = largest_fitting(2, 1, lambda s: fits(batch, s, smallest), max_probes)
    plan = MemoryPlan(budget, num_processes, batch, steps or 1, probes=probes)
    plan.capped = [name for name, capped in (("per_device_train_batch_size", capped_batch),
                                             ("steps_per_generation", capped_steps)) if capped]  # fmt: skip
    common = 1
    for g in sorted(num_generations):
        step_unit = g // math.gcd(g, batch * num_processes)  # the smallest S at which G divides the generation batch
        own = plan.steps_per_generation // step_unit * step_unit
        fit = own > 0 and fits(batch, own, g)
        if fit:
            common = math.lcm(common, step_unit)
        plan.rows.append({"num_generations": g, "steps_per_generation": own, "needs": step_unit,
                          "generation_batch_size": batch * own * num_processes,
                          "prompts": batch * own * num_processes // g, "divides": own == plan.steps_per_generation,
                          "peak": seen[(batch, own, g)].peak if own else None, "fits": fit})  # fmt: skip
    plan.common_steps = plan.steps_per_generation // common * common if plan.fitting else 0
    return plan


def plan_rows(plan: MemoryPlan) -> list[dict]:
    """The memory plan's table, a row a G, as text."""
    rows = []
    for row in plan.rows:
        own = row["steps_per_generation"]
        rows.append({
            "G": row["num_generations"], "per_device_train_batch_size": plan.per_device_train_batch_size,
            "steps_per_generation": own or f"none (needs {row['needs']})",
            "generation batch": row["generation_batch_size"] or plan.per_device_train_batch_size * row["needs"] *
            plan.num_processes, "prompts/generation": row["prompts"] or "-",
            "G divides the largest": "yes" if row["divides"] else "no",
            "peak": mib(row["peak"]) if own else "not run", "fits": "yes" if row["fits"] else "no",
        })  # fmt: skip
    return rows
