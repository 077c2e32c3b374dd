"""
The arguments of `grpo-curriculum train`, parsed by TRL's own [`~trl.TrlParser`] as `trl grpo --config RECIPE --key
value ...` parses them (with `RLOOConfig` instead of `GRPOConfig` for a recipe's `trainer: rloo`, as `trl rloo` would;
with `AsyncGRPOConfig` for `trainer: async_grpo`, whose `dtype` is the one `ModelConfig` would otherwise take):
the recipe's keys are the defaults, each override is read by its field's type (`--max_steps 10`
an integer, `--use_peft` true, `--save_strategy no` a string, `--lora_target_modules q_proj v_proj` a list). Before any
config is built, [`~config.recipe.load_recipe`] (what `grpo-curriculum check` runs) names every problem at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from trl import GRPOConfig, ModelConfig, TrlParser
from trl.scripts.grpo import GRPOScriptArguments

from ..core.errors import MISSING, CurriculumError, Problem
from ..core.geometry import BatchGeometry
from .recipe import Recipe, starting_num_generations
from .trl_fields import TRAINERS, config_class, field_name, trl_fields


@dataclass
class RecipeArguments(GRPOScriptArguments):
    """
    `trl grpo`'s script arguments plus the recipe's own keys (see [`~config.recipe`]).

    Args:
        num_processes (`int`, *optional*): World size the recipe was written for.
        dataset_num_prompts (`int`, *optional*): Prompts of a built-in dataset (default 256).
        dataset_prompt_column (`str`, *optional*, defaults to `"prompt"`): Dataset column holding the prompt.
        warm_start_steps (`int`, *optional*, defaults to `0`): Supervised steps of the built-in model before RL.
        trainer (`str`, *optional*, defaults to `"grpo"`): `grpo`, `rloo` or `async_grpo` (checked with the recipe,
            see [`~config.trainers`]).
    """

    num_processes: int | None = field(default=None, metadata={"help": "World size the recipe was written for."})
    dataset_num_prompts: int | None = field(default=None, metadata={"help": "Prompts of a built-in dataset."})
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "Dataset column holding the prompt."})
    warm_start_steps: int = field(default=0, metadata={"help": "Supervised steps of `builtin:tiny` before RL."})
    trainer: str = field(default="grpo", metadata={"help": "`grpo` (GRPOTrainer), `rloo` (RLOOTrainer) or "
                                                           "`async_grpo` (AsyncGRPOTrainer)."})


@dataclass
class CurriculumArguments:
    """The recipe's `curriculum:` mapping (see [`~core.curriculum.load_curriculum`])."""

    curriculum: dict | None = field(default=None, metadata={"help": "`stages:` and options (recipe file only)."})


@functools.cache
def model_config(trainer: str = "grpo") -> type:
    """
    `ModelConfig`, or for a trainer whose config class has fields of the same name (`AsyncGRPOConfig.dtype`, which
    `AsyncGRPOTrainer` loads the model with) a copy of it without them: one `--dtype` for the parser, the trainer's.
    """
    config = config_class(TRAINERS[trainer])
    shared = {f.name for f in dataclasses.fields(config)} & {f.name for f in dataclasses.fields(ModelConfig)}
    if not shared:
        return ModelConfig
    kept = [(f.name, f.type, field(default=f.default, default_factory=f.default_factory, metadata=f.metadata))
            for f in dataclasses.fields(ModelConfig) if f.name not in shared]
    return dataclasses.make_dataclass("ModelConfig", kept)


class RecipeParser(TrlParser):
    """
    A [`~trl.TrlParser`] for `grpo-curriculum train` whose usage errors are [`CurriculumError`]s, reading the training
    keys as fields of `trainer`'s config class ([`~config.trl_fields.TRAINERS`]: `GRPOConfig`, `RLOOConfig`,
    `AsyncGRPOConfig`).
    """

    def __init__(self, trainer: str = "grpo"):
        super().__init__((RecipeArguments, config_class(TRAINERS[trainer]), model_config(trainer),
                          CurriculumArguments), prog="grpo-curriculum train RECIPE")
        for action in self._actions:  # `tuple[float, float]`: HfArgumentParser would read one string's characters
            if action.dest == "reward_clip_range":
                action.nargs, action.type = 2, float

    def error(self, message: str):
        raise CurriculumError([Problem("command line", MISSING, message, "write overrides as on `trl grpo`'s "
                                       "command line, e.g. `--max_steps 10 --report_to none`")])

    def overrides(self, args: list[str]) -> dict:
        """
        The settings the command-line `args` give, read as `trl grpo` reads them; an unknown `--key` is kept (its
        value as text) for the recipe check to name it, with the closest key.

        Raises:
            [`CurriculumError`]: for a value its field's type refuses, or a token that is not `--key` or its value.
        """
        unset = object()
        namespace = argparse.Namespace(**{action.dest: unset for action in self._actions})
        namespace, rest = self.parse_known_args(args, namespace)
        given = {name: value for name, value in vars(namespace).items() if value is not unset}
        if str(given.get("resume_from_checkpoint")).lower() in ("true", "false"):  # as in a recipe: the newest one
            given["resume_from_checkpoint"] = given["resume_from_checkpoint"].lower() == "true"
        i = 0
        while i < len(rest):
            key, equals, text = rest[i].partition("=")
            if not key.startswith("--") or key == "--":
                self.error(f"{rest[i]!r} must be `--key value` after the recipe")
            if not equals and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                text, i = rest[i + 1], i + 1
            given[key[2:].replace("-", "_")] = text if equals or text else MISSING
            i += 1
        return given


def command_line_overrides(args: list[str], data) -> dict:
    """
    [`RecipeParser.overrides`] of `args`, read with the config class of the trainer they (`--trainer`) or else the
    recipe mapping `data` name (an invalid one, or one the installed TRL lacks: `GRPOConfig`'s, and the recipe check
    names it).
    """
    trainer = data.get("trainer") if isinstance(data, Mapping) else None
    for i, token in enumerate(args):
        key, equals, text = token.partition("=")
        if key == "--trainer":
            trainer = text if equals else args[i + 1] if i + 1 < len(args) else None
    known = isinstance(trainer, str) and trainer in TRAINERS and config_class(TRAINERS[trainer]) is not None
    return RecipeParser(trainer if known else "grpo").overrides(args)  # (TRL 1.14: no AsyncGRPOConfig, said later)


def trl_arguments(recipe: Recipe, geometry: BatchGeometry, **settings) -> tuple[GRPOConfig, ModelConfig]:
    """
    The `GRPOConfig` (`RLOOConfig` for `trainer: rloo`) and `ModelConfig` of a validated recipe (`settings` on top),
    as [`~trl.TrlParser`] builds them for `trl grpo --config`. `num_generations` and `temperature` are the
    curriculum's first ones (see [`~config.recipe.starting_num_generations`] for a per-prompt first stage on
    `geometry`).
    Activation checkpointing, on by TRL's default, is set under the installed transformers' name (from 5.23:
    `activation_checkpointing`, no FutureWarning; before: `gradient_checkpointing`).

    Raises:
        [`CurriculumError`]: naming the recipe and TRL's message, for a setting TRL's config classes refuse.
    """
    config = {**recipe.raw, **recipe.training, **settings}
    if "gradient_checkpointing" not in config:
        config.setdefault(field_name("activation_checkpointing", trl_fields(recipe.trainer)), True)
    config["num_generations"] = starting_num_generations(recipe, geometry)
    config["temperature"] = recipe.curriculum.stages[0].temperature_at(0.0)
    parser = RecipeParser(recipe.trainer)
    parser.set_defaults_with_config(**config)
    try:
        _, training_args, model_args, _ = parser.parse_args_into_dataclasses([])
    except ValueError as error:  # a check of TRL's or transformers' own (e.g. `auto_find_batch_size`)
        raise CurriculumError([Problem(recipe.path or "recipe", MISSING, f"is refused by TRL's config: {error}",
                                       "change the setting TRL names")], f"recipe {recipe.path}") from None
    return training_args, model_args
