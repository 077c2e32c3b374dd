"""
The seam, checkpoints: where transformers writes one, the rotation that deletes only this run's, the curriculum's state
written before TRL's trainer state, the trainer state read first on resume, and the micro-step counter a resume
restores. Knows Trainer / GRPOTrainer internals, like the rest of the seam (`training/_trl/`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os

from .settings import unsupported_trl, generation_round_length

def checkpoint_dir(trainer, trial) -> str:
    """The folder `Trainer._save_checkpoint` writes the current checkpoint to."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")


@contextlib.contextmanager
def rotate_only_own_checkpoints(trainer, resume_from_checkpoint):
    """
    While `Trainer.train` runs: transformers' checkpoint rotation (`save_total_limit`, and the end-of-training
    cleanup that keeps only the best checkpoint) deletes only checkpoints of this run. transformers lists every
    `checkpoint-*` folder of `output_dir` (`trainer_utils.sort_checkpoints`; in transformers 4 the method
    `Trainer._sorted_checkpoints`: a glob that also matches e.g. `checkpoint-5-keep`) and deletes the oldest, whoever wrote them; here that list is cut down to the folders this
    trainer wrote (recorded by `GRPOHooks._save_checkpoint`) and, when the run resumes from a checkpoint of
    `output_dir` (its own folder), its earlier `checkpoint-N` folders (exact name, holding a `trainer_state.json` that
    parses and is at step N).
    A checkpoint of another folder, or anything else in `output_dir`, is never a candidate.
    """
    import transformers.trainer as trainer_module
    import transformers.trainer_utils as trainer_utils
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from ..checkpoint import TRAINER_STATE_FILE, read_trainer_state
    from ..files import CurriculumStateError

    output_dir = os.path.realpath(trainer.args.output_dir)
    resumed = resume_from_checkpoint is True or (
        isinstance(resume_from_checkpoint, (str, os.PathLike))
        and os.path.dirname(os.path.realpath(resume_from_checkpoint)) == output_dir
    )
    written = trainer.__dict__.setdefault("_checkpoints_written", set())

    def own(path: str) -> bool:
        real = os.path.realpath(path)
        if real in written:
            return True
        name = os.path.basename(real)
        step = name[len(PREFIX_CHECKPOINT_DIR) + 1 :]
        if not (resumed and os.path.dirname(real) == output_dir and name == f"{PREFIX_CHECKPOINT_DIR}-{step}"
                and step.isdigit()):  # fmt: skip
            return False
        try:  # a checkpoint of the run: its trainer state parses and is at the step it is named after
            return read_trainer_state(os.path.join(real, TRAINER_STATE_FILE))["global_step"] == int(step)
        except CurriculumStateError:
            return False

    def only_own(original, folder_of):
        @functools.wraps(original)
        def sort_own_checkpoints(*args, **kwargs):
            found = original(*args, **kwargs)
            if os.path.realpath(folder_of(args, kwargs)) != output_dir:  # another trainer's (a trial's) folder
                return found
            return [path for path in found if own(path)]

        return sort_own_checkpoints

    original = getattr(trainer_utils, "sort_checkpoints", None)
    if original is not None and original is getattr(trainer_module, "sort_checkpoints", None):  # transformers >= 5
        trainer_utils.sort_checkpoints = trainer_module.sort_checkpoints = only_own(
            original, lambda args, kwargs: kwargs["output_dir"] if "output_dir" in kwargs else args[0])
        try:
            yield
        finally:
            trainer_utils.sort_checkpoints = trainer_module.sort_checkpoints = original
    elif callable(getattr(type(trainer), "_sorted_checkpoints", None)):  # transformers 4.x: a Trainer method
        trainer._sorted_checkpoints = only_own(trainer._sorted_checkpoints,
                                               lambda args, kwargs: kwargs.get("output_dir", args[0] if args else None)
                                               or trainer.args.output_dir)  # fmt: skip
        try:
            yield
        finally:
            del trainer._sorted_checkpoints
    else:
        raise unsupported_trl("limit checkpoint rotation to its own checkpoints (transformers' sort_checkpoints moved)")


def record_checkpoint(trainer, folder: str) -> None:
    """Note a checkpoint folder this trainer writes: [`rotate_only_own_checkpoints`] may rotate it away later."""
    trainer.__dict__.setdefault("_checkpoints_written", set()).add(os.path.realpath(folder))


@contextlib.contextmanager
def curriculum_state_before_trainer_state(trainer, folder: str, save):
    """
    While `Trainer._save_checkpoint` runs: when it writes the checkpoint's `trainer_state.json` (after the model,
    optimizer and RNG states, before rotating old checkpoints away), call `save(folder)` first, write TRL's
    `entropy_ctrl_state.json` (adaptive entropy only; TRL's own later write is skipped), the checkpoint's manifest
    ([`~training.manifest`]: each file's size and content hash) and the trainer state atomically. A checkpoint whose `trainer_state.json` parses is then complete, curriculum and entropy state
    included, and no older checkpoint is deleted before it is.
    """
    from ..checkpoint import ENTROPY_STATE_FILE
    from ..files import atomic_json
    from ..manifest import write_manifest

    state = trainer.state
    target = os.path.abspath(os.path.join(folder, "trainer_state.json"))
    saved = []
    entropy = uses_entropy_state(trainer)

    def save_curriculum_and_entropy() -> None:
        save(folder)
        if entropy:  # TRL writes it after the checkpoint is complete and old ones are rotated away, not atomically
            atomic_json(os.path.join(folder, ENTROPY_STATE_FILE), {"entropy_coef": trainer.entropy_coef,
                                                                   "last_world_entropy": trainer._last_world_entropy})
        write_manifest(folder)  # the last before the trainer state: every file it covers is written

    def save_to_json(json_path: str) -> None:
        if os.path.abspath(json_path) != target:
            return type(state).save_to_json(state, json_path)
        save_curriculum_and_entropy()
        saved.append(json_path)
        atomic_json(json_path, dataclasses.asdict(state))

    state.save_to_json = save_to_json
    if entropy:
        trainer.use_adaptive_entropy = False  # read by `GRPOTrainer._save_checkpoint` only: its own write is skipped
    try:
        yield
    finally:
        del state.save_to_json
        if entropy:
            trainer.use_adaptive_entropy = True
    if not saved:  # a transformers version that writes the trainer state elsewhere: never lose the curriculum's
        save_curriculum_and_entropy()


def load_trainer_state_first(trainer, checkpoint: str) -> None:
    """
    Make `trainer.state` the checkpoint's before the curriculum state is read. transformers 5 loads the trainer state
    before the optimizer (whose loading the resume hook follows); transformers 4.57 loads it after, so at that point
    the state is still the fresh one (step 0): it is loaded here, and transformers loads the same file again after.
    """
    from transformers import TrainerState

    from ..checkpoint import TRAINER_STATE_FILE

    path = os.path.join(checkpoint, TRAINER_STATE_FILE)
    if trainer.state.global_step == 0 and os.path.isfile(path):
        trainer.state = TrainerState.load_from_json(path)


def uses_entropy_state(trainer) -> bool:
    """Whether TRL's adaptive entropy controller is on: its checkpoints then need `entropy_ctrl_state.json`."""
    return bool(getattr(trainer, "use_adaptive_entropy", False))


def micro_step(trainer) -> int:
    """TRL's count of `training_step` calls, which decides when a new round is generated."""
    return trainer._step


def restore_micro_step(trainer, value: int) -> None:
    """Put TRL's micro-step counter back, so rounds keep their phase after a resume (TRL restarts it at 0)."""
    trainer._step = value
    trainer._buffered_inputs = None  # forces a (re)generation at the first micro-step


def round_in_progress(trainer) -> bool:
    """Whether the next micro-step continues a round rather than starting one."""
    return trainer._step % generation_round_length(trainer) != 0
