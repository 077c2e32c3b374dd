"""
`CurriculumGRPOTrainer` and `CurriculumRLOOTrainer`: `trl.GRPOTrainer` and `trl.RLOOTrainer` whose `num_generations`
and temperature follow a curriculum, both built on [`CurriculumTrainerMixin`] (the round machinery they share).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os

from trl import GRPOTrainer, RLOOTrainer

from ..core.errors import Problem, raise_if_any
from ..core.geometry import BatchGeometry, generation_kwargs_problems, split_batches_problem
from ..core.next_increment import dynamic_next, top_up_next
from ..core.rloo import rloo_problems
from ..core.signals import is_informative, round_stats
from . import tracking
from ._trl import checkpoint as trl_checkpoint
from ._trl import settings as trl_settings
from ._trl import vllm as trl_vllm
from ._trl.hooks import GRPOHooks, RLOOHooks
from .callback import CurriculumCallback
from .checkpoint import RECIPE_FIX, DefaultsChanged, fit_problems, resume_checkpoint
from .files import CurriculumStateError
from .report import SETTLED_FILE, PromptReport, settled_rows, write_settled
from .round import Round
from .schema import state_error
from .state import STATE_FILE, read_state, write_state
from .stream import first_rows, local_round_rows, prompt_keys, prompt_slots, prompt_texts
from .switches import describe_g

logger = logging.getLogger("grpo_curriculum")
# the end of a per-prompt round's "too few prompts" error, at generation batch {0}
ROUND_FIX = ("generation round of {0} completions: use a larger dataset, a smaller generation batch, or larger "
             "num_generations candidates.")

PROMPT_REPORT_FILE = "uncertain_prompts.jsonl"


def _find_curriculum(callbacks) -> CurriculumCallback | None:
    found = [cb for cb in callbacks or [] if isinstance(cb, CurriculumCallback)]
    if any(cb is CurriculumCallback for cb in callbacks or []):
        raise TypeError("Pass a CurriculumCallback instance (built from a schedule), not the class, in `callbacks`.")
    if len(found) > 1:
        raise ValueError(f"Pass at most one CurriculumCallback in `callbacks`; got {len(found)}.")
    return found[0] if found else None


def validate_schedule_geometry(curriculum: CurriculumCallback, args, dataset=None,
                               environment_owns_data: bool = False) -> None:
    """
    Check every G the curriculum can reach against the run's batch geometry and the train dataset's size (and, when
    an `environment_factory` owns the data, that no stage is per prompt).

    Raises:
        [`CurriculumError`]: naming the geometry, the valid G values and the fixes for each invalid stage.
    """
    geometry = BatchGeometry.from_args(args)
    problems = curriculum.schedule.geometry_problems(geometry)
    if environment_owns_data:
        problems += _environment_problems(curriculum)
    if not problems and dataset is not None and hasattr(dataset, "__len__"):
        problems += _dataset_problems(curriculum, args, len(dataset), geometry.generation_batch_size)
    config = getattr(args, "accelerator_config", None)  # a dict, or transformers' AcceleratorConfig
    split = config.get("split_batches") if isinstance(config, dict) else getattr(config, "split_batches", False)
    if split:
        problems.append(split_batches_problem("accelerator_config", split))
    problems += generation_kwargs_problems(getattr(args, "generation_kwargs", None))
    raise_if_any(problems, context=geometry.describe())


def _environment_problems(curriculum: CurriculumCallback) -> list[Problem]:
    """Without a train dataset, the environment's `reset()` gives each rollout its prompt: none has an identity."""
    return [Problem(f"stages[{i}].adaptive.policy", "per_prompt", "needs a train_dataset: with an environment_factory "
                    "and no train_dataset, the environment's reset() picks each rollout's prompt, so there are no "
                    "prompts to give their own G", "pass a train_dataset (each row's fields reach reset() as keyword "
                    "arguments), or give this stage one G (num_generations, or policy hysteresis or success_rate)")
            for i, stage in enumerate(curriculum.schedule.stages) if stage.adaptive is not None and
            stage.adaptive.per_prompt]  # fmt: skip


def _dataset_problems(curriculum: CurriculumCallback, args, size: int, batch: int) -> list[Problem]:
    """A generation round must find its prompts in one pass over the dataset, for TRL's loader and every stage."""
    return curriculum.schedule.dataset_size_problems(args.num_generations, batch, size)


class CurriculumTrainerMixin:
    """
    The curriculum's round machinery, shared by [`CurriculumGRPOTrainer`] and [`CurriculumRLOOTrainer`]: placed before
    the seam's hooks ([`GRPOHooks`], [`RLOOHooks`]) and the TRL trainer, it implements their curriculum events (each
    round's setting, prompts and increments, the policy and the prompt report, checkpoints and resume, the log keys).
    A subclass names its TRL trainer in `_trl_trainer` and may refuse settings in [`_unsupported_problems`].
    """

    _trl_trainer = None  # the TRL trainer class this mixin is placed before (its constructor's signature)
    trainer_kind: str | None = None  # `grpo` or `rloo`, the recipe's `trainer:`

    def __init__(self, *args, **kwargs):
        bound = inspect.signature(self._trl_trainer.__init__).bind(self, *args, **kwargs)
        self._curriculum = _find_curriculum(bound.arguments.get("callbacks"))
        training_args, dataset = bound.arguments.get("args"), bound.arguments.get("train_dataset")
        environment_owns_data = dataset is None and bound.arguments.get("environment_factory") is not None
        if self._curriculum is not None and training_args is not None:  # fail before loading anything
            self._validate(training_args, dataset, environment_owns_data)
        self._temperature_cells: list = []
        with trl_settings.record_fused_lm_head_temperature(self._temperature_cells, self._trl_module), \
                trl_settings.reference_from_instance(bound.arguments.get("model"), self._trl_module):
            super().__init__(*args, **kwargs)
        self._prompt_stream = None
        self._prompt_report = None
        self._report_rows = None
        self._reset_round_state()
        if self._curriculum is None:
            return
        if training_args is None:  # the TRL trainer built default args from the model name
            self._validate(self.args, self.train_dataset)
        self._curriculum._trainer = self
        trl_settings.check_reward_calls(self)  # a reward function's mistake named at its first call
        if environment_owns_data:  # TRL's placeholder holds one round at its own G: make it hold one at the smallest
            smallest = self._curriculum.schedule.num_generations_values[0]
            trl_settings.fit_environment_placeholder(self, -(-self.args.generation_batch_size // smallest))
        self._prompt_stream = trl_settings.new_prompt_stream(self)
        slots = prompt_slots(self._prompt_stream)
        self._curriculum.round_context = {"budget": self.args.generation_batch_size, "seed": self.args.seed,
                                          "slots": slots}  # fmt: skip
        self._prompt_report = PromptReport(slots, size=self._curriculum.uncertain_prompts)
        # The report counts a prompt the dataset repeats once, under its first row (the policies keep a row's own key).
        if self._curriculum.uncertain_prompts and self.accelerator.is_main_process:  # (the report's process)
            self._report_rows = first_rows(self._prompt_stream)
        trl_vllm.install_variable_group_requests(self)  # a no-op unless vLLM server mode
        if self.args.max_steps > 0:
            self._curriculum.resolve(self.args.max_steps)  # stage ends are known: check them now
        self._apply(self._curriculum.initial_setting())

    def _validate(self, args, dataset, environment_owns_data: bool = False) -> None:
        """Refuse what this trainer does not support ([`_unsupported_problems`]), then check the geometry."""
        raise_if_any(self._unsupported_problems(args), context=type(self).__name__)
        validate_schedule_geometry(self._curriculum, args, dataset, environment_owns_data)

    def _unsupported_problems(self, args) -> list[Problem]:
        """The curriculum's stages (and `args`) this trainer cannot train, one [`Problem`] each: none here."""
        return []

    def _curriculum_active(self) -> bool:
        return self._curriculum is not None

    def _reset_round_state(self) -> None:
        self._round = None  # the round in progress or last sampled
        self._round_to_replay = None  # resumed inside a round: its `start_stream` and `plan`, to sample it again

    def _curriculum_restart(self) -> None:
        self._curriculum.reset_run()
        self._prompt_stream = trl_settings.new_prompt_stream(self)
        self._reset_round_state()
        self._apply(self._curriculum.initial_setting())

    @contextlib.contextmanager
    def _curriculum_evaluation(self):
        """Evaluate at the temperature of the stage in force at this step; then back to the round's temperature."""
        training = trl_settings.current_sampling(self)[1]
        evaluation = self._curriculum.evaluation_temperature(self.state.global_step)
        if evaluation != training:
            trl_settings.set_temperature(self, evaluation, self._temperature_cells)
        try:
            yield
        finally:
            if evaluation != training:
                trl_settings.set_temperature(self, training, self._temperature_cells)

    def _apply(self, setting) -> None:
        num_generations, temperature = trl_settings.current_sampling(self)
        if setting.num_generations is not None and setting.num_generations != num_generations:
            trl_settings.set_num_generations(self, setting.num_generations)
        if setting.temperature != temperature or self._curriculum.current is None:
            trl_settings.set_temperature(self, setting.temperature, self._temperature_cells)

    def _curriculum_round_start(self) -> Round:
        """
        A training generation round starts: decide its setting, apply it, choose its prompts (and, in a per-prompt
        stage, each prompt's G) and its first increment.
        """
        stream, batch = self._prompt_stream, self.args.generation_batch_size
        # Resumed from a checkpoint taken inside a round, TRL regenerates that round: it keeps its setting and prompts,
        # and is not observed again (the checkpoint's policy state and prompt report already hold it).
        replay, self._round_to_replay = self._round_to_replay, None
        if replay is not None:
            round_ = self._curriculum.replay_round(stream, self._curriculum.current, replay["start_stream"],
                                                   replay["plan"], batch)  # fmt: skip
        else:
            round_ = self._curriculum.new_round(stream, self.state.global_step, batch, fix=ROUND_FIX.format(batch))
        setting, sizes = round_.setting, round_.sizes
        self._apply(setting)
        keys = prompt_keys(stream, round_.prompts)
        trl_settings.all_processes_agree(self, (self._curriculum.rounds, setting.stage, setting.num_generations,
                                                setting.temperature, tuple(sizes), tuple(keys)))  # fmt: skip
        self._round = round_
        return round_

    def _curriculum_increment_rows(self, round_: Round) -> tuple[list[dict], list[int]]:
        """This process's rows of the round's next increment, and the size of each group it samples."""
        groups, counts = round_.last_increment()
        prompts = [round_.prompts[g] for g in groups]
        return local_round_rows(self, self._prompt_stream, prompts, counts), counts

    def _curriculum_increment_scored(self, round_: Round, rewards: list[float], completion_ids) -> bool:
        """
        An increment's rewards (every process, row order): record them and decide the round's next increment. Returns
        whether there is one (top-up: until the round holds `generation_batch_size` completions; dynamic sampling:
        until enough groups are informative or `max_rounds` increments are sampled).
        """
        keys = None
        if self._curriculum.needs_completion_keys:
            keys = trl_settings.completion_keys(self, completion_ids)
        round_.add_rewards(rewards, keys)
        setting, batch = round_.setting, self.args.generation_batch_size
        if setting.top_up is not None:
            added = top_up_next(round_.rewards, round_.sizes, setting.top_up, batch)
            if added is None:
                return False
            round_.add_increment(added)
        elif setting.dynamic_sampling is not None:
            step = dynamic_next(round_.rewards, setting.num_generations, batch, setting.dynamic_sampling,
                                len(round_.increments), setting.stage, round_.generated)  # fmt: skip
            if not step.more:
                round_.trained, round_.masked = step.trained, step.masked
                return False
            if self.accelerator.is_main_process:  # a stalled round shows: one line for each further draw
                informative = sum(is_informative(group) for group in round_.rewards)
                logger.info(setting.dynamic_sampling.drawing_line(self.state.global_step, setting.stage,
                                                                  len(round_.increments), round_.generated,
                                                                  informative, step.more))  # fmt: skip
            round_.add_groups(self._prompt_stream.take(step.more), setting.num_generations)
        else:
            return False
        trl_settings.all_processes_agree(self, (self._curriculum.rounds, len(round_.increments),
                                                tuple(round_.increments[-1])))  # fmt: skip
        return True

    def _curriculum_round_end(self, round_: Round) -> None:
        """
        The round is sampled: count it and (unless it is a replay) feed every group sampled to the adaptive policy and
        the prompt report.
        """
        trained_sizes = round_.trained_sizes
        # The share of the trained completions in informative groups (a group without two finite rewards is not).
        informative = sum(round_.sizes[g] for g in round_.trained_groups if is_informative(round_.rewards[g]))
        increments = round_.setting.top_up is not None or round_.setting.dynamic_sampling is not None
        self._curriculum.record_round(trained_sizes, round_.deferred, replayed=round_.replay,
                                      generated=round_.generated, increments=len(round_.increments),
                                      dropped=round_.dropped,
                                      informative_share=informative / sum(trained_sizes) if increments else None)
        if round_.replay:
            return
        rewards, sizes = round_.group_rewards()
        keys = prompt_keys(self._prompt_stream, round_.prompts)
        completion_keys = None if round_.keys is None else [key for group in round_.keys for key in group]
        stats = round_stats(rewards, sizes, prompt_keys=keys, completion_keys=completion_keys,
                            success_threshold=self._curriculum.success_threshold)  # fmt: skip
        self._curriculum.observe_round(stats)
        if self.accelerator.is_main_process:  # map-style prompt texts are read when the report is written
            texts = prompt_texts(self._prompt_stream, round_.prompts) if self._prompt_stream.iterable else None
            if self._report_rows is not None:
                keys = [str(self._report_rows[int(key)]) for key in keys]
            self._prompt_report.update(keys, rewards, sizes, texts=texts)

    def write_prompt_report(self, directory: str | None = None) -> str | None:
        """
        Write the uncertain-prompt report (`uncertain_prompts.jsonl`: the `uncertain_prompts` prompts of highest
        reward variance, with their mean, variance and times seen) to `directory` (default: `output_dir`). A prompt is
        one entry however many rows of a map-style dataset hold it, keyed by the first (an iterable dataset's prompts
        are keyed by a digest of the prompt). Main process only; returns the path.
        """
        report = self._prompt_report
        if self._curriculum is None or not self.accelerator.is_main_process or not len(report) or not report.size:
            return None
        directory = directory or self.args.output_dir
        texts = None
        if not self._prompt_stream.iterable:  # map-style: read the reported prompts' texts now
            slots = report.top().tolist()
            texts = dict(zip(slots, prompt_texts(self._prompt_stream, slots), strict=True))
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, PROMPT_REPORT_FILE)
        report.write_jsonl(path, texts)
        return path

    def write_settled_prompts(self, directory: str | None = None) -> str | None:
        """
        Write `settled_prompts.jsonl` to `directory` (default: `output_dir`): the prompts the per-prompt policy in
        force at the end (a skipping stage's too) judges settled, solved or never succeeding, with their evidence, at
        most `uncertain_prompts` of them ([`~training.report.settled_rows`]); map-style datasets name each by its row
        and give its text. Main process only; `None` (nothing written) without such a policy.
        """
        policy = None if self._curriculum is None else self._curriculum.policy
        if policy is None or not policy.adaptive.per_prompt or not self.accelerator.is_main_process:
            return None
        rows = settled_rows(policy, self._curriculum.uncertain_prompts or 1000)
        texts = None
        if not self._prompt_stream.iterable:
            slots = [int(row["prompt"]) for row in rows]
            texts = {str(slot): text for slot, text in zip(slots, prompt_texts(self._prompt_stream, slots),
                                                             strict=True)}  # fmt: skip
        directory = directory or self.args.output_dir
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, SETTLED_FILE)
        write_settled(path, rows, texts)
        return path

    # --- checkpoint and resume ---------------------------------------------------------------------------------------

    def _curriculum_save(self, folder: str) -> None:
        write_state(folder, {
            "trainer": self.trainer_kind,
            "global_step": self.state.global_step,
            "micro_step": trl_checkpoint.micro_step(self),
            "geometry": self._geometry(),
            "callback": self._curriculum.state_dict(),
            "stream": self._prompt_stream.state(),
            "round_start_stream": None if self._round is None else self._round.start_stream,
            "round_plan": None if self._round is None else self._round.plan,
            "prompt_report": self._prompt_report.state_dict(),
        })  # fmt: skip
        self.write_prompt_report(folder)

    def _geometry(self) -> dict:
        return {"generation_batch_size": self.args.generation_batch_size,
                "num_processes": self.accelerator.num_processes}  # fmt: skip

    def _curriculum_load(self, checkpoint: str) -> None:
        state = read_state(checkpoint, global_step=self.state.global_step)
        stream = trl_settings.new_prompt_stream(self)
        if state["callback"]["stages"] == self._curriculum.stage_signature():  # else load_state_dict names the change
            size = None if stream.iterable else len(stream.dataset)
            problems = fit_problems(state, self._curriculum.schedule.stages, size)
            if problems:
                raise state_error(os.path.join(checkpoint, STATE_FILE), problems, RECIPE_FIX,
                                  what="values this run's recipe and dataset cannot use (the file was edited, or the "
                                       "recipe or dataset changed)")  # fmt: skip
        try:
            self._curriculum.load_state_dict(state["callback"])
            self._prompt_report.load_state_dict(state["prompt_report"])
        except DefaultsChanged as error:
            raise CurriculumStateError(f"{os.path.join(checkpoint, STATE_FILE)} does not fit this run: {error}. "
                                       f"Fix: {error.fix}.") from None
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise CurriculumStateError(
                f"{os.path.join(checkpoint, STATE_FILE)} does not fit this run: {error}. Fix: resume with the recipe "
                "(curriculum) the checkpoint was written with, or start a new run from the model weights in it."
            ) from None
        trl_checkpoint.restore_micro_step(self, state["micro_step"])
        self._prompt_stream = stream
        in_round = trl_checkpoint.round_in_progress(self) and state["round_start_stream"] is not None
        if in_round and state["geometry"] == self._geometry():
            # TRL regenerates the round the checkpoint was taken in: the same setting and prompts (and a per-prompt
            # round's group sizes; a top-up round's pilot, its later increments planned from the new rewards).
            self._round_to_replay = {"start_stream": state["round_start_stream"], "plan": state["round_plan"]}
        elif in_round:
            # Another geometry: the round's rows no longer fit. Its prompts start a new round, built for this one.
            logger.info("resumed inside a round on another geometry (%s, was %s): the round is rebuilt for it",
                        self._geometry(), state["geometry"])  # fmt: skip
            self._prompt_stream.load_state(state["round_start_stream"])
        else:
            self._prompt_stream.load_state(state["stream"])
        if self._curriculum.current is not None:
            self._apply(self._curriculum.current)
        if self.accelerator.is_main_process:
            now = self._curriculum.current
            where = "" if now is None else (f" (stage {now.stage}, G {describe_g(now.num_generations, now.top_up)}, "
                                            f"temperature {now.temperature:.4g})")  # fmt: skip
            logger.info("curriculum resumed from %s at step %d%s", checkpoint, self.state.global_step, where)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """
        [`~transformers.Trainer.train`]. With a curriculum, `resume_from_checkpoint=True` resumes from the newest
        *complete* checkpoint in `output_dir` (one a run stopped while writing, or a damaged one, is skipped with a
        warning naming it), and a checkpoint that is missing, incomplete or damaged is one clear error before any step
        ([`~grpo_curriculum.training.checkpoint.resume_checkpoint`]). Rotating checkpoints away (`save_total_limit`)
        deletes only this run's ([`~_trl.checkpoint.rotate_only_own_checkpoints`]).
        """
        if self._curriculum is not None:  # one clear error for a missing, incomplete or damaged checkpoint
            resume_from_checkpoint = resume_checkpoint(resume_from_checkpoint, self.args.output_dir,
                                                       entropy=trl_checkpoint.uses_entropy_state(self),
                                                       trainer=self.trainer_kind)  # fmt: skip
        if self._curriculum is not None and self._curriculum.current is not None and not resume_from_checkpoint:
            self._curriculum_restart()  # a second `train()` starts over from step 0: so does the curriculum
        with trl_checkpoint.rotate_only_own_checkpoints(self, resume_from_checkpoint):  # never another run's
            output = super().train(resume_from_checkpoint, *args, **kwargs)
        self.write_prompt_report()
        self.write_settled_prompts()
        return output

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._curriculum is not None and trl_settings.is_training(self):
            sizes = self._curriculum.round_sizes_since_log()
            logs.update(self._curriculum.log_metrics())
            if sizes and self.accelerator.is_main_process:
                tracking.log_histogram(self.args, "curriculum/num_generations_per_prompt", sizes, self.state.global_step)
        super().log(logs, start_time)


class CurriculumGRPOTrainer(CurriculumTrainerMixin, GRPOHooks, GRPOTrainer):
    """
    [`~trl.GRPOTrainer`] whose `num_generations` (G) and sampling temperature follow a [`CurriculumCallback`].

    Same constructor as [`~trl.GRPOTrainer`]. With a [`CurriculumCallback`] in `callbacks`, every setting the schedule
    can reach is validated against the batch geometry here, before any step; then each generation round uses the
    setting the schedule gives for the optimizer step it starts at. Without one, it trains exactly like
    [`~trl.GRPOTrainer`].

    At a switch:
    - the generation batch stays `generation_batch_size` completions (memory is constant), so a round holds
      `generation_batch_size / G` prompts, each repeated G times in a row, split over processes like TRL's sampler
      (a per-prompt stage gives each prompt its own G, the groups adding up to the generation batch, with advantages
      computed per real group);
    - the new temperature reaches generation (transformers, continuous batching, vLLM) and the fused LM head that
      computes the policy's and the reference model's log-probabilities, so log-probs are always computed at the
      temperature the samples were drawn with;
    - every process applies the same setting at the same round (checked at each round in multi-process runs).

    Rounds sampled in increments ([`grpo_curriculum.training.round.Round`]), each increment one TRL generation and
    scoring pass (every completion scored once), merged into the round TRL trains on with each group whole and
    contiguous and its advantages computed over all its completions:
    - a top-up stage (`Adaptive(policy="top_up")`): a pilot of `pilot` completions for each of the round's prompts,
      then increments from [`grpo_curriculum.core.sampling.top_up_increment`] (the groups whose rewards are all equal
      first) until the round holds `generation_batch_size` completions;
    - dynamic sampling (`Stage(dynamic_sampling=DynamicSampling(max_rounds, on_limit))`, DAPO): rounds of new
      prompts at the stage's G until `generation_batch_size / G` groups are informative (two finite rewards at least,
      not all equal) or `max_rounds` rounds were sampled; the batch holds the first informative
      groups. A batch still short after `max_rounds` rounds is filled up with all-equal groups whose tokens are out
      of the loss (`on_limit="mask"`, the default: the loss and `num_items_in_batch` of the informative groups
      alone for the token-normalised losses `dapo`, `bnpo`, `cispo` and `vespo`), stops training with an error
      (`"error"`, verl's behaviour), or is filled up with all-equal groups trained as TRL trains its zero-std groups
      (`"fill"`: advantage 0, their tokens in the loss normalisation). Groups sampled and not trained on are counted
      (`curriculum/dropped`): their prompts were seen in the pass and are not drawn again in it.

    `num_generations` and `temperature` in `args` are overridden by the first stage; evaluation keeps G fixed at
    `num_generations_eval or num_generations` from `args` and samples and scores at the temperature of the stage in
    force at that step. Checkpoints hold the curriculum's state ([`grpo_curriculum.training.state`]).
    """

    _trl_trainer = GRPOTrainer
    trainer_kind = "grpo"  # recorded in the curriculum state: a resume by the other trainer is refused


class CurriculumRLOOTrainer(CurriculumTrainerMixin, RLOOHooks, RLOOTrainer):
    """
    [`~trl.RLOOTrainer`] whose `num_generations` (G) and sampling temperature follow a [`CurriculumCallback`].

    Same constructor as [`~trl.RLOOTrainer`], and the same curriculum, checkpoints and log keys as
    [`CurriculumGRPOTrainer`]; without a [`CurriculumCallback`] in `callbacks` it trains exactly like
    [`~trl.RLOOTrainer`]. At a switch every round holds `generation_batch_size / G` prompts, each repeated G times in
    a row, and RLOO's leave-one-out advantage is computed over those groups at the round's G; the new temperature
    reaches generation and the fused LM head of the policy and the reference model (whose log-probabilities also give
    RLOO's KL penalty, subtracted from the rewards when `beta > 0`).

    Supported stages: fixed G and temperature, stage schedules, temperature ramps, adaptive G and temperature for the
    whole round (`Adaptive(policy="hysteresis")` or `"success_rate"`), per-prompt G (`"per_prompt"`), top-up
    (`"top_up"`) and dynamic sampling (`on_limit` `"fill"` or `"error"`). A round of whole contiguous groups of
    several sizes (one pass, or merged from several as for [`CurriculumGRPOTrainer`], RLOO's `old_logps` and KL
    computed again where the merge re-pads a prompt) gets each row's advantage as RLOO's leave-one-out
    `r - (sum - r) / (n - 1)` over its own group's size `n` (the KL penalty subtracted from the rewards first when
    `beta > 0`, `normalize_advantages` over the round, as `RLOOTrainer` does;
    [`grpo_curriculum.training.advantages.rloo_advantages`]). Refused at construction, each with its fix
    ([`grpo_curriculum.core.rloo.rloo_problems`]): dynamic sampling's `on_limit="mask"` (RLOO's loss has no loss
    mask) and comparison modes other than `"all"`. vLLM generation (`use_vllm`, server and colocate modes) follows each
    switch as in [`CurriculumGRPOTrainer`]: the requests' `n` and temperature (server mode: one request per distinct
    group size of a per-prompt round), the sampling parameters' temperature (colocate). Needs
    TRL 1.16 (the package's other TRL releases are supported by [`CurriculumGRPOTrainer`] only).
    """

    _trl_trainer = RLOOTrainer
    trainer_kind = "rloo"

    def __init__(self, *args, **kwargs):
        trl_settings.require_rloo_trl()  # before anything is loaded
        super().__init__(*args, **kwargs)

    def _unsupported_problems(self, args) -> list[Problem]:
        return rloo_problems(self._curriculum.schedule.stages)
