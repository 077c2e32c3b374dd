"""
Everything that knows TRL's `GRPOTrainer` internals lives in the seam, this module and its siblings in
`training/_trl/`, so a TRL upgrade touches only them: `hooks.py` (the overridden methods; `contract.py`, what they call
on the trainer), `merge.py` (rounds sampled in increments, their advantages and comparisons), `checkpoint.py`
(checkpoints and resume), `vllm.py` (vLLM server requests), `evaluation.py` (greedy evaluation). This one holds the
settings and rewards they share.

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
`RLOOTrainer` (TRL 1.16, `trl/trainer/rloo_trainer.py`) runs the same round with the same attributes and methods, so
all of the above holds for it, except: `_generate` returns `(prompt_ids, completion_ids, completions)` (no tool loop,
no tool mask); `__init__` calls the `add_fused_lm_head` and `create_model_from_path` of its own module
(`RLOO_MODULE`); and its advantage is the leave-one-out baseline over `rewards.view(-1, num_generations)`, after
subtracting `beta` x the sequence KL (policy minus reference log-probabilities at the round's temperature) from each
reward. A round of mixed group sizes runs with `num_generations = 1` (TRL then gives every row advantage 0) and its
advantages are recomputed RLOO's way per real group (`advantages.rloo_advantages`), the KL from the policy's and
reference model's per-token log-probabilities the pass computed (`_get_per_token_logps_and_entropies`, called in that
order; recorded by `RLOOHooks`) and RLOO's output's `completion_mask`. A merged round (top-up, dynamic sampling) also
merges RLOO's per-row `old_logps` (a 1-D tensor, no padding), computing it and the KL again when the merge moves a
prompt; RLOO's output has no `num_items_in_batch` and no loss mask (`tool_mask`), so a round that masks rows
(dynamic sampling's `on_limit="mask"`) is not used with it (`grpo_curriculum.core.rloo` refuses it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging

import torch
from datasets import Dataset

from ...core.errors import CurriculumError, Problem
from ..advantages import weighted_rewards
from ..stream import PromptStream

logger = logging.getLogger("grpo_curriculum")

GRPO_MODULE = "trl.trainer.grpo_trainer"
RLOO_MODULE = "trl.trainer.rloo_trainer"  # `RLOOTrainer`: the same round (`_generate_and_score_completions`, ...)


class UnsupportedTRLError(RuntimeError):
    """Raised when the installed TRL does not have the internals this version of grpo-curriculum relies on."""


def unsupported_trl(what: str) -> UnsupportedTRLError:
    import trl

    from ...compat import trl_requirement

    return UnsupportedTRLError(
        f"grpo-curriculum cannot {what} with the installed TRL {trl.__version__}: its GRPOTrainer internals changed. "
        f"Install a supported TRL version (`pip install '{trl_requirement()}'`) or upgrade grpo-curriculum."
    )


from ...compat import RLOO_TRL  # noqa: E402  (the TRL release `CurriculumRLOOTrainer` is built and tested against)


def require_rloo_trl() -> None:
    """
    Raise [`UnsupportedTRLError`] unless the installed TRL is a 1.16 release: `CurriculumRLOOTrainer` relies on
    `RLOOTrainer`'s internals as TRL 1.16 has them (module docstring), and is not tested on the package's other TRL
    releases (`CurriculumGRPOTrainer` is).
    """
    import trl

    from ...compat import release_of

    if release_of(trl.__version__) != RLOO_TRL:
        wanted = ".".join(map(str, RLOO_TRL))
        raise UnsupportedTRLError(
            f"CurriculumRLOOTrainer needs TRL {wanted} (it relies on RLOOTrainer's internals as TRL {wanted} has "
            f"them); the installed TRL is {trl.__version__}. Install it (`pip install 'trl=={wanted}.*'`), or train "
            "with CurriculumGRPOTrainer, which supports this TRL."
        )


@contextlib.contextmanager
def record_fused_lm_head_temperature(cells: list, module_name: str = GRPO_MODULE):
    """
    While the parent `__init__` (of `GRPOTrainer`, or of the trainer of `module_name`) runs, record the closure cell
    holding the temperature of every fused LM head it adds (policy and reference model), so [`set_temperature`] can
    change it later.
    """
    module = importlib.import_module(module_name)
    original = getattr(module, "add_fused_lm_head", None)
    if original is None:  # TRL < 1.15: the log-probabilities divide by `trainer.temperature` at every computation
        yield cells
        return

    def recording_add_fused_lm_head(model, *args, **kwargs):
        original(model, *args, **kwargs)
        function = getattr(model.forward, "__func__", None)
        code = getattr(function, "__code__", None)
        if code is None or "temperature" not in code.co_freevars:
            raise unsupported_trl("locate the temperature of the fused LM head")
        cells.append(function.__closure__[code.co_freevars.index("temperature")])

    module.add_fused_lm_head = recording_add_fused_lm_head
    try:
        yield cells
    finally:
        module.add_fused_lm_head = original


@contextlib.contextmanager
def reference_from_instance(model, module_name: str = GRPO_MODULE):
    """
    While the parent `__init__` (of `GRPOTrainer`, or of the trainer of `module_name`) runs: with `beta > 0` it builds the reference model by loading the
    policy's `config._name_or_path` again (`create_model_from_path`), which a model built in memory (the built-in
    `builtin:tiny`, or any instance never saved) does not have (`''`: the Hub refuses it). Such a policy's reference
    is a copy of it: the weights RL starts from, as a reload of a saved policy would give (in the dtype TRL asks for).
    """
    module = importlib.import_module(module_name)
    original = getattr(module, "create_model_from_path", None)
    if original is None:
        raise unsupported_trl("find `create_model_from_path`")
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


def round_rewards(trainer, rewards_per_func) -> list[float]:
    """
    The round's rewards as TRL combines them ([`~training.advantages.weighted_rewards`]: weighted sum; NaN where every
    reward function returned None), clamped to `reward_clip_range` where the trainer has one (`RLOOTrainer`). RLOO's
    KL penalty is not in them: the curriculum's signals are about the task's rewards.
    """
    clip = getattr(trainer, "reward_clip_range", None)
    return weighted_rewards(rewards_per_func, trainer.reward_weights, clip).tolist()


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


def check_reward_calls(trainer) -> None:
    """
    Check every call of the trainer's reward functions (plain and `async def` callables, not reward models): a
    function that raises (`SystemExit` included: a `sys.exit()` in reward code would end `train` with no word),
    returns the wrong length or type, an infinite value or NaN for every completion stops the run at that call with one
    error naming the function, the step, the completion and the rule
    ([`~core.reward_output.reward_output_problem`]), instead of a traceback inside TRL or a run trained on `nan`.
    TRL calls `trainer.reward_funcs[i](prompts=..., completions=..., ...)` (and awaits it when it is async): each is
    replaced by a wrapper of the same kind that keeps its name (`reward_func_names` were read at `__init__`).
    """
    import inspect

    from ...core.reward_output import reward_output_problem

    several = trainer.accelerator.num_processes > 1
    trainer._reward_failures = []

    def stop(error: CurriculumError, kwargs, cause=None):
        """Raise `error`; with several processes, note it and let TRL's gather go on (every process must reach it):
        [`raise_reward_failures`] stops every process after it, with this process's message."""
        if not several:
            raise error from cause
        trainer._reward_failures.append(error)
        return [None] * len(kwargs.get("completions") or [])

    def failed(error, name, step, kwargs):
        where = _user_frame(error)
        what = (f"called sys.exit({error.code!r})" if isinstance(error, SystemExit) else
                f"raised {type(error).__name__}: {error}")
        return stop(CurriculumError([Problem(f"reward function {name}", f"{len(kwargs.get('completions') or [])} "
                                     "completions", f"{what}{where}, scoring the completions of step {step}: a reward "
                                     "function must return one reward per completion, not raise or exit",
                                     f"fix {name} (return None for a completion it cannot score)")],
                                    context="training"), kwargs, error)  # fmt: skip

    def verified(output, name, step, kwargs):
        problem = reward_output_problem(name, output, len(kwargs.get("completions") or []), step=step,
                                        infinite=False)  # refused once gathered
        if problem is not None:
            return stop(CurriculumError([problem], context="training"), kwargs)
        return output

    def checked(func, name):
        @functools.wraps(func)
        def call(*args, **kwargs):
            step = trainer.state.global_step
            try:
                output = func(*args, **kwargs)
            except (Exception, SystemExit) as error:
                return failed(error, name, step, kwargs)
            return verified(output, name, step, kwargs)

        @functools.wraps(func)
        async def call_async(*args, **kwargs):  # TRL awaits it (`is_async_callable`), on its event loop's thread
            step = trainer.state.global_step
            try:
                output = await func(*args, **kwargs)
            except (Exception, SystemExit) as error:
                return failed(error, name, step, kwargs)
            return verified(output, name, step, kwargs)

        awaited = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))
        return call_async if awaited else call

    trainer.reward_funcs = [func if isinstance(func, torch.nn.Module) or not callable(func) else checked(func, name)
                            for func, name in zip(trainer.reward_funcs, trainer.reward_func_names)]


def raise_reward_failures(trainer) -> None:
    """
    After TRL's `_calculate_rewards` (its gather done by every process): stop every process when a reward function
    failed on any ([`check_reward_calls`] noted it and let the gather go on), each with the first failing process's
    problems, so no process is left in a collective its peer never reaches (a gloo traceback after the message).
    One small `gather_object` a scoring call, with several processes only.
    """
    failures = getattr(trainer, "_reward_failures", None)
    if failures is None or trainer.accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    mine = [(trainer.accelerator.process_index, failures[0].problems)] if failures else []
    failures.clear()
    found = gather_object(mine)
    if found:
        rank, problems = found[0]
        raise CurriculumError(problems, context=f"training, on process {rank}")


def refuse_unscored_rounds(trainer, rewards_per_func) -> None:
    """
    Stop where no completion of a scoring call got a reward: every reward function returned `None` (or NaN) for every
    completion (TRL only warns per row; the run trained to the end on nothing, logging reward nan). A function's NaN
    for every completion is refused at its call ([`check_reward_calls`]); `None` for every completion is one function's
    right where another scores them. `rewards_per_func` is gathered: every process stops alike.
    """
    if rewards_per_func.numel() == 0 or not torch.isnan(rewards_per_func).all():
        return
    names = list(trainer.reward_func_names)
    who = "every reward function" if len(names) > 1 else "the reward function"
    raise CurriculumError([Problem(
        "reward_funcs", names, f"scored none of the {len(rewards_per_func)} completions of step "
        f"{trainer.state.global_step}: {who} returned None (or NaN) for every one, so the step has no reward to "
        "train on (TRL would log reward nan and go on)",
        "make the reward functions score the completions the model writes (None is for a completion a function cannot "
        "score); check the dataset columns they read")], context="training")  # fmt: skip


def _user_frame(error: BaseException) -> str:
    """` (file.py, line N)`: the innermost frame of `error`'s traceback, where the reward code failed."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if len(frames) > 1 else ""
