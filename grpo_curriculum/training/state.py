"""
The curriculum state in a checkpoint of the synchronous trainers: `curriculum_state.json` and, for the per-prompt
statistics, `curriculum_arrays.npz`, written atomically ([`write_state`]) before the Trainer marks the checkpoint
complete, versioned, and read back ([`read_state`]) through the bounded reader ([`~training.files.read_file`]),
checked against [`STATE_SCHEMA`] (a [`~training.schema`] table with ranges) and against the invariants that tie its
parts together, before anything of it is applied. No torch, no TRL (numpy only when arrays are written or read).

The schema's pieces that the asynchronous trainer's state shares ([`POLICY`], [`STREAM`], [`ROUND_PLAN`], [`STEP`],
[`NUMBER`]) are here, and so is [`FIX`], what to do about a checkpoint file that cannot be used.
"""

from __future__ import annotations

import json
import os

from ..core.adaptive import WEIGHTS
from ..core.errors import MISSING, Problem, plural, shorten
from ..core.rules import COUNT, MAX_COUNT, MAX_STEPS, POSITIVE, TEMPERATURE, Rule, fraction, integer
from ..core.sampling import MAX_ROUNDS, ON_LIMIT_NAMES, TOP_UP_PROMPTS_RULES
from .files import CurriculumStateError, atomic_write, read_json
from .schema import Array, ByField, Each, Nullable, split_arrays, validated

STATE_FILE = "curriculum_state.json"
ARRAYS_FILE = "curriculum_arrays.npz"  # per-prompt statistics, next to the state
TRAINER_KINDS = ("grpo", "rloo")  # `trainer:` of a recipe: CurriculumGRPOTrainer, CurriculumRLOOTrainer
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
MAX_STATE_BYTES = 32 << 20
"""Largest `curriculum_state.json` read, in bytes (32 MiB: read in well under a second; a 50k-prompt state takes under
1 MB, its arrays are in `curriculum_arrays.npz`)."""
MAX_SWITCHES = 10_000
"""Most switch records a state may hold (a switch is recorded only when G, the stage or an adaptive temperature
changes, at most once a round, and a reversal waits twice as long each time: real runs record a few dozen)."""
FIX = ("resume from another checkpoint of this run (`resume_from_checkpoint=True` picks the newest complete one), "
       "or start a new run from the model weights in it")  # fmt: skip
"""What to do about a checkpoint file that cannot be used (every error reading one names it)."""

STEP = integer(0, MAX_STEPS)
NUMBER = Rule("number")
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
                "distinct_ema": Nullable(_SHARE), "reward_ema": Nullable(NUMBER), "best_reward": Nullable(NUMBER),
                "stale": STEP, "clamped_from": Nullable(POSITIVE),
                "decision": Nullable((_G, TEMPERATURE, Nullable(Rule("str"))))}  # fmt: skip
_PROMPT_STATS = {"successes": Array("number", 0), "failures": Array("number", 0),
                 "zero_streak": Array("int", -127, 127), "moments": Array("number", 0, 1, 3)}  # fmt: skip
POLICY = ByField("policy", {
    "hysteresis": {**_POLICY_BASE, "above": STEP, "below": STEP},
    "success_rate": {**_POLICY_BASE, "window": Each(Each(Rule("any_of", options=(
                         STEP, Rule("list", low=2, high=2, item=Rule("number", low=0)))))),
                     "counts?": {"slots": Array("int", 0, MAX_STEPS), "successes": Array("number", 0),
                                 "trials": Array("number", 0)}},
    "per_prompt": {**_POLICY_BASE, "stats": _PROMPT_STATS,
                   "explore": {"easy": Rule("number", low=0.05, high=0.95), "hard": Rule("number", low=0.05, high=0.95)}},
})  # fmt: skip
STREAM = {"epoch": STEP, "position": STEP, "waiting?": Each(STEP), "filling?": Rule("bool")}
ROUND_PLAN = {"taken": Each(STEP), "sizes": Each(_G), "left": Each(STEP), "read": STEP, "deferred": STEP}
"""A per-prompt round's allocation ([`~core.allocation.RoundPlan.as_dict`])."""
DEFAULTS = {"lookahead?": _LOOKAHEAD, "defer?": Rule("bool"), "weight?": Rule("choice", choices=tuple(WEIGHTS)),
            "skip_target?": fraction(False, True), "max_rounds?": integer(0, MAX_ROUNDS),
            "top_up_prompts?": Rule("choice", choices=tuple(TOP_UP_PROMPTS_RULES))}
"""The knob defaults a state was written with (`training.checkpoint.knob_defaults`), for the one migration path of
both state files (`training.checkpoint.defaults_changed`)."""

STATE_SCHEMA = {
    "trainer?": Rule("choice", choices=TRAINER_KINDS),  # which trainer wrote it (absent before issue 44)
    "global_step": STEP,
    "micro_step": integer(0, MAX_STEPS * MAX_COUNT),  # a micro-step per gradient accumulation step
    "geometry": {"generation_batch_size": integer(1, MAX_COUNT), "num_processes": integer(1, MAX_COUNT)},
    "callback": {"stages": Each(Rule("mapping")), "comparisons?": Each(Rule("str")),
                 "current": Nullable(_SETTING), "rounds": STEP,
                 "switches": Each({"step": STEP, "round": STEP, "from": _SETTING, "to": _SETTING,
                                   "reason": Rule("str")}, high=MAX_SWITCHES),
                 "policy_stage?": Nullable(STEP), "policy": Nullable(POLICY), "deferred_total?": STEP,
                 "defaults?": DEFAULTS},
    "stream": STREAM,
    "round_start_stream": Nullable(STREAM),
    "round_plan": Nullable(ROUND_PLAN),
    "prompt_report": {"slots": Array("int", 0, MAX_STEPS), "count": Array("int", 0, 2**32 - 1),
                      "seen": Array("int", 1, 2**32 - 1), "mean": Array("number"), "std?": Array("number", 0),
                      "m2?": Array("number", 0), "texts": Each((STEP, Rule("any")), high=MAX_STEPS)},
}  # fmt: skip
"""What `curriculum_state.json` (with its arrays) must hold; [`_invariants`] checks how its parts fit together."""


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


# --- writing and reading the state -----------------------------------------------------------------------------------


def write_state(folder: str, state: dict) -> None:
    """Write a curriculum state (numpy arrays into `curriculum_arrays.npz`, the rest into `curriculum_state.json`)."""
    import numpy as np

    state, arrays = split_arrays({"version": VERSION, **state})
    if arrays:
        atomic_write(os.path.join(folder, ARRAYS_FILE), lambda f: np.savez_compressed(f, **arrays), binary=True)
    atomic_write(os.path.join(folder, STATE_FILE), lambda f: json.dump(state, f))


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
            f"curriculum cannot continue where it stopped. Fix: {FIX}."
        )
    state = read_json(path, FIX, MAX_STATE_BYTES)
    if not isinstance(state, dict):
        raise CurriculumStateError(f"{path} holds {type(state).__name__}, not a curriculum state. Fix: {FIX}.")
    if state.get("version") not in READS:
        raise CurriculumStateError(
            f"{path} has version {shorten(state.get('version'))}; this grpo-curriculum reads versions "
            f"{' and '.join(map(str, READS))}. Fix: resume with the grpo-curriculum version that wrote it, or "
            f"{FIX.split(', or ')[1]}."
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
        raise CurriculumStateError(f"{path} lacks {', '.join(missing)}: the file is damaged. Fix: {FIX}.")
    state = validated(path, state, os.path.join(folder, ARRAYS_FILE), STATE_SCHEMA, _invariants, FIX)
    _drop_top_up_rule(state)
    if global_step is not None and state["global_step"] != global_step:
        raise CurriculumStateError(
            f"{path} was saved at step {state['global_step']}, but the checkpoint's trainer state is at step "
            f"{global_step}: the file belongs to another checkpoint. Fix: {FIX}."
        )
    return state
