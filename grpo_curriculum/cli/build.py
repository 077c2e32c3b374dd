"""Build a run from a validated recipe: the model, tokenizer, datasets and reward functions ([`build_run`]) and the
curriculum trainer around them ([`build_trainer`]), as TRL's `trl grpo` (`trl rloo`) script builds them."""

from __future__ import annotations

from ..config.recipe import BUILTIN, TINY_MODEL
from ..config.trainers import ASYNC
from .launch import launch_geometry


def build_run(recipe, split=None):
    """
    Model (an instance for the built-in tiny model, else a name or path TRL loads), tokenizer, train and eval datasets
    and reward functions for a [`Recipe`], as TRL's `trl grpo` script builds them. `split`, when given, maps the train
    and eval datasets to the ones the run gets, before the built-in model's warm start sees them (`sweep` holds rows
    out of training with it).
    """
    from ..config.environment import BUILTIN_PROMPTS
    from ..config.recipe import import_reward
    from ..demo.tasks import TASKS, build_model, build_tokenizer, warm_start

    rewards = [import_reward(path) for path in recipe.reward_funcs]  # the user's code first: before any model loads
    seed = recipe.training.get("seed", 42)
    evaluates = recipe.training.get("eval_strategy", "no") != "no"
    if recipe.dataset_name.startswith(BUILTIN):
        make_dataset, _ = TASKS[recipe.dataset_name.removeprefix(BUILTIN)]
        dataset = make_dataset(recipe.dataset_num_prompts or BUILTIN_PROMPTS, seed=seed)
        eval_dataset = make_dataset(64, seed=seed + 10_000) if evaluates else None  # another draw
    else:
        from datasets import load_dataset

        splits = load_dataset(recipe.dataset_name, recipe.dataset_config,
                              streaming=recipe.script.get("dataset_streaming", False))  # fmt: skip
        dataset = splits[recipe.dataset_train_split]
        eval_dataset = splits[recipe.script.get("dataset_test_split", "test")] if evaluates else None
        if recipe.dataset_prompt_column != "prompt":
            dataset = dataset.rename_column(recipe.dataset_prompt_column, "prompt")
            if eval_dataset is not None:
                eval_dataset = eval_dataset.rename_column(recipe.dataset_prompt_column, "prompt")
    if split is not None:
        dataset, eval_dataset = split(dataset, eval_dataset)
    if recipe.model_name_or_path == TINY_MODEL:
        model, tokenizer = build_model(seed=seed), build_tokenizer()
        warm_start(model, tokenizer, dataset, steps=recipe.warm_start_steps, seed=seed)
    elif recipe.model_name_or_path.startswith(BUILTIN):  # a pretrained model fetched without the Hub
        from transformers import AutoTokenizer

        from ..demo.models import fetch_model

        model = str(fetch_model(recipe.model_name_or_path.removeprefix(BUILTIN)))  # a path: TRL loads it
        tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left", truncation_side="left")  # as TRL would
    else:
        model, tokenizer = recipe.model_name_or_path, None
    return model, tokenizer, dataset, eval_dataset, rewards


def model_arguments(model_args, args, loads_model: bool) -> dict:
    """
    What `CurriculumGRPOTrainer` gets from the recipe's `ModelConfig` (`model_args`), as TRL's `trl grpo` script routes
    it: `peft_config` (LoRA) and, when TRL loads the model (`loads_model`: a name or path, not an instance), `args`'
    `model_init_kwargs` (revision, trust_remote_code, attn_implementation, dtype; the recipe's own `model_init_kwargs`
    on top) and `quantization_config`.
    """
    from trl import get_peft_config, get_quantization_config

    if not loads_model:
        args.model_init_kwargs = None  # an instance: nothing to load
        return {"peft_config": get_peft_config(model_args)}
    kwargs = {"revision": model_args.model_revision, "trust_remote_code": args.trust_remote_code,
              "attn_implementation": model_args.attn_implementation, "dtype": model_args.dtype}  # fmt: skip
    args.model_init_kwargs = {**kwargs, **(args.model_init_kwargs or {})}
    return {"quantization_config": get_quantization_config(model_args), "peft_config": get_peft_config(model_args)}


def build_trainer(recipe, output_dir: str | None = None, extra_callbacks=(), split=None, async_options=None,
                  **settings):
    """
    `CurriculumGRPOTrainer` (`CurriculumRLOOTrainer` for `trainer: rloo`, `CurriculumAsyncGRPOTrainer` for
    `trainer: async_grpo`) for a validated recipe, its `GRPOConfig` (`RLOOConfig`, `AsyncGRPOConfig`) and
    `ModelConfig` built by TRL's parser (see [`~config.arguments.trl_arguments`]) with `settings` (and `output_dir`,
    when given) on top (`split`: see [`build_run`]; `async_options`: more `AsyncGRPOTrainer` arguments, e.g.
    `weight_transfer`, for `trainer: async_grpo`).
    """
    from ..config.arguments import trl_arguments
    from ..core.curriculum import curriculum_options
    from ..training.callback import CurriculumCallback

    settings.update({"output_dir": output_dir} if output_dir is not None else {})
    args, model_args = trl_arguments(recipe, launch_geometry(recipe), **settings)
    model, tokenizer, dataset, eval_dataset, rewards = build_run(recipe, split)
    if recipe.trainer == ASYNC:
        return _async_trainer(recipe, args, model_args, model, tokenizer, dataset, rewards, extra_callbacks,
                              async_options)
    from ..training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer

    routed = model_arguments(model_args, args, loads_model=isinstance(model, str))
    trainer = CurriculumRLOOTrainer if recipe.trainer == "rloo" else CurriculumGRPOTrainer
    return trainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        callbacks=[CurriculumCallback(recipe.curriculum, **curriculum_options(recipe.raw.get("curriculum") or {})),
                   *extra_callbacks],
        **routed,
    )


def _async_trainer(recipe, args, model_args, model, tokenizer, dataset, rewards, callbacks, options):
    """
    `CurriculumAsyncGRPOTrainer` for a recipe of `trainer: async_grpo`: the model by name (AsyncGRPOTrainer loads it,
    at `args.dtype`, with its own attention), LoRA from `ModelConfig` as `trl grpo` routes it, the curriculum's stages
    when the recipe's `curriculum:` has them (else TRL's loop at the recipe's G and temperature) and its
    `dynamic_sampling` switch (which needs no stages).
    """
    from trl import get_peft_config

    from ..training.async_grpo import CurriculumAsyncGRPOTrainer

    kwargs = {"revision": model_args.model_revision} if model_args.model_revision not in (None, "main") else {}
    args.model_init_kwargs = {**kwargs, **(args.model_init_kwargs or {})} or None
    curriculum = recipe.raw.get("curriculum")
    return CurriculumAsyncGRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        peft_config=get_peft_config(model_args),
        stages=recipe.curriculum if isinstance(curriculum, dict) and "stages" in curriculum else None,
        dynamic_sampling=bool(curriculum and curriculum.get("dynamic_sampling")),
        **(options or {}),
    )
