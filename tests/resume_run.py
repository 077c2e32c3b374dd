"""
Train the tiny model with a curriculum, appending one JSON line per generation round to `rounds.jsonl`; used by
tests/test_resume.py in a subprocess that is killed with SIGKILL and then resumed, and in the test process for the
reference run that never stopped (`main([OUTPUT_DIR])`).

    python tests/resume_run.py OUTPUT_DIR [--resume] [--sleep SECONDS] [--kill-at POINT:STEP] [--save-total-limit N]

`--kill-at` sends SIGKILL to this process at a point of writing checkpoint-STEP: `after-model` (the model is written,
nothing else), `after-curriculum` (model, optimizer, RNG and curriculum state written, not `trainer_state.json`) or
`before-rotation` (the checkpoint is complete, older ones not rotated away yet).
"""

import argparse
import json
import os
import signal
import time

import transformers.trainer

from grpo_curriculum import Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.demo.tasks import build_model, build_tokenizer
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer
from tests.conftest import grpo_args, indexed_dataset

STAGES = [
    Stage(num_generations=2, temperature=0.7, until_step=5),
    Stage(num_generations=4, temperature=1.1, until_step=9),
    Stage(num_generations=8, temperature=1.3),
]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--kill-at")
    parser.add_argument("--save-total-limit", type=int)
    options = parser.parse_args(argv)
    log = open(os.path.join(options.output_dir, "rounds.jsonl"), "a")
    trainer = None

    def reward(prompts, completions, idx, trainer_state, **kwargs):
        log.write(json.dumps({"step": trainer_state.global_step, "G": trainer.num_generations,
                              "T": trainer.temperature, "idx": list(idx), "pid": os.getpid()}) + "\n")  # fmt: skip
        log.flush()
        time.sleep(options.sleep)
        return [float(i) for i in idx]

    trainer = CurriculumGRPOTrainer(
        model=build_model(),
        processing_class=build_tokenizer(),
        reward_funcs=reward,
        args=grpo_args(options.output_dir, max_steps=12, save_strategy="steps", save_steps=2, shuffle_dataset=True,
                       save_total_limit=options.save_total_limit),
        train_dataset=indexed_dataset(),
        callbacks=[CurriculumCallback(STAGES)],
    )
    if options.kill_at:
        kill_at(trainer, *options.kill_at.split(":"))
    trainer.train(resume_from_checkpoint=True if options.resume else None)
    log.close()


def kill_at(trainer, point: str, step: str) -> None:
    """SIGKILL this process at `point` of writing checkpoint-`step`."""

    def kill_around(owner, name, before: bool = False):
        original = getattr(owner, name)

        def call(*args, **kwargs):
            if before and trainer.state.global_step == int(step):
                os.kill(os.getpid(), signal.SIGKILL)
            result = original(*args, **kwargs)
            if not before and trainer.state.global_step == int(step):
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(owner, name, call)

    if point == "after-model":
        kill_around(trainer, "save_model")
    elif point == "after-curriculum":
        kill_around(trainer, "_curriculum_save")
    elif point == "before-rotation":
        kill_around(transformers.trainer, "rotate_checkpoints", before=True)
    else:
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    main()
