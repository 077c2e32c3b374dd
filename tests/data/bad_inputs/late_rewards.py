"""Reward functions that pass the preflight (step 0) and break TRL's contract from step 1 on (tests/test_preflight.py:
the training-time checks)."""


async def short_later(completions, trainer_state, **kwargs):
    return [0.0] * (len(completions) - (trainer_state.global_step >= 1))


def unscored_later(completions, trainer_state, **kwargs):
    return [1.0 if trainer_state.global_step < 1 else None for _ in completions]


async def unscored_later_async(completions, trainer_state, **kwargs):
    return [1.0 if trainer_state.global_step < 1 else float("nan") for _ in completions]
