"""
The curriculum's part of a checkpoint: written atomically before the Trainer marks the checkpoint complete, versioned,
and validated when read back. No torch, no TRL (numpy only when arrays are written or read: the CLI imports this).

Every file the package reads back (a checkpoint's curriculum state and arrays, TRL's `entropy_ctrl_state.json`, the
`trainer_state.json` that resume and `grpo-curriculum plot` read) goes through one bounded reader ([`read_file`]):
regular files only (a FIFO, a device or a link to one is refused before it is read), at most [`MAX_FILE_BYTES`]
bytes, and any problem is one [`CurriculumStateError`] naming the file and the fix. The curriculum state is then
checked against a schema of [`~core.rules.Rule`] tables with ranges, and against the invariants that tie
its parts together, before anything of it is applied.

A checkpoint folder is *complete* when everything resume reads parses and validates: its `trainer_state.json` (the
Trainer writes it after the model, optimizer and RNG states; [`GRPOHooks`] makes that write atomic and writes the
curriculum state just before it), for a curriculum run its `curriculum_state.json` and `curriculum_arrays.npz`, and
TRL's `entropy_ctrl_state.json` when it is there (or when the run needs it). `resume_from_checkpoint=True` resumes from
the newest complete checkpoint, skipping newer ones with a warning that names each and says what is wrong with it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core.adaptive import WEIGHTS
from ..core.errors import MISSING, Problem, plural, shorten, shorten_text
from ..core.rules import COUNT, MAX_COUNT, MAX_STEPS, POSITIVE, TEMPERATURE, Rule, fraction, integer
from ..core.sampling import MAX_ROUNDS, ON_LIMIT_NAMES, TOP_UP_PROMPTS_RULES
from ..core.slots import HASHED_SLOTS
from .files import (MAX_FILE_BYTES, CurriculumStateError, atomic_json, atomic_write, read_file,  # noqa: F401
                    read_json)  # (this module's names before the file I/O moved to files.py)
from .manifest import check_manifest

logger = logging.getLogger("grpo_curriculum")

STATE_FILE = "curriculum_state.json"
ARRAYS_FILE = "curriculum_arrays.npz"  # per-prompt statistics, next to the state
TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME
TRAINER_KINDS = ("grpo", "rloo")  # `trainer:` of a recipe: CurriculumGRPOTrainer, CurriculumRLOOTrainer
ENTROPY_STATE_FILE = "entropy_ctrl_state.json"  # TRL's adaptive entropy controller (`use_adaptive_entropy`)
VERSION = 6  # 6: `callback.defaults` (the knob defaults it was written with; one without `weight` ran the per-prompt
# weight `"knapsack"`, one without `top_up_prompts` the earlier top-up round size, `"pilot_half"`); 5:
# `callback.current` may hold a round's `top_up` and `dynamic_sampling` (absent before: `None`)
READS = (2, 3, 4, 5, 6)  # version 2 stored the prompt report's sums of squared deviations (`m2`, float32), not `std`
PER_PROMPT_SINCE = 4  # the value-maximising per-prompt rule: earlier per-prompt states (another rule) are refused
# States of versions 4-5 written before the top-up rule `value` was removed (the format is otherwise the same) may
# hold a top-up setting's `rule` and `round_priors`: `rule: flat_first` (what top-up does) and a null `round_priors`
# are dropped when read; a state of a `value` stage is refused ([`_top_up_value_stage`]).
REQUIRED = ("version", "global_step", "micro_step", "callback", "stream", "round_start_stream", "round_plan",
            "geometry", "prompt_report")  # fmt: skip
LEGACY_DEFAULTS = {"lookahead": 2, "defer": True, "weight": "knapsack", "max_rounds": 4,
                   "top_up_prompts": "pilot_half", "skip_target": 0.25}
"""The defaults of the knobs in [`knob_defaults`] that a state without `callback.defaults` (version 5 and before) was
written with: per-prompt `lookahead`, `defer` and `weight`, dynamic sampling's `max_rounds`, and the rule of a top-up
round's default size (`"pilot_half"`: `generation_batch_size // (2 * pilot)` prompts). A knob a state's
`callback.defaults` does not record has its value here (the first version-6 states recorded no `weight` and no
`top_up_prompts`; none before issue 37 recorded `skip_target`, 0.25 until then)."""
MAX_STATE_BYTES = 32 << 20
"""Largest `curriculum_state.json` read, in bytes (32 MiB: read in well under a second; a 50k-prompt state takes under
1 MB, its arrays are in `curriculum_arrays.npz`)."""
MAX_SWITCHES = 10_000
"""Most switch records a state may hold (a switch is recorded only when G, the stage or an adaptive temperature
changes, at most once a round, and a reversal waits twice as long each time: real runs record a few dozen)."""

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_FIX = ("resume from another checkpoint of this run (`resume_from_checkpoint=True` picks the newest complete one), "
        "or start a new run from the model weights in it")  # fmt: skip


class CheckpointWriteError(RuntimeError):
    """
    Writing the checkpoint `folder` failed (`cause`: a full disk, a quota, a file system gone read-only, ...): torch
    reports a full disk as `RuntimeError: ... unexpected pos`, so the failure is named by the checkpoint it cut short.

    Args:
        folder (`str`): The checkpoint folder being written (left incomplete: resume never picks it).
        cause (`BaseException`): What the write raised.
    """

    def __init__(self, folder: str, cause: BaseException):
        self.folder, self.cause = folder, cause
        super().__init__(f"writing {folder} failed: {describe_write_error(folder, cause)}")


def describe_write_error(folder: str, cause: BaseException) -> str:
    """`cause` in a line, with the free space left where `folder` is (torch's own message does not say it is full)."""
    import shutil

    errors = [cause, *(e for e in (cause.__cause__, cause.__context__) if e is not None)]
    what = next((f"{e.strerror}" for e in errors if isinstance(e, OSError) and e.strerror), None)
    what = what or (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
    place = folder
    while place and not os.path.isdir(place):
        place = os.path.dirname(place)
    try:
        free = shutil.disk_usage(place or ".").free
        what += f"; {free / 2**20:.1f} MiB free on its file system"
    except OSError:
        pass
    return what


def knob_defaults() -> dict:
    """
    This version's defaults of the knobs whose defaults changed (per-prompt `lookahead`, `defer`, `weight` and
    `skip_target`, dynamic
    sampling's `max_rounds`, the rule of a top-up round's default size, `top_up_prompts`): a checkpoint records them
    (`callback.defaults`), so that a run resumed by a version with other defaults can tell a knob its recipe left at
    the default from one it set (see [`~training.callback.CurriculumCallback.load_state_dict`]).
    """
    from dataclasses import fields

    from ..core.adaptive import Adaptive
    from ..core.sampling import DynamicSampling, TopUp

    adaptive = {field.name: field.default for field in fields(Adaptive)}
    return {"lookahead": adaptive["lookahead"], "defer": adaptive["defer"], "weight": adaptive["weight"],
            "skip_target": adaptive["skip_target"], "max_rounds": DynamicSampling().max_rounds,
            "top_up_prompts": TopUp.PROMPTS_RULE}


# --- schemas: what a value read back must be ---------------------------------------------------------------------


@dataclass(frozen=True)
class Array:
    """
    A one-dimensional numpy array of `"int"` or `"number"` values, every one finite and in `[low, high]`.

    Args:
        kind (`str`): `"int"` (integer dtype) or `"number"` (integer or float dtype).
        low (`float`, *optional*): Least value.
        high (`float`, *optional*): Largest value.
        length (`int`, *optional*): The exact length.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    length: int | None = None

    def problems(self, key: str, value) -> list[Problem]:
        import numpy as np

        noun = "integers" if self.kind == "int" else "numbers"
        if not (isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in
                ("iu" if self.kind == "int" else "iuf")):  # fmt: skip
            array = isinstance(value, np.ndarray)
            what = f"an array of dtype {value.dtype} and shape {value.shape}" if array else value
            return [Problem(key, what, f"must be a one-dimensional array of {noun}")]
        if self.length is not None and len(value) != self.length:
            return [Problem(key, f"{len(value)} values", f"must hold {self.length} values")]
        values = value.astype(np.float64)
        bad = ~np.isfinite(values)
        bad |= values < (-math.inf if self.low is None else self.low)
        bad |= values > (math.inf if self.high is None else self.high)
        if not bad.any():
            return []
        where = int(bad.argmax())
        bounds = f" in [{self.low:g}, {self.high:g}]" if self.low is not None and self.high is not None else (
            f" >= {self.low:g}" if self.low is not None else "")
        return [Problem(f"{key}[{where}]", value[where].item(),
                        f"must be a finite number{bounds} ({int(bad.sum())} of {len(value)} values are not)")]


@dataclass(frozen=True)
class Nullable:
    """`null`, or what `schema` accepts."""

    schema: object


@dataclass(frozen=True)
class Each:
    """A list of at most `high` values, each accepted by `item`."""

    item: object
    high: int = MAX_COUNT


@dataclass(frozen=True)
class ByField:
    """A mapping checked with `schemas[value[field]]` (e.g. an adaptive policy's state, by policy name)."""

    field: str
    schemas: dict


def problems_of(schema, value, key: str = "") -> list[Problem]:
    """
    Every problem of `value` against `schema` (the first 20), each with its key path.

    A schema is a [`~core.rules.Rule`] (one value), an [`Array`], a `dict` (a mapping that must hold each
    key, a key ending in `?` may be absent; other keys are ignored), a `tuple` (a list of exactly those values), or a
    [`Nullable`], [`Each`] or [`ByField`].
    """
    found: list[Problem] = []
    _walk(schema, value, key, found)
    return found[:20]


def _walk(schema, value, key: str, found: list) -> None:
    if len(found) >= 20:
        return
    if isinstance(schema, (Rule, Array)):
        found += schema.problems(key, value)
    elif isinstance(schema, Nullable):
        if value is not None:
            _walk(schema.schema, value, key, found)
    elif isinstance(schema, ByField):
        if not isinstance(value, dict):
            found.append(Problem(key, value, "must be a mapping"))
        elif not isinstance(value.get(schema.field), str) or value[schema.field] not in schema.schemas:
            found.append(Problem(f"{key}.{schema.field}", value.get(schema.field, MISSING),
                                 f"must be one of {sorted(schema.schemas)}"))
        else:
            _walk(schema.schemas[value[schema.field]], value, key, found)
    elif isinstance(schema, (Each, tuple)):
        items = schema if isinstance(schema, tuple) else None
        if not isinstance(value, list):
            found.append(Problem(key, value, "must be a list"))
        elif items is not None and len(value) != len(items):
            found.append(Problem(key, value, f"must be a list of {len(items)} values"))
        elif items is None and len(value) > schema.high:
            found.append(Problem(key, f"{len(value)} values", f"must hold at most {schema.high} values"))
        else:
            for i, item in enumerate(value):
                _walk(items[i] if items is not None else schema.item, item, f"{key}[{i}]", found)
    elif isinstance(schema, dict):
        if not isinstance(value, dict):
            found.append(Problem(key or "top level", value, "must be a mapping"))
            return
        for name, sub in schema.items():
            name, optional = name.removesuffix("?"), name.endswith("?")
            path = f"{key}.{name}" if key else name
            if name in value:
                _walk(sub, value[name], path, found)
            elif not optional:
                found.append(Problem(path, MISSING, "is missing"))
    else:
        raise TypeError(f"not a schema: {schema!r}")


STEP = integer(0, MAX_STEPS)
_NUMBER = Rule("number")
_G = integer(2, MAX_COUNT, why="GRPO needs at least 2 completions per prompt")
_SHARE = fraction(False, False)
_LOOKAHEAD = integer(0, MAX_COUNT)
_SETTING = {"stage": STEP, "num_generations": Nullable(_G), "temperature": TEMPERATURE,
            "top_up?": Nullable({"pilot": _G, "largest": _G, "prompts": Nullable(COUNT),
                                 "rule?": Rule("choice", choices=("flat_first",))}),
            "dynamic_sampling?": Nullable({"max_rounds": integer(1, MAX_ROUNDS),
                                           "on_limit?": Rule("choice", choices=ON_LIMIT_NAMES)})}  # fmt: skip
_POLICY_BASE = {"version": integer(1, 1), "num_generations": _G, "temperature": TEMPERATURE, "round": STEP,
                "last_g_change": Nullable(STEP), "last_t_change": Nullable(STEP), "zero_std_ema": Nullable(_SHARE),
                "distinct_ema": Nullable(_SHARE), "reward_ema": Nullable(_NUMBER), "best_reward": Nullable(_NUMBER),
                "stale": STEP, "clamped_from": Nullable(POSITIVE),
                "decision": Nullable((_G, TEMPERATURE, Nullable(Rule("str"))))}  # fmt: skip
_PROMPT_STATS = {"successes": Array("number", 0), "failures": Array("number", 0),
                 "zero_streak": Array("int", -127, 127), "moments": Array("number", 0, 1, 3)}  # fmt: skip
_POLICY = ByField("policy", {
    "hysteresis": {**_POLICY_BASE, "above": STEP, "below": STEP},
    "success_rate": {**_POLICY_BASE, "window": Each(Each(Rule("any_of", options=(
                         STEP, Rule("list", low=2, high=2, item=Rule("number", low=0)))))),
                     "counts?": {"slots": Array("int", 0, MAX_STEPS), "successes": Array("number", 0),
                                 "trials": Array("number", 0)}},
    "per_prompt": {**_POLICY_BASE, "stats": _PROMPT_STATS,
                   "explore": {"easy": Rule("number", low=0.05, high=0.95), "hard": Rule("number", low=0.05, high=0.95)}},
})  # fmt: skip
_STREAM = {"epoch": STEP, "position": STEP, "waiting?": Each(STEP)}
ROUND_PLAN = {"taken": Each(STEP), "sizes": Each(_G), "left": Each(STEP), "read": STEP, "deferred": STEP}
"""A per-prompt round's allocation ([`~core.allocation.RoundPlan.as_dict`])."""
STATE_SCHEMA = {
    "trainer?": Rule("choice", choices=TRAINER_KINDS),  # which trainer wrote it (absent before issue 44)
    "global_step": STEP,
    "micro_step": integer(0, MAX_STEPS * MAX_COUNT),  # a micro-step per gradient accumulation step
    "geometry": {"generation_batch_size": integer(1, MAX_COUNT), "num_processes": integer(1, MAX_COUNT)},
    "callback": {"stages": Each(Rule("mapping")), "comparisons?": Each(Rule("str")),
                 "current": Nullable(_SETTING), "rounds": STEP,
                 "switches": Each({"step": STEP, "round": STEP, "from": _SETTING, "to": _SETTING,
                                   "reason": Rule("str")}, high=MAX_SWITCHES),
                 "policy_stage?": Nullable(STEP), "policy": Nullable(_POLICY), "deferred_total?": STEP,
                 "defaults?": {"lookahead?": _LOOKAHEAD, "defer?": Rule("bool"),
                               "weight?": Rule("choice", choices=tuple(WEIGHTS)),
                               "skip_target?": fraction(False, True),
                               "max_rounds?": integer(0, MAX_ROUNDS),
                               "top_up_prompts?": Rule("choice", choices=tuple(TOP_UP_PROMPTS_RULES))}},
    "stream": _STREAM,
    "round_start_stream": Nullable(_STREAM),
    "round_plan": Nullable(ROUND_PLAN),
    "prompt_report": {"slots": Array("int", 0, MAX_STEPS), "count": Array("int", 0, 2**32 - 1),
                      "seen": Array("int", 1, 2**32 - 1), "mean": Array("number"), "std?": Array("number", 0),
                      "m2?": Array("number", 0), "texts": Each((STEP, Rule("any")), high=MAX_STEPS)},
}  # fmt: skip
"""What `curriculum_state.json` (with its arrays) must hold; [`_invariants`] checks how its parts fit together."""

TRAINER_STATE_SCHEMA = {"global_step": STEP, "log_history": Each(Rule("mapping"), high=MAX_STEPS)}
"""What grpo-curriculum reads of a `trainer_state.json`."""

ENTROPY_STATE_SCHEMA = {"entropy_coef": _NUMBER, "last_world_entropy": Rule("number", finite=False)}
"""TRL's `entropy_ctrl_state.json` (`last_world_entropy` is infinite before the first measurement)."""


PROMPTS_AT_G = "curriculum/prompts_at_g"
"""The log key prefix of the prompts a per-prompt round trained at each G (`curriculum/prompts_at_g4`)."""
_PROMPT_COUNT = Rule("number", low=0, why="the prompts trained at that G")


def _log_problems(log_history: list) -> list[Problem]:
    """What the package reads of a trainer state's log lines: each `curriculum/prompts_at_g{G}` names a G (an integer
    from 2) and holds a count (the first 20 problems)."""
    problems = []
    for i, entry in enumerate(log_history):
        for key, value in entry.items():
            if not (isinstance(key, str) and key.startswith(PROMPTS_AT_G)) or len(problems) >= 20:
                continue
            g = key[len(PROMPTS_AT_G) :]
            if not (g.isdecimal() and g.isascii() and len(g) < 8 and int(g) >= 2):
                problems.append(Problem(f"log_history[{i}].{key}", value, f"must name a G, `{PROMPTS_AT_G}` and an "
                                        "integer of at least 2 (the key of the prompts trained at that G)"))
            else:
                problems += _PROMPT_COUNT.problems(f"log_history[{i}].{key}", value)
    return problems


def _invariants(state: dict) -> list[Problem]:
    """What ties the parts of a curriculum state together (run after the schema holds)."""
    problems = []
    callback, rounds = state["callback"], state["callback"]["rounds"]
    stages = callback["stages"]

    def stage_of(key: str, index: int) -> dict | None:
        if index < len(stages):
            return stages[index]
        problems.append(Problem(key, index, f"must be a stage index below {len(stages)} (the checkpoint's schedule "
                                            f"has {plural(len(stages), 'stage')})"))  # fmt: skip
        return None

    current = callback["current"]
    stage = None if current is None else stage_of("callback.current.stage", current["stage"])
    if stage is not None:
        g, policy = current["num_generations"], stage.get("policy")
        if policy is None and g != stage.get("num_generations"):
            problems.append(Problem("callback.current.num_generations", g,
                                    f"must be the stage's G, {shorten(stage.get('num_generations'))}"))
        elif policy in ("per_prompt", "top_up") and g is not None:
            problems.append(Problem("callback.current.num_generations", g,
                                    f"must be null in a {policy.replace('_', '-')} stage"))
        elif policy not in (None, "per_prompt", "top_up") and g not in (stage.get("num_generations") or ()):
            problems.append(Problem("callback.current.num_generations", g,
                                    f"must be one of the stage's candidates {shorten(stage.get('num_generations'))}"))
    policy_stage, policy = callback.get("policy_stage"), callback["policy"]
    if (policy_stage is None) != (policy is None):
        problems.append(Problem("callback.policy", policy, "must be given exactly when callback.policy_stage is"))
    elif policy_stage is not None and (stage := stage_of("callback.policy_stage", policy_stage)) is not None:
        if policy["policy"] != stage.get("policy"):
            problems.append(Problem("callback.policy.policy", policy["policy"],
                                    f"must be the policy of stage {policy_stage}, {shorten(stage.get('policy'))}"))
        elif policy["num_generations"] not in (stage.get("num_generations") or ()):
            problems.append(Problem("callback.policy.num_generations", policy["num_generations"],
                                    f"must be one of the stage's candidates {shorten(stage.get('num_generations'))}"))
    switch_rounds = [switch["round"] for switch in callback["switches"]]
    if not _increasing(switch_rounds) or (switch_rounds and switch_rounds[-1] > rounds):
        problems.append(Problem("callback.switches", f"{len(switch_rounds)} records", "must be at most one a round: "
                                f"increasing rounds of at most callback.rounds = {rounds}"))
    if rounds > state["micro_step"] + 1:
        problems.append(Problem("callback.rounds", rounds, f"must be at most micro_step + 1 = "
                                f"{state['micro_step'] + 1} (a generation round takes at least one micro-step)"))
    for name in ("stream", "round_start_stream"):
        if state[name] is not None and state[name]["epoch"] > 3 * rounds + 1:
            problems.append(Problem(f"{name}.epoch", state[name]["epoch"], "must be at most 3 x callback.rounds + 1 = "
                                    f"{3 * rounds + 1} (a generation round opens at most 3 passes over the dataset)"))
    for name in ("stream", "round_start_stream"):
        waiting, position = (state[name] or {}).get("waiting", []), (state[name] or {}).get("position")
        if not _increasing(waiting) or (waiting and waiting[-1] >= position):
            problems.append(Problem(f"{name}.waiting", waiting, f"must be increasing positions below {name}.position "
                                    f"= {position} (prompts read in this pass and left for the next round)"))
    start = state["round_start_stream"]
    if start is not None and start["epoch"] > state["stream"]["epoch"]:
        problems.append(Problem("round_start_stream.epoch", start["epoch"],
                                f"must be at most stream.epoch = {state['stream']['epoch']}"))
    plan = state["round_plan"]
    if plan is not None:
        taken, left, sizes, batch = plan["taken"], plan["left"], plan["sizes"], state["geometry"]["generation_batch_size"]
        if start is None:
            problems.append(Problem("round_start_stream", None, "must be given with round_plan"))
        if sum(sizes) != batch:
            problems.append(Problem("round_plan.sizes", sizes, "must add up to geometry.generation_batch_size, "
                                    f"{batch} (a round's completions)"))
        if len(taken) != len(sizes) or not _increasing(taken):
            problems.append(Problem("round_plan.taken", taken, f"must be {len(sizes)} increasing positions (one a "
                                    "prompt of the round)"))
        if not _increasing(left) or set(taken) & set(left):
            problems.append(Problem("round_plan.left", left, "must be increasing positions not in round_plan.taken"))
    problems += _same_lengths("prompt_report", state["prompt_report"], ("slots", "count", "seen", "mean", "std", "m2"))
    report = state["prompt_report"]
    if ("std" in report) == ("m2" in report):
        problems.append(Problem("prompt_report", MISSING, "must hold `std` (or, written by version 2, `m2`)"))
    if not problems:
        import numpy as np

        slots = report["slots"]
        if len(slots) > 1 and not (np.diff(slots.astype(np.int64)) > 0).all():
            problems.append(Problem("prompt_report.slots", MISSING, "must be increasing (each touched slot once)"))
        if (report["count"].astype(np.float64) > report["seen"].astype(np.float64) * MAX_COUNT).any():
            problems.append(Problem("prompt_report.count", MISSING, f"must be at most {MAX_COUNT} x seen (completions "
                                    "of the prompt's visits)"))
        counts = (policy or {}).get("counts")
        if counts is not None:
            problems += _same_lengths("callback.policy.counts", counts, ("slots", "successes", "trials"))
            if not problems and (counts["successes"] > counts["trials"]).any():
                problems.append(Problem("callback.policy.counts.successes", MISSING, "must be at most trials"))
        if (policy or {}).get("policy") == "per_prompt":
            names = ("successes", "failures", "zero_streak")
            problems += _same_lengths("callback.policy.stats", policy["stats"], names)
    return problems


RECIPE_FIX = "resume with the recipe and dataset the checkpoint was written with, or " + _FIX.split(", or ")[1]


def _top_up_rule(saved: dict | None, plan, index: int) -> str | None:
    """The rule a saved round's top-up plan breaks against its recipe stage's `plan` (a `TopUp` or `None`), if any:
    the same pilot and largest group, and the same prompts unless the saved ones came from the default rule (a recipe
    may then set the prompts that rule gave, see `defaults_changed`)."""
    if plan is None:
        return None if saved is None else f"must be null: stage {index} of the recipe is not a top-up stage"
    if saved is not None and (saved["pilot"], saved["largest"]) == (plan.pilot, plan.largest) and (
            saved["prompts"] in (None, plan.prompts)):  # fmt: skip
        return None
    return (f"must be stage {index}'s top-up plan: pilot {plan.pilot}, largest {plan.largest}, prompts "
            f"{plan.prompts or 'by the default rule'}")


def fit_problems(state: dict, stages: list, dataset_size: int | None) -> list[Problem]:
    """
    Every value of a read curriculum state (see [`read_state`]) that the run resuming it cannot use: checked against
    its recipe's `stages` (whose signature the state's matches) and, for a map-style dataset, the `dataset_size`
    prompts of a pass (`None`: an iterable dataset, whose end is not known).

    - An adaptive-temperature stage's temperatures (`callback.policy.temperature`, its `decision` and the current
      setting's) lie within the stage's `temperature: [low, high]`.
    - The current setting holds a `top_up` plan exactly when its stage is a top-up stage, and then the stage's; a
      `dynamic_sampling` block exactly when its stage samples dynamically.
    - Stream positions lie within a pass of the dataset (`stream`, `round_start_stream`), and a per-prompt round's
      plan gives each prompt one of the stage's candidates and takes and leaves only prompts it looked at (the waiting
      ones and the `read` next ones); the prompt slots of the report and of the success-rate policy's counts lie
      within the dataset's (its rows, or the hash buckets of an iterable dataset).
    """
    problems = []
    callback = state["callback"]
    current, policy_stage, policy = callback["current"], callback.get("policy_stage"), callback["policy"]
    bounds = None if policy_stage is None or stages[policy_stage].adaptive is None else (
        stages[policy_stage].adaptive.temperature)

    def within(key: str, value) -> None:
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            problems.append(Problem(key, value, f"must lie within stage {policy_stage}'s adaptive temperature bounds "
                                    f"[{bounds[0]:g}, {bounds[1]:g}]", RECIPE_FIX))

    if policy is not None:
        within("callback.policy.temperature", policy["temperature"])
        if policy["decision"] is not None:
            within("callback.policy.decision[1]", policy["decision"][1])
    if current is not None:
        stage = stages[current["stage"]]
        if current["stage"] == policy_stage:
            within("callback.current.temperature", current["temperature"])
        rule = _top_up_rule(current.get("top_up"), stage.top_up, current["stage"])
        if rule is not None:
            problems.append(Problem("callback.current.top_up", current.get("top_up"), rule, RECIPE_FIX))
        if (current.get("dynamic_sampling") is None) != (stage.dynamic_sampling is None) and state["version"] >= 5:
            rule = (f"must be given: stage {current['stage']} of the recipe samples dynamically"
                    if stage.dynamic_sampling is not None else
                    f"must be null: stage {current['stage']} of the recipe has no `dynamic_sampling`")
            problems.append(Problem("callback.current.dynamic_sampling", current.get("dynamic_sampling"), rule,
                                    RECIPE_FIX))
    for name in ("stream", "round_start_stream"):
        position = (state[name] or {}).get("position", 0)
        if dataset_size is not None and position > dataset_size:
            problems.append(Problem(f"{name}.position", position, f"must be at most the dataset's {dataset_size} "
                                    "prompts (the prompts read in the current pass)", RECIPE_FIX))
    slots = HASHED_SLOTS if dataset_size is None else dataset_size  # (`stream.prompt_slots`)
    counts = (policy or {}).get("counts") or {}
    for key, touched in (("prompt_report.slots", state["prompt_report"]["slots"]),
                         ("callback.policy.counts.slots", counts.get("slots"))):  # fmt: skip
        if touched is not None and len(touched) and int(touched.max()) >= slots:
            problems.append(Problem(f"{key}[{int(touched.argmax())}]", int(touched.max()), f"must be below {slots}, "
                                    "the prompt slots of this run's dataset (a slot a dataset row, or a hash bucket "
                                    "of an iterable dataset's prompts)", RECIPE_FIX))
    plan, start = state["round_plan"], state["round_start_stream"]
    adaptive = None if plan is None or current is None else stages[current["stage"]].adaptive
    if adaptive is not None and not set(plan["sizes"]) <= set(adaptive.num_generations):
        problems.append(Problem("round_plan.sizes", plan["sizes"], f"must be candidates of stage {current['stage']}, "
                                f"{list(adaptive.num_generations)} (each prompt's G in a per-prompt round)",
                                RECIPE_FIX))
    if plan is not None and start is not None:
        looked = len(start.get("waiting", [])) + plan["read"]
        if dataset_size is not None and start["position"] + plan["read"] > dataset_size:
            problems.append(Problem("round_plan.read", plan["read"], f"must be at most the dataset's {dataset_size} "
                                    f"prompts less round_start_stream.position ({start['position']})", RECIPE_FIX))
        for name in ("taken", "left"):
            if plan[name] and plan[name][-1] >= looked:
                problems.append(Problem(f"round_plan.{name}", plan[name], f"must be positions below {looked}, the "
                                        "prompts the round looked at (round_start_stream.waiting and round_plan.read)",
                                        _FIX))
    return problems


def _top_up_value_stage(state: dict) -> str | None:
    """Where a state (not validated yet) holds the removed top-up rule `value`: `"stage 0"`, `"callback.policy"`,
    `"round_priors"`; `None` when it does not."""
    callback = state.get("callback") if isinstance(state.get("callback"), dict) else {}
    stages = callback.get("stages") if isinstance(callback.get("stages"), list) else []
    found = [f"stage {i}" for i, stage in enumerate(stages)
             if isinstance(stage, dict) and stage.get("rule") == "value"]  # fmt: skip
    if found:
        return ", ".join(found)
    policy = callback.get("policy")
    if isinstance(policy, dict) and policy.get("policy") == "top_up":
        return "callback.policy"
    return "round_priors" if state.get("round_priors") is not None else None


def _drop_top_up_rule(state: dict) -> None:
    """Drop the `rule: flat_first` that states written before the top-up rule `value` was removed hold in each top-up
    setting (`flat_first` is what top-up does), so that they read as a state written now."""
    callback = state["callback"]
    settings = [callback["current"]] + [switch[end] for switch in callback["switches"] for end in ("from", "to")]
    for setting in settings:
        if setting is not None and isinstance(setting.get("top_up"), dict):
            setting["top_up"].pop("rule", None)
    state.pop("round_priors", None)


def _increasing(values: list) -> bool:
    return all(b > a for a, b in zip(values, values[1:]))


def _same_lengths(key: str, arrays: dict, names) -> list[Problem]:
    lengths = {name: len(arrays[name]) for name in names if name in arrays}
    if len(set(lengths.values())) <= 1:
        return []
    return [Problem(key, MISSING, f"must hold arrays of one length; they hold {lengths}")]


# --- writing and reading a checkpoint ------------------------------------------------------------------------------


def write_state(folder: str, state: dict) -> None:
    """Write a curriculum state (numpy arrays into `curriculum_arrays.npz`, the rest into `curriculum_state.json`)."""
    import numpy as np

    state, arrays = _split_arrays({"version": VERSION, **state})
    if arrays:
        atomic_write(os.path.join(folder, ARRAYS_FILE), lambda f: np.savez_compressed(f, **arrays), binary=True)
    atomic_write(os.path.join(folder, STATE_FILE), lambda f: json.dump(state, f))


def state_error(path: str | os.PathLike, problems: list[Problem], fix: str = _FIX,
                what: str = "values that cannot be used (the file is damaged or was edited)") -> CurriculumStateError:
    """One [`CurriculumStateError`] for the `problems` of the file `path`: `"{path} holds {what}:"`, then each."""
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return CurriculumStateError(f"{os.fspath(path)} holds {what}:\n{lines}\nFix: {fix}.")


def read_state(folder: str, global_step: int | None = None) -> dict:
    """
    Read and check the curriculum state of a checkpoint: `curriculum_state.json` and `curriculum_arrays.npz`, through
    [`read_file`], against [`STATE_SCHEMA`] and the invariants between its parts. Version 2 states are read too.

    Args:
        folder (`str`): The checkpoint folder.
        global_step (`int`, *optional*): The step the Trainer resumes at (its `trainer_state.json`); must match.

    Raises:
        [`CurriculumStateError`]: naming the file, what is wrong with it and what to do.
    """
    path = os.path.join(folder, STATE_FILE)
    if not os.path.lexists(path):
        raise CurriculumStateError(
            f"{folder} holds no {STATE_FILE}: it was not written by CurriculumGRPOTrainer (or not completely), so the "
            f"curriculum cannot continue where it stopped. Fix: {_FIX}."
        )
    state = read_json(path, _FIX, MAX_STATE_BYTES)
    if not isinstance(state, dict):
        raise CurriculumStateError(f"{path} holds {type(state).__name__}, not a curriculum state. Fix: {_FIX}.")
    if state.get("version") not in READS:
        raise CurriculumStateError(
            f"{path} has version {shorten(state.get('version'))}; this grpo-curriculum reads versions "
            f"{' and '.join(map(str, READS))}. Fix: resume with the grpo-curriculum version that wrote it, or "
            f"{_FIX.split(', or ')[1]}."
        )
    policy = state.get("callback", {}).get("policy") if isinstance(state.get("callback"), dict) else None
    if state["version"] < PER_PROMPT_SINCE and (state.get("round_plan") is not None or (
            isinstance(policy, dict) and policy.get("policy") == "per_prompt")):  # fmt: skip
        raise CurriculumStateError(
            f"{path} has version {state['version']} and holds the state of the per-prompt rule that grpo-curriculum "
            f"0.1 used before version {PER_PROMPT_SINCE}; this one allocates by expected value and cannot continue it. "
            "Fix: resume with the grpo-curriculum version that wrote it, or start a new run from the model weights "
            "in it."
        )
    value_stage = _top_up_value_stage(state)
    if value_stage is not None:
        raise CurriculumStateError(
            f"{path} holds the per-prompt history of a top-up stage with `rule: value` ({value_stage}); that rule "
            "was removed from grpo-curriculum (it won on no task of the study, docs/study.md), so this version cannot "
            "continue it: top-up now always grows the groups whose rewards are all equal first, then the "
            "lowest-variance ones. Fix: resume with the grpo-curriculum version that wrote it, or start a new run "
            "from the model weights in it (without `rule` in the recipe)."
        )
    missing = [key for key in REQUIRED if key not in state]
    if missing:
        raise CurriculumStateError(f"{path} lacks {', '.join(missing)}: the file is damaged. Fix: {_FIX}.")
    state = validated(path, state, os.path.join(folder, ARRAYS_FILE), STATE_SCHEMA, _invariants)
    _drop_top_up_rule(state)
    if global_step is not None and state["global_step"] != global_step:
        raise CurriculumStateError(
            f"{path} was saved at step {state['global_step']}, but the checkpoint's trainer state is at step "
            f"{global_step}: the file belongs to another checkpoint. Fix: {_FIX}."
        )
    return state


def validated(path: str, state: dict, arrays_path: str, schema, invariants) -> dict:
    """
    `state` (read from `path`) with its arrays joined in from `arrays_path`, checked against `schema` and then
    `invariants(state)` (a list of problems).

    Raises:
        [`CurriculumStateError`]: naming `path` and every problem found.
    """
    try:
        if _has_arrays(state):
            state = _join_arrays(state, _read_arrays(arrays_path))
        problems = problems_of(schema, state) or invariants(state)
    except RecursionError:
        problems = [Problem(path, MISSING, "nests values too deeply")]
    if problems:
        raise state_error(path, problems)
    return state


def _read_arrays(path: str) -> dict:
    """The arrays of `curriculum_arrays.npz`, by name (a truncated, oversized or foreign archive: one error)."""
    import io
    import zlib

    import numpy as np

    data = read_file(path, _FIX)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
            if unpacked > MAX_FILE_BYTES:
                raise CurriculumStateError(f"{path} unpacks to {unpacked} bytes, more than the {MAX_FILE_BYTES} read. "
                                           f"Fix: {_FIX}.")  # fmt: skip
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        if isinstance(error, CurriculumStateError):
            raise
        raise CurriculumStateError(f"{path} cannot be read ({shorten_text(str(error), 200)}): the file is damaged. "
                                   f"Fix: {_FIX}.") from None


def read_trainer_state(path: str | os.PathLike, fix: str = _FIX) -> dict:
    """
    A `trainer_state.json`, through [`read_file`], checked against [`TRAINER_STATE_SCHEMA`].

    Raises:
        [`CurriculumStateError`]: naming the file, what is wrong with it and `fix`.
    """
    state = read_json(path, fix)
    problems = problems_of(TRAINER_STATE_SCHEMA, state) or _log_problems(state["log_history"])
    if problems:
        raise state_error(os.fspath(path), problems, fix)
    return state


class OtherTrainerError(CurriculumStateError):
    """A checkpoint written by the other trainer (GRPO for RLOO, or the reverse): never resumed, nor skipped."""


def check_checkpoint(folder: str | os.PathLike, entropy: bool = False, trainer: str | None = None) -> None:
    """
    Check that everything resume reads in a checkpoint folder parses and validates: `trainer_state.json`, the
    curriculum state at the same step (written by `trainer`, `grpo` or `rloo`, when given), `entropy_ctrl_state.json`
    when it is there (or `entropy`: the run needs it), that transformers' files are whole ([`damaged_file`]) and, where
    the checkpoint has a manifest, hold the bytes saved ([`~training.manifest.check_manifest`]).

    Raises:
        [`CurriculumStateError`]: for the first file that cannot be used, naming it and what is wrong with it
        ([`OtherTrainerError`] for a checkpoint of the other trainer).
    """
    folder = os.fspath(folder)
    trainer_state = read_trainer_state(os.path.join(folder, TRAINER_STATE_FILE))
    state = read_state(folder, global_step=trainer_state["global_step"])
    wrote = state.get("trainer")
    if trainer is not None and wrote is not None and wrote != trainer:
        names = {"grpo": "GRPO (CurriculumGRPOTrainer)", "rloo": "RLOO (CurriculumRLOOTrainer)"}
        raise OtherTrainerError(
            f"{os.path.join(folder, STATE_FILE)} was written by a run of {names[wrote]}, and this run is "
            f"{names[trainer]}: "
            f"it would continue with another loss, advantages and beta. Fix: resume with `trainer: {wrote}` (the "
            f"recipe the run was trained with), or start a new {trainer} run in a new folder (`--output_dir "
            "runs/NAME`, without `--resume_from_checkpoint`).")
    damaged = damaged_file(folder)
    if damaged:
        raise CurriculumStateError(f"{damaged}. Fix: {_FIX}.")
    check_manifest(folder, _FIX)  # the bytes saved, where the checkpoint has a manifest
    path = os.path.join(folder, ENTROPY_STATE_FILE)
    if os.path.lexists(path) or entropy:
        problems = problems_of(ENTROPY_STATE_SCHEMA, read_json(path, _FIX))
        if problems:
            raise state_error(path, problems)


def damaged_file(folder: str) -> str | None:
    """
    The first of transformers' files in a checkpoint that is cut short, said as `PATH is damaged: ...` (`None` when
    each is whole): a `*.safetensors` whose header does not cover the file (read by `safetensors`, no tensor loaded), a
    `*.pt`, `*.pth` or `*.bin` (`torch.save`'s zip archives: optimizer, scheduler, RNG states, training arguments)
    without its closing directory. Cheap: headers only. A truncated file would otherwise fail inside torch or
    safetensors after the model is built, without its name.
    """
    import zipfile

    for path in sorted(Path(folder).iterdir()):
        if not path.is_file():
            continue
        try:
            if path.suffix == ".safetensors":
                from safetensors import safe_open

                with safe_open(str(path), "np"):
                    pass
            elif path.suffix in (".pt", ".pth", ".bin"):
                zipfile.ZipFile(path).close()
        except Exception as error:  # noqa: BLE001 - each library's own error: the file cannot be read whole
            return (f"{path} is damaged ({type(error).__name__}: {error}): it was cut short (a disk filled up, or a "
                    "copy stopped)")
    return None


def checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """The `checkpoint-N` folders in `output_dir`, newest (highest N) first."""
    if not os.path.isdir(output_dir):
        return []
    found = ((int(m.group(1)), p) for p in Path(output_dir).iterdir()
             if p.is_dir() and (m := _CHECKPOINT.match(p.name)))  # fmt: skip
    return [p for _, p in sorted(found, reverse=True)]


def newest_complete_checkpoint(output_dir: str | os.PathLike, entropy: bool = False, trainer: str | None = None,
                               below: int | None = None) -> str | None:
    """
    The newest complete `checkpoint-N` folder in `output_dir` (highest N, below step `below` when given; see
    [`check_checkpoint`]), or `None`; each newer one is named in a warning that says what is wrong with it. A
    checkpoint of the other trainer is an error ([`OtherTrainerError`]), not skipped.
    """
    for folder in checkpoints(output_dir):
        if below is not None and int(folder.name.rsplit("-", 1)[1]) >= below:
            continue
        try:
            check_checkpoint(folder, entropy, trainer)
        except OtherTrainerError:
            raise
        except CurriculumStateError as error:
            reason = str(error).split("\nFix:")[0].split(" Fix: ")[0]
            logger.warning("skipping %s: it was not completely written (a run stopped while saving it) or cannot be "
                           "used: %s", folder, reason)  # fmt: skip
            continue
        return str(folder)
    return None


def resume_checkpoint(resume_from_checkpoint, output_dir: str, entropy: bool = False, trainer: str | None = None):
    """
    The checkpoint folder a curriculum run resumes from: for `True`, the newest complete one in `output_dir`; for a
    path, that folder once [`check_checkpoint`] passes; else `resume_from_checkpoint` itself (`None`, `False`).

    Raises:
        [`CurriculumStateError`]: when `output_dir` holds no complete checkpoint, or the path is missing or not a
        complete checkpoint, naming what was found and what to do.
    """
    fix = ("train without `resume_from_checkpoint` to start a new run, or set `output_dir` to the directory of the "
           "run to resume")  # fmt: skip
    if resume_from_checkpoint is True:
        found = newest_complete_checkpoint(output_dir, entropy, trainer)
        if found is not None:
            return found
        folders = checkpoints(output_dir)
        if not folders:
            where = "does not exist" if not os.path.exists(output_dir) else "holds no checkpoint-N folder"
            raise CurriculumStateError(f"resume_from_checkpoint=True, but the output directory {output_dir} {where}: "
                                       f"there is no checkpoint to resume. Fix: {fix}.")  # fmt: skip
        names = ", ".join(p.name for p in folders[:5]) + (", ..." if len(folders) > 5 else "")
        raise CurriculumStateError(
            f"resume_from_checkpoint=True, but none of the {len(folders)} checkpoint folders in {output_dir} "
            f"({names}) is a complete CurriculumGRPOTrainer checkpoint (the warnings above say what each lacks). "
            f"Fix: {fix}."
        )
    if isinstance(resume_from_checkpoint, (str, os.PathLike)):
        path = os.fspath(resume_from_checkpoint)
        if not os.path.isdir(path):
            rule = "is not a directory" if os.path.exists(path) else "does not exist"
            raise CurriculumStateError(f"resume_from_checkpoint = {path} {rule}: a checkpoint is a checkpoint-N "
                                       "folder of an output directory. Fix: pass one, or `true` for the newest "
                                       f"complete one in `output_dir`, or {fix}.")  # fmt: skip
        try:
            check_checkpoint(path, entropy, trainer)
        except OtherTrainerError:
            raise
        except CurriculumStateError as error:
            match = _CHECKPOINT.match(os.path.basename(os.path.normpath(path)))
            older = match and newest_complete_checkpoint(os.path.dirname(os.path.normpath(path)) or ".", entropy,
                                                         trainer, below=int(match.group(1)))
            if not older:
                raise
            raise CurriculumStateError(f"{error} Or resume from {older}, the newest complete checkpoint before it: "
                                       f"`--resume_from_checkpoint {older}`.") from None
    return resume_from_checkpoint


def _has_arrays(state) -> bool:
    if isinstance(state, dict):
        return set(state) == {"__array__"} or any(_has_arrays(v) for v in state.values())
    return False


def _split_arrays(state, path: str = "") -> tuple[object, dict]:
    """`state` with every numpy array replaced by a reference `{"__array__": name}`, and the arrays by name."""
    if type(state).__module__ == "numpy" and hasattr(state, "shape"):
        return {"__array__": path}, {path: state}
    if isinstance(state, dict):
        out, arrays = {}, {}
        for key, value in state.items():
            out[key], found = _split_arrays(value, f"{path}.{key}" if path else str(key))
            arrays.update(found)
        return out, arrays
    return state, {}


def _join_arrays(state, arrays: dict):
    """Undo [`_split_arrays`] (a reference to an array the archive lacks stays as it is, for the schema to name)."""
    if isinstance(state, dict):
        if set(state) == {"__array__"}:
            name = state["__array__"]
            return arrays[name] if isinstance(name, str) and name in arrays else state
        return {key: _join_arrays(value, arrays) for key, value in state.items()}
    return state
