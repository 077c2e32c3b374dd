"""
The value rules of the TRL and transformers fields a recipe may set, beyond the types of [`~config.trl_fields`]: so
that `grpo-curriculum check` refuses what `train` would fail on, with the same message, and neither ends in a
traceback.

Sources (TRL 1.16, transformers 5.24, torch 2.x): `GRPOConfig.__post_init__` and `TrainingArguments.__post_init__`
(e.g. `warmup_steps >= 0`, `logging_steps` an integer above 1, `torch_empty_cache_steps > 0`), then what the run does
with the value: torch's optimizers (`lr >= 0`, `0 <= beta < 1`, `eps >= 0`), numpy's and torch's seeding
(`0 <= seed < 2**32`), the learning-rate schedulers (`cosine_with_min_lr` needs `min_lr` or `min_lr_rate`), the
DataLoader (`num_workers >= 0`, `prefetch_factor` only with workers), generation (`max_new_tokens > 0`), NEFTune's
uniform noise (`alpha >= 0`) and transformers' `report_to` integrations. Each was found by training one step of the
built-in model at values at and past the bound (`tests/test_trl_ranges.py` keeps that corpus). A field whose value no
code path bounds gets a rule from its meaning (a probability in [0, 1], a port in [1, 65535]) and, for every float,
NaN refused (a NaN coefficient trains NaN weights without an error); `inf` only where it means "no limit".

Pure standard library, so `check` stays import-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from ..core.errors import Problem, list_text
from ..core.rules import MAX_COUNT, MAX_STEPS, Rule, is_number, suggest
from .trl_fields import ACCEPTED_BEYOND_ANNOTATION

SEED_MAX = 2**32 - 1
"""numpy's legacy seeding (`np.random.seed`, which transformers' `set_seed` calls) takes `0 <= seed < 2**32`."""

REPORT_TO = ("azure_ml", "comet_ml", "mlflow", "neptune", "tensorboard", "trackio", "wandb", "codecarbon", "clearml",
             "dagshub", "flyte", "dvclive", "swanlab", "kubeflow")
"""transformers' `INTEGRATION_TO_CALLBACK` keys (a test compares them with the installed transformers')."""


def _int(low: int, high: int = MAX_COUNT, why: str | None = None) -> Rule:
    return Rule("int", low=low, high=high, why=why, high_is_rule=high not in (MAX_COUNT, MAX_STEPS, 2**16))


def _number(low=None, high=None, open_low=False, open_high=False, finite=True, why=None) -> Rule:
    return Rule("number", low=low, high=high, open_low=open_low, open_high=open_high, finite=finite, why=why)


_PROBABILITY = _number(0, 1)
_POSITIVE = _number(0, open_low=True)
_NON_NEGATIVE = _number(0)
_FINITE = _number()
_STEPS = _number(0, open_low=True, why="a fraction of the run's steps below 1, else a whole number of steps")
_PORT = _int(1, 65535, why="a TCP port")

RANGES: dict[str, Rule] = {
    # transformers.TrainingArguments
    "per_device_train_batch_size": _int(1),
    "num_train_epochs": _POSITIVE,
    "max_steps": _int(-1, MAX_STEPS, why="-1, transformers' default: train `num_train_epochs` epochs"),  # 0: below
    "learning_rate": _number(0, why="torch's optimizers refuse a negative learning rate"),
    "warmup_steps": _number(0, why="a fraction of the run's steps below 1, else a number of steps"),
    "weight_decay": _NON_NEGATIVE,
    "adam_beta1": _number(0, 1, open_high=True, why="torch's Adam"),
    "adam_beta2": _number(0, 1, open_high=True, why="torch's Adam"),
    "adam_epsilon": _number(0, why="torch's Adam"),
    "gradient_accumulation_steps": _int(1),
    "max_grad_norm": _number(0, finite=False, why="0: no clipping"),
    "label_smoothing_factor": _PROBABILITY,
    "neftune_noise_alpha": _number(0, why="the scale of NEFTune's uniform noise"),
    "torch_empty_cache_steps": _int(1),
    "logging_steps": _STEPS,
    "eval_steps": _STEPS,
    "eval_delay": _NON_NEGATIVE,
    "per_device_eval_batch_size": _int(1),
    "eval_accumulation_steps": _int(1),
    "save_steps": _STEPS,
    "save_total_limit": _int(1, why="checkpoints kept"),
    "seed": _int(0, SEED_MAX, why="numpy's and torch's seed range"),
    "data_seed": _int(0, SEED_MAX, why="numpy's and torch's seed range"),
    "dataloader_num_workers": _int(0),
    "dataloader_prefetch_factor": _int(1),
    "ddp_bucket_cap_mb": _int(1),
    "ddp_timeout": _int(1, MAX_STEPS, why="seconds"),
    "local_rank": _int(-1, MAX_COUNT, why="-1: not distributed"),
    "router_aux_loss_coef": _FINITE,
    # trl.GRPOConfig
    "num_generations": _int(2, why="GRPO needs at least 2 completions per prompt to compute advantages"),
    "num_generations_eval": _int(2, why="GRPO needs at least 2 completions per prompt to compute advantages"),
    "max_completion_length": _int(1, why="generation's max_new_tokens"),
    "pad_to_multiple_of": _int(1, 2**16),  # (a bound on the input: TRL allocates the padding, 2**31 fails)
    "generation_batch_size": _int(1),
    "steps_per_generation": _int(1),
    # (`temperature`: a stage's rule, `core.rules.TEMPERATURE`; without a curriculum the top-level one is the stage's)
    "top_p": _number(0, 1, open_low=True),
    "top_k": _int(0, why="0: no top-k filtering"),
    "min_p": _PROBABILITY,
    "repetition_penalty": _number(0.01, why="transformers divides the positive logits by it: at 5e-324 they "
                                  "overflow to inf and sampling fails"),
    "vllm_server_port": _PORT,
    "vllm_server_timeout": _POSITIVE,
    "vllm_group_port": _PORT,
    "vllm_gpu_memory_utilization": _number(0, 1, open_low=True),
    "vllm_max_model_length": _int(1),
    "vllm_tensor_parallel_size": _int(1),
    "beta": _number(0, why="the KL coefficient; 0: no reference model"),
    "num_iterations": _int(1),
    "epsilon": _NON_NEGATIVE,
    "delta": _POSITIVE,
    "epsilon_high": _NON_NEGATIVE,
    "sapo_temperature_neg": _POSITIVE,
    "sapo_temperature_pos": _POSITIVE,
    "vespo_k_pos": _FINITE,
    "vespo_lambda_pos": _FINITE,
    "vespo_k_neg": _FINITE,
    "vespo_lambda_neg": _FINITE,
    "ref_model_mixup_alpha": _PROBABILITY,
    "ref_model_sync_steps": _int(1),
    "top_entropy_quantile": _PROBABILITY,
    "entropy_coef": _NON_NEGATIVE,
    "entropy_coef_min": _NON_NEGATIVE,
    "entropy_coef_max": _NON_NEGATIVE,
    "entropy_coef_delta": _NON_NEGATIVE,
    "entropy_target": _FINITE,
    "max_tool_calling_iterations": _int(0),
    "vllm_importance_sampling_clip_max": _POSITIVE,
    "vllm_importance_sampling_clip_min": _NON_NEGATIVE,
    "off_policy_mask_threshold": _NON_NEGATIVE,
    "num_completions_to_print": _int(0),
    "vllm_importance_sampling_cap": _POSITIVE,
    # trl.ModelConfig (LoRA)
    "lora_r": _int(1),
    "lora_alpha": _int(1),
    "lora_dropout": _number(0, 1, open_high=True),
}
"""Field -> the rule of its numeric value (its `null`, `"auto"` or other alternatives of the snapshot stay)."""

ASYNC_RANGES: dict[str, Rule] = {  # `AsyncGRPOConfig`'s own fields (`trainer: async_grpo`), from TRL 1.16's source
    "max_staleness": _int(0, why="policy versions a sample may lag; 0: only the current one's"),
    "weight_sync_steps": _int(1, why="optimizer steps between weight syncs to the vLLM server"),  # `step % n`
    "max_inflight_tasks": _int(-1, why="-1, TRL's default: max_staleness x samples a step"),  # 0: see trainers.py
    "request_timeout": _int(1, MAX_STEPS, why="seconds"),
    "weight_sync_timeout": _int(1, MAX_STEPS, why="seconds"),
    "heartbeat_stale_after_s": _POSITIVE,
    "fork_threshold_tokens": _int(0),
}
"""As [`RANGES`], for the fields only `AsyncGRPOConfig` has (its trainer needs a vLLM server: not probed by training one
step like the others; `max_inflight_tasks: 0`, a hang, is refused by `config.trainers.async_recipe_problems`)."""

_MIN_LR_SCHEDULERS = ("cosine_with_min_lr", "cosine_warmup_with_min_lr")


def ranged_rule(name: str, numeric: Rule) -> Rule:
    """The rule replacing the `"int"` / `"float"` alternative of field `name` (`numeric`), when it has a range."""
    return RANGES.get(name) or ASYNC_RANGES.get(name, numeric)


def _kwargs(value) -> Mapping | None:
    """`lr_scheduler_kwargs` as a mapping (TRL also takes a JSON string), or `None` when unreadable."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, Mapping) else None


JSON_FIELDS = ("lr_scheduler_kwargs", "accelerator_config", "activation_checkpointing_kwargs",
               "gradient_checkpointing_kwargs")
"""Mapping fields transformers also takes as JSON text (`TrainingArguments._VALID_DICT_FIELDS`: a string starting with
`{` is read with `json.loads`); `accelerator_config` otherwise names a JSON file ([`~config.environment`] checks it).
(`deepspeed` and `fsdp_config` take the same forms: their rules are the distributed setup's.)"""


def _json_problems(key: str, text) -> list[Problem]:
    """A JSON-text value of a [`JSON_FIELDS`] field that is not a JSON object (or, but for `accelerator_config`, any
    other string: the run would pass the characters as keyword arguments)."""
    if not isinstance(text, str) or (key == "accelerator_config" and not text.startswith("{")):
        return []
    try:
        if isinstance(json.loads(text), Mapping) and text.startswith("{"):
            return []
        why = "is not a JSON object"
    except ValueError as error:
        why = f"is not JSON ({error})"
    return [Problem(key, text, f"{why}: a string here must be a JSON object, e.g. '{{\"name\": 1}}'",
                    f"write it as a YAML mapping, e.g. `{key}: {{name: 1}}`")]


def _scheduler_problems(scheduler, kwargs: Mapping, keywords: Mapping) -> list[Problem]:
    """Keywords of `lr_scheduler_kwargs` the scheduler's function does not take (transformers' `get_scheduler` would
    raise a TypeError when the trainer builds it); `keywords`: the snapshot's scheduler -> names."""
    names = keywords.get(scheduler)
    unknown = [key for key in kwargs if names is not None and key not in names]
    if not unknown:
        return []
    close = suggest(str(unknown[0]), names)
    takes = f"takes {list_text(map(repr, names))}" if names else "takes none"
    return [Problem("lr_scheduler_kwargs", dict(kwargs), f"names {list_text(map(repr, unknown))}, which the "
                    f"`{scheduler}` scheduler does not take (it {takes})",
                    f"did you mean `{close}`?" if close else "remove it, or choose the `lr_scheduler_type` it is for")]


def _words_problems(key: str, value, words) -> list[Problem]:
    """`debug`: a list of `words`, or one of them (TRL's parser reads the field as a list of `DebugOption`s, so a
    string is one of them: not several separated by spaces, nor empty)."""
    given = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    unknown = [word for word in given if word not in words]
    if not unknown:
        return []
    close = suggest(str(unknown[0]), words) if unknown[0] else None
    several = isinstance(value, str) and len(value.split()) > 1 and all(word in words for word in value.split())
    fix = (f"list them: `{key}: {value.split()}`" if several else f"did you mean `{close}`?" if close else
           f"use one of them, or remove `{key}`")
    return [Problem(key, value, f"names {list_text(map(repr, unknown))}, not one of {list_text(map(repr, words))} "
                    "(a string is one of them; several: a list)", fix)]


BOOL_WORDS = ("yes", "true", "t", "y", "1", "no", "false", "f", "n", "0")
"""The strings transformers' `HfArgumentParser` reads a `str | bool` field as (`string_to_bool`, any case): TRL's
parser, which builds the run's config, takes no other string for such a field (a test compares them)."""


def _bool_text_problems(key: str, value) -> list[Problem]:
    """A `str | bool` field (`include_num_input_tokens_seen`) given a string TRL's parser cannot read as a bool."""
    if not isinstance(value, str) or value.lower() in BOOL_WORDS:
        return []
    return [Problem(key, value, "is read as a boolean by TRL's parser (which builds the run's config), so a string "
                    f"here must be one of {list_text(BOOL_WORDS)}", f"use `{key}: true`, or `false`")]


def _optim_args_problems(text) -> list[Problem]:
    """`optim_args`: comma-separated `key=value` pairs (transformers' `_parse_optim_args` splits them so)."""
    if not isinstance(text, str) or not text:
        return []
    bad = [pair for pair in text.replace(" ", "").split(",") if pair.count("=") != 1]
    if not bad:
        return []
    return [Problem("optim_args", text, f"must be comma-separated `key=value` pairs ({list_text(map(repr, bad))} is "
                    "not one)", "e.g. `optim_args: \"betas=0.9,weight_decay=0.01\"`, or remove it")]


def related_problems(training: Mapping, fields: Mapping) -> list[Problem]:
    """
    The rules between fields (each value already of its type and in its range), and within a field's value: what
    `TrainingArguments`, `GRPOConfig`, the schedulers and the optimizers refuse.

    Args:
        training (`Mapping`): The `GRPOConfig` keys the recipe sets.
        fields (`Mapping`): The snapshot's fields ([`~config.trl_fields.trl_fields`]): their defaults, for the keys
            not set, the schedulers' keywords and `debug`'s words.
    """
    value = lambda key: training.get(key, fields.get(key, {}).get("default"))  # noqa: E731
    problems = []
    report_to = value("report_to")
    names = [report_to] if isinstance(report_to, str) else report_to if isinstance(report_to, list) else []
    known = ("all", "none", *REPORT_TO)
    unknown = [name for name in names if name not in known]
    alone = [name for name in ("none", "all") if name in names and len(names) > 1]
    if alone and not unknown:  # transformers reads `none` and `all` only as the whole value
        problems.append(Problem("report_to", report_to, f"lists `{alone[0]}` with other names: `{alone[0]}` is only "
                                "read alone (the list would reach transformers' integrations as a tracker's name)",
                                f"use `report_to: {alone[0]}`" if alone[0] == "none" or set(names) == {"all"} else
                                f"list the trackers without `{alone[0]}`"))
    if unknown:
        close = suggest(unknown[0], known)
        problems.append(Problem("report_to", report_to, f"names {list_text(map(repr, unknown))}, not one of "
                                f"transformers' integrations ({list_text(known, limit=20)})",
                                f"did you mean `{close}`?" if close else "use `none` (no tracking) or an integration"))
    if value("max_steps") == 0:  # transformers trains num_train_epochs epochs for any max_steps <= 0; -1 means it
        problems.append(Problem("max_steps", 0, "must be a positive number of steps, or -1 (transformers' default: "
                                "train `num_train_epochs` epochs; 0 would too)", "e.g. `max_steps: 1000`, or -1"))
    for key, strategy in (("logging_steps", "logging_strategy"), ("eval_steps", "eval_strategy"),
                          ("save_steps", "save_strategy")):
        steps = value(key)
        if value(strategy) == "steps" and is_number(steps) and steps > 1 and steps != int(steps):
            problems.append(Problem(key, steps, "must be a whole number of steps when above 1 (below 1: a fraction "
                                    "of the run)", f"use `{key}: {math.floor(steps)}`"))
    pad = value("pad_to_multiple_of")  # GRPOConfig reads a string other than these as an integer
    if isinstance(pad, str) and pad != "auto" and pad.lower() not in ("none", "null") and not (
            pad.isdigit() and 1 <= int(pad) <= RANGES["pad_to_multiple_of"].high):
        problems.append(Problem("pad_to_multiple_of", pad, f"must be `auto`, null or a positive integer (at most "
                                f"{RANGES['pad_to_multiple_of'].high})", "e.g. `pad_to_multiple_of: 64`, or `auto`"))
    scheduler, kwargs = value("lr_scheduler_type"), _kwargs(value("lr_scheduler_kwargs")) or {}
    for key in JSON_FIELDS:
        problems += _json_problems(key, training.get(key))
    problems += _scheduler_problems(scheduler, kwargs, fields.get("lr_scheduler_kwargs", {}).get("keywords", {}))
    problems += _optim_args_problems(value("optim_args"))
    for key, spec in fields.items():  # (`fsdp`'s bool is transformers', beyond its `str` annotation: parsed as text)
        text_or_bool = "str" in spec["type"] and "bool" in spec["type"] and key not in ACCEPTED_BEYOND_ANNOTATION
        if key in training and text_or_bool:
            problems += _bool_text_problems(key, training[key])
    if "debug" in training and "words" in fields.get("debug", {}):  # (its default, "", is never parsed)
        problems += _words_problems("debug", training["debug"], fields["debug"]["words"])
    if value("output_dir") == "":  # transformers writes into the current folder; the lock cannot name it
        problems.append(Problem("output_dir", "", "is empty: it must name the folder the run writes",
                                "e.g. `output_dir: runs/NAME`, or remove it (TRL's default: trainer_output)"))
    if scheduler in ("reduce_lr_on_plateau", "greedy") and value("eval_strategy") == "no":
        problems.append(Problem("lr_scheduler_type", scheduler, "needs evaluation (it steps on the eval loss)",
                                "set `eval_strategy: steps` (with `eval_steps`), or use another scheduler"))
    if scheduler in _MIN_LR_SCHEDULERS and not ({"min_lr", "min_lr_rate"} & set(kwargs)):
        problems.append(Problem("lr_scheduler_type", scheduler, "needs `min_lr` or `min_lr_rate` in "
                                "`lr_scheduler_kwargs`", "e.g. `lr_scheduler_kwargs: {min_lr_rate: 0.1}`"))
    if scheduler == "warmup_stable_decay" and "num_decay_steps" not in kwargs:
        problems.append(Problem("lr_scheduler_type", scheduler, "needs `num_decay_steps` in `lr_scheduler_kwargs`",
                                "e.g. `lr_scheduler_kwargs: {num_decay_steps: 100}`"))
    for key in ("dataloader_prefetch_factor", "dataloader_multiprocessing_context"):  # the DataLoader's workers'
        if value(key) is not None and value("dataloader_num_workers") == 0:
            problems.append(Problem(key, value(key), "only applies with `dataloader_num_workers` > 0 (worker "
                                    "processes)", "remove it, or set `dataloader_num_workers`"))
    if value("save_strategy") == "best" and value("metric_for_best_model") is None:
        problems.append(Problem("save_strategy", "best", "needs `metric_for_best_model`",
                                "e.g. `metric_for_best_model: eval_reward`, or `save_strategy: steps`"))
    low = value("vllm_importance_sampling_clip_min")
    high = value("vllm_importance_sampling_cap") or value("vllm_importance_sampling_clip_max")
    if is_number(low) and is_number(high) and low >= high:
        problems.append(Problem("vllm_importance_sampling_clip_min", low, f"must be less than "
                                f"vllm_importance_sampling_clip_max ({high})", "lower it, or raise the maximum"))
    for one, other in (("fp16", "bf16"), ("fp16_full_eval", "bf16_full_eval")):  # transformers: at most one of them
        if value(one) is True and value(other) is True:
            problems.append(Problem(one, True, f"cannot be combined with `{other}: true` (one mixed precision at a "
                                    "time)", f"keep one: `{one}: false` or `{other}: false`"))
    save, evaluate = value("save_strategy"), value("eval_strategy")
    if value("load_best_model_at_end") is True and save != "best":
        if evaluate != save:
            problems.append(Problem("load_best_model_at_end", True, f"needs `save_strategy` ({save}) and "
                                    f"`eval_strategy` ({evaluate}) to match, or `save_strategy: best`",
                                    f"set `eval_strategy: {save}`, or `load_best_model_at_end: false`"))
        elif evaluate == "steps" and is_number(value("save_steps")) and is_number(value("eval_steps")):
            every, checked = value("save_steps"), value("eval_steps")
            fractions = every < 1 and checked < 1  # both fractions of the run: compared in millionths, as transformers
            if checked > 0 and every % checked and not (
                    fractions and round(every * 1_000_000) % max(round(checked * 1_000_000), 1) == 0):
                problems.append(Problem("load_best_model_at_end", True, f"needs `save_steps` ({every:g}) to be a "
                                        f"multiple of `eval_steps` ({checked:g})",
                                        f"e.g. `save_steps: {checked:g}`"))
    if value("sync_ref_model") is True and value("beta") == 0:  # the trainer refuses it once the model has loaded
        default = "" if "beta" in training else ", the trainer's default"
        problems.append(Problem("sync_ref_model", True, f"needs a reference model, which the trainer builds only when "
                                f"`beta` > 0 (beta is 0{default})", "set `beta` above 0 (e.g. `beta: 0.04`), or "
                                "`sync_ref_model: false`"))
    clip = training.get("reward_clip_range")  # RLOOConfig's: RLOOTrainer runs `rewards.clamp(clip[0], clip[1])`
    if isinstance(clip, (list, tuple)) and (len(clip) != 2 or not all(map(math.isfinite, clip)) or clip[0] > clip[1]):
        swapped = len(clip) == 2 and all(map(math.isfinite, clip))  # torch's clamp would set every reward to `high`
        problems.append(Problem("reward_clip_range", clip, "must be two finite numbers [low, high] with low <= high "
                                "(RLOOTrainer clamps each reward to them)",
                                f"e.g. `reward_clip_range: {[clip[1], clip[0]] if swapped else [-1.0, 1.0]}`, or "
                                "remove it (no clipping)"))
    low, high = value("entropy_coef_min"), value("entropy_coef_max")
    if is_number(low) and is_number(high) and low > high:
        problems.append(Problem("entropy_coef_min", low, f"must be at most entropy_coef_max ({high})",
                                "lower it, or raise entropy_coef_max"))
    return problems
