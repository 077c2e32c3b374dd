"""
What a recipe needs from the machine it runs on, checked the same way by `grpo-curriculum check` and, before anything
is built or written, by `grpo-curriculum train` ([`~cli.launch.validate_for_launch`]): so the two commands give one
verdict, and neither ends in a traceback after the model has loaded.

- a built-in dataset large enough for a generation round of every stage (the trainer's own check, said up front);
- the file `accelerator_config` names (a string not starting with `{`; `deepspeed`'s is read with its config by
  [`~config.engines`]);
- `use_liger_kernel`: the `liger-kernel` package (0.3 or later, transformers' floor);
- `push_to_hub`: not offline (`HF_HUB_OFFLINE`), a token, and the Hub reachable (a connection, 5 s at most);
- `tf32: true`: a CUDA GPU of the Ampere generation or later (transformers refuses it otherwise; torch is imported only
  for this key).

Apart from `tf32: true` and `push_to_hub: true`, nothing here imports a library or touches the network.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import socket
from urllib.parse import urlparse

from ..core.errors import Problem

LIGER_MINIMUM = (0, 3)
"""transformers' `is_liger_kernel_available`: liger-kernel 0.3.0 or later."""
BUILTIN_PROMPTS = 256
"""Prompts of a built-in dataset when `dataset_num_prompts` is not given (see [`~cli.build.build_run`])."""


def environment_problems(recipe, geometry, num_generations: int) -> list[Problem]:
    """
    What `recipe` needs from this machine and is not here (see the module docstring).

    Args:
        recipe ([`~config.recipe.Recipe`]): The validated recipe.
        geometry ([`~core.geometry.BatchGeometry`]): Its batch geometry on the processes it runs (or is checked) on.
        num_generations (`int`): The G `GRPOConfig` gets ([`~config.recipe.starting_num_generations`]).
    """
    from .recipe import BUILTIN

    problems, training = [], recipe.training
    if recipe.dataset_name.startswith(BUILTIN) and num_generations:
        size = recipe.dataset_num_prompts or BUILTIN_PROMPTS
        what, prompts = recipe.curriculum.prompts_needed(num_generations, geometry.generation_batch_size)
        if size < prompts:
            problems.append(Problem("dataset_num_prompts", size, f"is too small: a round of "
                                    f"{geometry.generation_batch_size} completions at {what} takes {prompts} prompts "
                                    "from one pass over the dataset",
                                    f"e.g. `dataset_num_prompts: {max(prompts, BUILTIN_PROMPTS)}`, or a smaller "
                                    "generation batch"))
    path = training.get("accelerator_config")  # transformers reads a string not starting with `{` as a file
    if isinstance(path, str) and not path.startswith("{") and not os.path.isfile(path):
        where = "a folder" if os.path.isdir(path) else "no file"
        problems.append(Problem("accelerator_config", path, f"names {where} (a string here is the path of a JSON "
                                "config file, or JSON text starting with `{`)",
                                "give the path of an existing JSON file"))
    if training.get("use_liger_kernel") is True:
        problems += _liger_problems()
    if training.get("push_to_hub") is True:
        problems += _hub_problems(training.get("hub_token"))
    if training.get("tf32") is True and not _tf32_available():
        problems.append(Problem("tf32", True, "needs a CUDA GPU of the Ampere generation or later (TF32 matmuls), "
                                "which this machine does not have", "remove `tf32` (or set `tf32: false`)"))
    return problems


def _liger_problems() -> list[Problem]:
    fix = "`pip install 'liger-kernel>=0.3'` (CUDA), or set `use_liger_kernel: false`"
    if importlib.util.find_spec("liger_kernel") is None:
        return [Problem("use_liger_kernel", True, "needs `liger_kernel`, which is not installed in this environment",
                        fix)]
    try:
        version = importlib.metadata.version("liger-kernel")
    except importlib.metadata.PackageNotFoundError:
        return []
    numbers = tuple(int(part) if part.isdigit() else 0 for part in version.split(".")[:2])
    if numbers >= LIGER_MINIMUM:
        return []
    return [Problem("use_liger_kernel", True, f"needs liger-kernel 0.3 or later (transformers' floor), not {version}",
                    fix)]


def _hub_problems(hub_token) -> list[Problem]:
    """`push_to_hub: true`: the trainer creates the Hub repository when it is built, after the model loads."""
    from huggingface_hub import constants, get_token

    fix = "set `push_to_hub: false` (push the saved folder later with `hf upload`)"
    if constants.HF_HUB_OFFLINE:
        return [Problem("push_to_hub", True, "needs the Hugging Face Hub, and HF_HUB_OFFLINE is set", fix)]
    if not (hub_token or get_token()):
        return [Problem("push_to_hub", True, "needs a Hugging Face token with write access, and none is set (no "
                        "`hub_token`, HF_TOKEN or `hf auth login`)", f"run `hf auth login`, or {fix}")]
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return []  # through a proxy: the connection below would not say whether the Hub is reachable
    endpoint = urlparse(constants.ENDPOINT)
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as error:
        return [Problem("push_to_hub", True, f"needs the Hugging Face Hub, and {host}:{port} cannot be reached from "
                        f"here ({error.strerror or error})", f"run where the Hub is reachable, or {fix}")]
    return []


def _tf32_available() -> bool:
    """transformers' own test (`--tf32 requires Ampere or a newer GPU arch`): imports torch."""
    from transformers.utils.import_utils import is_torch_tf32_available

    return is_torch_tf32_available()
