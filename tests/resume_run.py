"""
Train the tiny model with a curriculum, appending one JSON line per generation round to `rounds.jsonl`; used by
tests/test_resume.py in a subprocess that is killed with SIGKILL and then resumed.

    python tests/resume_run.py OUTPUT_DIR [--resume] [--sleep SECONDS]
"""

import argparse
import json
import os
import time

from grpo_curriculum import Stage
from grpo_curriculum.callback import CurriculumCallback
from grpo_curriculum.tasks import build_model, build_tokenizer
from grpo_curriculum.trainer import CurriculumGRPOTrainer
from tests.conftest import grpo_args, indexed_dataset

STAGES = [
    Stage(num_generations=2, temperature=0.7, until_step=5),
    Stage(num_generations=4, temperature=1.1, until_step=9),
    Stage(num_generations=8, temperature=1.3),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    options = parser.parse_args()
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
        args=grpo_args(options.output_dir, max_steps=12, save_strategy="steps", save_steps=2, shuffle_dataset=True),
        train_dataset=indexed_dataset(),
        callbacks=[CurriculumCallback(STAGES)],
    )
    trainer.train(resume_from_checkpoint=True if options.resume else None)


if __name__ == "__main__":
    main()
