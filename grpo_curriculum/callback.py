"""The `TrainerCallback` that carries a curriculum and decides, round by round, which G and temperature apply."""

from __future__ import annotations

import logging
from dataclasses import asdict

from transformers import TrainerCallback

from . import tracking
from .adaptive import make_policy
from .schedule import ResolvedSchedule, Setting, Stage, StageSchedule

logger = logging.getLogger("grpo_curriculum")


class CurriculumCallback(TrainerCallback):
    """
    A [`~transformers.TrainerCallback`] carrying a curriculum over `num_generations` (G) and `temperature`.

    Pass it to [`CurriculumGRPOTrainer`] in `callbacks=[...]`; the trainer asks it for the setting of each generation
    round and applies it everywhere TRL uses G or the temperature. Given to a plain [`~trl.GRPOTrainer`], it stops the
    run before the first step instead of silently doing nothing.

    Args:
        schedule ([`StageSchedule`] or `list[Stage]`):
            The stages.

    Example:
    ```python
    >>> from grpo_curriculum import CurriculumCallback, CurriculumGRPOTrainer, Stage
    >>> curriculum = CurriculumCallback([Stage(num_generations=4, temperature=0.7, until_fraction=0.5),
    ...                                  Stage(num_generations=8, temperature=0.9)])
    >>> trainer = CurriculumGRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...,
    ...                                 callbacks=[curriculum])
    ```
    """

    def __init__(self, schedule: StageSchedule | list[Stage]):
        self.schedule = schedule if isinstance(schedule, StageSchedule) else StageSchedule(schedule)
        self.resolved: ResolvedSchedule | None = None
        self.current: Setting | None = None
        self.rounds = 0  # generation rounds started in this run
        self.switches: list[dict] = []
        self.policy = None  # the adaptive policy of the current stage, if it is adaptive
        self.policy_stage: int | None = None
        self.last_stats = None  # signals of the last round (grpo_curriculum.signals.RoundStats)
        self._trainer = None

    @classmethod
    def from_yaml(cls, path: str, **kwargs) -> CurriculumCallback:
        """
        Build the callback from a recipe file holding a top-level `curriculum:` mapping with `stages:`.

        Raises:
            [`CurriculumError`]: listing every problem in the file, each with its key path, value, rule and fix.
        """
        from .recipe import load_curriculum

        return cls(load_curriculum(path), **kwargs)

    # --- decisions -------------------------------------------------------------------------------------------------

    def resolve(self, total_steps: int) -> ResolvedSchedule:
        """Fix the stage ends for a run of `total_steps` optimizer steps (validates them)."""
        self.resolved = self.schedule.resolve(total_steps)
        return self.resolved

    def initial_setting(self) -> Setting:
        """The setting before the first round: the first stage's."""
        stage = self.schedule.stages[0]
        return Setting(0, stage.num_generations, stage.temperature_at(0.0))

    def setting_for_round(self, global_step: int) -> Setting:
        """
        The setting of the generation round that starts now, at optimizer step `global_step`: the stage's, or for an
        adaptive stage its policy's decision from the rounds observed so far. Records a switch when G, the stage, or an
        adaptive temperature changes.
        """
        if self.resolved is None:
            raise RuntimeError("CurriculumCallback.resolve(total_steps) must run before the first generation round.")
        setting = self.resolved.setting_at(global_step)
        stage = self.schedule.stages[setting.stage]
        reason = f"stage {setting.stage} starts at step {self.resolved.start_of(setting.stage)}"
        if stage.adaptive is not None:
            if self.policy_stage != setting.stage:
                self.policy = make_policy(stage.adaptive, stage.num_generations, stage.temperature)
                self.policy_stage = setting.stage
            decision = self.policy.decide()
            setting = Setting(setting.stage, decision.num_generations, decision.temperature)
            if decision.reason is not None:
                reason = decision.reason
        else:
            self.policy, self.policy_stage = None, None
        previous = self.current
        changed = previous is not None and (
            setting.stage != previous.stage
            or setting.num_generations != previous.num_generations
            or (stage.adaptive is not None and setting.temperature != previous.temperature)
        )
        if changed:
            self._record_switch(global_step, previous, setting, reason)
        self.current = setting
        self.rounds += 1
        return setting

    def _record_switch(self, global_step: int, previous: Setting, setting: Setting, reason: str) -> None:
        switch = {"step": global_step, "round": self.rounds, "from": asdict(previous), "to": asdict(setting),
                  "reason": reason}  # fmt: skip
        self.switches.append(switch)
        main = self._trainer is None or self._trainer.accelerator.is_main_process
        if main:
            logger.info(
                "curriculum switch at step %d (round %d): G %d -> %d, temperature %.4g -> %.4g (%s)",
                global_step, self.rounds, previous.num_generations, setting.num_generations, previous.temperature,
                setting.temperature, reason,
            )  # fmt: skip
        if main and self._trainer is not None:
            tracking.log_switches(self._trainer.args, self.switches, global_step)

    def observe_round(self, stats) -> None:
        """Feed the statistics of the round that just got its rewards to the adaptive policy, if one is active."""
        self.last_stats = stats
        if self.policy is not None:
            self.policy.observe(stats)

    @property
    def success_threshold(self) -> float:
        return self.policy.adaptive.success_threshold if self.policy is not None else 0.5

    @property
    def needs_completion_keys(self) -> bool:
        return self.policy is not None

    def log_metrics(self) -> dict[str, float]:
        """The `curriculum/*` values added to every training log line."""
        if self.current is None:
            return {}
        metrics = {
            "curriculum/num_generations": self.current.num_generations,
            "curriculum/temperature": self.current.temperature,
            "curriculum/stage": self.current.stage,
        }
        stats = self.last_stats
        if stats is not None:
            metrics["curriculum/mean_group_std"] = stats.mean_group_std
            if stats.distinct_fraction is not None:
                metrics["curriculum/distinct_fraction"] = stats.distinct_fraction
        if self.policy is not None:
            metrics.update({f"curriculum/policy/{k}": v for k, v in self.policy.metrics().items()
                            if k not in ("num_generations", "temperature")})  # fmt: skip
        return metrics

    # --- checkpointing ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """What a checkpoint must hold to continue the curriculum exactly (JSON-serialisable)."""
        return {
            "current": asdict(self.current) if self.current is not None else None,
            "rounds": self.rounds,
            "switches": list(self.switches),
            "policy_stage": self.policy_stage,
            "policy": self.policy.state_dict() if self.policy is not None else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.current = Setting(**state["current"]) if state["current"] is not None else None
        self.rounds = state["rounds"]
        self.switches = list(state["switches"])
        self.policy_stage = state.get("policy_stage")
        self.policy = None
        if self.policy_stage is not None:
            stage = self.schedule.stages[self.policy_stage]
            self.policy = make_policy(stage.adaptive, stage.num_generations, stage.temperature)
            self.policy.load_state_dict(state["policy"])

    # --- callback events -------------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if self._trainer is None:
            raise RuntimeError(
                "CurriculumCallback was given to a trainer that does not apply curricula, so it would silently do "
                "nothing. Use `grpo_curriculum.CurriculumGRPOTrainer` (same constructor as `trl.GRPOTrainer`) and "
                "pass the callback in `callbacks=[...]`."
            )
        if self.resolved is None or self.resolved.total_steps != state.max_steps:
            self.resolve(state.max_steps)
        if state.is_world_process_zero:
            for line in self.resolved.describe():
                logger.info("curriculum %s", line)
            tracking.log_config(args, self)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.switches:
            tracking.log_switches(args, self.switches, state.global_step, commit=True)
