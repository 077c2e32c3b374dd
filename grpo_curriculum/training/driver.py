"""
The curriculum's driver: its decisions and its state, for every trainer. Which stage is in force and the setting of
each generation round (a stage's, or its adaptive policy's decision), the rounds it plans from the prompt stream (a
fixed G's prompts, a per-prompt allocation, a top-up pilot), the switches it records, the counts it logs and what a
checkpoint holds of it. [`CurriculumCallback`] is this driver with the trainer's callback events; the asynchronous
trainer's rollout worker ([`~training.async_curriculum.AsyncCurriculum`]) runs one of its own. Pure of TRL: the
trainers apply what it decides.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict

from ..core.allocation import SKIP_REASONS
from ..core.comparison import Comparison
from ..core.errors import raise_if_any
from ..core.policies import make_policy
from ..core.rules import UNCERTAIN_PROMPTS, UNCERTAIN_PROMPTS_DEFAULT
from ..core.schedule import ResolvedSchedule, Setting, Stage, StageSchedule, stage_signature
from . import tracking
from .checkpoint import defaults_changed, knob_defaults
from .round import Round
from .stream import prompt_keys
from .switches import describe_switch, write_switches

logger = logging.getLogger("grpo_curriculum")


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


def _shaped_round(stream, setting: Setting, batch: int | None) -> Round:
    """A round of one G (a top-up round: its pilot) from `stream`: `batch // G` prompts, or one (`batch` `None`)."""
    start = stream.state()
    if setting.top_up is not None:
        g, count = setting.top_up.pilot, setting.top_up.prompts_for(batch)
    else:
        g, count = setting.num_generations, 1 if batch is None else batch // setting.num_generations
    return Round(setting, stream.take(count), [g] * count, start_stream=start)


class CurriculumDriver:
    """
    A curriculum over `num_generations` (G) and `temperature`: the decisions and the state every trainer runs.

    Args:
        schedule ([`StageSchedule`] or `list[Stage]`):
            The stages.
        uncertain_prompts (`int`, *optional*):
            How many prompts of highest reward variance the trainer reports (`uncertain_prompts.jsonl`; 0: none).
    """

    def __init__(self, schedule: StageSchedule | list[Stage], uncertain_prompts: int = UNCERTAIN_PROMPTS_DEFAULT):
        self.schedule = schedule if isinstance(schedule, StageSchedule) else StageSchedule(schedule)
        raise_if_any(UNCERTAIN_PROMPTS.problems("uncertain_prompts", uncertain_prompts))
        self.uncertain_prompts = int(uncertain_prompts)
        self.resolved: ResolvedSchedule | None = None
        self.round_context: dict | None = None  # what policies with per-prompt state need: budget, slots, seed
        self._trainer = None
        self.reset_run()

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
        adapts_temperature = history and stage.adaptive.temperature is not None  # else: the stage's (a ramp too)
        if history:
            decision = self.policy_for(setting.stage).decide()
            g = None if stage.adaptive.per_prompt else decision.num_generations
            setting = Setting(setting.stage, g, decision.temperature if adapts_temperature else setting.temperature)
            decided = decision.reason
        else:
            self.policy, self.policy_stage = None, None
        previous = self.current
        starts = previous is not None and setting.stage != previous.stage
        changed = previous is not None and (
            starts
            or setting.num_generations != previous.num_generations
            or (adapts_temperature and setting.temperature != previous.temperature)
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
        if stage.adaptive is None or stage.top_up is not None or stage.adaptive.temperature is None:
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
        self.skipped = Counter()  # prompts skipped since the last log line, by reason (`SKIP_REASONS`)
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

    def policy_for(self, index: int):
        """
        The adaptive policy of stage `index`: the one in force when it is that stage's, else a new one (starting at
        the stage's G and temperature, bound to the trainer's [`round_context`]) that becomes the one in force.
        """
        if self.policy is not None and self.policy_stage == index:
            return self.policy
        stage = self.schedule.stages[index]
        policy = make_policy(stage.adaptive, stage.num_generations, stage.temperature)
        if self.round_context is not None:
            policy.bind(**self.round_context)
        elif stage.adaptive.per_prompt:
            raise RuntimeError("a per-prompt stage needs CurriculumGRPOTrainer (it sets the round's budget and the "
                               "prompts' slots)")
        self.policy, self.policy_stage = policy, index
        return policy

    def per_prompt_round(self, stream, fix: str) -> tuple[dict, dict, list]:
        """
        Allocate the per-prompt round of the policy in force from `stream` ([`PromptStream`]): the rest of this pass,
        without deferral when every prompt left would be deferred (not at one candidate: [`fills_pass_end`]); else a
        new pass (the rest of this one is dropped, as TRL drops a pass's tail), filled without deferral if need be.
        Counts the prompts it skipped, by reason, for the next log line.

        Returns:
            `(where the stream stood, the plan as a dict, its prompts)`.

        Raises:
            `ValueError`: when a whole pass cannot fill a round; `fix` says what to change.
        """
        policy = self.policy
        for attempt in range(2):
            stream.open_pass()
            # a stage of one G that skips starts the next pass rather than fill this one's end with what it skipped,
            # unless a whole pass could not fill a round: that pass is then taken in turn (`stream.filling`)
            fill = attempt or policy.fills_pass_end or stream.filling
            for defer in (True, False) if fill else (True,):
                waiting = [policy.slot_of(key) for key in prompt_keys(stream, stream.waiting)]
                fresh = (policy.slot_of(prompt_keys(stream, [prompt])[0]) for prompt in stream.upcoming())
                plan = policy.plan(waiting, fresh, epoch=stream.epoch, defer=defer)
                if plan is not None:
                    stream.filling = stream.filling or not (defer or policy.fills_pass_end)
                    self.skipped.update(plan.skipped)
                    start, plan = stream.state(), plan.as_dict()
                    return start, plan, stream.commit(plan)
            stream.end_pass()
        raise ValueError(f"The train dataset has too few prompts to fill one {fix}")

    def new_round(self, stream, global_step: int, batch: int | None, fix: str) -> Round:
        """
        The generation round that starts after `global_step` optimizer steps ([`setting_for_round`]), its prompts
        taken from `stream`: a per-prompt round's allocation ([`per_prompt_round`]; `fix` ends its error), a top-up
        round's pilot, or `batch // G` prompts at the setting's G (`batch` `None`: one prompt, the asynchronous
        trainer's group).
        """
        setting = self.setting_for_round(global_step)
        if setting.num_generations is None and setting.top_up is None:
            start, plan, prompts = self.per_prompt_round(stream, fix)
            return Round(setting, prompts, plan["sizes"], start_stream=start, plan=plan, deferred=plan["deferred"])
        return _shaped_round(stream, setting, batch)

    @staticmethod
    def replay_round(stream, setting: Setting, start: dict, plan: dict | None, batch: int | None) -> Round:
        """
        The round a checkpoint was taken inside, sampled again after the resume (not observed again): `setting`'s
        round from where the stream stood (`start`), a per-prompt round with its `plan` (the same prompts and G).
        """
        stream.load_state(start)
        if plan is None:
            round_ = _shaped_round(stream, setting, batch)
        else:
            round_ = Round(setting, stream.commit(plan), plan["sizes"], start_stream=start, plan=plan)
        round_.replay = True
        return round_

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
        """Write every switch record to `switches.jsonl` in `directory` ([`write_switches`]); return the path."""
        return write_switches(directory, self.switches)

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
        `prompts_at_g{G}` (prompts trained at each G: their sum over the log lines is the run's G distribution),
        `skipped/{reason}` (prompts skipped since the last log line, by reason: `solved`, `failed`, `value`); of the
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
            metrics.update({f"curriculum/skipped/{reason}": self.skipped[reason] for reason in SKIP_REASONS
                            if self.skipped[reason] or self.deferred_total})  # fmt: skip
            self.skipped = Counter()
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
        self.deferred_total = state.get("deferred_total", 0)
        stage, self.policy, self.policy_stage = state.get("policy_stage"), None, None
        if stage is not None:
            self.policy_for(stage).load_state_dict(state["policy"])
