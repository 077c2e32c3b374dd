"""
An on-demand mutation check of the critical paths of merged rounds, resume and the prompt stream (issue 30): each
mutation is a text patch of one line of the package, applied to a temporary copy of the repository; the tests chosen
for it run against the copy, and the mutant is *killed* when they fail. Not run in CI (minutes; the distributed mutant
launches `torchrun`).

    python benchmarks/mutations.py                 # every mutation, a table and the kill rate
    python benchmarks/mutations.py --list          # the mutations
    python benchmarks/mutations.py take_keeps_waiting num_items_not_gathered

A mutation whose text is no longer in the file (the code moved on) is reported as `stale`, and counts as a failure
of this script (exit 1), like a surviving mutant: update its text, not the tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
    Mutation("recompute_skipped", "grpo_curriculum/training/_trl_merge.py",
             "    if any(bool((widths[share] != width).any()) for share, width in zip(shares, prompt_widths)):",
             "    if False:",
             ("tests/test_increments.py", "-k", "several_iterations or independent_rebuild"),
             "a merged round never recomputes old and reference log-probs at its padding"),
    Mutation("ref_recompute_skipped", "grpo_curriculum/training/_trl_merge.py",
             '            output["ref_per_token_logps"] = ref',
             "            pass",
             ("tests/test_increments.py", "-k", "several_iterations"),
             "the recompute skips the reference model's log-probs"),
    Mutation("prompts_right_padded", "grpo_curriculum/training/_trl_merge.py",
             "        parts = [_pad_width(part, width, side, value) for part in parts]",
             '        parts = [_pad_width(part, width, "right", value) for part in parts]',
             ("tests/test_increments.py", "-k", "several_iterations or padded_to_its_trained"),
             "a narrower increment's prompts padded on the right (pad tokens between prompt and completion)"),
    Mutation("padded_to_every_row", "grpo_curriculum/training/_trl_merge.py",
             '        merged[key] = tensor[:, tensor.size(1) - keep :] if side == "left" else tensor[:, :keep]',
             "        merged[key] = tensor",
             ("tests/test_increments.py", "-k", "padded_to_its_trained"),
             "merged rows padded to the widest row sampled, dropped rows included"),
    Mutation("row_metrics_per_increment", "grpo_curriculum/training/_trl_merge.py",
             "    _log_row_metrics(trainer, records, rows, torch.tensor(order, dtype=torch.long), merged)",
             "    pass",
             ("tests/test_increments.py", "-k", "completion_metrics or sampling_metrics"),
             "merged completion and sampling metrics averaged per increment instead of computed from the rows"),
    Mutation("reward_metrics_per_increment", "grpo_curriculum/training/_trl_merge.py",
             "    _log_reward_metrics(trainer, rewards_per_func)\n    _log_row_metrics",
             "    _log_row_metrics",
             ("tests/test_increments.py", "-k", "completion_metrics"),
             "merged reward metrics averaged per increment (dynamic sampling: over the dropped rows too)"),
    Mutation("user_metric_by_rows", "grpo_curriculum/training/_trl_merge.py",
             "            if key in user and user[key][1]:",
             "            if False:",
             ("tests/test_increments.py", "-k", "log_metric_value"),
             "a `log_metric` value merged as a mean of its passes weighted by rows, not TRL's total / count"),
    Mutation("is_ratio_token_level_always", "grpo_curriculum/training/_trl_merge.py",
             '    if mode in ("sequence_mask", "sequence_truncate"):\n        diff = diff.sum(dim=-1, keepdim=True)',
             '    if False:\n        diff = diff.sum(dim=-1, keepdim=True)',
             ("tests/test_increments.py", "-k", "sampling_metrics and sequence_mask"),
             "the importance-sampling ratio of a merged round computed per token in a sequence mode"),
    Mutation("num_items_not_gathered", "grpo_curriculum/training/_trl_merge.py",
             '    merged["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()',
             '    merged["num_items_in_batch"] = loss_mask.sum()',
             ("tests/test_distributed.py", "-k", "rounds_in_increments"),
             "`num_items_in_batch` of a merged round not gathered across processes (2 ranks: `dapo` loss doubles)"),
    Mutation("fill_up_not_masked", "grpo_curriculum/training/_trl_merge.py",
             '        merged["tool_mask"] = tool_mask * keep.unsqueeze(1)',
             '        merged["tool_mask"] = tool_mask',
             ("tests/test_increments.py", "-k", "undiluted or cap_fills"),
             "dynamic sampling's fill-up groups left in the loss under on_limit mask"),
    Mutation("on_limit_error_ignored", "grpo_curriculum/core/next_increment.py",
             '    if short and dynamic.on_limit == "error":',
             "    if False:",
             ("tests/test_increments.py", "-k", "on_limit_error"),
             "dynamic sampling at its limit with on_limit error trains on"),
    Mutation("mixed_frac_left_to_trl", "grpo_curriculum/training/_trl_merge.py",
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
    Mutation("replay_not_counted", "grpo_curriculum/training/callback.py",
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
    Mutation("masked_rows_in_statistics", "grpo_curriculum/training/_trl_merge.py",
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
    Mutation("temperature_step_unclamped", "grpo_curriculum/core/adaptive.py",
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
    Mutation("waiting_at_the_position", "grpo_curriculum/training/checkpoint.py",
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
    Mutation("loss_at_args_temperature", "grpo_curriculum/training/_trl_async.py",
             "            output = self.head(temperature)(*args, fused_lm_head=True, **kwargs)",
             "            output = self.base(*args, fused_lm_head=True, **kwargs)",
             ("tests/test_async_temperature.py",),
             "every loss term of the asynchronous trainer at args.temperature, not at its sampling temperature"),
    Mutation("term_temperature_by_position", "grpo_curriculum/training/_trl_async.py",
             "            temperatures[r, terms] = per_sample[batch[\"segment_id\"][r, terms]]",
             "            temperatures[r, terms] = per_sample[0]",
             ("tests/test_async_temperature.py", "-k", "collator"),
             "every loss term of a packed row at its first sample's temperature"),
    Mutation("dropped_groups_restart_the_stream", "grpo_curriculum/training/async_curriculum.py",
             "        first = next((g for g in untrained if g not in self._dropped), None)",
             "        first = next((g for g in untrained), None)",
             ("tests/test_async_curriculum.py", "-k", "neither_trained_nor_dropped"),
             "a checkpoint's stream restarts at a group dynamic sampling dropped (never to be trained)"),
    Mutation("passes_not_in_lockstep", "grpo_curriculum/training/_trl_async.py",
             "        if self.lockstep:",
             "        if False:",
             ("tests/test_async_temperature.py", "-k", "fsdp2"),
             "each process of a sharded model runs a pass per temperature of its own micro-batch only (a hang)"),
    Mutation("resumed_worker_counts_groups_twice", "grpo_curriculum/training/async_curriculum.py",
             "        if plan.replay and self._replays[plan.key] > 0:",
             "        if False:",
             ("tests/test_async_curriculum.py", "-k", "once"),
             "a resumed asynchronous worker counts the groups the checkpoint counted again"),
]


def ignore(directory, names):
    """What the copy leaves out: git, caches and every virtual environment (`.venv-vllm` alone takes GBs)."""
    return [n for n in names if n in {".git", "__pycache__", ".pytest_cache", ".ruff_cache"}
            or n.startswith(".venv") or n.endswith(".egg-info")]  # fmt: skip


def run(mutation: Mutation, timeout: int, show: bool = False) -> tuple[str, float, str]:
    """Apply `mutation` to a copy of the repository and run its tests: `("killed" | "survived" | "stale", s, tail)`."""
    source = (ROOT / mutation.path).read_text()
    if source.count(mutation.old) != 1:
        return "stale", 0.0, f"{mutation.path}: the text occurs {source.count(mutation.old)} times"
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutation.name}-") as copy:
        shutil.copytree(ROOT, copy, dirs_exist_ok=True, ignore=ignore)
        (Path(copy) / mutation.path).write_text(source.replace(mutation.old, mutation.new))
        env = {**os.environ, "PYTHONPATH": copy, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0", *mutation.tests]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed (timeout)", time.perf_counter() - start, ""
        seconds = time.perf_counter() - start
        lines = (done.stdout + done.stderr).strip().splitlines()
        if show:  # the assertion that killed it, to check that it is the one meant
            print("\n".join(line for line in lines if line.startswith(("E ", "FAILED", "ERROR")))[-3000:])
        tail = lines[-1:] or [""]
        if done.returncode == 5:  # no test collected: the selection is stale
            return "stale", seconds, tail[0]
        return ("killed" if done.returncode else "survived"), seconds, tail[0]


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
    print("| mutation | result | seconds | last line |\n|---|---|---:|---|")
    for mutation in chosen:
        outcome, seconds, tail = run(mutation, args.timeout, args.show)
        results.append(outcome)
        print(f"| {mutation.name} | {outcome} | {seconds:.0f} | {tail} |", flush=True)
    killed = sum(outcome.startswith("killed") for outcome in results)
    print(f"\nkilled {killed} of {len(results)} ({100 * killed / len(results):.0f}%)")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
