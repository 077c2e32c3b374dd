"""
Finding, checking and resuming checkpoints. A checkpoint folder is *complete* when everything resume reads parses and
validates: its `trainer_state.json` (the Trainer writes it after the model, optimizer and RNG states; [`GRPOHooks`]
makes that write atomic and writes the curriculum state just before it), for a curriculum run its curriculum state
([`~training.state.read_state`]), TRL's `entropy_ctrl_state.json` when it is there (or when the run needs it), and
transformers' files, whole (and, where the checkpoint has a manifest, holding the bytes saved).
`resume_from_checkpoint=True` resumes from the newest complete checkpoint, skipping newer ones with a warning that
names each and says what is wrong with it.

What a resumed run must keep: a state that fits the run's recipe and dataset ([`fit_problems`]), and the rules of the
knob defaults it was written with ([`defaults_changed`]: a knob whose default changed since, and which the recipe
leaves at its default, would change the rule mid-run). No torch, no TRL: the CLI imports this.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.adaptive import Adaptive
from ..core.errors import Problem
from ..core.rules import MAX_STEPS, Rule
from ..core.sampling import (TOP_UP_PROMPTS_RULES, DynamicSampling, TopUp, top_up_prompts_by_rule,
                             top_up_prompts_divisor)  # fmt: skip
from ..core.slots import HASHED_SLOTS
from .files import CurriculumStateError, read_json
from .manifest import check_manifest
from .schema import Each, problems_of, state_error
from .state import FIX, NUMBER, STATE_FILE, STEP, read_state

if TYPE_CHECKING:
    from ..core.schedule import Stage

logger = logging.getLogger("grpo_curriculum")

TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME
ENTROPY_STATE_FILE = "entropy_ctrl_state.json"  # TRL's adaptive entropy controller (`use_adaptive_entropy`)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


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


TRAINER_STATE_SCHEMA = {"global_step": STEP, "log_history": Each(Rule("mapping"), high=MAX_STEPS)}
"""What grpo-curriculum reads of a `trainer_state.json`."""

ENTROPY_STATE_SCHEMA = {"entropy_coef": NUMBER, "last_world_entropy": Rule("number", finite=False)}
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


def read_trainer_state(path: str | os.PathLike, fix: str = FIX) -> dict:
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
        raise CurriculumStateError(f"{damaged}. Fix: {FIX}.")
    check_manifest(folder, FIX)  # the bytes saved, where the checkpoint has a manifest
    path = os.path.join(folder, ENTROPY_STATE_FILE)
    if os.path.lexists(path) or entropy:
        problems = problems_of(ENTROPY_STATE_SCHEMA, read_json(path, FIX))
        if problems:
            raise state_error(path, problems, FIX)


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


# --- fitting a state to the run that resumes it ----------------------------------------------------------------------


RECIPE_FIX = "resume with the recipe and dataset the checkpoint was written with, or " + FIX.split(", or ")[1]
"""What to do about a state that the recipe or dataset of the run resuming it cannot use ([`fit_problems`])."""


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
                                        FIX))
    return problems


# --- the knob defaults a checkpoint was written with -----------------------------------------------------------------


LEGACY_DEFAULTS = {"lookahead": 2, "defer": True, "weight": "knapsack", "max_rounds": 4,
                   "top_up_prompts": "pilot_half", "skip_target": 0.25}
"""The defaults of the knobs in [`knob_defaults`] that a state without `callback.defaults` (version 5 and before) was
written with: per-prompt `lookahead`, `defer` and `weight`, dynamic sampling's `max_rounds`, and the rule of a top-up
round's default size (`"pilot_half"`: `generation_batch_size // (2 * pilot)` prompts). A knob a state's
`callback.defaults` does not record has its value here (the first version-6 states recorded no `weight` and no
`top_up_prompts`; none before issue 37 recorded `skip_target`, 0.25 until then)."""


def knob_defaults() -> dict:
    """
    This version's defaults of the knobs whose defaults changed (per-prompt `lookahead`, `defer`, `weight` and
    `skip_target`, dynamic
    sampling's `max_rounds`, the rule of a top-up round's default size, `top_up_prompts`): a checkpoint records them
    (`callback.defaults`), so that a run resumed by a version with other defaults can tell a knob its recipe left at
    the default from one it set (see [`~training.callback.CurriculumCallback.load_state_dict`]).
    """
    adaptive = {field.name: field.default for field in fields(Adaptive)}
    return {"lookahead": adaptive["lookahead"], "defer": adaptive["defer"], "weight": adaptive["weight"],
            "skip_target": adaptive["skip_target"], "max_rounds": DynamicSampling().max_rounds,
            "top_up_prompts": TopUp.PROMPTS_RULE}


class DefaultsChanged(ValueError):
    """A checkpoint was written with other knob defaults, and the schedule leaves such a knob at today's: resuming
    would change the rule mid-run. `fix` says what to set."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _default_text(name: str, value) -> str:
    """A knob's default in words: `lookahead 2`, or a top-up round size's rule as its formula."""
    if name == "top_up_prompts":
        return f"top-up prompts {TOP_UP_PROMPTS_RULES[value]}"
    return f"{name} {_text(value)}"


def _stage_knobs(stage: Stage) -> tuple[str, dict] | None:
    """The knobs of [`knob_defaults`] a stage uses, with where a recipe sets them: `("adaptive", {...})` for a
    per-prompt stage (`skip_target` only where it defers) or a top-up one (`top_up_prompts`: the default rule it uses,
    `None` when `prompts` is given), `("dynamic_sampling", {...})` for dynamic sampling, else `None`."""
    if stage.adaptive is not None and stage.adaptive.per_prompt:
        knobs = {"lookahead": stage.adaptive.lookahead, "defer": stage.adaptive.defer, "weight": stage.adaptive.weight}
        if stage.adaptive.defer:  # `skip_target` sets the deferral's rate: without deferral it changes nothing
            knobs["skip_target"] = stage.adaptive.skip_target
        return "adaptive", knobs
    if stage.top_up is not None:
        return "adaptive", {"top_up_prompts": TopUp.PROMPTS_RULE if stage.top_up.prompts is None else None}
    if stage.dynamic_sampling is not None:
        return "dynamic_sampling", {"max_rounds": stage.dynamic_sampling.max_rounds}
    return None


def _ran_with(state: dict, index: int) -> dict:
    """The dynamic-sampling knobs the state shows stage `index` ran with (its current setting or a switch's)."""
    settings = [state.get("current")] + [s[end] for s in state.get("switches", []) for end in ("from", "to")]
    for setting in settings:
        if setting is not None and setting.get("stage") == index and setting.get("dynamic_sampling") is not None:
            return {"max_rounds": setting["dynamic_sampling"].get("max_rounds")}
    return {}


def _same_rounds(top_up: TopUp, now: str, saved: str, batch: int | None) -> bool:
    """Whether two default rules of a top-up round's size give `top_up`'s stage the same rounds: the same prompts at
    generation batch `batch`, or (`batch` unknown) at every generation batch."""
    if batch is not None:
        return top_up_prompts_by_rule(now, top_up.pilot, top_up.largest, batch) == \
            top_up_prompts_by_rule(saved, top_up.pilot, top_up.largest, batch)
    return top_up_prompts_divisor(now, top_up.pilot, top_up.largest) == \
        top_up_prompts_divisor(saved, top_up.pilot, top_up.largest)


def _top_up_texts(top_up: TopUp, now: str, saved: str, batch: int | None) -> tuple[str, str]:
    """What a top-up stage without `prompts` has (today's default round size against the checkpoint's), and the
    recipe line that keeps the checkpoint's: `prompts: N` at generation batch `batch`, or how to compute N."""
    pilot, largest = top_up.pilot, top_up.largest
    if batch is not None:
        today, before = (top_up_prompts_by_rule(rule, pilot, largest, batch) for rule in (now, saved))
        return (f"no `prompts` (today's default round size {TOP_UP_PROMPTS_RULES[now]} = {today} prompts at "
                f"generation batch {batch}; the checkpoint's: {TOP_UP_PROMPTS_RULES[saved]} = {before})",
                f"`prompts: {before}`")  # fmt: skip
    return (f"no `prompts` (today's default round size {TOP_UP_PROMPTS_RULES[now]}; the checkpoint's: "
            f"{TOP_UP_PROMPTS_RULES[saved]})",
            f"`prompts: N` with N = {TOP_UP_PROMPTS_RULES[saved]} (pilot {pilot}), at least "
            f"ceil(generation_batch_size / {largest}) and at most generation_batch_size // {pilot}")  # fmt: skip


def defaults_changed(stages: list[Stage], state: dict, generation_batch: int | None = None) -> DefaultsChanged | None:
    """
    Whether a curriculum state written with other knob defaults ([`knob_defaults`]; a knob the state does not record:
    [`LEGACY_DEFAULTS`]) would change a stage's rule when resumed with `stages`: a knob whose value is today's default
    but not the default the state was written with may have been left at the default by the recipe, and so ran with
    the old one. A knob set to any other value was set by the recipe (the same rule then and now), and a dynamic
    sampling stage the state shows running with the value (its current setting or a switch) ran with it. A top-up
    stage without `prompts` uses the default rule of its round size: one the state was written with another rule
    for is refused with the `prompts` its rounds held (at `generation_batch`, the run's generation batch, when given).

    Returns:
        [`DefaultsChanged`] naming each such knob and the recipe lines that continue the run as it ran, or `None`.
    """
    now, saved = knob_defaults(), {**knob_defaults(), **LEGACY_DEFAULTS, **state.get("defaults", {})}
    changed, sets = [], []
    for index, stage in enumerate(stages):
        found = _stage_knobs(stage)
        if found is None:
            continue
        block, knobs = found
        ran = _ran_with(state, index)
        moved = {name: value for name, value in knobs.items()
                 if value == now[name] != saved[name] and ran.get(name, saved[name]) != value}  # fmt: skip
        if "top_up_prompts" in moved and _same_rounds(stage.top_up, now["top_up_prompts"], saved["top_up_prompts"],
                                                      generation_batch):
            del moved["top_up_prompts"]  # e.g. pilot 4, largest 16: both rules hold generation_batch_size // 8
        if not moved:
            continue
        if "top_up_prompts" in moved:
            has, line = _top_up_texts(stage.top_up, now["top_up_prompts"], saved["top_up_prompts"], generation_batch)
            changed.append(f"stage {index} has {has}")
            sets.append(f"stage {index}'s `{block}`: {line}")
            continue
        changed.append(f"stage {index} has " + ", ".join(
            f"{name} {_text(value)} (today's default; the checkpoint's: {_text(saved[name])}"
            + (f", and it ran this stage with {_text(ran[name])})" if name in ran else ")")
            for name, value in moved.items()))  # fmt: skip
        sets.append(f"stage {index}'s `{block}`: `" + ", ".join(
            f"{name}: {_text(ran.get(name, saved[name]))}" for name in moved) + "`")  # fmt: skip
    if not changed:
        return None
    message = ("the checkpoint was written by a grpo-curriculum version with other defaults ("
               + ", ".join(_default_text(name, saved[name]) for name in now if saved[name] != now[name])
               + "): where the recipe leaves a knob at its default, the run would change rules mid-run: "
               + "; ".join(changed))  # fmt: skip
    fix = ("to continue the run as it was written, set these knobs in the recipe to what it ran with ("
           + "; ".join(sets) + "; in Python the same keyword arguments of `Adaptive` / `DynamicSampling`); if the "
           "recipe set today's values itself when it wrote the checkpoint, resume with the grpo-curriculum version "
           "that wrote it, or start a new run from the model weights in it")
    return DefaultsChanged(message, fix)
