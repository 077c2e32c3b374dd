"""
Everything that knows TRL's `GRPOTrainer` internals lives here, so a TRL upgrade touches this one module.

Tested against TRL 1.16. What the curriculum relies on:

- `trainer.num_generations` is read at every generation round (`_generate`, the reward grouping
  `rewards.view(-1, G)` and the vLLM request `n=G`).
- The sampling temperature lives in `trainer.generation_config` / `trainer.generation_kwargs` (transformers
  generation and continuous batching) and `trainer.vllm_generation.temperature` (vLLM, both modes).
- The training log-probabilities are computed by the fused LM head that `add_fused_lm_head` patches into the policy
  (and the reference model) at `__init__`, with the temperature bound in a closure. We record that closure cell while
  the parent `__init__` runs and rewrite it at each switch.
- `_generate_and_score_completions(inputs)` is called once per generation round in training, with the local slice of
  the round's rows (prompt repeated G times, contiguous, processes taking consecutive slices). We build those rows
  ourselves from a prompt stream that reproduces `RepeatSampler`'s order, so the data loader's read-ahead (accelerate
  prefetch, worker prefetch) never hands a row grouped for the old G to a round with the new G.
- Each training round appends one `frac_reward_zero_std` to `trainer._metrics["train"]`; the curriculum replaces it
  by its own zero-std share ([`grpo_curriculum.signals.is_zero_std`]: one definition for both logs).
- Without a `train_dataset` (an `environment_factory` owns the data), `__init__` sets `trainer.train_dataset` to a
  placeholder of `generation_batch_size // num_generations` empty prompts.
- `_generate_single_turn` samples a round's first turn (then, with tools, each later turn of TRL's tool loop, one
  history a row): the first call in a round is the one whose groups a vLLM server request may regroup.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import importlib
import itertools
import json
import logging
import math
import os
import warnings

import torch
from datasets import Dataset, IterableDataset

logger = logging.getLogger("grpo_curriculum")

_GRPO_MODULE = "trl.trainer.grpo_trainer"


class UnsupportedTRLError(RuntimeError):
    """Raised when the installed TRL does not have the internals this version of grpo-curriculum relies on."""


def _unsupported(what: str) -> UnsupportedTRLError:
    import trl

    return UnsupportedTRLError(
        f"grpo-curriculum cannot {what} with the installed TRL {trl.__version__}: its GRPOTrainer internals changed. "
        "Install a supported TRL version (see `pyproject.toml`, e.g. `pip install 'trl>=1.16,<1.17'`) or upgrade "
        "grpo-curriculum."
    )


@contextlib.contextmanager
def record_fused_lm_head_temperature(cells: list):
    """
    While the parent `GRPOTrainer.__init__` runs, record the closure cell holding the temperature of every fused LM
    head it adds (policy and reference model), so [`set_temperature`] can change it later.
    """
    module = importlib.import_module(_GRPO_MODULE)
    original = getattr(module, "add_fused_lm_head", None)
    if original is None:
        raise _unsupported("find `add_fused_lm_head`")

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


def set_num_generations(trainer, num_generations: int) -> None:
    """Make the next generation round sample `num_generations` completions per prompt and group rewards by it (`1`:
    every row on its own, for a round of mixed group sizes)."""
    trainer.num_generations = int(num_generations)


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


def sampling_temperatures(trainer, cells: list) -> dict[str, float]:
    """Where each temperature currently stands (for tests and the consistency check)."""
    found = {"trainer": trainer.temperature}
    if getattr(trainer, "generation_config", None) is not None:
        found["generation_config"] = trainer.generation_config.temperature
    if getattr(trainer, "generation_kwargs", None) is not None:
        found["generation_kwargs"] = trainer.generation_kwargs["temperature"]
    if getattr(trainer, "use_vllm", False):
        found["vllm"] = trainer.vllm_generation.temperature
    for i, cell in enumerate(cells):
        found[f"fused_lm_head[{i}]"] = cell.cell_contents
    return found


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


def train_dataset_as_loaded(trainer):
    """The train dataset as the train data loader reads it (unused columns removed when the user asked for it)."""
    dataset = trainer.train_dataset
    if isinstance(dataset, Dataset):
        dataset = trainer._remove_unused_columns(dataset, description="training")
    return dataset


class PromptStream:
    """
    The sequence of unique prompts consumed by generation rounds, independent of G.

    With a constant G it yields exactly the prompts TRL's `RepeatSampler` (map-style datasets) or
    `repeat_iterable_dataset` (iterable datasets) would: a fresh permutation (seeded with `seed`) a pass, consumed in
    order, a pass's tail too short for a whole round dropped. With a changing G, each round takes
    `generation_batch_size / G` prompts from where the last round stopped, so no prompt is skipped or repeated within a
    pass whatever the switches. A per-prompt round looks ahead ([`upcoming`]), reads what it looked at and takes some
    of it; the prompts it leaves wait at the front of the stream for the next round ([`waiting`], [`commit`]).

    Args:
        dataset (`Dataset` or `IterableDataset`):
            The train dataset.
        shuffle (`bool`):
            Whether to shuffle each pass (`GRPOConfig.shuffle_dataset`).
        seed (`int`):
            The run's seed (`TrainingArguments.seed`).
    """

    def __init__(self, dataset, shuffle: bool, seed: int):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.iterable = isinstance(dataset, IterableDataset)
        self.epoch = 0  # passes started so far
        self.position = 0  # prompts consumed in the current pass
        self._order = None  # map-style: the current pass's permutation
        self._iterator = None  # iterable: the current pass's stream
        self._lookahead: list = []  # iterable: rows read from the stream but not consumed yet
        self._waiting: list[tuple[int, object]] = []  # (position in the pass, prompt) left by a per-prompt round
        if not self.iterable:
            self._generator = torch.Generator()
            if shuffle:
                self._generator.manual_seed(seed)

    def _start_pass(self) -> None:
        if self.iterable:
            stream = self.dataset.shuffle(seed=self.seed) if self.shuffle else self.dataset
            stream.set_epoch(self.epoch)
            self._iterator = iter(stream)
        elif self.shuffle:
            self._order = torch.randperm(len(self.dataset), generator=self._generator).tolist()
        else:
            self._order = list(range(len(self.dataset)))
        self._lookahead, self._waiting = [], []
        self.epoch += 1
        self.position = 0

    def open_pass(self) -> None:
        """Start a pass if none is open."""
        if self._order is None and self._iterator is None:
            self._start_pass()

    @property
    def waiting(self) -> list:
        """The prompts a per-prompt round left for the next one, in stream order (they come before [`upcoming`])."""
        return [prompt for _, prompt in self._waiting]

    def upcoming(self):
        """The prompts left in the current pass after those read, in order, without consuming them (opens a pass if
        none is open)."""
        self.open_pass()
        if not self.iterable:  # (by index: a slice would copy the rest of the pass every round)
            yield from (self._order[i] for i in range(self.position, len(self._order)))
            return
        for i in itertools.count():
            if i == len(self._lookahead):
                row = next(self._iterator, _END)
                if row is _END:
                    return
                self._lookahead.append(row)
            yield self._lookahead[i]

    def consume(self, num_prompts: int) -> list:
        """Consume the next `num_prompts` prompts of the pass (all offered by [`upcoming`]) and return them."""
        if self.iterable:  # (after `load_state` nothing is read ahead yet: read them from the stream)
            taken = list(itertools.islice(self.upcoming(), num_prompts))
            self._lookahead = self._lookahead[len(taken) :]
        else:
            taken = self._order[self.position : self.position + num_prompts]
        if len(taken) != num_prompts:
            raise RuntimeError(f"the pass has {len(taken)} prompts left, {num_prompts} were asked for")
        self.position += num_prompts
        return taken

    def commit(self, plan: dict) -> list:
        """
        Carry out a per-prompt round's plan ([`grpo_curriculum.allocation.RoundPlan.as_dict`]) over the waiting
        prompts and the next `plan["read"]` ones: return the prompts it takes; those it leaves wait for the next round.
        """
        start = self.position
        looked = self._waiting + list(zip(itertools.count(start), self.consume(plan["read"])))
        self._waiting = [looked[i] for i in plan["left"]]
        return [looked[i][1] for i in plan["taken"]]

    def end_pass(self) -> None:
        """Drop the rest of the current pass (too short for a round); the next prompts come from a new pass."""
        self._order, self._iterator, self._lookahead, self._waiting = None, None, [], []

    def take(self, num_prompts: int) -> list:
        """The next `num_prompts` unique prompts: dataset indices (map-style) or rows (iterable)."""
        for _ in range(3):  # a pass too short for one round is an error, not an endless loop
            waiting = self.waiting[:num_prompts]  # (left by a per-prompt stage before a switch)
            need = num_prompts - len(waiting)
            if len(list(itertools.islice(self.upcoming(), need))) == need:
                self._waiting = self._waiting[len(waiting) :]
                return waiting + self.consume(need)
            self.end_pass()
        raise ValueError(
            f"The train dataset has fewer prompts than one generation round needs ({num_prompts}): "
            "use a larger dataset, a smaller generation batch, or a larger num_generations."
        )

    def state(self) -> dict:
        """Where the stream stands: the pass number, the prompts read in it and the positions of those waiting
        (JSON-serialisable)."""
        return {"epoch": self.epoch, "position": self.position, "waiting": [i for i, _ in self._waiting]}

    def load_state(self, state: dict) -> None:
        """Restore a [`state`]: replay the pass's permutation (or stream), skip what was read, keep what waits."""
        self.epoch, self.position, self._order, self._iterator, self._lookahead = 0, 0, None, None, []
        waiting = state.get("waiting", [])
        if self.iterable:
            if state["epoch"] > 0:
                self.epoch = state["epoch"] - 1
                self._start_pass()
                keep = set(waiting)
                read = itertools.islice(self._iterator, state["position"])
                self._waiting = [(i, row) for i, row in enumerate(read) if i in keep]
        else:
            if self.shuffle:
                self._generator.manual_seed(self.seed)
            for _ in range(state["epoch"]):
                self._start_pass()
            self._waiting = [(i, self._order[i]) for i in waiting]
        self.position = state["position"]

    def materialize(self, prompts: list) -> list[dict]:
        """The rows of `prompts` (as returned by [`take`]), read in one batched call for map-style datasets."""
        if self.iterable:
            return prompts
        if hasattr(self.dataset, "__getitems__"):
            return self.dataset.__getitems__(list(prompts))
        return [self.dataset[i] for i in prompts]


_END = object()


def local_round_rows(trainer, stream: PromptStream, prompts: list, group_sizes: list[int]) -> list[dict]:
    """
    This process's rows of a generation round holding `prompts` (from [`PromptStream.take`]), prompt `i` repeated
    `group_sizes[i]` times in a row: process `p` takes the `p`-th contiguous slice of the round's rows, exactly the
    layout `RepeatSampler` and accelerate's batch sharding give (groups may span processes).
    """
    local = trainer.args.generation_batch_size // trainer.accelerator.num_processes
    start = trainer.accelerator.process_index * local
    owner = [i for i, size in enumerate(group_sizes) for _ in range(size)][start : start + local]
    first = owner[0]
    rows = stream.materialize(prompts[first : owner[-1] + 1])
    # A fresh copy for every repeat, as the data loader gives: TRL writes per-row fields into them, and a reward
    # function mutating one row's fields must not change the other rows of its group.
    return [copy.deepcopy(rows[i - first]) for i in owner]


def prompt_digest(prompt) -> str:
    """A digest of a prompt (text or chat messages), the same on every process."""
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prompt_keys(stream: PromptStream, prompts: list) -> list[str]:
    """A stable key per prompt, identical on every process: the dataset index, or a digest of an iterable row's prompt."""
    if not stream.iterable:
        return [str(i) for i in prompts]
    return [prompt_digest(row.get("prompt")) for row in prompts]


def first_rows(stream: PromptStream, batch: int = 4096):
    """
    For a map-style dataset, each row's first row holding the same prompt (a numpy array over the rows), so that a
    prompt the dataset repeats (drawn with replacement, or listed with several answers) is one prompt wherever it is
    counted by prompt; `None` for an iterable dataset, whose keys are digests of the prompt already. Reads the
    `prompt` column once, and holds a 16-byte digest a distinct prompt while it does.
    """
    import numpy as np

    if stream.iterable:
        return None
    dataset = stream.dataset
    if isinstance(dataset, Dataset):  # the column alone, in batches
        prompts = (p for chunk in dataset.select_columns(["prompt"]).iter(batch_size=batch) for p in chunk["prompt"])
    else:
        prompts = (dataset[i].get("prompt") for i in range(len(dataset)))
    seen, rows = {}, np.empty(len(dataset), dtype=np.int64)
    for i, prompt in enumerate(prompts):
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
        rows[i] = seen.setdefault(hashlib.blake2b(text.encode(), digest_size=16).digest(), i)
    return rows


def prompt_texts(stream: PromptStream, prompts: list) -> list:
    """The `prompt` field of each prompt (text or chat messages), for reports."""
    return [row.get("prompt") for row in stream.materialize(prompts)]


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


# --- rounds whose groups differ in size (per-prompt G) -------------------------------------------------------------
# TRL groups a round's rewards with `rewards.view(-1, num_generations)` and, in vLLM server mode, sends
# `all_prompts[::num_generations]` with `n=num_generations`. A round whose prompts have different G runs with
# `num_generations = 1` (every row its own prompt as far as TRL's grouping goes); its advantages are then recomputed
# per real group ([`group_advantages`]) and the server requests regrouped ([`install_variable_group_requests`]).


def _segment_nanmean(values, group, num_groups: int):
    mask = ~torch.isnan(values)
    shape = (num_groups, *values.shape[1:])
    sums = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(0, group, values.nan_to_num(0.0))
    counts = torch.zeros(shape, dtype=values.dtype, device=values.device).index_add_(0, group, mask.to(values.dtype))
    return sums / counts, counts


def _segment_nanstd(values, group, num_groups: int):
    """TRL's `nanstd` (NaN-aware, Bessel-corrected; NaN for fewer than 2 values) of each group."""
    mean, counts = _segment_nanmean(values, group, num_groups)
    squares = ((values - mean[group]) ** 2).nan_to_num(0.0)
    total = torch.zeros_like(mean).index_add_(0, group, squares)
    variance = torch.where(counts > 1, total / (counts - 1), torch.full_like(total, float("nan")))
    return torch.sqrt(variance)


def group_advantages(trainer, rewards_per_func, group_sizes: list[int]):
    """
    The advantages `GRPOTrainer._generate_and_score_completions` computes, with each group of its own size: a group's
    mean and std are over its own rewards; `scale_rewards` ("group", "batch", "none") and `multi_objective_aggregation`
    ("sum_then_normalize", "normalize_then_sum") mean what they mean in TRL; rows every reward function left unscored
    get advantage 0.

    Args:
        trainer ([`~trl.GRPOTrainer`]): For its reward weights, `scale_rewards` and `multi_objective_aggregation`.
        rewards_per_func (`torch.Tensor`): `(rows, reward functions)`, gathered from every process, in row order.
        group_sizes (`list[int]`): Each group's size, in row order (they add up to the rows).

    Returns:
        `torch.Tensor`: The advantage of each row.
    """
    from trl.trainer.utils import nanstd

    device = rewards_per_func.device
    num_groups = len(group_sizes)
    group = torch.repeat_interleave(torch.arange(num_groups, device=device), torch.tensor(group_sizes, device=device))
    weights = trainer.reward_weights.to(device).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if trainer.multi_objective_aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = _segment_nanmean(rewards, group, num_groups)[0][group]
        if trainer.scale_rewards in ("group", "none"):
            std = _segment_nanstd(rewards, group, num_groups)[group]
        elif trainer.scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        else:
            raise ValueError(f"Invalid value for scale_rewards: {trainer.scale_rewards}.")
        advantages = rewards - mean
        if trainer.scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    elif trainer.multi_objective_aggregation == "normalize_then_sum":
        mean = _segment_nanmean(rewards_per_func, group, num_groups)[0][group]
        std_k = _segment_nanstd(rewards_per_func, group, num_groups)[group]
        rewards = (((rewards_per_func - mean) / (std_k + 1e-4)) * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    else:
        raise ValueError(f"Invalid multi_objective_aggregation: {trainer.multi_objective_aggregation}.")
    return torch.nan_to_num(advantages, nan=0.0)


def regroup_round_output(trainer, output: dict, rewards_per_func, group_sizes: list[int]) -> None:
    """
    Replace what TRL computed for a round of mixed group sizes (it ran with `num_generations = 1`) by the values of
    the real groups: this process's `advantages` in `output` and the advantages of the completion log.
    """
    advantages = group_advantages(trainer, rewards_per_func, group_sizes)
    local = len(output["advantages"])
    start = trainer.accelerator.process_index * local
    output["advantages"] = advantages[start : start + local].to(output["advantages"].device)
    trainer._logs["advantages"].clear()
    trainer._logs["advantages"].extend(advantages.tolist())


def log_zero_std_fraction(trainer, fraction: float) -> None:
    """
    Log `fraction` (the curriculum's share of the round's completions in zero-std groups,
    [`grpo_curriculum.signals.is_zero_std`]) as the round's `frac_reward_zero_std`, in place of TRL's (NaN, when no
    reward was finite: TRL's stays).
    """
    if not math.isnan(fraction):
        trainer._metrics["train"]["frac_reward_zero_std"][-1] = fraction


def install_variable_group_requests(trainer) -> None:
    """
    In vLLM server mode (main process), make the first turn of a round of mixed group sizes send TRL's kind of
    requests: each unique prompt once with `n` = its group's size. TRL sends such a round row by row
    (`num_generations = 1`, `n=1`); the wrapper around `VLLMClient.generate` sends one request per distinct size
    instead (`n` = that size, its prompts in round order), and hands the completions back row by row, in group order.
    With a fixed sampling seed, vLLM then gives each completion of a group its own seed (`seed + index`), as in TRL;
    rows sent with `n=1` would all repeat it.

    Only the call [`GRPOHooks`] marks as the round's first turn (`trainer._request_group_sizes`) is regrouped. Every
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
        sizes = trainer._request_group_sizes
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


# --- checkpoints ---------------------------------------------------------------------------------------------------

def checkpoint_dir(trainer, trial) -> str:
    """The folder `Trainer._save_checkpoint` writes the current checkpoint to."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")


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
    - `_curriculum_round_rows() -> (list[dict], list[int])`: a training generation round starts; returns this
      process's rows and the round's group sizes (each prompt's G, in row order).
    - `_curriculum_round_rewards(rewards, completion_ids) -> float`: the round's rewards, from every process, in row
      order; returns the round's zero-std share, logged as TRL's `frac_reward_zero_std`.
    - `_curriculum_save(checkpoint_dir)` / `_curriculum_load(checkpoint_dir)`: a checkpoint is written / resumed.
    - `_curriculum_evaluation()`: a context manager around each evaluation step.
    """

    _round_group_sizes = None  # a round of mixed group sizes whose first turn is not sampled yet: its group sizes
    _request_group_sizes = None  # while that first turn is sampled: its group sizes (read by the vLLM server client)

    def _generate_and_score_completions(self, inputs):
        if not (self._curriculum_active() and is_training(self)):
            return super()._generate_and_score_completions(inputs)
        inputs, sizes = self._curriculum_round_rows()
        mixed = list(sizes) if len(set(sizes)) > 1 else None
        before = self.num_generations
        set_num_generations(self, 1 if mixed else sizes[0])
        self._round_group_sizes = mixed
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._round_group_sizes = None
            if mixed:  # TRL's own G is back (a later `train()` builds TRL's loader with it)
                set_num_generations(self, before)
        if mixed:
            regroup_round_output(self, output, self._round_rewards_per_func, mixed)
        log_zero_std_fraction(self, self._round_zero_std_fraction)
        self._round_rewards_per_func = self._round_zero_std_fraction = None
        return output

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # The round's first turn samples each group; later turns (TRL's tool loop) continue each row's own history.
        self._request_group_sizes, self._round_group_sizes = self._round_group_sizes, None
        try:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)  # fmt: skip
        finally:
            self._request_group_sizes = None

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        if not self._curriculum_active():
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        with self._curriculum_evaluation():  # generation and loss at the temperature of the stage in force
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._curriculum_active() and is_training(self):
            self._round_rewards_per_func = rewards_per_func
            rewards = weighted_rewards(self, rewards_per_func)
            self._round_zero_std_fraction = self._curriculum_round_rewards(rewards, completion_ids_list)
        return rewards_per_func

    def _save_checkpoint(self, model, trial):
        if not (self._curriculum_active() and self.args.should_save):
            return super()._save_checkpoint(model, trial)
        with curriculum_state_before_trainer_state(self, checkpoint_dir(self, trial), self._curriculum_save):
            super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self._curriculum_active() and checkpoint is not None:
            self._curriculum_load(checkpoint)


def current_sampling(trainer) -> tuple[int, float]:
    """The G and temperature the next round would use."""
    return trainer.num_generations, trainer.temperature


def prompt_slots(stream: PromptStream):
    """Where per-prompt statistics live: a slot per dataset row, or hash buckets for an iterable dataset's prompts."""
    from .slots import PromptSlots

    return PromptSlots() if stream.iterable else PromptSlots(len(stream.dataset), indexed=True)


def new_prompt_stream(trainer) -> PromptStream:
    """A prompt stream over the train dataset as the data loader reads it, shuffled like TRL's sampler."""
    return PromptStream(train_dataset_as_loaded(trainer), shuffle=trainer.shuffle_dataset, seed=trainer.args.seed)


@contextlib.contextmanager
def hide_renamed_method_warnings():
    """
    Hide the FutureWarnings of the model methods transformers 5 renamed that TRL 1.16 calls
    (`is_gradient_checkpointing`, read in every generation round, and `gradient_checkpointing_enable/disable` when
    checkpointing is on): no recipe setting avoids them.
    """
    with warnings.catch_warnings():
        renamed = r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)`"
        warnings.filterwarnings("ignore", message=renamed + " is deprecated", category=FutureWarning)
        yield


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
    config = GenerationConfig(do_sample=False, max_new_tokens=trainer.max_completion_length,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=trainer.eos_token_ids)  # fmt: skip
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
                ends = [i for i, token in enumerate(sequence) if token in trainer.eos_token_ids]
                completion_ids.append(sequence[: ends[0] + 1] if ends else sequence)
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            if is_conversational(batch[0]):
                texts = [[{"role": "assistant", "content": text}] for text in texts]
            rewards += weighted_rewards(trainer, trainer._calculate_rewards(batch, prompts, texts, completion_ids))
    finally:
        model.train(was_training)
    return rewards
