"""Reward functions that break TRL's contract, one way each (tests/test_preflight.py)."""

import sys


def one_short(completions, **kwargs):
    return [0.0] * (len(completions) - 1)


def raises(completions, **kwargs):
    raise ValueError("no answer found")


def strings(completions, **kwargs):
    return ["1.0"] * len(completions)


def one_float(completions, **kwargs):
    return 1.0


def all_nan(completions, **kwargs):
    return [float("nan")] * len(completions)


def scores_dict(completions, **kwargs):
    return {"accuracy": [1.0] * len(completions), "format": [0.0] * len(completions)}


def exits(completions, **kwargs):
    sys.exit(0)


def good(completions, **kwargs):
    return [float(len(c)) for c in completions]


def minus_inf(completions, **kwargs):
    return [float("-inf")] + [0.0] * (len(completions) - 1)


async def async_one_short(completions, **kwargs):  # TRL 1.16 awaits async reward functions
    return [0.0] * (len(completions) - 1)


async def good_async(completions, **kwargs):
    return [float(len(c)) for c in completions]
