"""A TRL GRPO script on the tiny built-in model and task (runs anywhere on CPU, from any directory), in two versions:

    python examples/grpo_plain.py            # plain trl.GRPOTrainer
    python examples/grpo_with_curriculum.py  # the same script driven by recipes/demo.yaml's curriculum

The two files differ in two lines: the trainer import and the `callbacks=[...]` argument. INFO logs are on, so the
curriculum version prints its stages and each switch (step, G and temperature before and after, reason).
"""

import argparse
import logging
from pathlib import Path

from trl import GRPOConfig
from grpo_curriculum import CurriculumCallback, CurriculumGRPOTrainer as GRPOTrainer

from grpo_curriculum.demo.tasks import build_model, build_tokenizer, echo_dataset, echo_reward

ROOT = Path(__file__).resolve().parent.parent  # the repository: recipes/ and runs/ whatever the current directory
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=40)
parser.add_argument("--output-dir", default=str(ROOT / "runs" / "example"))
cli = parser.parse_args()

args = GRPOConfig(
    output_dir=cli.output_dir,
    per_device_train_batch_size=16,
    num_generations=2,
    max_completion_length=4,
    learning_rate=1e-2,
    max_steps=cli.max_steps,
    logging_steps=10,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    bf16=False,
    activation_checkpointing=False,  # TRL turns it on by default; a tiny model needs no memory savings
)
trainer = GRPOTrainer(
    model=build_model(),
    processing_class=build_tokenizer(),
    reward_funcs=echo_reward,
    args=args,
    train_dataset=echo_dataset(256), callbacks=[CurriculumCallback.from_yaml(ROOT / "recipes" / "demo.yaml")],
)
trainer.train()
