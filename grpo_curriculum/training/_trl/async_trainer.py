"""
The curriculum on TRL's asynchronous GRPO trainer (`trl.experimental.async_grpo.AsyncGRPOTrainer`, TRL 1.16):
everything here knows TRL's internals (docs/async.md). The rollout worker's side: `async_worker.py`.

[`CurriculumAsyncGRPOTrainer`] checks the curriculum before any model loads ([`curriculum_problems`]), installs
[`~async_worker.CurriculumRolloutLoop`] in TRL's rollout worker, computes each sample's loss at the temperature it
was sampled at ([`LossTemperatures`]), and saves and restores the curriculum state with TRL's checkpoints
([`~async_state`]).
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from types import SimpleNamespace

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

from ...core.asynchronous import async_problems, round_budget
from ...core.errors import raise_if_any
from ...core.schedule import StageSchedule, stage_signature
from .async_worker import SAMPLED_TEMPERATURE, CurriculumRolloutLoop, StateChannel
from ..async_state import read_async_state, write_async_state
from ..checkpoint import knob_defaults
from ..manifest import check_manifest, write_manifest
from ..state import FIX

LOSS_TEMPERATURE = "loss_temperature"  # a batch column: each loss term's sampling temperature


class LossTemperatures:
    """
    Each loss term at the temperature its sample was sampled at. TRL's trainer computes every log-probability at
    `args.temperature`, fixed into the fused LM head it adds to the model (`add_fused_lm_head`); with a temperature
    schedule the queue holds samples of several temperatures (up to `max_staleness` versions old), and a micro-batch
    can pack them together, even on one shared position of TRL's prefix tree. This replaces the model's fused forward
    (on the module TRL patched) with one that runs the model's body once and applies TRL's own fused head (the function
    `add_fused_lm_head` builds, at each temperature) to its hidden states once per distinct temperature of the
    micro-batch (once where it holds one temperature, as nearly always), taking each loss term from the head at its
    temperature; [`CurriculumAsyncGRPOTrainer.compute_loss`] sets the terms (`plan`) for each micro-batch. (PEFT's
    wrapper, which TRL adds after the head, is looked through; TRL's asynchronous trainer has no reference model.)

    A sharded model's collectives run once a micro-batch whatever the number of temperatures, so processes whose
    micro-batches hold different numbers of temperatures stay in step without agreeing on them: the body runs once
    (FSDP2 gathers each sharded block in its own forward and backward hooks, once), and the head reads the LM head's
    weight as TRL's head does, already gathered by the root's forward hook, or, left sharded (a `DTensor`), gathered
    here once for every temperature ([`OneBody`]). DeepSpeed is refused with a curriculum
    ([`~core.asynchronous.async_problems`]): ZeRO-3 gathers the head's weight in each application (TRL's
    `maybe_gather_lm_head_ctx`), so processes applying the head at different numbers of temperatures would wait for
    each other.
    """

    def __init__(self, model, temperature: float):
        from accelerate.utils import is_peft_model

        self.module = model.get_base_model() if is_peft_model(model) else model
        self.base = self.module.forward  # TRL's fused forward, at `args.temperature`
        self.default = float(temperature)
        self.heads = {float(temperature): self.base.__func__}  # TRL's `_fused_forward`, unbound: (model, *args, ...)
        self.plan = None  # (each term's position, each term's temperature): the micro-batch's
        self.head_passes = 0  # heads applied (temperatures) in the last micro-batch
        self.body_passes = 0  # body passes in the last micro-batch: 1
        self.module.forward = self.forward

    def head(self, temperature: float):
        """TRL's fused forward at `temperature`, unbound (built once, with the arguments TRL builds its own with)."""
        if temperature not in self.heads:
            from trl.trainer.utils import add_fused_lm_head

            if len(self.heads) > 64:  # a ramp gives a temperature a policy version: keep the default's
                self.heads = {self.default: self.base.__func__}

            self.module.forward = self.base  # (its non-fused path is the model's own forward)
            try:
                add_fused_lm_head(self.module, temperature=temperature, outputs=("log_probs", "entropy"))
                self.heads[temperature] = self.module.forward.__func__
            finally:
                self.module.forward = self.forward
        return self.heads[temperature]

    def forward(self, *args, fused_lm_head=False, **kwargs):
        if not fused_lm_head or self.plan is None:
            return self.base(*args, fused_lm_head=fused_lm_head, **kwargs)
        index, temperatures = self.plan
        distinct = sorted(set(temperatures.tolist())) or [self.default]
        model = self.one_body()
        output = log_probs = entropy = None
        for temperature in distinct:
            output = self.head(temperature)(model, *args, fused_lm_head=True, **kwargs)
            take = temperatures == temperature
            terms, spread = output.log_probs.flatten()[index], output.entropy.flatten()[index]
            log_probs = terms if log_probs is None else torch.where(take, terms, log_probs)
            entropy = spread if entropy is None else torch.where(take, spread, entropy)
        self.head_passes, self.body_passes = len(distinct), model.passes
        # TRL's `compute_loss` takes `log_probs.flatten()[token_index]`, its token index renumbered to the terms
        output.log_probs, output.entropy = log_probs.unsqueeze(0), entropy.unsqueeze(0)
        return output

    def one_body(self) -> OneBody:
        """The model as each head application sees it: the body run once for all of them."""
        return OneBody(self.module)


class StaleGroups:
    """
    The groups whose samples TRL's `RolloutQueueDataset` drops as stale (more than `max_staleness` policy versions
    old), never to be trained: a checkpoint's first untrained group must not be one, or every later resume would
    start the stream there and sample the groups trained since again. [`watch`] wraps the rollout queue the dataset
    reads, and applies its own test to each sample it takes (`version() - sample.model_version > max_staleness`, in
    the same thread, at the same version). A group's samples share its version and staleness only grows, so a group
    whose first sample taken is stale is dropped whole.
    """

    def __init__(self):
        self.groups: set[int] = set()

    def watch(self, queue, version, max_staleness: int):
        stale = self

        class Watched:
            def get(self, *args, **kwargs):
                sample = queue.get(*args, **kwargs)
                if version() - sample.model_version > max_staleness:
                    stale.groups.add(sample.group_id)
                return sample

            def __getattr__(self, name):  # `qsize` and the rest: the queue's own
                return getattr(queue, name)

        return Watched()

    def settled(self, trained) -> set[int]:
        """The stale groups none of whose samples was trained (`trained`: TRL's `_trained_groups`; a group whose
        first samples were taken before it went stale was trained, and is forgotten here)."""
        self.groups -= trained
        return set(self.groups)


class OneBody:
    """
    The model as TRL's fused forward sees it (its `self`) with the body run once: the backbone (read as TRL reads it,
    `getattr(self, "base_model")`, looked up on each call as FSDP and PEFT replace modules) runs on its first call, and
    the later calls (the head at the other temperatures) get its outputs, so each head's gradient flows into the one
    body pass. An LM head whose weight is a `DTensor` (FSDP2 with the head left sharded, which TRL's head gathers with
    `full_tensor()` in each call) is gathered once for all. Everything else is the model's.
    """

    def __init__(self, module):
        self._module, self._body, self._outputs, self._lm_head, self.passes = module, module.base_model, None, None, 0

    def __getattr__(self, name):
        value = getattr(self._module, name)
        return self._run_body if value is self._body else value

    def _run_body(self, *args, **kwargs):
        if self._outputs is None:
            self._outputs, self.passes = self._body(*args, **kwargs), self.passes + 1
        return self._outputs

    def get_output_embeddings(self):
        from torch.distributed.tensor import DTensor

        lm_head = self._module.get_output_embeddings()
        if not isinstance(lm_head.weight, DTensor):
            return lm_head
        if self._lm_head is None:
            bias = None if lm_head.bias is None else lm_head.bias.full_tensor()
            self._lm_head = SimpleNamespace(weight=lm_head.weight.full_tensor(), bias=bias)
        return self._lm_head


def _with_loss_temperatures(collate, default: float):
    """TRL's rollout collator, adding each loss term's sampling temperature ([`LOSS_TEMPERATURE`], laid out as
    `token_index`: a sample's terms are where `segment_id` names it)."""

    def collate_with_temperatures(examples):
        batch = collate(examples)
        (rows,) = examples
        temperatures = torch.full(batch["token_index"].shape, float(default), dtype=torch.float64)
        for r, row in enumerate(rows):
            per_sample = torch.tensor([sample["metrics"].get(SAMPLED_TEMPERATURE, default) for sample in row.samples],
                                      dtype=torch.float64)  # fmt: skip
            terms = batch["token_index"][r] >= 0
            temperatures[r, terms] = per_sample[batch["segment_id"][r, terms]]
        batch[LOSS_TEMPERATURE] = temperatures
        return batch

    return collate_with_temperatures


class CurriculumAsyncGRPOTrainer(AsyncGRPOTrainer):
    """
    TRL's `AsyncGRPOTrainer` with the curriculum in its rollout worker (see the module docstring). Without `stages` and
    `dynamic_sampling` it is TRL's trainer, unchanged.

    Args:
        *args, **kwargs: TRL's `AsyncGRPOTrainer` arguments.
        stages (`list[Stage]` or [`~core.schedule.StageSchedule`], *optional*):
            A stage schedule (`Stage(num_generations=2, temperature=1.0, until_step=50)`, ...): each group is sampled
            whole at the G and temperature of the stage in force when it starts (see [`CurriculumRolloutLoop`]), every
            sample records them (`curriculum/num_generations`, `curriculum/temperature`, `curriculum/stage`, logged per
            step as the means over the samples trained on), and each sample's loss is computed at its own sampling
            temperature ([`LossTemperatures`]). What the asynchronous trainer refuses:
            [`~core.asynchronous.async_problems`]. Needs `args.max_steps > 0`.
        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            Drop the groups whose rewards are all equal (or with fewer than two finite rewards) in the worker, before
            the queue. Needs `args.max_steps > 0`: TRL's epoch stop counts trained groups, and a dropped group is never
            trained, so an epoch-bounded run would go on to TRL's safety ceiling.

    Both need TRL's own rollout worker (no `rollout_worker`).
    """

    def __init__(self, *args, stages=None, dynamic_sampling: bool = False, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        schedule, problems = curriculum_problems(config, stages, dynamic_sampling, **kwargs)
        raise_if_any(problems, context="CurriculumAsyncGRPOTrainer")
        super().__init__(*args, **kwargs)
        self.curriculum_schedule = schedule
        self.dynamic_sampling = bool(dynamic_sampling)
        self.loss_temperatures = None
        if schedule is not None and any(stage.temperature != self.args.temperature or stage.temperature_end is not None
                                        for stage in schedule.stages):  # fmt: skip
            self.loss_temperatures = LossTemperatures(self.model, self.args.temperature)
        self._channel = None
        self._stale = StaleGroups()
        if (schedule is not None or dynamic_sampling) and isinstance(self.rollout_worker, AsyncRolloutWorker):
            # rank 0 holds the worker; `AsyncRolloutWorker.start` spawns `_loop_cls(**_loop_kwargs)` in its child
            self.rollout_worker._loop_cls = CurriculumRolloutLoop
            self.rollout_worker._loop_kwargs.update(
                schedule=schedule, weight_sync_steps=self.args.weight_sync_steps, seed=self.args.seed,
                dynamic_sampling=self.dynamic_sampling, budget=round_budget(*_batch(self.args)))
            start = self.rollout_worker.start

            def start_at_the_current_version():  # TRL's start-of-training weight sync has published it just before
                self.rollout_worker._loop_kwargs["version_origin"] = (self.model_version, self.state.global_step)
                start()

            self.rollout_worker.start = start_at_the_current_version

    def _dataset_size(self) -> int | None:
        return len(self.train_dataset) if hasattr(self.train_dataset, "__len__") else None

    def _inner_training_loop(self, *args, **kwargs):
        """With a stage schedule: the worker starts from the checkpoint's curriculum state when resuming, and answers
        the checkpoints' state requests through a folder of this run's (removed at the end)."""
        if self.curriculum_schedule is None or not isinstance(self.rollout_worker, AsyncRolloutWorker):
            return super()._inner_training_loop(*args, **kwargs)
        checkpoint = kwargs.get("resume_from_checkpoint")
        if checkpoint is not None:
            check_manifest(checkpoint, FIX)  # the bytes saved, where the checkpoint has a manifest
        resume = None if checkpoint is None else read_async_state(
            checkpoint, stage_signature(self.curriculum_schedule.stages), self._dataset_size(),
            self.curriculum_schedule.stages)  # fmt: skip
        folder = tempfile.mkdtemp(prefix="grpo-curriculum-async-")
        self._channel = StateChannel(folder)
        self.rollout_worker._loop_kwargs.update(state_dir=folder, resume=resume)
        try:
            return super()._inner_training_loop(*args, **kwargs)
        finally:
            self._channel = None
            shutil.rmtree(folder, ignore_errors=True)  # ours: made above

    def _save_checkpoint(self, model, trial):
        if self._channel is None or not self.accelerator.is_main_process:
            return super()._save_checkpoint(model, trial)
        untrained, up_to, dropped = self._untrained_groups()
        state = self._channel.request(untrained, up_to, lambda: self.rollout_worker.check_health(
            self.args.heartbeat_stale_after_s), dropped=dropped)  # fmt: skip
        # the folder TRL's `_save_checkpoint` writes its `rollout_state.json` into, and the Trainer the checkpoint
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)
        write_async_state(folder, {"stages": stage_signature(self.curriculum_schedule.stages),
                                   "dataset_size": self._dataset_size(), "defaults": knob_defaults(),
                                   **state})  # fmt: skip
        super()._save_checkpoint(model, trial)
        # each file's size and hash (after the trainer state here: a save cut short before it has no manifest, and
        # resumes with the header checks only, as a checkpoint written before manifests does)
        write_manifest(folder)

    def _untrained_groups(self) -> tuple[list[int], int, list[int]]:
        """What a checkpoint's curriculum state is taken from: the groups not trained below the highest trained one
        (`up_to`, excluded), leaving out those dropped whole as stale (never to be trained), and the stale ones from
        `up_to` on ([`~training.async_curriculum.AsyncCurriculum.state`])."""
        trained = self._trained_groups
        up_to = max(trained, default=-1) + 1
        stale = self._stale.settled(trained)
        untrained = [g for g in range(up_to) if g not in trained and g not in stale]
        return untrained, up_to, sorted(g for g in stale if g >= up_to)

    def get_train_dataloader(self):
        loader = super().get_train_dataloader()
        if self._rollout_dataset is not None and self.curriculum_schedule is not None:  # (rank 0's queue)
            self._rollout_dataset.queue = self._stale.watch(self._rollout_dataset.queue, lambda: self.model_version,
                                                            self.args.max_staleness)  # fmt: skip
        if self.loss_temperatures is not None:
            # accelerate's prepared loader (`DataLoaderAdapter`) iterates the DataLoader it wraps
            inner = getattr(loader, "base_dataloader", loader)
            inner.collate_fn = _with_loss_temperatures(inner.collate_fn, self.args.temperature)
        return loader

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        temperatures = inputs.pop(LOSS_TEMPERATURE, None)
        if temperatures is None or self.loss_temperatures is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        index = inputs["token_index"]
        terms = index >= 0
        renumbered = torch.full_like(index, -1)
        renumbered[terms] = torch.arange(int(terms.sum()), device=index.device)
        self.loss_temperatures.plan = (index[terms], temperatures[terms])
        try:
            loss = super().compute_loss(model, {**inputs, "token_index": renumbered}, return_outputs,
                                        num_items_in_batch)  # fmt: skip
        finally:
            self.loss_temperatures.plan = None
        self._metrics["train"]["curriculum/loss_temperatures"].append(float(self.loss_temperatures.head_passes))
        return loss


def _batch(config) -> tuple[int, int, int]:
    return config.per_device_train_batch_size, config.gradient_accumulation_steps, config.world_size


# What the curriculum uses of TRL's asynchronous module beyond its public API (TRL 1.16; docs/async.md "Coupling"):
# each class's names, and the parameters of the rollout loop's methods it calls or overrides.
PRIVATE_NAMES = {
    "AsyncRolloutWorker": ("_loop_cls", "start"),
    "_AsyncRolloutLoop": ("_generate_loop", "_generate_one", "_generate_one_turn", "_score_group", "_push_metrics"),
    "AsyncGRPOTrainer": ("_save_checkpoint", "_inner_training_loop", "get_train_dataloader", "compute_loss"),
}
PRIVATE_PARAMETERS = {"_generate_one": ("prompt", "tool_dict", "tools", "group_id"),
                      "_generate_one_turn": ("prompt_ids",), "_score_group": ("group",)}  # fmt: skip


def trl_shape_problems() -> list:
    """One [`~core.errors.Problem`] when the installed `trl.experimental.async_grpo` lacks a name (or a method
    parameter) of [`PRIVATE_NAMES`] the curriculum relies on: a TRL other than the release it was built against,
    refused before any model loads rather than failing mid-run."""
    from importlib.metadata import version

    from trl.experimental.async_grpo import async_rollout_worker

    from ...compat import ASYNC_TRL
    from ...core.errors import Problem

    classes = {"AsyncRolloutWorker": AsyncRolloutWorker, "AsyncGRPOTrainer": AsyncGRPOTrainer,
               "_AsyncRolloutLoop": getattr(async_rollout_worker, "_AsyncRolloutLoop", None)}  # fmt: skip
    missing = [f"{cls}.{name}" for cls, names in PRIVATE_NAMES.items() for name in names
               if classes[cls] is None or not hasattr(classes[cls], name)]  # fmt: skip
    loop = classes["_AsyncRolloutLoop"]
    for method, parameters in PRIVATE_PARAMETERS.items():
        if loop is not None and hasattr(loop, method):
            given = inspect.signature(getattr(loop, method)).parameters
            missing += [f"_AsyncRolloutLoop.{method}({name})" for name in parameters if name not in given]
    if not missing:
        return []
    wanted = ".".join(map(str, ASYNC_TRL))
    return [Problem("trl", version("trl"), f"has an asynchronous trainer of another shape than TRL {wanted}'s, which "
                    f"the curriculum's rollout loop and checkpoints are built on (missing: {', '.join(missing)})",
                    f"install TRL {wanted} (`pip install 'trl=={wanted}.*'`), or train without `stages` and "
                    "`dynamic_sampling` (TRL's own trainer)")]


def curriculum_problems(config, stages=None, dynamic_sampling: bool = False, **kwargs):
    """
    The resolved schedule of `stages` (`None` without stages or with a problem) and every problem of this curriculum
    on the asynchronous trainer ([`~core.asynchronous.async_problems`] and the stages' own), before any model loads.
    `kwargs`: the trainer's other keyword arguments (`tools`, `environment_factory`, `rollout_worker`).
    """
    schedule, problems = None, []
    if stages is not None or dynamic_sampling:
        problems += trl_shape_problems()
    if stages is not None:
        schedule = stages if isinstance(stages, StageSchedule) else StageSchedule(stages)
        problems += schedule.problems()
    max_steps = getattr(config, "max_steps", -1)
    problems += async_problems(None if schedule is None else schedule.stages, max_steps=max_steps,
                               dynamic_sampling=bool(dynamic_sampling),
                               tools=bool(kwargs.get("tools") or kwargs.get("environment_factory")),
                               rollout_worker=kwargs.get("rollout_worker") is not None,
                               batch=None if config is None else _batch(config),
                               deepspeed=bool(getattr(config, "deepspeed", None)) or os.environ.get(
                                   "ACCELERATE_USE_DEEPSPEED", "false").lower() == "true")  # fmt: skip
    if schedule is None or problems:
        return None, problems
    return schedule.resolve(max_steps), problems
