"""
An on-demand mutation check of the critical paths of merged rounds, resume and the prompt stream (issue 30): each
mutation is a text patch of one line of the package, applied to a temporary copy of the repository; the tests chosen
for it run against the copy, and the mutant is *killed* when they fail. Not run in CI (minutes; the distributed mutant
launches `torchrun`).

Honest by construction (issue 55): each selection first runs on an unmutated copy and must pass there (else every
mutant using it is a `broken selection`, not run); a mutant counts as killed only when pytest ends with failed tests
and no error (JUnit report: failures, no collection, setup or teardown errors); a usage error, an interrupted run, an
internal error or the timeout is reported as `not killed: ...`. The table's last column is the first failure's message,
to check that the kill is the assertion meant.

    python benchmarks/mutations.py                 # every mutation, a table and the kill rate
    python benchmarks/mutations.py --list          # the mutations
    python benchmarks/mutations.py take_keeps_waiting num_items_not_gathered

A mutation whose text is no longer in the file (the code moved on) is reported as `stale`, and counts as a failure
of this script (exit 1), like a surviving mutant: update its text, not the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str  # the exact text replaced (must occur once)
    new: str
    tests: tuple[str, ...]  # pytest arguments
    what: str


MUTATIONS = [
    Mutation("recompute_skipped", "grpo_curriculum/training/_trl/merge.py",
             "    if any(bool((widths[share] != width).any()) for share, width in zip(shares, prompt_widths)):",
             "    if False:",
             ("tests/test_increments.py", "-k", "several_iterations or independent_rebuild"),
             "a merged round never recomputes old and reference log-probs at its padding"),
    Mutation("ref_recompute_skipped", "grpo_curriculum/training/_trl/merge.py",
             '            output["ref_per_token_logps"] = ref',
             "            pass",
             ("tests/test_increments.py", "-k", "several_iterations"),
             "the recompute skips the reference model's log-probs"),
    Mutation("prompts_right_padded", "grpo_curriculum/training/_trl/merge.py",
             "        parts = [_pad_width(part, width, side, value) for part in parts]",
             '        parts = [_pad_width(part, width, "right", value) for part in parts]',
             ("tests/test_increments.py", "-k", "several_iterations or padded_to_its_trained"),
             "a narrower increment's prompts padded on the right (pad tokens between prompt and completion)"),
    Mutation("padded_to_every_row", "grpo_curriculum/training/_trl/merge.py",
             '        merged[key] = tensor[:, tensor.size(1) - keep :] if side == "left" else tensor[:, :keep]',
             "        merged[key] = tensor",
             ("tests/test_increments.py", "-k", "padded_to_its_trained"),
             "merged rows padded to the widest row sampled, dropped rows included"),
    Mutation("row_metrics_per_increment", "grpo_curriculum/training/_trl/merge.py",
             "    _log_row_metrics(trainer, records, rows, torch.tensor(order, dtype=torch.long), merged)",
             "    pass",
             ("tests/test_increments.py", "-k", "completion_metrics or sampling_metrics"),
             "merged completion and sampling metrics averaged per increment instead of computed from the rows"),
    Mutation("reward_metrics_per_increment", "grpo_curriculum/training/_trl/merge.py",
             "    _log_reward_metrics(trainer, rewards_per_func)\n    _log_row_metrics",
             "    _log_row_metrics",
             ("tests/test_increments.py", "-k", "completion_metrics"),
             "merged reward metrics averaged per increment (dynamic sampling: over the dropped rows too)"),
    Mutation("user_metric_by_rows", "grpo_curriculum/training/_trl/merge.py",
             "            if key in user and user[key][1]:",
             "            if False:",
             ("tests/test_increments.py", "-k", "log_metric_value"),
             "a `log_metric` value merged as a mean of its passes weighted by rows, not TRL's total / count"),
    Mutation("is_ratio_token_level_always", "grpo_curriculum/training/_trl/merge.py",
             '    if mode in ("sequence_mask", "sequence_truncate"):\n        diff = diff.sum(dim=-1, keepdim=True)',
             '    if False:\n        diff = diff.sum(dim=-1, keepdim=True)',
             ("tests/test_increments.py", "-k", "sampling_metrics and sequence_mask"),
             "the importance-sampling ratio of a merged round computed per token in a sequence mode"),
    Mutation("num_items_not_gathered", "grpo_curriculum/training/_trl/merge.py",
             '    merged["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()',
             '    merged["num_items_in_batch"] = loss_mask.sum()',
             ("tests/test_distributed.py", "-k", "rounds_in_increments"),
             "`num_items_in_batch` of a merged round not gathered across processes (2 ranks: `dapo` loss doubles)"),
    Mutation("fill_up_not_masked", "grpo_curriculum/training/_trl/merge.py",
             '        merged["tool_mask"] = tool_mask * keep.unsqueeze(1)',
             '        merged["tool_mask"] = tool_mask',
             ("tests/test_increments.py", "-k", "undiluted or cap_fills"),
             "dynamic sampling's fill-up groups left in the loss under on_limit mask"),
    Mutation("on_limit_error_ignored", "grpo_curriculum/core/next_increment.py",
             '    if short and dynamic.on_limit == "error":',
             "    if False:",
             ("tests/test_increments.py", "-k", "on_limit_error"),
             "dynamic sampling at its limit with on_limit error trains on"),
    Mutation("mixed_frac_left_to_trl", "grpo_curriculum/training/_trl/merge.py",
             '        if metrics.get("frac_reward_zero_std"):  # TRL\'s, computed for the real groups',
             '        if False:  # TRL\'s, computed for the real groups',
             ("tests/test_trainer.py", "-k", "one_zero_std_share"),
             "a mixed per-prompt round logs TRL's zero-std share of groups of 1"),
    Mutation("informative_share_skips_unscored", "grpo_curriculum/training/trainer.py",
             "informative_share=informative / sum(trained_sizes) if increments else None)",
             "informative_share=informative / max(1, sum(round_.sizes[g] for g in round_.trained_groups if any("
             "r == r for r in round_.rewards[g]))) if increments else None)",
             ("tests/test_increments.py", "-k", "unscored"),
             "informative_share leaves unscored groups out of its denominator"),
    Mutation("take_keeps_waiting", "grpo_curriculum/training/stream.py",
             "                self._waiting = self._waiting[len(waiting) :]",
             "                pass",
             ("tests/test_per_prompt.py", "-k", "left_waiting_once"),
             "PromptStream.take() does not remove the waiting prompts it serves"),
    Mutation("checkpoint_step_ignored", "grpo_curriculum/training/checkpoint.py",
             '    state = read_state(folder, global_step=trainer_state["global_step"])',
             "    state = read_state(folder)",
             ("tests/test_resume.py", "-k", "another_step"),
             "check_checkpoint ignores whether the curriculum state is of the checkpoint's step"),
    Mutation("replay_not_counted", "grpo_curriculum/training/driver.py",
             "            self._since_log.generated += produced",
             "            pass",
             ("tests/test_increments.py", "-k", "replays_it and dynamic"),
             "a round regenerated after a resume logs curriculum/generated 0"),
    Mutation("stage_table_counts_lines", "grpo_curriculum/cli/summary.py",
             "        steps, previous = max(step - previous, 1), step",
             "        steps, previous = 1, step",
             ("tests/test_run.py", "-k", "stage_table_counts"),
             "the per-stage table counts log lines, not optimizer steps"),
    Mutation("advantage_epsilon", "grpo_curriculum/training/advantages.py",
             "            advantages = advantages / (std + EPSILON)",
             "            advantages = advantages / (std + 1e-3)",
             ("tests/test_increments.py", "-k", "closed_form"),
             "merged advantages scaled by another epsilon than TRL's"),
    # Issue 45: masked rows out of the advantages' statistics, TRL's own ops, the deferral floor.
    Mutation("masked_rows_in_statistics", "grpo_curriculum/training/_trl/merge.py",
             "                               trainer.multi_objective_aggregation, masked)  # fmt: skip",
             "                               trainer.multi_objective_aggregation, None)  # fmt: skip",
             ("tests/test_increments.py", "-k", "masked_fill_up"),
             "dynamic sampling's masked fill-up rows count in the batch std and normalize_then_sum's statistics"),
    Mutation("group_std_not_trls", "grpo_curriculum/training/advantages.py",
             "            std = _per_row(nanstd(grouped, dim=1), sizes) if max(sizes) > 1 else torch.zeros_like(rewards)",
             "            std = _per_row((((grouped - torch.nanmean(grouped, dim=1, keepdim=True)) ** 2).nansum(dim=1) / "
             "((~torch.isnan(grouped)).sum(dim=1) - 1)).sqrt(), sizes)",
             ("tests/test_advantages.py", "-k", "grpo_advantages_of_groups_of_one_size"),
             "the group std computed as sum / (n - 1) (the same number, other ops), not TRL's nanstd: not bit-equal"),
    Mutation("rloo_baseline_not_trls", "grpo_curriculum/training/advantages.py",
             "        baselines = (torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (counts - 1)",
             "        baselines = torch.nansum(grouped, dim=1, keepdim=True) / (counts - 1) - grouped / (counts - 1)",
             ("tests/test_advantages.py", "-k", "rloo_advantages_of_groups_of_one_size"),
             "RLOO's baseline (sum - r) / (n - 1) computed in another order: not bit-equal to RLOOTrainer"),
    Mutation("deferral_without_floor", "grpo_curriculum/core/allocation.py",
             '        keep = max(self.explore["easy" if streak > 0 else "hard"] ** abs(streak), KEEP_FLOOR)',
             '        keep = self.explore["easy" if streak > 0 else "hard"] ** abs(streak)',
             ("tests/test_allocation.py", "-k", "comes_back"),
             "a prompt with a long zero-variance streak is practically never seen again (no KEEP_FLOOR)"),
    # Issue 35, item 14: boundaries the suite did not pin.
    Mutation("temperature_step_unclamped", "grpo_curriculum/core/policies.py",
             "new = min(bounds[1], round(t + a.temperature_step, 6))",
             "new = round(t + a.temperature_step, 6)",
             ("tests/test_adaptive.py", "-k", "step_past_a_bound"),
             "an adaptive temperature step up past the upper bound is not clamped (0.95 + 0.1 -> 1.05, bound 1.0)"),
    Mutation("recipe_limit_exclusive", "grpo_curriculum/core/loading.py",
             "    if len(raw) > MAX_BYTES:",
             "    if len(raw) >= MAX_BYTES:",
             ("tests/test_recipe.py", "-k", "exactly_the_byte_limit"),
             "a recipe of exactly MAX_BYTES bytes is refused"),
    Mutation("knapsack_ties_to_the_largest", "grpo_curriculum/core/allocation.py",
             "k, c in enumerate(candidates) if c <= r",
             "k, c in reversed(list(enumerate(candidates))) if c <= r",
             ("tests/test_allocation.py", "-k", "ties_go_to_the_smaller"),
             "the knapsack's ties go to the larger G of the earlier prompt ([4, 4, 2], not [2, 4, 4])"),
    Mutation("waiting_at_the_position", "grpo_curriculum/training/state.py",
             "(waiting and waiting[-1] >= position)",
             "(waiting and waiting[-1] > position)",
             ("tests/test_resume.py", "-k", "waiting_position_must_lie_below"),
             "a restored waiting position equal to the stream position (a prompt not read yet) is accepted"),
    # Issue 45, item 3: one verdict on every rank.
    Mutation("probe_counts_as_a_file", "grpo_curriculum/cli/folders.py",
             "            empty = next((e for e in entries if not e.name.startswith(PROBE_PREFIX)), None) is None",
             "            empty = next(entries, None) is None",
             ("tests/test_folders.py", "-k", "one_verdict_on_an_empty"),
             "under torchrun a rank reads rank 0's writability probe as a file of the user's and refuses alone"),
    # Issue 46: the asynchronous trainer's loss temperature and curriculum state (their tests need no vLLM).
    Mutation("loss_at_args_temperature", "grpo_curriculum/training/_trl/async_trainer.py",
             "            output = self.head(temperature)(model, *args, fused_lm_head=True, **kwargs)",
             "            output = self.heads[self.default](model, *args, fused_lm_head=True, **kwargs)",
             ("tests/test_async_temperature.py",),
             "every loss term of the asynchronous trainer at args.temperature, not at its sampling temperature"),
    Mutation("term_temperature_by_position", "grpo_curriculum/training/_trl/async_trainer.py",
             "            temperatures[r, terms] = per_sample[batch[\"segment_id\"][r, terms]]",
             "            temperatures[r, terms] = per_sample[0]",
             ("tests/test_async_temperature.py", "-k", "collator"),
             "every loss term of a packed row at its first sample's temperature"),
    Mutation("dropped_groups_restart_the_stream", "grpo_curriculum/training/async_curriculum.py",
             "        first = next((g for g in untrained if g not in self._dropped), None)",
             "        first = next((g for g in untrained), None)",
             ("tests/test_async_curriculum.py", "-k", "neither_trained_nor_dropped"),
             "a checkpoint's stream restarts at a group dynamic sampling dropped (never to be trained)"),
    # Issue 51 item 4: one body pass a micro-batch, the head per temperature (`passes_not_in_lockstep`, the
    # per-micro-batch `all_gather_object` it mutated, is gone: the processes' collectives no longer depend on it).
    Mutation("body_pass_per_temperature", "grpo_curriculum/training/_trl/async_trainer.py",
             "        if self._outputs is None:",
             "        if True:",
             ("tests/test_async_temperature.py", "-k", "body_once"),
             "the model's body runs once per temperature of a micro-batch, not once"),
    Mutation("head_gathered_per_temperature", "grpo_curriculum/training/_trl/async_trainer.py",
             "        if not isinstance(lm_head.weight, DTensor):",
             "        if True:",
             ("tests/test_async_temperature.py", "-k", "fsdp2"),
             "an FSDP2-sharded LM head is gathered once per head applied, differing across processes (an abort)"),
    Mutation("resumed_worker_counts_groups_twice", "grpo_curriculum/training/async_curriculum.py",
             "        if plan.replay and self._replays[plan.key] > 0:",
             "        if False:",
             ("tests/test_async_curriculum.py", "-k", "once"),
             "a resumed asynchronous worker counts the groups the checkpoint counted again"),
    # Issue 55: the newest code's behaviours no test guarded (each test fails on its mutant, docs/testing.md).
    Mutation("ramp_loss_at_args_temperature", "grpo_curriculum/training/_trl/async_trainer.py",
             "        if schedule is not None and any(stage.temperature != self.args.temperature or stage.temperature_end "
             "is not None",
             "        if schedule is not None and any(stage.temperature != self.args.temperature or False",
             ("tests/test_async_temperature.py", "-k", "ramp"),
             "a one-stage temperature ramp starting at args.temperature trains every sample at args.temperature"),
    Mutation("second_checkpoint_loses_its_round", "grpo_curriculum/training/async_curriculum.py",
             "        for g in [g for g in self._origin if g < first]:",
             "        for g in [g for g in self._origin if g <= first]:",
             ("tests/test_async_curriculum.py", "-k", "two_checkpoints"),
             "a second checkpoint with the same first untrained group resumes past it (never sampled again)"),
    Mutation("drop_not_reported", "grpo_curriculum/training/_trl/async_worker.py",
             "            self.curriculum.dropped(group.group_id)",
             "            pass",
             ("tests/test_async.py", "-k", "dynamic_sampling_drops"),
             "a group dynamic sampling drops under a schedule is not reported: a checkpoint restarts the stream at it"),
    Mutation("planned_at_the_first_version", "grpo_curriculum/training/_trl/async_worker.py",
             "                    plan = self.curriculum.next_group(group_id, version)",
             "                    plan = self.curriculum.next_group(group_id, 1)",
             ("tests/test_async.py", "-k", "worker_plans"),
             "the worker plans every group at policy version 1's stage, not at the version current when it starts"),
    Mutation("version_steps_without_sync_interval", "grpo_curriculum/training/async_curriculum.py",
             "        return max(step0, (step0 // self.weight_sync_steps + version - version0) * self.weight_sync_steps)",
             "        return max(step0, step0 + version - version0)",
             ("tests/test_async.py", "-k", "worker_plans"),
             "a policy version read as one optimizer step whatever weight_sync_steps is"),
    Mutation("async_reward_not_awaited", "grpo_curriculum/cli/preflight.py",
             "        if _is_async(func):  # TRL awaits these (on its event loop) and no other",
             "        if False:",
             ("tests/test_preflight.py", "-k", "good_dataset"),
             "the preflight does not await an `async def` reward function (a valid one refused)"),
    Mutation("minus_inf_reward_accepted", "grpo_curriculum/core/reward_output.py",
             "        if infinite and math.isinf(value):",
             "        if infinite and value == math.inf:",
             ("tests/test_preflight.py", "-k", "minus_inf"),
             "the preflight refuses a reward of +inf but lets -inf through to step 1"),
    Mutation("output_dir_checked_on_rank_0_only", "grpo_curriculum/cli/train.py",
             '    raise_if_any(output_dir_problems(output_dir, "output_dir", fix, resuming=resumes_in(output_dir, '
             "resume))",
             '    raise_if_any((output_dir_problems(output_dir, "output_dir", fix, resuming=resumes_in(output_dir, '
             "resume)) if main_process() else [])",
             ("tests/test_folders.py", "-k", "holds_a_users_file"),
             "under torchrun only rank 0 refuses an output_dir that holds files: rank 1 goes on alone"),
    Mutation("async_max_steps_0_accepted", "grpo_curriculum/core/asynchronous.py",
             "    if curriculum and (max_steps is None or max_steps <= 0):",
             "    if curriculum and (max_steps is None or max_steps < 0):",
             ("tests/test_async.py::test_what_the_asynchronous_curriculum_refuses_is_named_before_any_model_loads",),
             "max_steps 0 (TRL: unset, an epoch stop) accepted with dynamic sampling on the asynchronous trainer"),
    Mutation("async_state_not_atomic", "grpo_curriculum/training/async_state.py",
             "    atomic_write(os.path.join(folder, ASYNC_STATE_FILE), lambda f: json.dump(state, f))",
             '    (lambda f: json.dump(state, f))(open(os.path.join(folder, ASYNC_STATE_FILE), "w", encoding="utf-8"))',
             ("tests/test_async_state.py", "-k", "midway"),
             "the asynchronous state file written in place: a failed write leaves half a file"),
    # Issue 51: the asynchronous trainer's step size, resume and coupling.
    Mutation("stale_groups_pin_the_resume", "grpo_curriculum/training/_trl/async_trainer.py",
             "        untrained = [g for g in range(up_to) if g not in trained and g not in stale]",
             "        untrained = [g for g in range(up_to) if g not in trained]",
             ("tests/test_async_curriculum.py", "-k", "stale"),
             "a group TRL dropped whole as stale is a checkpoint's first untrained group (every resume restarts there)"),
    Mutation("stale_test_not_trls", "grpo_curriculum/training/_trl/async_trainer.py",
             "                if version() - sample.model_version > max_staleness:",
             "                if version() - sample.model_version >= max_staleness:",
             ("tests/test_async_curriculum.py", "-k", "stale"),
             "groups TRL kept are noted as stale (a checkpoint would skip them untrained)"),
    Mutation("resume_counts_versions_from_1", "grpo_curriculum/training/async_curriculum.py",
             "        return max(step0, (step0 // self.weight_sync_steps + version - version0) * self.weight_sync_steps)",
             "        return max(version - 1, 0) * self.weight_sync_steps",
             ("tests/test_async_curriculum.py", "-k", "resumes_at"),
             "a resumed worker reads its policy versions from 1: one sync interval early (the next stage too soon)"),
    Mutation("worker_started_without_its_version", "grpo_curriculum/training/_trl/async_trainer.py",
             '                self.rollout_worker._loop_kwargs["version_origin"] = (self.model_version, '
             "self.state.global_step)",
             '                self.rollout_worker._loop_kwargs["version_origin"] = (1, 0)',
             ("tests/test_async_curriculum.py", "-k", "starts_its_worker"),
             "the trainer does not tell a resumed worker the version and step it starts at"),
    Mutation("score_block_not_logged", "grpo_curriculum/training/_trl/async_worker.py",
             '                        self._push_metrics({"rollout/score_block_s": time.monotonic() - blocked})',
             "                        pass",
             ("tests/test_async.py", "-k", "scoring_held"),
             "the curriculum's generation loop drops TRL's rollout/score_block_s"),
    Mutation("trl_shape_not_checked", "grpo_curriculum/training/_trl/async_trainer.py",
             "        problems += trl_shape_problems()",
             "        pass",
             ("tests/test_async.py", "-k", "another_shape"),
             "a TRL whose asynchronous module lacks a private name the curriculum relies on is not refused"),
    Mutation("deepspeed_accepted", "grpo_curriculum/core/asynchronous.py",
             "    if curriculum and deepspeed:",
             "    if False:",
             ("tests/test_async.py", "-k", "deepspeed"),
             "DeepSpeed (untested; TRL's asynchronous trainer is built for FSDP2) accepted with a curriculum"),
    Mutation("step_size_always_samples", "grpo_curriculum/core/asynchronous.py",
             "    if token_budget is not None and token_budget <= 0:",
             "    if True:",
             ("tests/test_async_recipe.py", "-k", "as_trl_batches"),
             "check says 'N samples a step' whatever TRL's token_budget (it batches by tokens by default)"),
    Mutation("dynamic_switch_needs_stages", "grpo_curriculum/core/curriculum.py",
             '    if stages_optional and "stages" not in value:',
             "    if False:",
             ("tests/test_async_recipe.py", "-k", "needs_no_stages"),
             "curriculum: {dynamic_sampling: true} refused without stages (the Python API takes it)"),
    # Issue 53: checkpoints verified by content.
    Mutation("manifest_checks_sizes_only", "grpo_curriculum/training/manifest.py",
             '                if file_hash(file) != entry["hash"] else None)  # fmt: skip',
             "                if False else None)  # fmt: skip",
             ("tests/test_resume.py", "-k", "named_by_its_manifest"),
             "a checkpoint file damaged at the same size passes the manifest (sizes compared, not hashes)"),
    Mutation("manifest_not_written", "grpo_curriculum/training/_trl/checkpoint.py",
             "        write_manifest(folder)  # the last before the trainer state: every file it covers is written",
             "        pass",
             ("tests/test_resume.py", "-k", "named_by_its_manifest"),
             "a checkpoint is saved without its manifest (same-size damage resumes silently)"),
    Mutation("unknown_generation_kwargs_kept", "grpo_curriculum/cli/preflight.py",
             "        elif key not in known:",
             "        elif False:",
             ("tests/test_preflight.py", "-k", "generation_kwargs_unknown"),
             "an unknown generation_kwargs key (`max_new_token`) is kept and ignored, as transformers does"),
    Mutation("reward_failure_on_its_process_only", "grpo_curriculum/training/_trl/hooks.py",
             "        raise_reward_failures(self)  # a reward function's failure on any process: every process stops with it",
             "        pass",
             ("tests/test_distributed.py", "-k", "failing_on_one"),
             "a reward function failing on one process leaves the others in TRL's gather (a gloo traceback)"),
    Mutation("skip_fills_pass_end", "grpo_curriculum/core/policies.py",
             "        return not a.defer or (len(a.num_generations) > 1 and a.pilot is None)",
             "        return True", ("tests/test_skipping.py", "-k", "never_fills"),
             "a stage of one G that skips fills the pass's end with the prompts it skipped"),
    Mutation("skip_pass_not_taken_in_turn", "grpo_curriculum/training/driver.py",
             "                    stream.filling = stream.filling or not (defer or policy.fills_pass_end)",
             "                    pass", ("tests/test_skipping.py", "-k", "in_turn"),
             "a pass of settled prompts only trains its first round every pass (the rest never in turn)"),
    Mutation("async_defaults_unchecked", "grpo_curriculum/training/async_state.py",
             "    if schedule is not None:", "    if False:", ("tests/test_async_state.py", "-k", "other_knob"),
             "an asynchronous state written with other knob defaults resumes with today's (the rule changes mid-run)"),
]

MUTATIONS += [  # issue 50's skipping rules in the allocator, each killed by tests/test_skipping.py -k KEY
    Mutation(name, "grpo_curriculum/core/allocation.py", old, new, ("tests/test_skipping.py", "-k", key), why)
    for name, key, old, new, why in (
        ("pooled_ignores_point_mass", "pooled_skips",
         "            keep = 1 - float(self.impossible[slot]) * (1 - keep)", "            pass",
         "`skip: pooled` skips failing prompts as `evidence` does, where no prompt is impossible"),
        ("point_mass_everything_impossible", "point_mass",
         "        probability[zero] = share / (share + (1 - share) * none) if share > 0 else 0.0",
         "        probability[zero] = 1.0", "the point mass calls every never-succeeding prompt impossible"),
        ("solved_skips_failing", "pooled_skips",
         "        if streak < 0 and (self.solved_only or self.evidence and self.stats.successes[slot] > 0):",
         "        if streak < 0 and self.evidence and self.stats.successes[slot] > 0:",
         "`skip: solved` skips prompts that failed every visit, as `evidence` does"),
        ("pilot_never_used", "pilot_groups or pilot_stage_trains",
         "        return self.pilot if settled else self.candidates[-1]", "        return self.candidates[-1]",
         "pilot groups are never planned: unseen and settled prompts get the stage's full G"),
    )
]
MUTATIONS += [  # issue 50's third round: skipping explores from 0.05, and a resumed state keeps its own
    Mutation(name, path, old, new, ("tests/test_skipping.py", "-k", "state_saved_exploring"), why)
    for name, path, old, new, why in (
        ("skip_explores_from_greso", "grpo_curriculum/core/skipping.py", "SKIP_DEFAULT_EXPLORE = 0.05",
         "SKIP_DEFAULT_EXPLORE = 0.5", "`Skip()` explores from GRESO's 0.5, not the study's 0.05"),
        ("resume_forgets_exploration", "grpo_curriculum/core/policies.py",
         '        self.allocator.explore = {kind: float(state["explore"][kind]) for kind in ("easy", "hard")}',
         "        pass", "a resumed per-prompt state starts exploring again from the stage's start, not what it saved"),
    )
]

def ignore(directory, names):
    """What the copy leaves out: git, caches and every virtual environment (`.venv-vllm` alone takes GBs)."""
    return [n for n in names if n in {".git", "__pycache__", ".pytest_cache", ".ruff_cache"}
            or n.startswith(".venv") or n.endswith(".egg-info")]  # fmt: skip


# pytest's exit codes (`pytest.ExitCode`), named here so that this script imports no pytest
EXIT_NAMES = {0: "passed", 1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error",
              5: "no tests collected"}  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What one run of a selection gave: pytest's exit code (`None`: the timeout stopped it), the failed and errored
    tests (from pytest's JUnit XML report), its seconds and its last output line."""

    code: int | None
    failures: int
    errors: int
    seconds: float
    tail: str

    @property
    def passed(self) -> bool:
        return self.code == 0

    @property
    def failed_assertions(self) -> bool:
        """Tests failed, and nothing else went wrong: no collection, setup or teardown error (a kill)."""
        return self.code == 1 and self.failures > 0 and self.errors == 0

    def describe(self) -> str:
        if self.code is None:
            return "timeout"
        what = EXIT_NAMES.get(self.code, f"exit {self.code}")
        return what + (f", {self.errors} errors" if self.errors else "")


def pytest_command(tests: tuple[str, ...], report: str) -> list[str]:
    """The pytest command for a selection: one process (`-n 0` only where pytest-xdist is installed, which would take
    it; without xdist pytest refuses the option), stopping at the first failure, its JUnit report into `report`."""
    parallel = ["-n", "0"] if importlib.util.find_spec("xdist") is not None else []
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *parallel, f"--junitxml={report}",
            *tests]  # fmt: skip


def run_selection(copy: str, tests: tuple[str, ...], timeout: int) -> tuple[Outcome, list[str]]:
    """Run the pytest selection `tests` in the repository copy `copy`: its [`Outcome`] and its output lines."""
    import xml.etree.ElementTree as ElementTree

    report = os.path.join(copy, ".mutation-report.xml")
    if os.path.exists(report):
        os.remove(report)  # ours: the previous selection's report in this temporary copy
    env = {**os.environ, "PYTHONPATH": copy, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    start = time.perf_counter()
    # a session of its own, so that a timeout stops what the tests started too (torchrun and its workers)
    process = subprocess.Popen(pytest_command(tests, report), cwd=copy, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return Outcome(None, 0, 0, time.perf_counter() - start, f"stopped after {timeout} s"), []
    seconds = time.perf_counter() - start
    lines = output.strip().splitlines()
    failures = errors = 0
    tail = (lines[-1:] or [""])[0]
    if os.path.exists(report):
        root = ElementTree.parse(report).getroot()
        for suite in root.iter("testsuite"):
            failures += int(suite.get("failures", 0))
            errors += int(suite.get("errors", 0))
        failed = next(root.iter("failure"), None)
        if failed is not None:  # what failed: the assertion (or exception) that a kill comes from
            tail = " ".join((failed.get("message") or tail).split())[:200]
    return Outcome(process.returncode, failures, errors, seconds, tail), lines


class Runner:
    """
    Runs mutants of the repository at `root`, each in a temporary copy. A mutant is *killed* only when its selection
    passes on the unmutated copy (run once a selection, first) and fails on the mutated one with failed tests and
    nothing else: a selection that fails or errors unmutated (a missing file, a broken test) is a *broken selection*
    and the mutant is not run; a collection, setup or usage error, an interrupted run or a timeout of the mutant is
    reported as what it is, never as a kill.
    """

    def __init__(self, root: Path = ROOT, timeout: int = 1200, show: bool = False):
        self.root, self.timeout, self.show = Path(root), timeout, show
        self._baselines: dict[tuple[str, ...], Outcome] = {}
        self._clean: tempfile.TemporaryDirectory | None = None

    def _copy(self, into: str) -> None:
        shutil.copytree(self.root, into, dirs_exist_ok=True, ignore=ignore)

    def baseline(self, tests: tuple[str, ...]) -> Outcome:
        """The selection's outcome on the unmutated copy (run once a selection)."""
        if tests not in self._baselines:
            if self._clean is None:
                self._clean = tempfile.TemporaryDirectory(prefix="mutant-baseline-")
                self._copy(self._clean.name)
            self._baselines[tests] = run_selection(self._clean.name, tests, self.timeout)[0]
        return self._baselines[tests]

    def run(self, mutation: Mutation) -> tuple[str, float, str]:
        """`(result, seconds, last line)`: result `killed`, `survived`, `stale`, `broken selection (...)`, or
        `not killed: ...` (the mutant's run ended in an error or a timeout, not in failed tests)."""
        source = (self.root / mutation.path).read_text()
        if source.count(mutation.old) != 1:
            return "stale", 0.0, f"{mutation.path}: the text occurs {source.count(mutation.old)} times"
        clean = self.baseline(mutation.tests)
        if not clean.passed:
            return f"broken selection ({clean.describe()} unmutated)", clean.seconds, clean.tail
        with tempfile.TemporaryDirectory(prefix=f"mutant-{mutation.name}-") as copy:
            self._copy(copy)
            (Path(copy) / mutation.path).write_text(source.replace(mutation.old, mutation.new))
            outcome, lines = run_selection(copy, mutation.tests, self.timeout)
        if self.show:  # the assertion that killed it, to check that it is the one meant
            print("\n".join(line for line in lines if line.startswith(("E ", "FAILED", "ERROR")))[-3000:])
        if outcome.failed_assertions:
            return "killed", outcome.seconds, outcome.tail
        if outcome.passed:
            return "survived", outcome.seconds, outcome.tail
        return f"not killed: {outcome.describe()}", outcome.seconds, outcome.tail

    def close(self) -> None:
        if self._clean is not None:
            self._clean.cleanup()
            self._clean = None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds a mutant's tests may run")
    parser.add_argument("--show", action="store_true", help="print the failing assertions of each mutant")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.what} ({m.path}; {' '.join(m.tests)})")
        return 0
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutations {sorted(unknown)}: see --list")
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    results = []
    runner = Runner(ROOT, args.timeout, args.show)
    print("| mutation | result | seconds | last line |\n|---|---|---:|---|")
    try:
        for mutation in chosen:
            outcome, seconds, tail = runner.run(mutation)
            results.append(outcome)
            print(f"| {mutation.name} | {outcome} | {seconds:.0f} | {tail} |", flush=True)
    finally:
        runner.close()
    killed = results.count("killed")
    print(f"\nkilled {killed} of {len(results)} ({100 * killed / len(results):.0f}%)")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
