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
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import itertools
import json
import logging
import os

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
    """Make the next generation round sample `num_generations` completions per prompt and group rewards by it."""
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
    pass whatever the switches.

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
        self.epoch += 1
        self.position = 0

    def take(self, num_prompts: int) -> list:
        """The next `num_prompts` unique prompts: dataset indices (map-style) or rows (iterable)."""
        for _ in range(3):  # a pass too short for one round is an error, not an endless loop
            if self._order is None and self._iterator is None:
                self._start_pass()
            if self.iterable:
                rows = list(itertools.islice(self._iterator, num_prompts))
                if len(rows) == num_prompts:
                    self.position += num_prompts
                    return rows
            elif self.position + num_prompts <= len(self._order):
                indices = self._order[self.position : self.position + num_prompts]
                self.position += num_prompts
                return indices
            self._order, self._iterator = None, None
        raise ValueError(
            f"The train dataset has fewer prompts than one generation round needs ({num_prompts}): "
            "use a larger dataset, a smaller generation batch, or a larger num_generations."
        )

    def state(self) -> dict:
        """Where the stream stands: the pass number and the prompts consumed in it (JSON-serialisable)."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state(self, state: dict) -> None:
        """Restore a [`state`]: replay the pass's permutation (or stream) and skip what was consumed."""
        self.epoch, self.position, self._order, self._iterator = 0, 0, None, None
        if self.iterable:
            if state["epoch"] > 0:
                self.epoch = state["epoch"] - 1
                self._start_pass()
                for _ in itertools.islice(self._iterator, state["position"]):
                    pass
        else:
            if self.shuffle:
                self._generator.manual_seed(self.seed)
            for _ in range(state["epoch"]):
                self._start_pass()
        self.position = state["position"]

    def materialize(self, prompts: list) -> list[dict]:
        """The rows of `prompts` (as returned by [`take`]), read in one batched call for map-style datasets."""
        if self.iterable:
            return prompts
        if hasattr(self.dataset, "__getitems__"):
            return self.dataset.__getitems__(list(prompts))
        return [self.dataset[i] for i in prompts]


def local_round_rows(trainer, stream: PromptStream, prompts: list, num_generations: int) -> list[dict]:
    """
    This process's rows of a generation round holding `prompts` (from [`PromptStream.take`]) at `num_generations`:
    the global round is the prompts each repeated G times in a row, and process `i` takes the `i`-th contiguous slice,
    exactly the layout `RepeatSampler` and accelerate's batch sharding give.
    """
    local = trainer.args.generation_batch_size // trainer.accelerator.num_processes
    start = trainer.accelerator.process_index * local
    first, last = start // num_generations, (start + local - 1) // num_generations
    rows = stream.materialize(prompts[first : last + 1])
    # A fresh dict for every repeat, as the data loader gives: TRL writes per-row fields into them.
    return [dict(rows[position // num_generations - first]) for position in range(start, start + local)]


def prompt_keys(stream: PromptStream, prompts: list) -> list[str]:
    """A stable key per prompt, identical on every process: the dataset index, or a digest of an iterable row's prompt."""
    if not stream.iterable:
        return [str(i) for i in prompts]
    return [hashlib.sha1(json.dumps(row.get("prompt"), sort_keys=True, default=str).encode()).hexdigest()[:16]
            for row in prompts]  # fmt: skip


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


def is_grpo_trainer(trainer) -> bool:
    from trl import GRPOTrainer

    return isinstance(trainer, GRPOTrainer)


# --- checkpoints ---------------------------------------------------------------------------------------------------

CURRICULUM_STATE_FILE = "curriculum_state.json"


def checkpoint_dir(trainer, trial) -> str:
    """The folder `Trainer._save_checkpoint` writes the current checkpoint to."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")


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
    - `_curriculum_round_rows() -> list[dict]`: a training generation round starts; returns this process's rows.
    - `_curriculum_round_rewards(rewards, completion_ids)`: the round's rewards, from every process, in row order.
    - `_curriculum_save(checkpoint_dir)` / `_curriculum_load(checkpoint_dir)`: a checkpoint is written / resumed.
    """

    def _generate_and_score_completions(self, inputs):
        if self._curriculum_active() and is_training(self):
            inputs = self._curriculum_round_rows()
        return super()._generate_and_score_completions(inputs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._curriculum_active() and is_training(self):
            self._curriculum_round_rewards(weighted_rewards(self, rewards_per_func), completion_ids_list)
        return rewards_per_func

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self._curriculum_active() and self.args.should_save:
            self._curriculum_save(checkpoint_dir(self, trial))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self._curriculum_active() and checkpoint is not None:
            self._curriculum_load(checkpoint)


def current_sampling(trainer) -> tuple[int, float]:
    """The G and temperature the next round would use."""
    return trainer.num_generations, trainer.temperature


def new_prompt_stream(trainer) -> PromptStream:
    """A prompt stream over the train dataset as the data loader reads it, shuffled like TRL's sampler."""
    return PromptStream(train_dataset_as_loaded(trainer), shuffle=trainer.shuffle_dataset, seed=trainer.args.seed)
