"""
Everything that knows TRL's `GRPOTrainer` internals lives here, so a TRL upgrade touches this one module.

Tested against TRL 1.14, 1.15 and 1.16 (`grpo_curriculum.compat.TRL_RANGE`; docs/compatibility.md). Where their
internals differ, the code below looks the feature up (marked "TRL < 1.15" etc.) rather than the version. What the
curriculum relies on:

- `trainer.num_generations` is read at every generation round (`_generate`, the reward grouping
  `rewards.view(-1, G)` and the vLLM request `n=G`).
- The sampling temperature lives in `trainer.generation_config` / `trainer.generation_kwargs` (transformers
  generation and continuous batching) and `trainer.vllm_generation.temperature` (vLLM, both modes).
- The training log-probabilities are computed by the fused LM head that `add_fused_lm_head` patches into the policy
  (and the reference model) at `__init__`, with the temperature bound in a closure. We record that closure cell while
  the parent `__init__` runs and rewrite it at each switch. TRL < 1.15 has no fused LM head: its log-probabilities
  divide by `trainer.temperature` at each computation.
- `_generate_single_turn` takes `num_generations` from TRL 1.14 on (`has_tool_images` from 1.10): the hook passes its
  arguments through. `trainer.eos_token_ids` exists from TRL 1.14 on (earlier: the tokenizer's EOS alone).
- With `beta > 0`, `__init__` builds the reference model with `create_model_from_path(config._name_or_path)`; for a
  policy built in memory (no path) we make it a copy of the policy ([`reference_from_instance`]).
- `_generate_and_score_completions(inputs)` is called once per generation round in training, with the local slice of
  the round's rows (prompt repeated G times, contiguous, processes taking consecutive slices). We build those rows
  ourselves from a prompt stream that reproduces `RepeatSampler`'s order, so the data loader's read-ahead (accelerate
  prefetch, worker prefetch) never hands a row grouped for the old G to a round with the new G. A round sampled in
  increments (top-up, dynamic sampling) calls the parent method once per increment (it generates, scores each row
  once and computes log-probabilities at the round's temperature) and merges the outputs ([`merge_increments`]): the
  per-row keys of `_ROW_TENSORS` are padded, gathered and re-sliced, `advantages` and `num_items_in_batch` recomputed.
- `_calculate_rewards` returns the rewards per function of every process (gathered), in row order; `_logs` holds the
  completion log (deques of `generation_batch_size`) and `_metrics["train"]` one list per metric, appended per pass.
- Each generation pass appends TRL's metrics to `trainer._metrics["train"]` (`_generate`: token count, completion
  lengths; `_generate_and_score_completions`: rewards, `frac_reward_zero_std`, vLLM sampling; `log_metric` values
  from `_pending_metrics`, flushed after `_calculate_rewards`). A round of one pass keeps them as TRL wrote them; a
  merged round writes one value each, computed TRL's way from the rows it trains on (`_generate`'s returned rows are
  recorded for it). The curriculum's own signals are logged under `curriculum/...`.
- Without a `train_dataset` (an `environment_factory` owns the data), `__init__` sets `trainer.train_dataset` to a
  placeholder of `generation_batch_size // num_generations` empty prompts.
- `_generate_single_turn` samples a round's first turn (then, with tools, each later turn of TRL's tool loop, one
  history a row): the first call in a round is the one whose groups a vLLM server request may regroup.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import logging
import math
import os

import torch
from datasets import Dataset

from ..core.comparison import comparison_keep
from ..core.errors import CurriculumError, Problem
from .advantages import frac_reward_zero_std, group_advantages
from .stream import PromptStream

logger = logging.getLogger("grpo_curriculum")

_GRPO_MODULE = "trl.trainer.grpo_trainer"


class UnsupportedTRLError(RuntimeError):
    """Raised when the installed TRL does not have the internals this version of grpo-curriculum relies on."""


def _unsupported(what: str) -> UnsupportedTRLError:
    import trl

    from ..compat import trl_requirement

    return UnsupportedTRLError(
        f"grpo-curriculum cannot {what} with the installed TRL {trl.__version__}: its GRPOTrainer internals changed. "
        f"Install a supported TRL version (`pip install '{trl_requirement()}'`) or upgrade grpo-curriculum."
    )


@contextlib.contextmanager
def record_fused_lm_head_temperature(cells: list):
    """
    While the parent `GRPOTrainer.__init__` runs, record the closure cell holding the temperature of every fused LM
    head it adds (policy and reference model), so [`set_temperature`] can change it later.
    """
    module = importlib.import_module(_GRPO_MODULE)
    original = getattr(module, "add_fused_lm_head", None)
    if original is None:  # TRL < 1.15: the log-probabilities divide by `trainer.temperature` at every computation
        yield cells
        return

    def recording_add_fused_lm_head(model, *args, **kwargs):
        original(model, *args, **kwargs)
        function = getattr(model.forward, "__func__", None)
        code = getattr(function, "__code__", None)
        if code is None or "temperature" not in code.co_freevars:
            raise _unsupported("locate the temperature of the fused LM head")
        cells.append(function.__closure__[code.co_freevars.index("temperature")])

    module.add_fused_lm_head = recording_add_fused_lm_head
    try:
        yield cells
    finally:
        module.add_fused_lm_head = original


@contextlib.contextmanager
def reference_from_instance(model):
    """
    While the parent `GRPOTrainer.__init__` runs: with `beta > 0` it builds the reference model by loading the
    policy's `config._name_or_path` again (`create_model_from_path`), which a model built in memory (the built-in
    `builtin:tiny`, or any instance never saved) does not have (`''`: the Hub refuses it). Such a policy's reference
    is a copy of it: the weights RL starts from, as a reload of a saved policy would give (in the dtype TRL asks for).
    """
    module = importlib.import_module(_GRPO_MODULE)
    original = getattr(module, "create_model_from_path", None)
    if original is None:
        raise _unsupported("find `create_model_from_path`")
    in_memory = isinstance(model, torch.nn.Module) and not getattr(getattr(model, "config", None), "_name_or_path", "")

    def copying_create_model_from_path(model_id, *args, **kwargs):
        if not (in_memory and model_id == ""):
            return original(model_id, *args, **kwargs)
        import copy

        reference = copy.deepcopy(model)
        dtype = kwargs.get("dtype")
        dtype = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
        return reference.to(dtype) if isinstance(dtype, torch.dtype) else reference

    module.create_model_from_path = copying_create_model_from_path
    try:
        yield
    finally:
        module.create_model_from_path = original


def set_num_generations(trainer, num_generations: int) -> None:
    """Make the next generation round sample `num_generations` completions per prompt and group rewards by it (`1`:
    every row on its own, for a round of mixed group sizes)."""
    trainer.num_generations = int(num_generations)


def full_length_completions(trainer) -> bool:
    """
    Make transformers generation run every completion to `max_completion_length` (no early end of sequence): the most
    memory a generation batch can take (`sweep --plan-memory` probes it). `False`, and nothing changed, with vLLM,
    which generates outside the trainer.
    """
    if getattr(trainer, "use_vllm", False) or getattr(trainer, "generation_config", None) is None:
        return False
    trainer.generation_config.min_new_tokens = trainer.max_completion_length
    trainer.generation_kwargs["min_new_tokens"] = trainer.max_completion_length
    return True


def set_temperature(trainer, temperature: float, cells: list) -> None:
    """Set the sampling temperature everywhere TRL reads it: generation, vLLM and the log-prob computation."""
    temperature = float(temperature)
    trainer.temperature = temperature
    if getattr(trainer, "generation_config", None) is not None:
        trainer.generation_config.temperature = temperature
    if getattr(trainer, "generation_kwargs", None) is not None:
        trainer.generation_kwargs["temperature"] = temperature
    if getattr(trainer, "use_vllm", False):
        trainer.vllm_generation.temperature = temperature
    for cell in cells:
        cell.cell_contents = temperature


def fit_environment_placeholder(trainer, num_prompts: int) -> None:
    """
    Without a `train_dataset`, TRL trains on a placeholder of `generation_batch_size // num_generations` empty prompts
    (one round at its own G; the `environment_factory`'s `reset()` gives each rollout its prompt). Make it
    `num_prompts` rows of the same empty prompt, enough for a round at the curriculum's smallest G (and for TRL's
    loader at any G the curriculum sets).
    """
    placeholder = trainer.train_dataset
    if len(placeholder) < num_prompts:
        trainer.train_dataset = placeholder.select([0] * num_prompts)


def generation_round_length(trainer) -> int:
    """Micro-steps (`training_step` calls) a generated batch is used for: `steps_per_generation x num_iterations`."""
    return trainer.args.steps_per_generation * trainer.num_iterations


def completion_keys(trainer, completion_ids_list) -> list[int]:
    """A key per completion of the whole round (gathered from every process, in row order) to count distinct ones."""
    from accelerate.utils import gather_object

    local = [hash(tuple(ids)) for ids in completion_ids_list]  # int tuples hash the same on every process
    return gather_object(local) if trainer.accelerator.num_processes > 1 else local


def weighted_rewards(trainer, rewards_per_func) -> list[float]:
    """The round's rewards as TRL combines them (weighted sum; NaN where every reward function returned None)."""
    weights = trainer.reward_weights.to(rewards_per_func.device).unsqueeze(0)
    rewards = (rewards_per_func * weights).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards.tolist()


def refuse_infinite_rewards(trainer, rewards_per_func) -> None:
    """
    Stop at a reward of `inf` or `-inf` (TRL reads `None` as NaN, unscored; an infinite reward gives NaN or zero
    advantages, so a run trained on with loss 0 and no gradient while logging reward inf): one error naming the reward
    function, the first bad value and where it is. `rewards_per_func` is gathered: every process stops alike.
    """
    bad = torch.isinf(rewards_per_func)
    if not bad.any():
        return
    row, column = (int(i) for i in bad.nonzero()[0])
    value, name = rewards_per_func[row, column].item(), trainer.reward_func_names[column]
    rows, count = len(rewards_per_func), int(bad[:, column].sum())
    raise CurriculumError([Problem(
        f"reward function {name}", value,
        f"returned {value} for completion {row} of the {rows} scored at step {trainer.state.global_step} ({count} "
        f"infinite): a reward must be a finite number (or None for a completion it cannot score); an infinite one "
        "trains nothing (loss 0, no gradient) while the logs show reward inf",
        "make it return finite rewards (clip them; a value beyond float32's 3.4e38 is inf too), or None where it "
        "cannot score a completion")], context="training")  # fmt: skip


def is_training(trainer) -> bool:
    """TRL's own test for a training (not evaluation) generation round."""
    return trainer.model.training


def all_processes_agree(trainer, fingerprint: tuple) -> None:
    """Raise if any process computed a different `fingerprint` (round, stage, G, temperature) for this round."""
    if trainer.accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    seen = gather_object([fingerprint])
    if any(other != fingerprint for other in seen):
        raise RuntimeError(
            f"grpo-curriculum: processes disagree on the generation round's setting: {seen}. Every process must run "
            "the same schedule with the same arguments; this is a bug if they do."
        )


def apply_comparison(trainer, output: dict, round_) -> None:
    """
    Zero the advantage of the trained rows that the round's comparison mode leaves out
    ([`grpo_curriculum.core.comparison`]; a stage without `comparison`, or `mode: all`, leaves TRL's output as it is),
    and log `curriculum/comparison_kept` (the share of the round's trained completions that keep their advantage) and
    `curriculum/comparison_margin`. The rows stay in the batch (their tokens still count in the loss normaliser and
    the KL term). The mode is a pure function of the step the round starts at, so a resumed run applies the same.
    """
    # The step the round started at: the generation step itself, or for a round regenerated after a resume from a
    # checkpoint taken inside it, the optimizer steps before the round (the micro-steps already trained in it back).
    phase = trainer._step % generation_round_length(trainer)
    start_step = trainer.state.global_step - phase // trainer.args.gradient_accumulation_steps
    mode, margin = trainer._curriculum.resolved.comparison_at(start_step)
    if mode == "all":
        return
    rewards, sizes = round_.group_rewards(round_.trained_groups)
    keep = comparison_keep(rewards, sizes, mode, margin)
    advantages = output["advantages"]
    start = trainer.accelerator.process_index * len(advantages)  # each process trains a contiguous share
    mask = torch.tensor(keep[start : start + len(advantages)], dtype=advantages.dtype, device=advantages.device)
    output["advantages"] = advantages * mask.view(-1, *([1] * (advantages.dim() - 1)))
    trainer._metrics["train"]["curriculum/comparison_kept"].append(sum(keep) / len(keep))
    if margin is not None:
        trainer._metrics["train"]["curriculum/comparison_margin"].append(margin)


def install_variable_group_requests(trainer) -> None:
    """
    In vLLM server mode (main process), make the first turn of a round of mixed group sizes send TRL's kind of
    requests: each unique prompt once with `n` = its group's size. TRL sends such a round row by row
    (`num_generations = 1`, `n=1`); the wrapper around `VLLMClient.generate` sends one request per distinct size
    instead (`n` = that size, its prompts in round order), and hands the completions back row by row, in group order.
    With a fixed sampling seed, vLLM then gives each completion of a group its own seed (`seed + index`), as in TRL;
    rows sent with `n=1` would all repeat it.

    Only the call [`GRPOHooks`] marks as an increment's first turn (`trainer._round.requesting`) is regrouped. Every
    other call passes through unchanged: a round of one G, evaluation, a `rollout_func`'s own calls, and the later
    turns of TRL's tool loop, where each row continues its own history (one prompt a row, `n=1`).
    """
    if not getattr(trainer, "use_vllm", False) or not trainer.accelerator.is_main_process:
        return
    generation = getattr(trainer, "vllm_generation", None)
    client = getattr(generation, "vllm_client", None) if getattr(generation, "mode", None) == "server" else None
    if client is None:
        return
    original = client.generate

    @functools.wraps(original)
    def generate(prompts, features=None, n=1, **kwargs):
        sizes = None if trainer._round is None else trainer._round.requesting
        if sizes is None:
            return original(prompts=prompts, features=features, n=n, **kwargs)
        if n != 1 or len(prompts) != sum(sizes):
            raise _unsupported(f"regroup a round's first vLLM request ({len(prompts)} prompts, n={n}, {sizes=})")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        rows: list = [None] * len(sizes)  # per group: (prompt_ids, completions, logprobs, logprob_token_ids)
        for size in sorted(set(sizes)):
            groups = [i for i, s in enumerate(sizes) if s == size]
            output = original(prompts=[prompts[starts[i]] for i in groups],
                              features=None if features is None else [features[starts[i]] for i in groups],
                              n=size, **kwargs)  # fmt: skip
            for j, i in enumerate(groups):
                part = slice(j * size, (j + 1) * size)
                rows[i] = (output["prompt_ids"][j], output["completion_ids"][part],
                           None if output.get("logprobs") is None else output["logprobs"][part],
                           None if output.get("logprob_token_ids") is None else output["logprob_token_ids"][part])
        result = {"prompt_ids": [row[0] for row, size in zip(rows, sizes) for _ in range(size)],
                  "completion_ids": [c for row in rows for c in row[1]]}  # fmt: skip
        for k, name in ((2, "logprobs"), (3, "logprob_token_ids")):
            result[name] = None if rows[0][k] is None else [value for row in rows for value in row[k]]
        return result

    client.generate = generate


# --- rounds sampled in increments ------------------------------------------------------------------------------------

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
        self.lengths: list[dict] = []  # per increment, this process's rows as `_generate` returned them (`generated`)
        self.user_metrics: list[dict] = []  # per increment, the `log_metric` values of this process (name: values)
        self._metric_lengths = {key: len(values) for key, values in trainer._metrics["train"].items()}
        self._kept_logs = trainer._logs
        self.tokens_seen = trainer.state.num_input_tokens_seen  # before the round

    @contextlib.contextmanager
    def increment(self):
        """Around one `_generate_and_score_completions` pass: its completion log goes to a log of its own."""
        self.scored = None
        self.trainer._logs, self.trainer._increment_records = _completion_logs(), self
        try:
            yield
        finally:
            self.logs.append(self.trainer._logs)
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

    def write_logs(self, order: list[int], advantages=None) -> None:
        """
        Append the completion log of the rows trained on (`order`: indices into the increments' rows, all processes,
        increment after increment) to TRL's, with their `advantages` (default: the ones TRL logged).
        """
        logs = self._kept_logs
        for name in ("prompt", "completion", "images", "advantages"):
            values = self._column(lambda log: log[name])
            if name == "advantages" and advantages is not None:
                logs[name].extend(advantages.tolist())
            elif values is not None:
                logs[name].extend(values[i] for i in order)
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


def finish_round(trainer, records: IncrementRecords, round_) -> dict:
    """
    The output TRL trains on for a sampled round ([`Round`]): a round of one pass as TRL returned it (with the
    advantages of its real groups when they differ in size); a round of several increments, or one that drops groups,
    merged ([`merge_increments`]).
    """
    if not round_.one_pass:
        masked = round_.masked_rows() if round_.masked else None
        return merge_increments(trainer, records, round_.order(), round_.trained_sizes, masked)
    output, advantages = records.outputs[0], None
    if round_.mixed:  # TRL ran it with `num_generations = 1`: the advantages of the real groups
        advantages = group_advantages(records.rewards_per_func[0], round_.sizes, trainer.reward_weights,
                                      trainer.scale_rewards, trainer.multi_objective_aggregation)  # fmt: skip
        local = len(output["advantages"])
        start = trainer.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].device)
        metrics = trainer._metrics["train"]
        if metrics.get("frac_reward_zero_std"):  # TRL's, computed for the real groups (TRL saw groups of 1)
            metrics["frac_reward_zero_std"][-1] = frac_reward_zero_std(
                records.rewards_per_func[0], round_.sizes, trainer.reward_weights, trainer.scale_rewards,
                trainer.multi_objective_aggregation)  # fmt: skip
    records.write_logs(list(range(records.rows[0])), advantages)
    return output


def merge_increments(trainer, records: IncrementRecords, order: list[int], group_sizes: list[int],
                     masked: list[bool] | None = None) -> dict:
    """
    One round output from its increments' outputs: the rows `order` (indices into the increments' rows of every
    process, concatenated in increment order) in that order, each process taking its contiguous share, as if TRL had
    generated them in one pass. Every group is whole and contiguous; its advantages are computed over all its rows
    ([`group_advantages`]); `num_items_in_batch`, the completion log and TRL's metrics describe the rows trained on.
    Each process's rows are padded as TRL pads one pass: to the widest of its own rows' prompts (on the left) and
    completions (rounded up to `pad_to_multiple_of`). When that moves a row's prompt (a model with absolute positions
    gives other log-probabilities), the policy's and reference model's log-probabilities are computed again for the
    round, as TRL computes them for one pass; the vLLM importance-sampling ratio is computed from them by TRL's
    formula. Rows `masked` (one flag a row of `order`) are out of the loss: their `tool_mask`, TRL's loss mask, is 0.
    """
    accelerator = trainer.accelerator
    outputs = records.outputs
    unknown = set().union(*outputs) - set(_ROW_TENSORS) - set(_RECOMPUTED)
    if unknown:
        raise _unsupported(f"merge the increments of a round whose outputs hold {sorted(unknown)} (image inputs)")
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
    rewards_per_func = torch.cat(records.rewards_per_func)
    rewards_per_func = rewards_per_func[torch.tensor(order, device=rewards_per_func.device)]
    advantages = group_advantages(rewards_per_func, group_sizes, trainer.reward_weights, trainer.scale_rewards,
                                  trainer.multi_objective_aggregation)  # fmt: skip
    merged["advantages"] = advantages[rank * local : (rank + 1) * local].to(merged["prompt_ids"].device)
    if masked is not None and any(masked):
        keep = torch.tensor([not m for m in masked[rank * local : (rank + 1) * local]], dtype=torch.long,
                            device=merged["completion_mask"].device)  # fmt: skip
        tool_mask = merged.get("tool_mask", torch.ones_like(merged["completion_mask"]))
        merged["tool_mask"] = tool_mask * keep.unsqueeze(1)
    loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
    merged["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()
    # Every process decides alike (the forward passes may be collective: FSDP, ZeRO-3).
    if any(bool((widths[share] != width).any()) for share, width in zip(shares, prompt_widths)):
        _recompute_logps(trainer, merged)
    if outputs[0].get("importance_sampling_ratio") is not None:
        merged["importance_sampling_ratio"] = importance_sampling_ratio(trainer, merged)
    records.merge_metrics()
    _log_reward_metrics(trainer, rewards_per_func)
    _log_row_metrics(trainer, records, rows, torch.tensor(order, dtype=torch.long), merged)
    metrics = trainer._metrics["train"]
    if metrics.get("frac_reward_zero_std"):
        metrics["frac_reward_zero_std"][-1] = frac_reward_zero_std(
            rewards_per_func, group_sizes, trainer.reward_weights, trainer.scale_rewards,
            trainer.multi_objective_aggregation)  # fmt: skip
    records.write_logs(order, advantages)
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
    raise _unsupported(f"compute the importance-sampling ratio of vllm_importance_sampling_mode {mode!r}")


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


def _recompute_logps(trainer, output: dict) -> None:
    """The policy's (`old_per_token_logps`) and reference model's log-probabilities of `output`'s rows, computed as
    `GRPOTrainer._generate_and_score_completions` computes them, at the rows' merged padding."""
    if output.get("old_per_token_logps") is None and output.get("ref_per_token_logps") is None:
        return
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import use_adapter

    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    keep, batch_size = output["completion_ids"].size(1), trainer.args.per_device_train_batch_size
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        if output.get("old_per_token_logps") is not None:
            output["old_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, keep, batch_size=batch_size)[0]  # fmt: skip
        if output.get("ref_per_token_logps") is not None:
            if trainer.ref_model is not None:
                logps = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, mask, keep,
                                                                   batch_size=batch_size)[0]  # fmt: skip
            else:
                model = trainer.accelerator.unwrap_model(trainer.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep,
                                                                       batch_size=batch_size)[0]  # fmt: skip
            output["ref_per_token_logps"] = logps


def _log_reward_metrics(trainer, rewards_per_func) -> None:
    """TRL's reward metrics of a pass (`reward`, `reward_std`, `rewards/<name>/mean|std`), for the rows trained on."""
    from trl.trainer.utils import nanstd

    metrics = trainer._metrics["train"]
    for i, name in enumerate(trainer.reward_func_names):
        metrics[f"rewards/{name}/mean"][-1] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"][-1] = nanstd(rewards_per_func[:, i]).item()
    rewards = torch.tensor(weighted_rewards(trainer, rewards_per_func))
    metrics["reward"][-1] = torch.nanmean(rewards).item()
    metrics["reward_std"][-1] = nanstd(rewards).item()


# --- engines: DDP, FSDP, DeepSpeed ---------------------------------------------------------------------------------

def engine(trainer) -> str:
    """
    The engine accelerate wraps the model with in this run, as a short name: `FSDP2`, `FSDP1` (with the state dict
    type its checkpoints use), `DeepSpeed ZeRO-N`, `DDP` (several processes) or `single process`.
    """
    state = trainer.accelerator.state
    if trainer.is_fsdp_enabled:
        plugin = state.fsdp_plugin
        kind = str(plugin.state_dict_type).rsplit(".", 1)[-1]
        return f"FSDP{plugin.fsdp_version} ({kind} checkpoints)"
    if trainer.is_deepspeed_enabled:
        zero = state.deepspeed_plugin.deepspeed_config.get("zero_optimization", {})
        return f"DeepSpeed ZeRO-{zero.get('stage', 0)}"
    return "DDP" if trainer.accelerator.num_processes > 1 else "single process"


def fsdp_fallback(trainer) -> str | None:
    """
    Why this run trains without FSDP although it asked for it (the `fsdp` field, or `accelerate launch --use_fsdp`),
    or `None`. accelerate sets up FSDP only on GPU-like devices: on CPU processes (`use_cpu: true`, or no GPU) it drops
    the FSDP plugin and trains plain DDP (every process holds the whole model), without a word.
    """
    asked = bool(trainer.args.fsdp) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")
    if not asked or trainer.is_fsdp_enabled:
        return None
    device = trainer.accelerator.device.type
    return (f"FSDP was requested, but accelerate runs {engine(trainer)} on {device} processes: it sets up FSDP only "
            "on GPU-like devices (CUDA, XPU, NPU, ...), so every process holds the whole model. On GPUs, remove "
            "`use_cpu: true`; on CPU, remove `fsdp`/`fsdp_config` (or launch without `--use_fsdp`) to train DDP "
            "knowingly.")


def save_final_model(trainer) -> None:
    """
    Save the trained model to `args.output_dir` for `from_pretrained`. Call it on every process: transformers'
    `Trainer.save_model` (what TRL's own scripts call on every process) gathers the weights in a collective under FSDP
    `FULL_STATE_DICT` and DeepSpeed ZeRO-3, and writes from the first process only. Under FSDP `SHARDED_STATE_DICT`
    (checkpoints as one shard per process) `save_model` writes nothing, so the final save switches accelerate's plugin
    to `FULL_STATE_DICT` first (accelerate's documented "train sharded, save full" use of `set_state_dict_type`).
    Under ZeRO-3 without `stage3_gather_16bit_weights_on_model_save`, transformers writes a DeepSpeed checkpoint
    instead, with its `zero_to_fp32.py` to consolidate it.
    """
    if trainer.is_fsdp_enabled and "FULL_STATE_DICT" not in str(trainer.accelerator.state.fsdp_plugin.state_dict_type):
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model()


# --- checkpoints ---------------------------------------------------------------------------------------------------

def checkpoint_dir(trainer, trial) -> str:
    """The folder `Trainer._save_checkpoint` writes the current checkpoint to."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")


@contextlib.contextmanager
def rotate_only_own_checkpoints(trainer, resume_from_checkpoint):
    """
    While `Trainer.train` runs: transformers' checkpoint rotation (`save_total_limit`, and the end-of-training
    cleanup that keeps only the best checkpoint) deletes only checkpoints of this run. transformers lists every
    `checkpoint-*` folder of `output_dir` (`trainer_utils.sort_checkpoints`; in transformers 4 the method
    `Trainer._sorted_checkpoints`: a glob that also matches e.g. `checkpoint-5-keep`) and deletes the oldest, whoever wrote them; here that list is cut down to the folders this
    trainer wrote (recorded by `GRPOHooks._save_checkpoint`) and, when the run resumes from a checkpoint of
    `output_dir` (its own folder), its earlier `checkpoint-N` folders (exact name, holding a `trainer_state.json` that
    parses and is at step N).
    A checkpoint of another folder, or anything else in `output_dir`, is never a candidate.
    """
    import transformers.trainer as trainer_module
    import transformers.trainer_utils as trainer_utils
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from .checkpoint import TRAINER_STATE_FILE, CurriculumStateError, read_trainer_state

    output_dir = os.path.realpath(trainer.args.output_dir)
    resumed = resume_from_checkpoint is True or (
        isinstance(resume_from_checkpoint, (str, os.PathLike))
        and os.path.dirname(os.path.realpath(resume_from_checkpoint)) == output_dir
    )
    written = trainer.__dict__.setdefault("_checkpoints_written", set())

    def own(path: str) -> bool:
        real = os.path.realpath(path)
        if real in written:
            return True
        name = os.path.basename(real)
        step = name[len(PREFIX_CHECKPOINT_DIR) + 1 :]
        if not (resumed and os.path.dirname(real) == output_dir and name == f"{PREFIX_CHECKPOINT_DIR}-{step}"
                and step.isdigit()):  # fmt: skip
            return False
        try:  # a checkpoint of the run: its trainer state parses and is at the step it is named after
            return read_trainer_state(os.path.join(real, TRAINER_STATE_FILE))["global_step"] == int(step)
        except CurriculumStateError:
            return False

    def only_own(original, folder_of):
        @functools.wraps(original)
        def sort_own_checkpoints(*args, **kwargs):
            found = original(*args, **kwargs)
            if os.path.realpath(folder_of(args, kwargs)) != output_dir:  # another trainer's (a trial's) folder
                return found
            return [path for path in found if own(path)]

        return sort_own_checkpoints

    original = getattr(trainer_utils, "sort_checkpoints", None)
    if original is not None and original is getattr(trainer_module, "sort_checkpoints", None):  # transformers >= 5
        trainer_utils.sort_checkpoints = trainer_module.sort_checkpoints = only_own(
            original, lambda args, kwargs: kwargs["output_dir"] if "output_dir" in kwargs else args[0])
        try:
            yield
        finally:
            trainer_utils.sort_checkpoints = trainer_module.sort_checkpoints = original
    elif callable(getattr(type(trainer), "_sorted_checkpoints", None)):  # transformers 4.x: a Trainer method
        trainer._sorted_checkpoints = only_own(trainer._sorted_checkpoints,
                                               lambda args, kwargs: kwargs.get("output_dir", args[0] if args else None)
                                               or trainer.args.output_dir)  # fmt: skip
        try:
            yield
        finally:
            del trainer._sorted_checkpoints
    else:
        raise _unsupported("limit checkpoint rotation to its own checkpoints (transformers' sort_checkpoints moved)")


def record_checkpoint(trainer, folder: str) -> None:
    """Note a checkpoint folder this trainer writes: [`rotate_only_own_checkpoints`] may rotate it away later."""
    trainer.__dict__.setdefault("_checkpoints_written", set()).add(os.path.realpath(folder))


@contextlib.contextmanager
def curriculum_state_before_trainer_state(trainer, folder: str, save):
    """
    While `Trainer._save_checkpoint` runs: when it writes the checkpoint's `trainer_state.json` (after the model,
    optimizer and RNG states, before rotating old checkpoints away), call `save(folder)` first, write TRL's
    `entropy_ctrl_state.json` (adaptive entropy only; TRL's own later write is skipped) and the trainer state
    atomically. A checkpoint whose `trainer_state.json` parses is then complete, curriculum and entropy state
    included, and no older checkpoint is deleted before it is.
    """
    from .checkpoint import ENTROPY_STATE_FILE, atomic_json

    state = trainer.state
    target = os.path.abspath(os.path.join(folder, "trainer_state.json"))
    saved = []
    entropy = uses_entropy_state(trainer)

    def save_curriculum_and_entropy() -> None:
        save(folder)
        if entropy:  # TRL writes it after the checkpoint is complete and old ones are rotated away, not atomically
            atomic_json(os.path.join(folder, ENTROPY_STATE_FILE), {"entropy_coef": trainer.entropy_coef,
                                                                   "last_world_entropy": trainer._last_world_entropy})

    def save_to_json(json_path: str) -> None:
        if os.path.abspath(json_path) != target:
            return type(state).save_to_json(state, json_path)
        save_curriculum_and_entropy()
        saved.append(json_path)
        atomic_json(json_path, dataclasses.asdict(state))

    state.save_to_json = save_to_json
    if entropy:
        trainer.use_adaptive_entropy = False  # read by `GRPOTrainer._save_checkpoint` only: its own write is skipped
    try:
        yield
    finally:
        del state.save_to_json
        if entropy:
            trainer.use_adaptive_entropy = True
    if not saved:  # a transformers version that writes the trainer state elsewhere: never lose the curriculum's
        save_curriculum_and_entropy()


def load_trainer_state_first(trainer, checkpoint: str) -> None:
    """
    Make `trainer.state` the checkpoint's before the curriculum state is read. transformers 5 loads the trainer state
    before the optimizer (whose loading the resume hook follows); transformers 4.57 loads it after, so at that point
    the state is still the fresh one (step 0): it is loaded here, and transformers loads the same file again after.
    """
    from transformers import TrainerState

    from .checkpoint import TRAINER_STATE_FILE

    path = os.path.join(checkpoint, TRAINER_STATE_FILE)
    if trainer.state.global_step == 0 and os.path.isfile(path):
        trainer.state = TrainerState.load_from_json(path)


def uses_entropy_state(trainer) -> bool:
    """Whether TRL's adaptive entropy controller is on: its checkpoints then need `entropy_ctrl_state.json`."""
    return bool(getattr(trainer, "use_adaptive_entropy", False))


def micro_step(trainer) -> int:
    """TRL's count of `training_step` calls, which decides when a new round is generated."""
    return trainer._step


def restore_micro_step(trainer, value: int) -> None:
    """Put TRL's micro-step counter back, so rounds keep their phase after a resume (TRL restarts it at 0)."""
    trainer._step = value
    trainer._buffered_inputs = None  # forces a (re)generation at the first micro-step


def round_in_progress(trainer) -> bool:
    """Whether the next micro-step continues a round rather than starting one."""
    return trainer._step % generation_round_length(trainer) != 0


# --- the GRPOTrainer methods the curriculum hooks into ---------------------------------------------------------------


class GRPOHooks:
    """
    Mixin placed before `trl.GRPOTrainer`: maps the (private) `GRPOTrainer` methods of TRL 1.16 to curriculum events
    that [`CurriculumGRPOTrainer`] implements, so the trainer itself names no TRL internals.

    Events (called only when `_curriculum_active()`):
    - `_curriculum_round_start() -> Round`: a training generation round starts; returns it ([`Round`]), its first
      increment planned.
    - `_curriculum_increment_rows(round) -> (list[dict], list[int])`: this process's rows of the round's next
      increment, and the size of each group it samples.
    - `_curriculum_increment_scored(round, rewards, completion_ids) -> bool`: the increment's rewards, from every
      process, in row order; plans the next increment and returns whether there is one.
    - `_curriculum_round_end(round)`: the round is sampled (TRL's metrics are TRL's: `frac_reward_zero_std` as TRL
      logs it for the round's own pass, or computed TRL's way for the rows a merged or mixed round trains on).
    - `_curriculum_save(checkpoint_dir)` / `_curriculum_load(checkpoint_dir)`: a checkpoint is written / resumed.
    - `_curriculum_evaluation()`: a context manager around each evaluation step.
    """

    _round = None  # the generation round in progress or last sampled ([`Round`])
    _increment_records = None  # while an increment is sampled: its [`IncrementRecords`]

    def _generate_and_score_completions(self, inputs):
        if not (self._curriculum_active() and is_training(self)):
            return super()._generate_and_score_completions(inputs)
        round_ = self._curriculum_round_start()
        records = IncrementRecords(self)
        num_generations = self.num_generations  # restored after every round
        try:
            while True:  # one TRL generation and scoring pass an increment
                rows, sizes = self._curriculum_increment_rows(round_)
                mixed = len(set(sizes)) > 1
                set_num_generations(self, 1 if mixed else sizes[0])
                round_.request_sizes = list(sizes) if mixed else None
                with records.increment():
                    output = super()._generate_and_score_completions(rows)
                rewards_per_func, completion_ids = records.scored
                records.add(output, rewards_per_func)
                if not self._curriculum_increment_scored(round_, weighted_rewards(self, rewards_per_func),
                                                         completion_ids):  # fmt: skip
                    break
        finally:
            round_.request_sizes = None
            set_num_generations(self, num_generations)
        output = finish_round(self, records, round_)
        apply_comparison(self, output, round_)
        self._curriculum_round_end(round_)
        return output

    def _generate(self, prompts):
        result = super()._generate(prompts)
        records = self._increment_records
        if records is not None and is_training(self):
            prompt_ids, completion_ids, tool_mask = result[:3]
            records.generated(prompt_ids, completion_ids, tool_mask)
        return result

    def _generate_single_turn(self, *args, **kwargs):
        # An increment's first turn samples each group; later turns (TRL's tool loop) continue each row's own history.
        # The arguments pass through as TRL gave them (TRL >= 1.14 adds `num_generations`, 1.10 `has_tool_images`).
        round_ = self._round
        if round_ is None:
            return super()._generate_single_turn(*args, **kwargs)
        round_.requesting, round_.request_sizes = round_.request_sizes, None
        try:
            return super()._generate_single_turn(*args, **kwargs)
        finally:
            round_.requesting = None

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        if not self._curriculum_active():
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        with self._curriculum_evaluation():  # generation and loss at the temperature of the stage in force
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._curriculum_active():
            refuse_infinite_rewards(self, rewards_per_func)
        records = getattr(self, "_increment_records", None)
        if records is not None and is_training(self):
            records.scored = (rewards_per_func, completion_ids_list)
            records.pending_metrics()
        return rewards_per_func

    def _save_checkpoint(self, model, trial):
        folder = checkpoint_dir(self, trial)
        record_checkpoint(self, folder)  # before transformers rotates: it is this run's
        try:
            if not (self._curriculum_active() and self.args.should_save):
                return super()._save_checkpoint(model, trial)
            with curriculum_state_before_trainer_state(self, folder, self._curriculum_save):
                super()._save_checkpoint(model, trial)
        except (OSError, RuntimeError) as error:  # a full disk reaches here as torch's RuntimeError: name the folder
            from .checkpoint import CheckpointWriteError

            raise CheckpointWriteError(folder, error) from error

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self._curriculum_active() and checkpoint is not None:
            load_trainer_state_first(self, checkpoint)
            self._curriculum_load(checkpoint)


def current_sampling(trainer) -> tuple[int, float]:
    """The G and temperature the next round would use."""
    return trainer.num_generations, trainer.temperature


def new_prompt_stream(trainer) -> PromptStream:
    """
    A prompt stream over the train dataset as the train data loader reads it (unused columns removed when the user
    asked for it), shuffled like TRL's sampler.
    """
    dataset = trainer.train_dataset
    if isinstance(dataset, Dataset):
        dataset = trainer._remove_unused_columns(dataset, description="training")
    return PromptStream(dataset, shuffle=trainer.shuffle_dataset, seed=trainer.args.seed)


def _eos_token_ids(trainer, tokenizer) -> list[int]:
    """The tokens that end a completion: TRL >= 1.14 also ends it at every EOS the model's generation config declares
    (`trainer.eos_token_ids`); earlier releases at the tokenizer's EOS only."""
    eos_token_ids = getattr(trainer, "eos_token_ids", None)
    return list(eos_token_ids) if eos_token_ids is not None else [tokenizer.eos_token_id]


def greedy_rewards(trainer, model, rows: list[dict], batch_size: int = 64) -> list[float]:
    """
    The reward of one greedy completion for each of `rows` (dataset rows with a `prompt`), scored as TRL scores a
    training round: prompts tokenized by `_tokenize_prompts` (chat template and all), completions cut after the first
    EOS and decoded as in `_generate_and_score_completions` (assistant messages for conversational prompts), every
    reward function called by `_calculate_rewards` with the rows' other columns, combined by [`weighted_rewards`].
    Greedy decoding: no sampling noise, and the model's and the global RNG state are untouched.
    """
    from transformers import GenerationConfig
    from trl.data_utils import is_conversational

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    eos_token_ids = _eos_token_ids(trainer, tokenizer)
    config = GenerationConfig(do_sample=False, max_new_tokens=trainer.max_completion_length,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_token_ids)  # fmt: skip
    was_training, rewards = model.training, []
    model.eval()
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            prompts = [row["prompt"] for row in batch]
            prompt_ids = trainer._tokenize_prompts(prompts)[0]
            width = max(map(len, prompt_ids))  # left padding, as TRL pads prompts for generation
            ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + list(p) for p in prompt_ids])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
            with torch.no_grad():
                out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                                     generation_config=config)[:, width:].tolist()  # fmt: skip
            completion_ids = []
            for sequence in out:
                ends = [i for i, token in enumerate(sequence) if token in eos_token_ids]
                completion_ids.append(sequence[: ends[0] + 1] if ends else sequence)
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            if is_conversational(batch[0]):
                texts = [[{"role": "assistant", "content": text}] for text in texts]
            rewards += weighted_rewards(trainer, trainer._calculate_rewards(batch, prompts, texts, completion_ids))
    finally:
        model.train(was_training)
    return rewards
