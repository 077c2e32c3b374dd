"""The `TrainerCallback` that carries a curriculum and decides, round by round, which G and temperature apply."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict

from transformers import TrainerCallback

from ..core.comparison import Comparison
from ..core.errors import raise_if_any
from ..core.policies import make_policy
from ..core.rules import UNCERTAIN_PROMPTS, UNCERTAIN_PROMPTS_DEFAULT
from ..core.schedule import ResolvedSchedule, Setting, Stage, StageSchedule, stage_signature
from . import tracking
from .checkpoint import defaults_changed, knob_defaults
from .files import atomic_write

logger = logging.getLogger("grpo_curriculum")

SWITCHES_FILE = "switches.jsonl"


class _RoundCounts:
    """Rounds, prompts, completions (trained on and generated), increments and deferred and dropped prompts counted
    over some rounds."""

    def __init__(self):
        self.rounds = self.prompts = self.completions = self.deferred = 0
        self.generated = self.increments = self.dropped = 0
        self.sizes: list[int] = []

    def add(self, group_sizes, deferred: int, keep_sizes: bool, generated: int | None = None, increments: int = 1,
            dropped: int = 0) -> None:  # fmt: skip
        self.rounds += 1
        self.prompts += len(group_sizes)
        self.completions += sum(group_sizes)
        self.deferred += deferred
        self.generated += sum(group_sizes) if generated is None else generated
        self.increments += increments
        self.dropped += dropped
        if keep_sizes:
            self.sizes += list(group_sizes)

    @property
    def mean_g(self) -> float:
        mean = self.completions / self.prompts
        return int(mean) if mean.is_integer() else mean


def describe_g(num_generations: int | None, top_up=None) -> str:
    """`"8"`, `"per prompt"` for a per-prompt round, or `"by top-up"` for a top-up round (`top_up` set)."""
    if top_up is not None:
        return "by top-up"
    return "per prompt" if num_generations is None else str(num_generations)


def is_stage_change_only(switch: dict) -> bool:
    """Whether a switch record changes the stage but neither G nor the temperature."""
    before, after = switch["from"], switch["to"]
    return (before["num_generations"] == after["num_generations"] and before["temperature"] == after["temperature"]
            and before.get("top_up") == after.get("top_up"))


def describe_switch(switch: dict) -> str:
    """
    One line for a switch record, as logged and printed by `grpo-curriculum demo`.

    Args:
        switch (`dict`):
            A record of [`CurriculumCallback.switches`]: `step`, `round`, `from` and `to` settings, `reason`.

    Returns:
        `str`: e.g. `"switch at step 21 (round 21): G 2 -> 8, temperature 0.8 -> 1 (stage 1 (compare) starts)"`; a
        record that changes only the stage reads `"stage change at step 61 (round 61): G 4 and temperature 0.8
        unchanged (...)"`, and a per-prompt setting reads `"G per prompt"`.
    """
    before, after = switch["from"], switch["to"]
    g_before = describe_g(before["num_generations"], before.get("top_up"))
    g_after = describe_g(after["num_generations"], after.get("top_up"))
    t_before, t_after = f"{before['temperature']:.4g}", f"{after['temperature']:.4g}"
    where = f"at step {switch['step']} (round {switch['round']})"
    if is_stage_change_only(switch):
        return f"stage change {where}: G {g_after} and temperature {t_after} unchanged ({switch['reason']})"
    if g_before == g_after:
        change = f"temperature {t_before} -> {t_after} at G {g_after}"
    elif t_before == t_after:
        change = f"G {g_before} -> {g_after} at temperature {t_after}"
    else:
        change = f"G {g_before} -> {g_after}, temperature {t_before} -> {t_after}"
    return f"switch {where}: {change} ({switch['reason']})"


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

    def __init__(self, schedule: StageSchedule | list[Stage], uncertain_prompts: int = UNCERTAIN_PROMPTS_DEFAULT):
        self.schedule = schedule if isinstance(schedule, StageSchedule) else StageSchedule(schedule)
        raise_if_any(UNCERTAIN_PROMPTS.problems("uncertain_prompts", uncertain_prompts))
        self.uncertain_prompts = int(uncertain_prompts)
        self.resolved: ResolvedSchedule | None = None
        self.round_context: dict | None = None  # what policies with per-prompt state need: budget, slots, seed
        self._trainer = None
        self.reset_run()

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

    # --- decisions -------------------------------------------------------------------------------------------------

    def resolve(self, total_steps: int) -> ResolvedSchedule:
        """Fix the stage ends for a run of `total_steps` optimizer steps (validates them)."""
        self.resolved = self.schedule.resolve(total_steps)
        return self.resolved

    def initial_setting(self) -> Setting:
        """The setting before the first round: the first stage's."""
        stage = self.schedule.stages[0]
        per_prompt = stage.adaptive is not None and (stage.adaptive.per_prompt or stage.top_up is not None)
        return Setting(0, None if per_prompt else stage.num_generations, stage.temperature_at(0.0), stage.top_up,
                       stage.dynamic_sampling)

    def setting_for_round(self, global_step: int) -> Setting:
        """
        The setting of the generation round that starts now, after `global_step` optimizer steps: the stage's, or for
        an adaptive stage its policy's decision from the rounds observed so far. Records a switch when G, the stage, or
        an adaptive temperature changes (see [`_record_switch`] for its step number).
        """
        if self.resolved is None:
            raise RuntimeError("CurriculumCallback.resolve(total_steps) must run before the first generation round.")
        setting = self.resolved.setting_at(global_step)
        stage = self.schedule.stages[setting.stage]
        decided = None  # an adaptive policy's reason for a change
        history = stage.adaptive is not None and stage.top_up is None  # a top-up stage decides within its rounds
        if history:
            if self.policy_stage != setting.stage:
                self.policy = self._make_policy(setting.stage)
                self.policy_stage = setting.stage
            decision = self.policy.decide()
            g = None if stage.adaptive.per_prompt else decision.num_generations
            setting = Setting(setting.stage, g, decision.temperature)
            decided = decision.reason
        else:
            self.policy, self.policy_stage = None, None
        previous = self.current
        starts = previous is not None and setting.stage != previous.stage
        changed = previous is not None and (
            starts
            or setting.num_generations != previous.num_generations
            or (history and setting.temperature != previous.temperature)
        )
        if changed:
            reasons = [self._stage_start_reason(setting.stage, global_step)] if starts or decided is None else []
            if decided is not None:
                reasons.append(decided)
            self._record_switch(global_step, previous, setting, "; ".join(reasons))
        self.current = setting
        self.rounds += 1
        return setting

    def evaluation_temperature(self, global_step: int) -> float:
        """
        The temperature of the stage in force at optimizer step `global_step`, as its next training round would start
        (an adaptive stage: its policy's current temperature), without deciding or recording anything.
        """
        if self.resolved is None:
            return self.initial_setting().temperature
        setting = self.resolved.setting_at(global_step)
        stage = self.schedule.stages[setting.stage]
        if stage.adaptive is None or stage.top_up is not None:
            return setting.temperature
        if self.policy is not None and self.policy_stage == setting.stage:
            return self.policy.temperature
        return stage.adaptive.clamp(stage.temperature)

    def reset_run(self) -> None:
        """Forget the previous run's rounds, switches and policy (a new `train()` starts from step 0)."""
        self.current: Setting | None = None
        self.rounds = 0  # generation rounds started in this run
        self.switches: list[dict] = []
        self.policy = None  # the adaptive policy of the current stage, if it is adaptive
        self.policy_stage: int | None = None
        self.last_stats = None  # signals of the last round (grpo_curriculum.core.signals.RoundStats)
        self.deferred_total = 0  # prompts deferred by per-prompt stages in this run
        self.informative_share = None  # the last round's share of trained completions in informative groups
        self._since_log, self._last_round = _RoundCounts(), _RoundCounts()

    def _stage_start_reason(self, index: int, global_step: int) -> str:
        """`"stage 1 (compare) starts"`, with the scheduled step when rounds made it start later."""
        name = self.schedule.stages[index].name
        reason = f"stage {index}" + (f" ({name}) starts" if name else " starts")
        first, _ = self.resolved.step_range(index)
        if global_step + 1 != first:  # a round spans several optimizer steps: settings change between rounds only
            reason += f" (scheduled from step {first}; settings change only between generation rounds)"
        if index:
            before, after = (self.schedule.stages[i].comparison or Comparison() for i in (index - 1, index))
            if before != after:
                reason += f"; {before.describe()} -> {after.describe().removeprefix('comparisons: ')}"
        return reason

    def _make_policy(self, index: int):
        stage = self.schedule.stages[index]
        policy = make_policy(stage.adaptive, stage.num_generations, stage.temperature)
        if self.round_context is not None:
            policy.bind(**self.round_context)
        elif stage.adaptive.per_prompt:
            raise RuntimeError("a per-prompt stage needs CurriculumGRPOTrainer (it sets the round's budget and the "
                               "prompts' slots)")
        return policy

    @property
    def per_prompt(self) -> bool:
        """Whether the current round is allocated per prompt."""
        return self.current is not None and self.current.num_generations is None

    def record_round(self, group_sizes, deferred: int = 0, replayed: bool = False, generated: int | None = None,
                     increments: int = 1, dropped: int = 0, informative_share: float | None = None) -> None:
        """
        The trainer reports the round it sampled: the G of each prompt trained on, how many prompts were deferred, and
        for a round sampled in increments the completions generated (default: those trained on), the increments, the
        groups dropped (sampled, not trained on) and the share of the trained completions in informative groups. A
        round replayed after a resume (its first build was counted before the checkpoint) only sets what later log
        lines repeat, and counts the completions it generated again (`curriculum/generated`).
        """
        produced = sum(group_sizes) if generated is None else generated
        self._last_round = _RoundCounts()
        self._last_round.add(group_sizes, 0, keep_sizes=False, generated=generated, increments=increments,
                             dropped=dropped)  # fmt: skip
        self.informative_share = informative_share
        if not replayed:
            self._since_log.add(group_sizes, deferred, keep_sizes=self.per_prompt, generated=generated,
                                increments=increments, dropped=dropped)  # fmt: skip
            self.deferred_total += deferred
        else:  # generated again: a cost of this run's
            self._since_log.generated += produced

    def round_sizes_since_log(self) -> list[int]:
        """Each prompt's G in the per-prompt rounds since the last log line (for a histogram)."""
        return list(self._since_log.sizes)

    def _record_switch(self, global_step: int, previous: Setting, setting: Setting, reason: str) -> None:
        """
        Record the switch to `setting` of the round that starts after `global_step` optimizer steps.

        Steps and rounds are numbered from 1, as in the Trainer's log lines: a switch at step `n` means that optimizer
        step `n` (logged as `"step": n`) is the first one trained at the new setting, in round `self.rounds + 1`. The
        record goes to [`switches`] (checkpointed), to the trainer's `state.log_history` (so `trainer_state.json`
        holds it, next to the log line of step `n`), to the logger and to wandb; [`on_train_end`] writes every record
        to `switches.jsonl` in the output directory.
        """
        step = global_step + 1
        switch = {"step": step, "round": self.rounds + 1, "from": asdict(previous), "to": asdict(setting),
                  "reason": reason}  # fmt: skip
        self.switches.append(switch)
        if self._trainer is not None:
            self._trainer.state.log_history.append(
                {"curriculum/switch": {k: v for k, v in switch.items() if k != "step"}, "step": step}
            )
        main = self._trainer is None or self._trainer.accelerator.is_main_process
        if main:
            logger.info("curriculum %s", describe_switch(switch))
        if main and self._trainer is not None:
            tracking.log_switches(self._trainer.args, self.switches, step)

    def write_switches(self, directory: str) -> str:
        """
        Write every switch record, one JSON object a line, to `switches.jsonl` in `directory` (created if missing);
        return the path. The file is replaced as a whole, so a resumed run never repeats a record.
        """
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, SWITCHES_FILE)
        atomic_write(path, lambda f: f.writelines(json.dumps(switch) + "\n" for switch in self.switches))
        return path

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
        """
        The `curriculum/*` values added to a training log line, over the rounds since the previous one (then reset):
        `num_generations` (mean G over the rounds' prompts), `prompts` (per round), `temperature` and `stage` (the
        current round's), and in per-prompt stages `deferred` (prompts deferred), `deferred_total` (in the run) and
        `prompts_at_g{G}` (prompts trained at each G: their sum over the log lines is the run's G distribution); of the
        last round, over every group it generated (dynamic sampling: dropped groups included): `mean_group_std`,
        `zero_std_fraction` (its completions' share in groups without a learning signal,
        [`grpo_curriculum.core.signals.is_zero_std`]; TRL's `frac_reward_zero_std` is TRL's own test over the trained
        rows) and `distinct_fraction`. In a stage that samples in increments (top-up,
        dynamic sampling): `generated` (completions sampled since the last log line, trained on or not, a round
        regenerated after a resume included),
        `increments` (generation passes per round), `dropped` (groups sampled but not trained on, since the last log
        line: they count as seen in the pass) and `informative_share` (the last round's share of trained completions
        in informative groups: two finite rewards at least, not all equal).
        """
        if self.current is None:
            return {}
        since = self._since_log if self._since_log.rounds else self._last_round  # a round can outlast a log line
        generated = self._since_log.generated
        self._since_log = _RoundCounts()
        metrics = {
            "curriculum/num_generations": since.mean_g if since.rounds else self.current.num_generations,
            "curriculum/temperature": self.current.temperature,
            "curriculum/stage": self.current.stage,
            "curriculum/prompts": since.prompts / since.rounds if since.rounds else None,
        }
        if self.per_prompt or self.deferred_total:
            metrics["curriculum/deferred"] = since.deferred if since is not self._last_round else 0
            metrics["curriculum/deferred_total"] = self.deferred_total
        for g in sorted(set(since.sizes)):
            metrics[f"curriculum/prompts_at_g{g}"] = since.sizes.count(g)
        if self.informative_share is not None:
            fresh = since is not self._last_round
            metrics["curriculum/generated"] = generated
            metrics["curriculum/increments"] = since.increments / since.rounds if since.rounds else None
            metrics["curriculum/dropped"] = since.dropped if fresh else 0
            metrics["curriculum/informative_share"] = self.informative_share
        stats = self.last_stats
        if stats is not None:
            metrics["curriculum/mean_group_std"] = stats.mean_group_std
            metrics["curriculum/zero_std_fraction"] = stats.zero_std_fraction
            if stats.distinct_fraction is not None:
                metrics["curriculum/distinct_fraction"] = stats.distinct_fraction
        if self.policy is not None:
            metrics.update({f"curriculum/policy/{k}": v for k, v in self.policy.metrics().items()
                            if k not in ("num_generations", "temperature")})  # fmt: skip
        return {k: v for k, v in metrics.items() if v is not None}

    # --- checkpointing ---------------------------------------------------------------------------------------------

    def stage_signature(self) -> list[dict]:
        """What a checkpoint's state depends on in each stage: a fixed G, or an adaptive policy and its candidates."""
        return stage_signature(self.schedule.stages)

    def comparison_signature(self) -> list[str]:
        """Each stage's comparison in words (`comparisons: all completions` for TRL's), which a resume must keep."""
        return [(stage.comparison or Comparison()).describe() for stage in self.schedule.stages]

    def state_dict(self) -> dict:
        """What a checkpoint must hold to continue the curriculum exactly (JSON-serialisable but for numpy arrays)."""
        return {
            "stages": self.stage_signature(),
            "comparisons": self.comparison_signature(),
            "current": asdict(self.current) if self.current is not None else None,
            "rounds": self.rounds,
            "switches": list(self.switches),
            "policy_stage": self.policy_stage,
            "policy": self.policy.state_dict() if self.policy is not None else None,
            "deferred_total": self.deferred_total,
            "defaults": knob_defaults(),
        }

    def load_state_dict(self, state: dict) -> None:
        """
        Restore a [`state_dict`].

        Raises:
            `ValueError`: when the schedule's stages no longer match the ones the state was saved with (their number,
            a fixed G, an adaptive policy or its candidates, a comparison), naming what changed; [`DefaultsChanged`] when the state
            was written with other knob defaults that a stage may rely on ([`defaults_changed`]).
        """
        saved, now = state["stages"], self.stage_signature()
        if saved != now:
            changes = [f"{len(saved)} stages saved, {len(now)} now"] if len(saved) != len(now) else []
            changes += [f"stage {i}: {a} saved, {b} now" for i, (a, b) in enumerate(zip(saved, now)) if a != b]
            raise ValueError("the curriculum's stages changed since the checkpoint (" + "; ".join(changes) + ")")
        saved, now = state.get("comparisons"), self.comparison_signature()  # (states before 0.2 have none)
        if saved is not None and saved != now:
            changes = [f"stage {i}: {a} saved, {b} now" for i, (a, b) in enumerate(zip(saved, now)) if a != b]
            raise ValueError("the curriculum's comparisons changed since the checkpoint (" + "; ".join(changes) + ")")
        batch = getattr(getattr(self._trainer, "args", None), "generation_batch_size", None)
        changed = defaults_changed(self.schedule.stages, state, batch)
        if changed is not None:
            raise changed
        self.current = Setting(**state["current"]) if state["current"] is not None else None
        self.rounds = state["rounds"]
        self.switches = list(state["switches"])
        self.policy_stage = state.get("policy_stage")
        self.deferred_total = state.get("deferred_total", 0)
        self.policy = None
        if self.policy_stage is not None:
            self.policy = self._make_policy(self.policy_stage)
            self.policy.load_state_dict(state["policy"])

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
