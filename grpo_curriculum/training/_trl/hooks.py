"""
The seam, the GRPOTrainer methods the curriculum hooks into ([`GRPOHooks`]), and the RLOOTrainer ones
([`RLOOHooks`]): the file to read for every override point. Each override calls `super()`; the curriculum's events
are implemented by `CurriculumGRPOTrainer` and `CurriculumRLOOTrainer` (their shared `CurriculumTrainerMixin`), the
contract between the two a Protocol ([`~contract.CurriculumHost`]): the hooks reach it through `as_host(self)`.
"""

from __future__ import annotations

from ..checkpoint import CheckpointWriteError
from .checkpoint import (checkpoint_dir, curriculum_state_before_trainer_state, load_trainer_state_first,
                         record_checkpoint)
from .contract import as_host
from .merge import IncrementRecords, apply_comparison, finish_round
from .settings import (GRPO_MODULE, RLOO_MODULE, is_training, raise_reward_failures, refuse_infinite_rewards,
                       refuse_unscored_rounds, round_rewards, set_num_generations)

class GRPOHooks:
    """
    Mixin placed before `trl.GRPOTrainer`: maps the (private) `GRPOTrainer` methods of TRL 1.16 to curriculum events
    that [`CurriculumTrainerMixin`] implements (for [`CurriculumGRPOTrainer`] and, through [`RLOOHooks`],
    [`CurriculumRLOOTrainer`]), so the trainers themselves name no TRL internals.

    The events (called only when `_curriculum_active()`), and the attributes the seam reads, are the members of
    [`~contract.CurriculumHost`]: `_curriculum_round_start`, `_curriculum_increment_rows`,
    `_curriculum_increment_scored` and `_curriculum_round_end` in `_generate_and_score_completions`,
    `_curriculum_evaluation` around `prediction_step`, `_curriculum_save` / `_curriculum_load` when a checkpoint is
    written / resumed.
    """

    _round = None  # the generation round in progress or last sampled ([`Round`])
    _increment_records = None  # while an increment is sampled: its [`IncrementRecords`]
    _trl_module = GRPO_MODULE  # the module whose `add_fused_lm_head` / `create_model_from_path` `__init__` calls

    @staticmethod
    def _generated_rows(result) -> tuple:
        """`(prompt_ids, completion_ids, tool_mask)` of what `_generate` returned (`GRPOTrainer`: its first three)."""
        return result[:3]

    def _generate_and_score_completions(self, inputs):
        host = as_host(self)
        if not (host._curriculum_active() and is_training(self)):
            return super()._generate_and_score_completions(inputs)
        round_ = host._curriculum_round_start()
        records = IncrementRecords(self)
        num_generations = self.num_generations  # restored after every round
        try:
            while True:  # one TRL generation and scoring pass an increment
                rows, sizes = host._curriculum_increment_rows(round_)
                mixed = len(set(sizes)) > 1
                set_num_generations(self, 1 if mixed else sizes[0])
                round_.request_sizes = list(sizes) if mixed else None
                with records.increment():
                    output = super()._generate_and_score_completions(rows)
                rewards_per_func, completion_ids = records.scored
                records.add(output, rewards_per_func)
                if not host._curriculum_increment_scored(round_, round_rewards(self, rewards_per_func),
                                                         completion_ids):  # fmt: skip
                    break
        finally:
            round_.request_sizes = None
            set_num_generations(self, num_generations)
        output = finish_round(self, records, round_)
        records.write_logs(apply_comparison(self, output, round_))  # the log shows the advantages trained on
        host._curriculum_round_end(round_)
        return output

    def _generate(self, prompts):
        result = super()._generate(prompts)
        records = self._increment_records
        if records is not None and is_training(self):
            records.generated(*self._generated_rows(result))
        return result

    def _generate_single_turn(self, *args, **kwargs):
        # An increment's first turn samples each group; later turns (TRL's tool loop) continue each row's own history.
        # The arguments pass through as TRL gave them (TRL >= 1.14 adds `num_generations`, 1.10 `has_tool_images`).
        round_ = as_host(self)._round
        if round_ is None:
            return super()._generate_single_turn(*args, **kwargs)
        round_.requesting, round_.request_sizes = round_.request_sizes, None
        try:
            return super()._generate_single_turn(*args, **kwargs)
        finally:
            round_.requesting = None

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        host = as_host(self)
        if not host._curriculum_active():
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        with host._curriculum_evaluation():  # generation and loss at the temperature of the stage in force
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        raise_reward_failures(self)  # a reward function's failure on any process: every process stops with it
        if as_host(self)._curriculum_active():
            refuse_infinite_rewards(self, rewards_per_func)
            refuse_unscored_rounds(self, rewards_per_func)
        records = getattr(self, "_increment_records", None)
        if records is not None and is_training(self):
            records.scored = (rewards_per_func, completion_ids_list)
            records.pending_metrics()
        return rewards_per_func

    def _save_checkpoint(self, model, trial):
        host = as_host(self)
        folder = checkpoint_dir(self, trial)
        record_checkpoint(self, folder)  # before transformers rotates: it is this run's
        try:
            if not (host._curriculum_active() and self.args.should_save):
                return super()._save_checkpoint(model, trial)
            with curriculum_state_before_trainer_state(self, folder, host._curriculum_save):
                super()._save_checkpoint(model, trial)
        except (OSError, RuntimeError) as error:  # a full disk reaches here as torch's RuntimeError: name the folder
            raise CheckpointWriteError(folder, error) from error

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        host = as_host(self)
        if host._curriculum_active() and checkpoint is not None:
            load_trainer_state_first(self, checkpoint)
            host._curriculum_load(checkpoint)


class RLOOHooks(GRPOHooks):
    """
    [`GRPOHooks`] for `trl.RLOOTrainer` (TRL 1.16), placed before it. `RLOOTrainer` runs the same round as
    `GRPOTrainer` (`_generate_and_score_completions` -> `_generate` -> `_generate_single_turn`, `_calculate_rewards`,
    `RepeatSampler` grouping by `num_generations`, the temperature bound in a fused LM head at `__init__`), so every
    hook applies as it is, but for two differences:
    - `_generate` returns `(prompt_ids, completion_ids, completions)`: RLOO has no tool loop, hence no tool mask;
    - `__init__` calls the `add_fused_lm_head` and `create_model_from_path` of `trl.trainer.rloo_trainer`.

    The leave-one-out advantage (`r - (sum - r) / (n - 1)` over `rewards.view(-1, num_generations)`, with `beta > 0`
    the KL to the reference subtracted from each reward first) is computed by `RLOOTrainer` for a round of one G. A
    round of mixed group sizes (per-prompt G) runs TRL's pass with `num_generations = 1`; its advantages are then
    recomputed RLOO's way over each real group ([`round_advantages`]), from the KL of the log-probabilities the
    pass computed, recorded here ([`_get_per_token_logps_and_entropies`]). A round merged from several increments
    (top-up, dynamic sampling) is merged as for GRPO ([`merge_increments`]: RLOO's `old_logps` and KL computed again
    where a prompt is re-padded), with the same advantages.
    """

    _trl_module = RLOO_MODULE

    @staticmethod
    def _generated_rows(result) -> tuple:
        prompt_ids, completion_ids = result[:2]
        return prompt_ids, completion_ids, None

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        # In a training pass, `_generate_and_score_completions` computes the policy's log-probabilities, then (beta > 0)
        # the reference model's: recorded, for the KL penalty of a round whose advantages are recomputed.
        result = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        records = self._increment_records
        if records is not None and is_training(self):
            records.logps.append(result[0])
        return result
