"""
The rules of a recipe's engine fields, `fsdp`, `fsdp_config` and `deepspeed`: what transformers' `TrainingArguments`,
accelerate's FSDP plugin and DeepSpeed config and transformers' `Trainer` refuse for them, so that `check` and `train`
(which both parse the recipe) give the same verdict before anything is built, and neither ends in a traceback.

Sources (transformers 5.25, accelerate 1.16): `TrainingArguments._process_fsdp_args` and
`_apply_legacy_fsdp_to_config` (`fsdp` is `true`, or the deprecated string / list of `FSDPOption` values; FSDP2 takes
only `full_shard` and `shard_grad_op`; `fsdp_config` is a mapping or the path of a JSON file, its keys with or
without the `fsdp_` prefix, its booleans read by `str_to_bool`), `FullyShardedDataParallelPlugin` (versions 1 and 2;
FSDP2 has no `LOCAL_STATE_DICT`), `HfDeepSpeedConfig` (a mapping, a JSON file, or JSON / base64 JSON text) and
`Trainer.create_accelerator_and_postprocess` (FSDP's activation checkpointing and the training argument cannot both
be on; `fsdp` and `deepspeed` cannot both be on). Pure standard library (the installed transformers' version is read
with `importlib.metadata`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping

from ..core.errors import Problem, list_text
from .trl_fields import installed_version

FSDP_OPTIONS = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2", "offload",
                "auto_wrap")
"""transformers' `FSDPOption` values (a test compares them with the installed transformers')."""
FSDP1_ONLY = ("no_shard", "hybrid_shard", "hybrid_shard_zero2")
AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
"""accelerate's `FSDP_AUTO_WRAP_POLICY`."""
STATE_DICT_TYPES = {1: ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"),
                    2: ("FULL_STATE_DICT", "SHARDED_STATE_DICT")}  # fmt: skip
"""accelerate's `FSDP_STATE_DICT_TYPE` and `FSDP2_STATE_DICT_TYPE`, by FSDP version."""
FSDP_BOOLEANS = ("cpu_ram_efficient_loading", "activation_checkpointing", "cpu_offload", "forward_prefetch",
                 "use_orig_params", "sync_module_states", "limit_all_gathers")  # fmt: skip
TRUTH = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
"""What transformers' `str_to_bool` reads (of `str(value).lower()`)."""
_FSDP_FIX = "`fsdp: true`, with the rest in `fsdp_config` (transformers 5 deprecates the string and list forms)"


def _fsdp_items(value) -> list:
    return value.split() if isinstance(value, str) else list(value) if isinstance(value, list) else []


def _json_file(key: str, path: str, fix: str) -> tuple[Mapping | None, list[Problem]]:
    """The JSON object in file `path` (`key`'s value), or the problem reading it."""
    try:
        with open(path, encoding="utf-8") as file:
            found = json.load(file)
    except OSError as error:
        return None, [Problem(key, path, f"cannot be read ({error.strerror or error})", fix)]
    except ValueError as error:
        return None, [Problem(key, path, f"is not valid JSON ({error})", fix)]
    if not isinstance(found, Mapping):
        return None, [Problem(key, path, f"must hold a JSON object, not a {type(found).__name__}", fix)]
    return found, []


def fsdp_config_of(value) -> tuple[Mapping | None, list[Problem]]:
    """`fsdp_config` as transformers reads it (a mapping, or a JSON file's object; `fsdp_` prefixes dropped)."""
    config, problems = value, []
    if isinstance(value, str):
        config, problems = _json_file("fsdp_config", value, "give the path of an FSDP JSON config, or the mapping "
                                      "itself, e.g. `fsdp_config: {version: 2, state_dict_type: FULL_STATE_DICT}`")
    if not isinstance(config, Mapping):
        return None, problems
    return {(k[5:] if isinstance(k, str) and k.startswith("fsdp_") else k): v for k, v in config.items()}, problems


def deepspeed_config_of(value) -> tuple[Mapping | None, list[Problem]]:
    """`deepspeed` as accelerate's `HfDeepSpeedConfig` reads it: a mapping, a JSON file, or JSON (or base64 JSON)."""
    if isinstance(value, Mapping):
        return value, []
    if not isinstance(value, str):
        return None, []
    fix = ("give the path of a DeepSpeed JSON config (e.g. examples/distributed/zero3.json), or the mapping itself, "
           "e.g. `deepspeed: {zero_optimization: {stage: 3}}`")
    if os.path.exists(value):
        return _json_file("deepspeed", value, fix)
    for decode in (lambda text: text, lambda text: base64.urlsafe_b64decode(text).decode("utf-8")):
        try:
            found = json.loads(decode(value))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            continue
        if isinstance(found, Mapping):
            return found, []
    return None, [Problem("deepspeed", value, "is neither an existing file nor JSON (nor base64 JSON) text", fix)]


def engine_problems(training: Mapping, defaults: Mapping) -> list[Problem]:
    """
    The problems of a recipe's `fsdp`, `fsdp_config` and `deepspeed` (each already of its type).

    Args:
        training (`Mapping`): The `GRPOConfig` keys the recipe sets.
        defaults (`Mapping`): Field -> TRL's default, for the keys not set.
    """
    value = lambda key: training.get(key, defaults.get(key))  # noqa: E731
    fsdp, problems = value("fsdp"), []
    items = _fsdp_items(fsdp)
    unknown = [item for item in items if item not in FSDP_OPTIONS]
    if unknown and isinstance(fsdp, str) and fsdp.strip().lower() in TRUTH:  # `--fsdp true` on a command line
        problems.append(Problem("fsdp", fsdp, "is the string " + repr(fsdp) + ", which transformers reads as the name "
                                "of an FSDP option (there is none of that name) and refuses", "on the command line "
                                "`--fsdp` alone (no value) turns FSDP on; in YAML write `fsdp: true` (unquoted)"))
    elif unknown:
        problems.append(Problem("fsdp", fsdp, f"names {list_text(map(repr, unknown))}, not one of transformers' "
                                f"FSDP options ({list_text(FSDP_OPTIONS)})", _FSDP_FIX))
    config = {}
    if fsdp:  # transformers reads `fsdp_config` only with FSDP on
        found, read = fsdp_config_of(value("fsdp_config"))
        problems += read
        config = found or {}
    version = config.get("version", 2)
    version = int(version) if isinstance(version, (int, str)) and str(version) in ("1", "2") else version
    if version not in (1, 2):
        problems.append(Problem("fsdp_config.version", version, "must be 2 (FSDP2, transformers' default) or 1 "
                                "(FSDP1, deprecated)", "`version: 2`"))
    if version == 2 and int((installed_version("transformers") or "5").split(".")[0]) >= 5:
        fsdp1 = [item for item in items if item in FSDP1_ONLY]
        if fsdp1:
            problems.append(Problem("fsdp", fsdp, f"asks for {list_text(map(repr, fsdp1))}, which only FSDP1 has "
                                    "(FSDP2, `fsdp_config.version` 2, the default, shards fully or keeps parameters "
                                    "gathered after the forward pass)", f"{_FSDP_FIX}; `fsdp_config: "
                                    "{reshard_after_forward: false}` is `shard_grad_op`"))
    policy = config.get("auto_wrap_policy", AUTO_WRAP_POLICIES[0])
    if policy not in AUTO_WRAP_POLICIES:
        problems.append(Problem("fsdp_config.auto_wrap_policy", policy, "must be one of "
                                f"{list_text(AUTO_WRAP_POLICIES)} (accelerate's)",
                                f"`auto_wrap_policy: {AUTO_WRAP_POLICIES[0]}`"))
    kind = config.get("state_dict_type", "FULL_STATE_DICT")
    allowed = STATE_DICT_TYPES[2 if version == 2 else 1]
    if not isinstance(kind, str) or kind.upper() not in allowed:
        problems.append(Problem("fsdp_config.state_dict_type", kind, f"must be one of {list_text(allowed)} for FSDP"
                                f"{version}", "`state_dict_type: FULL_STATE_DICT` (checkpoints and the final model "
                                "as whole weights) or `SHARDED_STATE_DICT` (checkpoints one shard per process)"))
    for key in FSDP_BOOLEANS + (("reshard_after_forward",) if version == 2 else ()):
        if key in config and str(config[key]).lower() not in TRUTH:
            problems.append(Problem(f"fsdp_config.{key}", config[key], "must be true or false", f"`{key}: false`"))
    checkpointing = value("activation_checkpointing")
    checkpointing = value("gradient_checkpointing") if checkpointing is None else checkpointing
    if str(config.get("activation_checkpointing", False)).lower() in TRUTH[:6] and checkpointing is not False:
        problems.append(Problem("fsdp_config.activation_checkpointing", config["activation_checkpointing"],
                                "cannot be combined with the `activation_checkpointing` training argument (TRL turns "
                                "it on by default; transformers refuses both under FSDP)",
                                "set `activation_checkpointing: false` in the recipe (FSDP's own checkpointing "
                                "replaces it)"))
    deepspeed = value("deepspeed")
    if deepspeed:
        found, read = deepspeed_config_of(deepspeed)
        problems += read
        zero = (found or {}).get("zero_optimization", {})
        stage = zero.get("stage", 0) if isinstance(zero, Mapping) else 0
        if stage not in (0, 1, 2, 3, "auto"):
            problems.append(Problem("deepspeed.zero_optimization.stage", stage, "must be 0, 1, 2 or 3",
                                    "e.g. `stage: 3` (parameters, gradients and optimizer state sharded)"))
        if fsdp:
            problems.append(Problem("deepspeed", deepspeed, "cannot be combined with `fsdp` (one engine a run: "
                                    "transformers' Trainer refuses both)", "remove `fsdp` or `deepspeed`"))
    return problems


def engine_notes(training: Mapping) -> list[str]:
    """What `check` says about the engine a recipe asks for: FSDP on CPU processes trains as DDP."""
    if training.get("fsdp") and training.get("use_cpu"):
        return ["warning: fsdp with use_cpu: true trains plain DDP (every process holds the whole model): accelerate "
                "sets up FSDP only on GPU-like devices. Remove `use_cpu: true` on GPUs, or remove `fsdp` to train DDP "
                "knowingly"]
    return []
