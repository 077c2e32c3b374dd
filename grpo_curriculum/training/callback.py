"""The `TrainerCallback` that carries a curriculum: the driver ([`~training.driver.CurriculumDriver`]) with the
trainer's events."""

from __future__ import annotations

from transformers import TrainerCallback

from ..core.sampling import TOP_UP_PROMPTS_RULES, TopUp, top_up_prompts_by_rule, top_up_prompts_divisor
from ..core.schedule import Stage
from . import tracking
from .checkpoint import LEGACY_DEFAULTS, knob_defaults
from .driver import CurriculumDriver, logger


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


class CurriculumCallback(CurriculumDriver, TrainerCallback):
    """
    A [`~transformers.TrainerCallback`] carrying a curriculum over `num_generations` (G) and `temperature`.

    Pass it to [`CurriculumGRPOTrainer`] in `callbacks=[...]`; the trainer asks it for the setting of each generation
    round and applies it everywhere TRL uses G or the temperature. Given to a plain [`~trl.GRPOTrainer`], it stops the
    run before the first step instead of silently doing nothing.

    Its decisions and state are [`~training.driver.CurriculumDriver`]'s (the asynchronous trainer's worker runs the
    same driver); the callback adds the events: the stage ends resolved and logged when training begins, the switch
    records written when it ends.

    Args:
        schedule ([`StageSchedule`] or `list[Stage]`):
            The stages.
        uncertain_prompts (`int`, *optional*):
            How many prompts of highest reward variance the trainer reports (`uncertain_prompts.jsonl`; 0: none).

    Example:
    ```python
    >>> from grpo_curriculum import CurriculumCallback, CurriculumGRPOTrainer, Stage
    >>> curriculum = CurriculumCallback([Stage(num_generations=4, temperature=0.7, until_fraction=0.5),
    ...                                  Stage(num_generations=8, temperature=0.9)])
    >>> trainer = CurriculumGRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...,
    ...                                 callbacks=[curriculum])
    ```
    """

    @classmethod
    def from_yaml(cls, path: str, **kwargs) -> CurriculumCallback:
        """
        Build the callback from a recipe file holding a top-level `curriculum:` mapping with `stages:`.

        Raises:
            [`CurriculumError`]: listing every problem in the file, each with its key path, value, rule and fix.
        """
        from ..core.curriculum import load_curriculum

        schedule, options = load_curriculum(path, with_options=True)
        return cls(schedule, **{**options, **kwargs})

    # --- callback events -------------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if self._trainer is None:
            raise RuntimeError(
                "CurriculumCallback was given to a trainer that does not apply curricula, so it would silently do "
                "nothing. Use `grpo_curriculum.CurriculumGRPOTrainer` (same constructor as `trl.GRPOTrainer`), or "
                "`grpo_curriculum.CurriculumRLOOTrainer` (same constructor as `trl.RLOOTrainer`), and pass the "
                "callback in `callbacks=[...]`."
            )
        if self.resolved is None or self.resolved.total_steps != state.max_steps:
            self.resolve(state.max_steps)
        if state.is_world_process_zero:
            for line in self.resolved.describe():
                logger.info("curriculum %s", line)
            tracking.log_config(args, self)

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.write_switches(args.output_dir)
        if self.switches:
            tracking.log_switches(args, self.switches, state.global_step, commit=True)
