"""Reward functions TRL runs, which the preflight must not refuse (tests/test_preflight.py): each reads what TRL passes
at its first call in training and a stand-in without it lacks (issue 53)."""

import copy


def progress(completions, trainer_state, **kwargs):
    """TRL's documented use of `trainer_state`: the fraction of the run done."""
    return [trainer_state.global_step / trainer_state.max_steps for _ in completions]


def epochs(completions, trainer_state, **kwargs):
    return [1.0 / trainer_state.num_train_epochs for _ in completions]


def last_token(completions, completion_ids, **kwargs):
    return [float(ids[-1] > 0) for ids in completion_ids]


async def judged(completions, **kwargs):
    return [float(len(c)) for c in completions]


def awaitable(completions, **kwargs):
    """Not `async def`, returning a coroutine: TRL does not await it (and fails on it at the first step)."""
    return judged(completions)


STATES = []


def recorder(completions, trainer_state, **kwargs):
    """Keeps each `trainer_state` it is called with (its fields, at the call)."""
    STATES.append(copy.deepcopy(vars(trainer_state)))
    return [0.0 for _ in completions]
