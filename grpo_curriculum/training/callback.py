"""The `TrainerCallback` that carries a curriculum: the driver ([`~training.driver.CurriculumDriver`]) with the
trainer's events."""

from __future__ import annotations

from transformers import TrainerCallback

from . import tracking
from .driver import CurriculumDriver, logger


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
