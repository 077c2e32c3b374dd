"""
A curriculum's switch records (a change of stage, G or temperature between generation rounds) in words, and the
`switches.jsonl` file they are written to at the end of training.
"""

from __future__ import annotations

import json
import os

from .files import atomic_write

SWITCHES_FILE = "switches.jsonl"


def describe_g(num_generations: int | None, top_up=None) -> str:
    """`"8"`, `"per prompt"` for a per-prompt round, or `"by top-up"` for a top-up round (`top_up` set)."""
    if top_up is not None:
        return "by top-up"
    return "per prompt" if num_generations is None else str(num_generations)


def is_stage_change_only(switch: dict) -> bool:
    """Whether a switch record changes the stage but neither G nor the temperature."""
    before, after = switch["from"], switch["to"]
    return (before["num_generations"] == after["num_generations"] and before["temperature"] == after["temperature"]
            and before.get("top_up") == after.get("top_up"))


def describe_switch(switch: dict) -> str:
    """
    One line for a switch record, as logged and printed by `grpo-curriculum demo`.

    Args:
        switch (`dict`):
            A record of [`CurriculumCallback.switches`]: `step`, `round`, `from` and `to` settings, `reason`.

    Returns:
        `str`: e.g. `"switch at step 21 (round 21): G 2 -> 8, temperature 0.8 -> 1 (stage 1 (compare) starts)"`; a
        record that changes only the stage reads `"stage change at step 61 (round 61): G 4 and temperature 0.8
        unchanged (...)"`, and a per-prompt setting reads `"G per prompt"`.
    """
    before, after = switch["from"], switch["to"]
    g_before = describe_g(before["num_generations"], before.get("top_up"))
    g_after = describe_g(after["num_generations"], after.get("top_up"))
    t_before, t_after = f"{before['temperature']:.4g}", f"{after['temperature']:.4g}"
    where = f"at step {switch['step']} (round {switch['round']})"
    if is_stage_change_only(switch):
        return f"stage change {where}: G {g_after} and temperature {t_after} unchanged ({switch['reason']})"
    if g_before == g_after:
        change = f"temperature {t_before} -> {t_after} at G {g_after}"
    elif t_before == t_after:
        change = f"G {g_before} -> {g_after} at temperature {t_after}"
    else:
        change = f"G {g_before} -> {g_after}, temperature {t_before} -> {t_after}"
    return f"switch {where}: {change} ({switch['reason']})"


def write_switches(directory: str, switches: list[dict]) -> str:
    """
    Write every switch record, one JSON object a line, to `switches.jsonl` in `directory` (created if missing);
    return the path. The file is replaced as a whole, so a resumed run never repeats a record.
    """
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SWITCHES_FILE)
    atomic_write(path, lambda f: f.writelines(json.dumps(switch) + "\n" for switch in switches))
    return path
