"""
The curriculum's part of a checkpoint: written atomically before the Trainer marks the checkpoint complete, versioned,
and validated when read back. No torch, no TRL (numpy only when arrays are written or read: the CLI imports this).

A checkpoint folder is *complete* when its `trainer_state.json` parses (the Trainer writes it after the model,
optimizer and RNG states; [`GRPOHooks`] makes that write atomic and writes the curriculum state just before it) and,
for a curriculum run, its `curriculum_state.json` parses too. `resume_from_checkpoint=True` resumes from the newest
complete checkpoint, skipping half-written newer ones with a warning that names them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

logger = logging.getLogger("grpo_curriculum")

STATE_FILE = "curriculum_state.json"
ARRAYS_FILE = "curriculum_arrays.npz"  # per-prompt statistics, next to the state
TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME
VERSION = 2
REQUIRED = ("version", "global_step", "micro_step", "callback", "stream", "round_start_stream", "round_plan",
            "geometry", "prompt_report")  # fmt: skip
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class CurriculumStateError(ValueError):
    """A checkpoint's curriculum state cannot be used to continue this run; the message says why and what to do."""


def atomic_write(path: str | os.PathLike, write, binary: bool = False) -> None:
    """
    Call `write(file)` on a temporary file next to `path`, sync it and rename it to `path`: readers see the old file or
    the new one, never a part (the temporary file is removed if `write` fails).
    """
    tmp = f"{os.fspath(path)}.tmp"
    try:
        with open(tmp, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_json(path: str, data) -> None:
    """Write `data` as JSON to `path` through a temporary file and a rename: readers see the old file or the new one."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2, sort_keys=True) + "\n"))


def write_state(folder: str, state: dict) -> None:
    """Write a curriculum state (numpy arrays into `curriculum_arrays.npz`, the rest into `curriculum_state.json`)."""
    import numpy as np

    state, arrays = _split_arrays({"version": VERSION, **state})
    if arrays:
        atomic_write(os.path.join(folder, ARRAYS_FILE), lambda f: np.savez_compressed(f, **arrays), binary=True)
    atomic_write(os.path.join(folder, STATE_FILE), lambda f: json.dump(state, f))


def read_state(folder: str, global_step: int | None = None) -> dict:
    """
    Read and check the curriculum state of a checkpoint.

    Args:
        folder (`str`): The checkpoint folder.
        global_step (`int`, *optional*): The step the Trainer resumes at (its `trainer_state.json`); must match.

    Raises:
        [`CurriculumStateError`]: naming the file, what is wrong with it and what to do.
    """
    path = os.path.join(folder, STATE_FILE)
    fix = ("resume from another checkpoint of this run (`resume_from_checkpoint=True` picks the newest complete one), "
           "or start a new run from the model weights in it")  # fmt: skip
    if not os.path.isfile(path):
        raise CurriculumStateError(
            f"{folder} holds no {STATE_FILE}: it was not written by CurriculumGRPOTrainer (or not completely), so the "
            f"curriculum cannot continue where it stopped. Fix: {fix}."
        )
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CurriculumStateError(f"{path} cannot be read ({error}): the file is damaged. Fix: {fix}.") from None
    if not isinstance(state, dict):
        raise CurriculumStateError(f"{path} holds {type(state).__name__}, not a curriculum state. Fix: {fix}.")
    if state.get("version") != VERSION:
        raise CurriculumStateError(
            f"{path} has version {state.get('version')!r}; this grpo-curriculum reads version {VERSION}. Fix: resume "
            f"with the grpo-curriculum version that wrote it, or {fix.split(', or ')[1]}."
        )
    missing = [key for key in REQUIRED if key not in state]
    if missing:
        raise CurriculumStateError(f"{path} lacks {', '.join(missing)}: the file is damaged. Fix: {fix}.")
    if global_step is not None and state["global_step"] != global_step:
        raise CurriculumStateError(
            f"{path} was saved at step {state['global_step']}, but the checkpoint's trainer state is at step "
            f"{global_step}: the file belongs to another checkpoint. Fix: {fix}."
        )
    arrays_path = os.path.join(folder, ARRAYS_FILE)
    if _has_arrays(state):
        import numpy as np

        try:
            with np.load(arrays_path) as arrays:
                state = _join_arrays(state, {name: arrays[name] for name in arrays.files})
        except (OSError, ValueError, KeyError) as error:
            raise CurriculumStateError(f"{arrays_path} cannot be read ({error}). Fix: {fix}.") from None
    return state


def is_complete(folder: str | os.PathLike) -> bool:
    """Whether a checkpoint folder was written completely (see the module docstring)."""
    for name in (TRAINER_STATE_FILE, STATE_FILE):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
    return True


def newest_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """
    The newest complete `checkpoint-N` folder in `output_dir` (highest N), or `None`; each newer incomplete one is
    named in a warning.
    """
    if not os.path.isdir(output_dir):
        return None
    found = sorted(((int(m.group(1)), p) for p in Path(output_dir).iterdir()
                    if p.is_dir() and (m := _CHECKPOINT.match(p.name))), reverse=True)  # fmt: skip
    for _, folder in found:
        if is_complete(folder):
            return str(folder)
        logger.warning("skipping %s: it was not completely written (a run stopped while saving it)", folder)
    return None


def _has_arrays(state) -> bool:
    if isinstance(state, dict):
        return set(state) == {"__array__"} or any(_has_arrays(v) for v in state.values())
    return False


def _split_arrays(state, path: str = "") -> tuple[object, dict]:
    """`state` with every numpy array replaced by a reference `{"__array__": name}`, and the arrays by name."""
    if type(state).__module__ == "numpy" and hasattr(state, "shape"):
        return {"__array__": path}, {path: state}
    if isinstance(state, dict):
        out, arrays = {}, {}
        for key, value in state.items():
            out[key], found = _split_arrays(value, f"{path}.{key}" if path else str(key))
            arrays.update(found)
        return out, arrays
    return state, {}


def _join_arrays(state, arrays: dict):
    """Undo [`_split_arrays`]."""
    if isinstance(state, dict):
        if set(state) == {"__array__"}:
            return arrays[state["__array__"]]
        return {key: _join_arrays(value, arrays) for key, value in state.items()}
    return state
