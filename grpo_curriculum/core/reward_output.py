"""
What a reward function must return, as TRL reads it: one number (or `None`, "cannot score") per completion, in a list
(or any sequence) as long as the completions. Checked where the preflight calls each reward function on stand-in
completions (`grpo_curriculum.cli.preflight`) and at every call during training
(`training._trl.settings.check_reward_calls`), so a function returning 7 rewards for 8 completions, a float, a dict,
strings or NaN for every row is named with its rule and fix instead of failing inside TRL (or training on a `nan`
reward). Pure: no torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

from .errors import Problem, shorten

RETURN_FIX = "return a list with one float per completion (None for a completion it cannot score)"


def _where(step) -> str:
    return f" at step {step}" if step is not None else " on the preflight's stand-in completions"


def reward_output_problem(name: str, output, expected: int, step: int | None = None,
                          infinite: bool = True) -> Problem | None:
    """
    The first rule `output`, returned by reward function `name` for `expected` completions, breaks (`None` if none).

    Args:
        name (`str`): The reward function's name, for the message.
        output: What it returned.
        expected (`int`): The completions it was given.
        step (`int`, *optional*): The optimizer step of the call (`None`: the preflight's call).
        infinite (`bool`, *optional*, defaults to `True`): Refuse `inf` too (training refuses it once the rewards are
            gathered, where float32 overflow shows, see `training._trl.settings.refuse_infinite_rewards`).
    """
    key, where = f"reward function {name}", _where(step)
    if isinstance(output, Mapping):
        return Problem(key, f"a dict with keys {shorten(list(output))}", f"returned a dict{where}: TRL would read its "
                       "keys as the rewards", f"{RETURN_FIX}; to log several scores, return one of them and report "
                       "the others with the `log_metric` argument TRL passes, or list one reward function per score")
    if isinstance(output, (str, bytes)) or not isinstance(output, Sequence) and not _is_array(output):
        return Problem(key, shorten(output), f"returned a {type(output).__name__}{where}, not one reward per "
                       f"completion ({expected})", RETURN_FIX)
    values = output.tolist() if _is_array(output) else list(output)
    if len(values) != expected:
        return Problem(key, f"{len(values)} rewards", f"returned {len(values)} rewards for {expected} completions"
                       f"{where}: a reward function returns exactly one reward per completion", RETURN_FIX)
    for row, value in enumerate(values):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return Problem(key, shorten(value), f"returned a {type(value).__name__} for completion {row} of {expected}"
                           f"{where}: a reward is a number, or None", RETURN_FIX)
        if infinite and math.isinf(value):
            return Problem(key, value, f"returned {value} for completion {row} of {expected}{where}: a reward must be "
                           "finite (an infinite one trains nothing while the logs show reward inf)",
                           "make it return finite rewards (clip them), or None where it cannot score a completion")
    if values and all(value is not None and math.isnan(value) for value in values):
        return Problem(key, "nan for every completion", f"returned NaN for all {expected} completions{where}: the "
                       "round has no reward to learn from (TRL reads NaN as 'not scored', so the run would train on "
                       "nothing and log reward nan)", "make it return a number for the completions it can score, "
                       "and None (not NaN) for the others")
    return None


def _is_array(output) -> bool:
    """A numpy array or a torch tensor (one dimension, as TRL converts them), without importing either."""
    return hasattr(output, "__len__") and hasattr(output, "tolist") and getattr(output, "ndim", 1) == 1
