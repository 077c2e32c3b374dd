"""
The seam, rounds sampled in increments: TRL's output of each generation pass of a round (top-up, dynamic sampling,
mixed group sizes) recorded ([`IncrementRecords`]) and merged into the one output TRL trains on ([`finish_round`],
[`merge_increments`]), its metrics computed TRL's way from the trained rows. Knows GRPOTrainer internals, like the rest
of the seam (`settings.py` describes what the curriculum relies on).
"""

from __future__ import annotations

import contextlib
import math

import torch

from ...core.comparison import comparison_keep
from .settings import unsupported_trl, generation_round_length
from ..advantages import grpo_advantages, rloo_advantages, weighted_rewards

# The per-row tensors of TRL's round output (`_generate_and_score_completions`), with the side and value they are
# padded with (`None`: the tokenizer's pad token). `advantages` and `num_items_in_batch` are recomputed for the round.
_ROW_TENSORS = {
    "prompt_ids": ("left", None),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "tool_mask": ("right", 1),
    "old_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
}
# The per-row values of RLOO's round output: the policy's sequence log-probability, recomputed with the round's
# log-probabilities when the merge moves a row's prompt.
_ROW_VECTORS = ("old_logps",)
_RECOMPUTED = ("advantages", "num_items_in_batch", "importance_sampling_ratio")


def _completion_logs() -> dict:
    """An unbounded stand-in for `GRPOTrainer._logs`, holding one increment's completion log."""
    from collections import defaultdict

    return {"images": [], "prompt": [], "completion": [], "rewards": defaultdict(list), "advantages": [],
            "extra": defaultdict(list)}  # fmt: skip


class IncrementRecords:
    """
    What TRL records in each generation pass of a round: the output, the rewards per function (every process, row
    order) and the completion log (every process, row order), kept per increment so that the round is written back
    once, for the rows it trains on, as TRL writes a round of one pass. Metrics TRL appends per pass are merged into
    one value a round ([`merge_metrics`]).
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.outputs: list[dict] = []
        self.rewards_per_func: list = []
        self.logs: list[dict] = []
        self.rows: list[int] = []  # each increment's rows, every process
        self.scored = None  # the pass's `(rewards_per_func, completion_ids_list)`, from `_calculate_rewards`
        self.logps: list = []  # the pass's per-token log-probabilities as computed (RLOO: policy, then reference)
        self.pass_logps: list[list] = []  # per increment, its `logps`
        self.lengths: list[dict] = []  # per increment, this process's rows as `_generate` returned them (`generated`)
        self.user_metrics: list[dict] = []  # per increment, the `log_metric` values of this process (name: values)
        self.trained = None  # the round's trained rows (every process) and their advantages: `(order, advantages)`
        self._metric_lengths = {key: len(values) for key, values in trainer._metrics["train"].items()}
        self._kept_logs = trainer._logs
        self.tokens_seen = trainer.state.num_input_tokens_seen  # before the round

    @contextlib.contextmanager
    def increment(self):
        """Around one `_generate_and_score_completions` pass: its completion log goes to a log of its own."""
        self.scored, self.logps = None, []
        self.trainer._logs, self.trainer._increment_records = _completion_logs(), self
        try:
            yield
        finally:
            self.logs.append(self.trainer._logs)
            self.pass_logps.append(self.logps)
            self.trainer._logs, self.trainer._increment_records = self._kept_logs, None

    def generated(self, prompt_ids, completion_ids, tool_mask) -> None:
        """What `GRPOTrainer._generate` returned for this process's rows of the increment: each row's prompt length,
        completion length as TRL logs it (model tokens only, with tools), completion width (every token) and whether
        it was truncated (no EOS or pad at its end), as TRL's completion metrics read them."""
        trainer = self.trainer
        eos_and_pad = [*trainer.eos_token_ids, trainer._tokenizer.pad_token_id]
        logged = [sum(mask) for mask in tool_mask] if tool_mask is not None else [len(ids) for ids in completion_ids]
        self.lengths.append({"prompt": [len(ids) for ids in prompt_ids], "completion": logged,
                             "width": [len(ids) for ids in completion_ids],
                             "truncated": [ids[-1] not in eos_and_pad for ids in completion_ids]})  # fmt: skip

    def add(self, output: dict, rewards_per_func) -> None:
        self.outputs.append(output)
        self.rewards_per_func.append(rewards_per_func)
        self.rows.append(len(rewards_per_func))

    def write_logs(self, keep: list[bool] | None = None) -> None:
        """
        Append the completion log of the rows trained on ([`trained`]: indices into the increments' rows, all
        processes, increment after increment, and their advantages, default the ones TRL logged) to TRL's, with the
        advantages the model trains on: 0 for the rows the round's comparison does not `keep` ([`apply_comparison`]).
        """
        order, advantages = self.trained
        logs = self._kept_logs
        for name in ("prompt", "completion", "images", "advantages"):
            values = self._column(lambda log: log[name])
            if name == "advantages" and advantages is not None:
                values = advantages.tolist()
            elif values is not None:
                values = [values[i] for i in order]
            if values is not None and name == "advantages" and keep is not None:
                values = [value if kept else value * 0.0 for value, kept in zip(values, keep, strict=True)]
            if values is not None:
                logs[name].extend(values)
        for group in ("rewards", "extra"):
            for column in sorted({column for log in self.logs for column in log[group]}):
                values = self._column(lambda log: log[group].get(column))
                if values is not None:
                    logs[group][column].extend(values[i] for i in order)

    def _column(self, read):
        parts = [read(log) for log in self.logs]
        if not any(parts):
            return None
        return [value for part, rows in zip(parts, self.rows) for value in (part if part else [None] * rows)]

    def merge_metrics(self) -> None:
        """
        One value a round for each metric TRL appended in several passes. Those TRL computes from the rows (rewards,
        completion lengths, zero-std share, vLLM sampling) are written again from the trained rows by
        [`merge_increments`]; a `log_metric` value is the mean of every value logged in the round's passes (TRL's
        `total / count`, over the passes' calls); any other (`tools/*`) the mean of its passes weighted by their rows
        when it was appended once a pass, else the mean of its values: over the rows generated, as no per-row value
        exists.
        """
        user = {}
        for part in self.user_metrics:
            for name, (total, count) in part.items():
                user[name] = (user.get(name, (0.0, 0))[0] + total, user.get(name, (0.0, 0))[1] + count)
        for key, values in self.trainer._metrics["train"].items():
            start = self._metric_lengths.get(key, 0)
            new = values[start:]
            if len(new) < 2:
                continue
            if key in user and user[key][1]:
                merged = user[key][0] / user[key][1]
            elif len(new) == len(self.rows):
                merged = sum(v * rows for v, rows in zip(new, self.rows)) / sum(self.rows)
            else:
                merged = sum(new) / len(new)
            del values[start:]
            values.append(merged)

    def pending_metrics(self) -> None:
        """Before TRL flushes a pass's `log_metric` values (`_pending_metrics`): their sum and count, every process."""
        pending = getattr(self.trainer, "_pending_metrics", {})
        names = sorted(set(gather_objects(self.trainer, list(pending))))
        part = {}
        for name in names:
            values = pending.get(name, [])
            stats = torch.tensor([sum(values), len(values)], dtype=torch.float64,
                                 device=self.trainer.accelerator.device)  # fmt: skip
            total, count = self.trainer.accelerator.gather(stats).view(-1, 2).sum(dim=0).tolist()
            part[name] = (total, int(count))
        self.user_metrics.append(part)


def gather_objects(trainer, values: list) -> list:
    """`values` of every process, concatenated in process order."""
    from accelerate.utils import gather_object

    return gather_object(values) if trainer.accelerator.num_processes > 1 else list(values)


def round_advantages(trainer, records: IncrementRecords, order: list[int], group_sizes: list[int],
                     masked: list[bool] | None = None, sequence_kl=None) -> tuple:
    """
    The trainer's advantages of a round's trained rows (`order`: indices into the increments' rows, every process) with
    each group of its own size, and TRL's `frac_reward_zero_std` for them: `GRPOTrainer`'s ([`grpo_advantages`]) or
    `RLOOTrainer`'s ([`rloo_advantages`]), read from the trainer's settings. Rows `masked` (one flag a row of `order`)
    have no part in them. RLOO's rewards carry `beta` x each row's sequence KL: `sequence_kl` (the trained rows', in
    `order`, when the merge computed the log-probabilities again), else each pass's own ([`trained_sequence_kl`]).
    """
    rewards_per_func = torch.cat(records.rewards_per_func)
    rewards_per_func = rewards_per_func[torch.tensor(order, device=rewards_per_func.device)]
    if trainer.trainer_kind != "rloo":  # `CurriculumGRPOTrainer` and `CurriculumRLOOTrainer` set it
        return grpo_advantages(rewards_per_func, group_sizes, trainer.reward_weights, trainer.scale_rewards,
                               trainer.multi_objective_aggregation, masked)  # fmt: skip
    if trainer.beta != 0.0 and sequence_kl is None:
        sequence_kl = trained_sequence_kl(trainer, records, order)
    return rloo_advantages(rewards_per_func, group_sizes, trainer.reward_weights, trainer.reward_clip_range,
                           trainer.beta, sequence_kl, trainer.normalize_advantages, masked)  # fmt: skip


def trained_sequence_kl(trainer, records: IncrementRecords, order: list[int]):
    """
    Each trained row's sequence KL as `RLOOTrainer._generate_and_score_completions` computes it for its pass, `(policy
    - reference log-probabilities) x completion_mask` summed over tokens, from the log-probabilities the pass computed
    (recorded by [`RLOOHooks`]): the rows `order` of every increment's rows, every process.
    """
    kls = []
    for output, logps in zip(records.outputs, records.pass_logps, strict=True):
        if len(logps) != 2:
            raise unsupported_trl(f"find RLOO's policy and reference log-probabilities of a generation pass "
                               f"({len(logps)} computed)")  # fmt: skip
        kls.append(trainer.accelerator.gather(((logps[0] - logps[1]) * output["completion_mask"]).sum(-1)))
    kls = torch.cat(kls)
    return kls[torch.tensor(order, device=kls.device)]


def finish_round(trainer, records: IncrementRecords, round_) -> dict:
    """
    The output TRL trains on for a sampled round ([`Round`]): a round of one pass as TRL returned it (with the
    advantages of its real groups when they differ in size); a round of several increments, or one that drops groups,
    merged ([`merge_increments`]). The round's completion log is written after its comparison
    ([`IncrementRecords.write_logs`]).
    """
    if not round_.one_pass:
        masked = round_.masked_rows() if round_.masked else None
        return merge_increments(trainer, records, round_.order(), round_.trained_sizes, masked)
    output, advantages = records.outputs[0], None
    if round_.mixed:  # TRL ran it with `num_generations = 1`: the advantages of the real groups
        advantages, zero_std = round_advantages(trainer, records, list(range(records.rows[0])), round_.sizes)
        local = len(output["advantages"])
        start = trainer.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].device)
        metrics = trainer._metrics["train"]
        if metrics.get("frac_reward_zero_std"):  # TRL's, computed for the real groups (TRL saw groups of 1)
            metrics["frac_reward_zero_std"][-1] = zero_std
    records.trained = (list(range(records.rows[0])), advantages)
    return output


def apply_comparison(trainer, output: dict, round_) -> list[bool] | None:
    """
    Zero the advantage of the trained rows that the round's comparison mode leaves out
    ([`grpo_curriculum.core.comparison`]; a stage without `comparison`, or `mode: all`, leaves TRL's output as it is),
    and log `curriculum/comparison_kept` (the share of the round's trained completions that keep their advantage) and
    `curriculum/comparison_margin`. The rows stay in the batch (their tokens still count in the loss normaliser and
    the KL term). The mode is a pure function of the step the round starts at, so a resumed run applies the same.
    Returns which of the round's trained rows (every process) keep their advantage (`None`: all of them).
    """
    # The step the round started at: the generation step itself, or for a round regenerated after a resume from a
    # checkpoint taken inside it, the optimizer steps before the round (the micro-steps already trained in it back).
    phase = trainer._step % generation_round_length(trainer)
    start_step = trainer.state.global_step - phase // trainer.args.gradient_accumulation_steps
    mode, margin = trainer._curriculum.resolved.comparison_at(start_step)
    if mode == "all":
        return None
    rewards, sizes = round_.group_rewards(round_.trained_groups)
    keep = comparison_keep(rewards, sizes, mode, margin)
    advantages = output["advantages"]
    start = trainer.accelerator.process_index * len(advantages)  # each process trains a contiguous share
    mask = torch.tensor(keep[start : start + len(advantages)], dtype=advantages.dtype, device=advantages.device)
    output["advantages"] = advantages * mask.view(-1, *([1] * (advantages.dim() - 1)))
    trainer._metrics["train"]["curriculum/comparison_kept"].append(sum(keep) / len(keep))
    if margin is not None:
        trainer._metrics["train"]["curriculum/comparison_margin"].append(margin)
    return keep


def merge_increments(trainer, records: IncrementRecords, order: list[int], group_sizes: list[int],
                     masked: list[bool] | None = None) -> dict:
    """
    One round output from its increments' outputs: the rows `order` (indices into the increments' rows of every
    process, concatenated in increment order) in that order, each process taking its contiguous share, as if TRL had
    generated them in one pass. Every group is whole and contiguous; its advantages are computed over all its rows
    ([`round_advantages`]; rows `masked` have no part in them); `num_items_in_batch`, the completion log (written by
    [`IncrementRecords.write_logs`]) and TRL's metrics describe the rows trained on. Each process's rows are padded as
    TRL pads one pass: to the widest of its own rows' prompts (on the left) and completions (rounded up to
    `pad_to_multiple_of`). When that moves a row's prompt (a model with absolute positions gives other
    log-probabilities), the policy's and reference model's log-probabilities are computed again for the round, as TRL
    computes them for one pass; the vLLM importance-sampling ratio is computed from them by TRL's formula. Rows
    `masked` (one flag a row of `order`) are out of the loss: their `tool_mask`, TRL's loss mask, is 0. `RLOOTrainer`'s
    output merges the same way, its per-row `old_logps` gathered and re-sliced (and computed again with the KL when a
    prompt moves); it has no loss mask, so it cannot have rows `masked`.
    """
    accelerator = trainer.accelerator
    outputs = records.outputs
    unknown = set().union(*outputs) - set(_ROW_TENSORS) - set(_ROW_VECTORS) - set(_RECOMPUTED)
    if unknown:
        raise unsupported_trl(f"merge the increments of a round whose outputs hold {sorted(unknown)} (image inputs)")
    num_processes, rank = accelerator.num_processes, accelerator.process_index
    if len(order) % num_processes:
        raise RuntimeError(f"a round of {len(order)} rows does not split over {num_processes} processes")
    local = len(order) // num_processes
    mine = torch.tensor(order[rank * local : (rank + 1) * local], dtype=torch.long)
    rows = _gathered_lengths(trainer, records)  # every row of every increment, every process: its lengths
    # The prompt width each row was scored at (each process padded its own rows of an increment).
    widths = torch.cat([accelerator.gather(torch.full((len(out["prompt_ids"]),), out["prompt_ids"].size(1),
                                                      device=accelerator.device)).cpu()
                        for out in outputs])  # fmt: skip
    # Each process's widths in the merged round, as TRL pads one pass: its own rows' widest prompt and completion.
    shares = [torch.tensor(order[r * local : (r + 1) * local], dtype=torch.long) for r in range(num_processes)]
    prompt_widths = [_padded_width(trainer, rows["prompt"][share]) for share in shares]
    completion_widths = [_padded_width(trainer, rows["width"][share]) for share in shares]
    merged = {}
    for key, (side, value) in _ROW_TENSORS.items():
        if outputs[0].get(key) is None:
            continue
        value = trainer._tokenizer.pad_token_id if value is None else value
        parts = []
        for out in outputs:
            tensor = accelerator.pad_across_processes(out[key], dim=1, pad_index=value, pad_first=side == "left")
            parts.append(accelerator.gather(tensor))
        keep = (prompt_widths if side == "left" else completion_widths)[rank]
        width = max(max(part.size(1) for part in parts), keep)
        parts = [_pad_width(part, width, side, value) for part in parts]
        tensor = torch.cat(parts)[mine.to(parts[0].device)]
        merged[key] = tensor[:, tensor.size(1) - keep :] if side == "left" else tensor[:, :keep]
    for key in _ROW_VECTORS:
        if outputs[0].get(key) is not None:
            merged[key] = torch.cat([accelerator.gather(out[key]) for out in outputs])[mine.to(outputs[0][key].device)]
    rloo = "old_logps" in merged  # RLOO's output: its KL penalty lives in the rewards, no loss mask of its own
    if rloo and masked is not None and any(masked):
        raise unsupported_trl("mask rows out of the loss of an RLOO round (RLOO's output has no loss mask)")
    rewards_per_func = torch.cat(records.rewards_per_func)
    rewards_per_func = rewards_per_func[torch.tensor(order, device=rewards_per_func.device)]
    # Every process decides alike (the forward passes may be collective: FSDP, ZeRO-3).
    sequence_kl = None  # RLOO: the trained rows' sequence KL at the round's padding, every process, `order`
    if any(bool((widths[share] != width).any()) for share, width in zip(shares, prompt_widths)):
        local_kl = _recompute_logps(trainer, merged)
        if local_kl is not None:
            sequence_kl = accelerator.gather(local_kl)
    if rloo and trainer.beta != 0.0 and sequence_kl is None:
        sequence_kl = trained_sequence_kl(trainer, records, order)
    advantages, zero_std = round_advantages(trainer, records, order, group_sizes, masked, sequence_kl)
    merged["advantages"] = advantages[rank * local : (rank + 1) * local].to(merged["prompt_ids"].device)
    if masked is not None and any(masked):
        keep = torch.tensor([not m for m in masked[rank * local : (rank + 1) * local]], dtype=torch.long,
                            device=merged["completion_mask"].device)  # fmt: skip
        tool_mask = merged.get("tool_mask", torch.ones_like(merged["completion_mask"]))
        merged["tool_mask"] = tool_mask * keep.unsqueeze(1)
    if "num_items_in_batch" in outputs[0]:  # (GRPO's; RLOO's loss has no such normaliser)
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        merged["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()
    if outputs[0].get("importance_sampling_ratio") is not None:
        merged["importance_sampling_ratio"] = importance_sampling_ratio(trainer, merged)
    records.merge_metrics()
    _log_reward_metrics(trainer, rewards_per_func)
    _log_row_metrics(trainer, records, rows, torch.tensor(order, dtype=torch.long), merged)
    metrics = trainer._metrics["train"]
    if rloo and trainer.beta != 0.0 and metrics.get("kl"):  # RLOO's: the mean per-token KL of the trained rows
        tokens = accelerator.gather(merged["completion_mask"].sum(1)).sum()
        metrics["kl"][-1] = (sequence_kl.sum() / tokens.clamp(min=1.0)).item()
    if metrics.get("frac_reward_zero_std"):
        metrics["frac_reward_zero_std"][-1] = zero_std
    records.trained = (order, advantages)
    return merged


def _gathered_lengths(trainer, records: IncrementRecords) -> dict:
    """[`IncrementRecords.generated`]'s per-row values of every increment, every process, in row order (tensors)."""
    accelerator = trainer.accelerator
    gathered = {}
    for name in ("prompt", "completion", "width", "truncated"):
        parts = [accelerator.gather(torch.tensor(part[name], dtype=torch.long, device=accelerator.device)).cpu()
                 for part in records.lengths]  # fmt: skip
        gathered[name] = torch.cat(parts)
    gathered["truncated"] = gathered["truncated"].bool()
    return gathered


def _padded_width(trainer, lengths) -> int:
    """The width TRL's `pad` gives rows of `lengths`: the longest, rounded up to `pad_to_multiple_of`."""
    width = int(lengths.max()) if len(lengths) else 0
    multiple = getattr(trainer, "pad_to_multiple_of", None)
    return -(-width // multiple) * multiple if multiple else width


def importance_sampling_ratio(trainer, output: dict):
    """
    The vLLM importance-sampling ratio of `output`'s rows, by `GRPOTrainer._generate_and_score_completions`'s formula:
    `exp(old - sampling)` per token (`token_*` modes) or per sequence (the sum, `sequence_*`), over the loss mask (NaN
    sampling log-probs count 0), then clamped (`*_truncate`) or set to 0 outside the bounds (`*_mask`).
    """
    mask = output["completion_mask"] if output.get("tool_mask") is None else \
        output["completion_mask"] * output["tool_mask"]  # fmt: skip
    diff = torch.nan_to_num((output["old_per_token_logps"] - output["sampling_per_token_logps"]) * mask, nan=0.0)
    mode = trainer.vllm_importance_sampling_mode
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    low, high = trainer.vllm_importance_sampling_clip_min, trainer.vllm_importance_sampling_clip_max
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, min=low, max=high)
    if mode in ("sequence_mask", "token_mask"):
        low = -math.inf if low is None else low
        high = math.inf if high is None else high
        return ratio.masked_fill((ratio < low) | (ratio > high), value=0.0)
    raise unsupported_trl(f"compute the importance-sampling ratio of vllm_importance_sampling_mode {mode!r}")


def _log_row_metrics(trainer, records: IncrementRecords, rows: dict, order, output: dict) -> None:
    """
    TRL's per-pass metrics computed from rows (`_generate`: token count, completion lengths and truncation;
    `_generate_and_score_completions`: vLLM sampling divergence and importance-sampling ratio), written again for the
    round's trained rows (`order`: all processes; `output`: this process's), as TRL computes them for one pass.
    `num_tokens` (and `state.num_input_tokens_seen`) counts the trained rows' prompt and completion tokens.
    """
    from trl.trainer.utils import nanmax, nanmin

    metrics, accelerator = trainer._metrics["train"], trainer.accelerator
    device = accelerator.device

    def put(name, value):
        if metrics.get(name):
            metrics[name][-1] = value

    lengths, truncated = rows["completion"][order].float(), rows["truncated"][order]
    trainer.state.num_input_tokens_seen = records.tokens_seen + int(rows["prompt"][order].sum() + lengths.sum())
    metrics["num_tokens"] = [trainer.state.num_input_tokens_seen]
    put("completions/mean_length", lengths.mean().item())
    put("completions/min_length", lengths.min().item())
    put("completions/max_length", lengths.max().item())
    put("completions/clipped_ratio", truncated.float().mean().item())
    terminated = lengths[~truncated]
    if len(terminated) == 0:  # TRL's placeholder when no completion terminated
        terminated = torch.zeros(1)
    put("completions/mean_terminated_length", terminated.mean().item())
    put("completions/min_terminated_length", terminated.min().item())
    put("completions/max_terminated_length", terminated.max().item())
    ratio = output.get("importance_sampling_ratio")
    if ratio is None or output.get("sampling_per_token_logps") is None:
        return
    mask = output["completion_mask"].bool() if output.get("tool_mask") is None else \
        (output["completion_mask"] * output["tool_mask"]).bool()  # fmt: skip
    delta = torch.abs(output["old_per_token_logps"] - output["sampling_per_token_logps"])
    delta = delta[mask & ~torch.isnan(delta)]
    zero = torch.tensor(0.0, device=device)
    put("sampling/sampling_logp_difference/mean",
        accelerator.gather(torch.mean(delta) if delta.numel() else zero).mean().item())
    put("sampling/sampling_logp_difference/max",
        accelerator.gather(torch.max(delta) if delta.numel() else zero).max().item())
    sequence_level = trainer.vllm_importance_sampling_mode in ("sequence_mask", "sequence_truncate")
    flat = ratio.flatten() if sequence_level else ratio[mask]
    put("sampling/importance_sampling_ratio/min", nanmin(accelerator.gather(torch.min(flat) if flat.numel() else
                                                                            zero)).item())  # fmt: skip
    put("sampling/importance_sampling_ratio/mean",
        accelerator.gather(torch.mean(flat) if flat.numel() else zero).nanmean().item())
    put("sampling/importance_sampling_ratio/max", nanmax(accelerator.gather(torch.max(flat) if flat.numel() else
                                                                            zero)).item())  # fmt: skip


def _pad_width(tensor, width: int, side: str, value):
    missing = width - tensor.size(1)
    if missing == 0:
        return tensor
    padding = tensor.new_full((tensor.size(0), missing), value)
    return torch.cat([padding, tensor] if side == "left" else [tensor, padding], dim=1)


def _recompute_logps(trainer, output: dict):
    """
    The policy's and reference model's log-probabilities of `output`'s rows, computed as the trainer's
    `_generate_and_score_completions` computes them, at the rows' merged padding: `GRPOTrainer`'s
    `old_per_token_logps` and `ref_per_token_logps`; `RLOOTrainer`'s `old_logps` (the policy's, summed over the
    completion mask), returning each row's sequence KL (`(policy - reference) x completion_mask` summed) when `beta > 0`
    (`None` otherwise, and for GRPO).
    """
    rloo = output.get("old_logps") is not None
    policy = rloo or output.get("old_per_token_logps") is not None
    reference = (rloo and trainer.beta != 0.0) or output.get("ref_per_token_logps") is not None
    if not (policy or reference):
        return None
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import use_adapter

    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    keep, batch_size = output["completion_ids"].size(1), trainer.args.per_device_train_batch_size
    old = ref = None
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        if policy:
            old = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep,
                                                             batch_size=batch_size)[0]  # fmt: skip
        if reference:
            if trainer.ref_model is not None:
                ref = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, mask, keep,
                                                                 batch_size=batch_size)[0]  # fmt: skip
            else:
                model = trainer.accelerator.unwrap_model(trainer.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    ref = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep,
                                                                     batch_size=batch_size)[0]  # fmt: skip
    if not rloo:
        if old is not None:
            output["old_per_token_logps"] = old
        if ref is not None:
            output["ref_per_token_logps"] = ref
        return None
    output["old_logps"] = (old * output["completion_mask"]).sum(1)
    return None if ref is None else ((old - ref) * output["completion_mask"]).sum(-1)


def _log_reward_metrics(trainer, rewards_per_func) -> None:
    """TRL's reward metrics of a pass (`reward`, `reward_std`, `rewards/<name>/mean|std`), for the rows trained on."""
    from trl.trainer.utils import nanstd

    metrics = trainer._metrics["train"]
    for i, name in enumerate(trainer.reward_func_names):
        metrics[f"rewards/{name}/mean"][-1] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"][-1] = nanstd(rewards_per_func[:, i]).item()
    rewards = weighted_rewards(rewards_per_func, trainer.reward_weights)  # as TRL logs them: before any clipping
    metrics["reward"][-1] = torch.nanmean(rewards).item()
    metrics["reward_std"][-1] = nanstd(rewards).item()
