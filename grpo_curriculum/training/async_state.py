"""
The curriculum state of the asynchronous trainer in a checkpoint (`CurriculumAsyncGRPOTrainer`, docs/async.md):
`curriculum_async_state.json` (and `curriculum_async_arrays.npz` for a per-prompt stage's statistics), written and read
back the way the synchronous trainers' state is ([`~training.state`]: atomic writes, bounded reads, a schema).

It holds where the prompt stream stood before the first group the trainer had not trained (so a resumed worker starts
there: the groups from it on are sampled again, as TRL's own resume samples again from its first untrained group), the
per-prompt policy of the stage in force (its statistics and GRESO's skip probabilities), what the groups sampled again
already count in them (`observed`: [`~training.async_curriculum.AsyncCurriculum.state`]) and what they depend on (each
stage's G or policy and candidates, the dataset's size), which a resume must keep.
"""

from __future__ import annotations

import os

from ..core.errors import Problem, shorten
from ..core.rules import COUNT, TEMPERATURE, Rule, integer
from .files import CurriculumStateError, atomic_write, read_json
from .schema import Each, Nullable, split_arrays, state_error, validated
from .state import DEFAULTS, FIX, NUMBER, POLICY, ROUND_PLAN, STEP, STREAM

ASYNC_STATE_FILE = "curriculum_async_state.json"
ASYNC_ARRAYS_FILE = "curriculum_async_arrays.npz"
MAX_BYTES = 32 << 20
SCHEMA = {
    "version": integer(1, 1),
    "trainer": Rule("choice", choices=("async_grpo",)),
    "stages": Each(Rule("mapping")),
    "dataset_size": Nullable(COUNT),
    "stream": STREAM,
    "round": Nullable({"plan": ROUND_PLAN, "stage": STEP, "temperature": TEMPERATURE, "skip": STEP}),
    "policy_stage": Nullable(STEP),
    "policy": Nullable(POLICY),
    "defaults?": DEFAULTS,
    "observed": Nullable({"pending": Each({"key": Rule("str", high=256), "rewards": Each(Nullable(NUMBER))}),
                          "counted": Each(Rule("str", high=256)), "frontier": {"epoch": STEP, "position": STEP}}),
}
"""What `curriculum_async_state.json` (with its arrays) must hold."""


def write_async_state(folder: str, state: dict) -> None:
    """Write the state (its numpy arrays into `curriculum_async_arrays.npz`, the rest as JSON), each file atomically."""
    import json

    import numpy as np

    state, arrays = split_arrays({"version": 1, "trainer": "async_grpo", **state})
    if arrays:
        atomic_write(os.path.join(folder, ASYNC_ARRAYS_FILE), lambda f: np.savez_compressed(f, **arrays), binary=True)
    atomic_write(os.path.join(folder, ASYNC_STATE_FILE), lambda f: json.dump(state, f))


# the knob defaults of the versions that wrote an asynchronous state without recording them (before issue 52)
UNRECORDED_DEFAULTS = {"lookahead": 0, "defer": True, "weight": "hard", "skip_target": 0.05, "max_rounds": 2,
                       "top_up_prompts": "largest_half"}  # fmt: skip


def read_async_state(folder: str, stages: list[dict], dataset_size: int | None, schedule=None) -> dict:
    """
    Read and check the state of checkpoint `folder` against this run's stage signature and dataset size, and (given
    `schedule`, the run's stages) against the knob defaults it was written with: the synchronous trainers' migration
    ([`~training.checkpoint.defaults_changed`]), one path for both state files.

    Raises:
        [`CurriculumStateError`]: naming the file, what is wrong and what to do.
    """
    path = os.path.join(folder, ASYNC_STATE_FILE)
    if not os.path.lexists(path):
        raise CurriculumStateError(
            f"{folder} holds no {ASYNC_STATE_FILE}: it was not written by CurriculumAsyncGRPOTrainer with a stage "
            f"schedule (or not completely), so the curriculum cannot continue where it stopped. Fix: {FIX}.")
    state = read_json(path, FIX, MAX_BYTES)
    if not isinstance(state, dict):
        raise CurriculumStateError(f"{path} holds {type(state).__name__}, not a curriculum state. Fix: {FIX}.")
    state = validated(path, state, os.path.join(folder, ASYNC_ARRAYS_FILE), SCHEMA, _invariants, FIX)
    changed = [Problem(key, state[key], f"was {shorten(state[key])} when the checkpoint was written, now "
                       f"{shorten(now)}")
               for key, now in (("stages", stages), ("dataset_size", dataset_size)) if state[key] != now]  # fmt: skip
    if changed:
        raise state_error(path, changed, what="a curriculum this run cannot continue",
                          fix="resume with the stages and dataset the checkpoint was written with, or start a new "
                              "run from the model weights in it")  # fmt: skip
    if schedule is not None:
        from .checkpoint import defaults_changed

        moved = defaults_changed(list(schedule), {"defaults": state.get("defaults", UNRECORDED_DEFAULTS)})
        if moved is not None:
            raise CurriculumStateError(f"{path} does not fit this run: {moved}. Fix: {moved.fix}.")
    return state


def _invariants(state: dict) -> list[Problem]:
    stage, policy = state["policy_stage"], state["policy"]
    if (stage is None) != (policy is None):
        return [Problem("policy", "given" if policy else None, "must be given exactly with `policy_stage`")]
    if (policy is None) != (state["observed"] is None):
        return [Problem("observed", "given" if state["observed"] else None, "must be given exactly with `policy`")]
    if stage is not None and stage >= len(state["stages"]):
        return [Problem("policy_stage", stage, f"must name one of the {len(state['stages'])} stages")]
    if stage is not None and state["stages"][stage].get("policy") != policy["policy"]:
        return [Problem("policy.policy", policy["policy"], f"must be stage {stage}'s policy")]
    again = state["round"]
    if again is not None:
        sizes, stages = again["plan"]["sizes"], state["stages"]
        if len(again["plan"]["taken"]) != len(sizes):
            return [Problem("round.plan.taken", again["plan"]["taken"], f"must hold {len(sizes)} positions (one a "
                            "group of the round)")]
        if again["skip"] >= len(sizes):
            return [Problem("round.skip", again["skip"], f"must be below the round's {len(sizes)} groups")]
        if again["stage"] >= len(stages) or "policy" not in stages[again["stage"]]:
            return [Problem("round.stage", again["stage"], "must name one of the per-prompt stages")]
    if policy is not None:
        lengths = {len(policy["stats"][name]) for name in ("successes", "failures", "zero_streak")}
        if len(lengths) != 1:
            return [Problem("policy.stats", sorted(lengths), "must hold one value a slot in each array")]
    return []
