"""
The preflight `check` and `train` both run on a recipe, before any model loads or any folder is written: what the
recipe text alone cannot show, said as one verdict with every problem listed (key, value, rule, fix).

- **The dataset**: read as `train` reads it ([`~cli.preflight_data`]: the same `datasets.load_dataset` call, every
  split built; the built-in ones built), then each split `train` reads (the train split, and the eval split when the
  run evaluates) scanned at the Arrow level: the prompt column (`dataset_prompt_column`; a hint to set it when
  `prompt` is missing) and its rename, that the split holds rows, that every prompt is a non-empty string or a
  conversation (a list of `{role, content}` messages), valid UTF-8, a train split large enough for a generation round,
  and for a conversation a chat template in the model's tokenizer (loaded without the model where it is local or
  cached). A file `datasets` cannot read is named; a Hub dataset on an offline machine is named as such.
- **The reward functions**: each imported, then called once, as TRL calls it, on the first rows with stand-in
  completions ([`STAND_INS`]); what it returns must be one finite number or `None` per completion
  ([`~core.reward_output.reward_output_problem`]; a dict, a float, strings, the wrong length, NaN everywhere are
  refused), and it must not raise or call `sys.exit`.
- **`trainer: async_grpo`**: the prompts must be conversations (TRL's rollout worker applies the chat template to
  each prompt's messages).
- **`generation_kwargs`**: built into transformers' `GenerationConfig` as TRL builds it (sampling on), so a value
  transformers refuses (`max_new_tokens: -3`) is named now, not at step 1. (With vLLM they go to vLLM's sampling
  parameters instead, which are not checked here.)

Cheap: no model forward pass; the dataset built once (the cache `train` reuses) and its prompt column scanned, a few
calls of each reward function. Reward code runs here (and may print): it is the code `train` would run.
"""

from __future__ import annotations

import inspect
import os
import traceback
from types import SimpleNamespace

from ..config.recipe import BUILTIN, TINY_MODEL, import_reward
from ..core.errors import CurriculumError, Problem, shorten
from ..core.reward_output import reward_output_problem
from .preflight_data import is_conversation, load_problem, quiet_datasets, shorten_message, split_problems

ROWS = 2  # dataset rows the reward functions are called on
STAND_INS = ("", "42")  # completions of each row: an empty one (a model may stop at once) and a short answer


def preflight_problems(recipe) -> list[Problem]:
    """Every problem the preflight finds in `recipe` (see the module docstring); `[]` when it is ready to train."""
    problems = generation_kwargs_problems(recipe)
    rows, found = dataset_rows(recipe)
    problems += found
    if rows and recipe.trainer == "async_grpo" and not _is_conversation(rows[0]["prompt"]):
        problems.append(Problem(
            "dataset_prompt_column", recipe.dataset_prompt_column, f"holds text prompts in dataset "
            f"{recipe.dataset_name} ({shorten(rows[0]['prompt'])}), and `trainer: async_grpo` takes conversations: "
            "TRL's rollout worker renders each prompt's messages with the tokenizer's chat template (a string would "
            "be read as a list of characters)", "give the prompts as lists of {role, content} messages (e.g. "
            "`[{role: user, content: ...}]`), or use `trainer: grpo`"))  # fmt: skip
        rows = None
    rewards = []
    for i, path in enumerate(recipe.reward_funcs):
        try:
            rewards.append((path, import_reward(path, f"reward_funcs[{i}]" if len(recipe.reward_funcs) > 1 else
                                                "reward_funcs")))
        except CurriculumError as error:
            problems += error.problems
    if rows:
        for path, func in rewards:
            problem = reward_call_problem(path, func, rows)
            problems += [problem] if problem else []
    return problems


def generation_kwargs_problems(recipe) -> list[Problem]:
    """`generation_kwargs` transformers' `GenerationConfig` refuses, built with sampling on as TRL builds it."""
    kwargs = recipe.training.get("generation_kwargs")
    if not isinstance(kwargs, dict) or not kwargs or recipe.training.get("use_vllm"):
        return []
    import warnings

    from transformers import GenerationConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            GenerationConfig(do_sample=True, **kwargs).validate()
    except (ValueError, TypeError) as error:
        return [Problem("generation_kwargs", kwargs, "is refused by transformers' GenerationConfig (TRL builds the "
                        f"generation config from it): {str(error).strip().splitlines()[0]}",
                        "fix or remove that key of `generation_kwargs` (transformers' GenerationConfig documents "
                        "each)")]  # fmt: skip
    return []


def dataset_rows(recipe) -> tuple[list[dict] | None, list[Problem]]:
    """The first [`ROWS`] rows of the train split, the prompt column renamed `prompt` as `train` renames it (`None`
    when the dataset cannot be read), and the problems found in the dataset (read as `train` reads it: see
    [`~cli.preflight_data`])."""
    if recipe.dataset_name.startswith(BUILTIN):
        from ..demo.tasks import TASKS

        make_dataset, _ = TASKS[recipe.dataset_name.removeprefix(BUILTIN)]
        return [dict(row) for row in make_dataset(ROWS, seed=0)], []  # the package's own: nothing to check
    splits, problem = _load(recipe)
    if problem is not None:
        return None, [problem]
    problems = split_problems(recipe, splits, _offline())
    if problems:
        return None, problems
    column, dataset = recipe.dataset_prompt_column, splits[recipe.dataset_train_split]
    rows = [dict(row) for row in (dataset.take(ROWS) if not hasattr(dataset, "num_rows") else
                                  dataset.select(range(min(ROWS, dataset.num_rows))))]  # fmt: skip
    if _is_conversation(rows[0][column]):
        problems += _chat_template_problems(recipe)
    if column != "prompt":
        rows = [{**{k: v for k, v in row.items() if k != column}, "prompt": row[column]} for row in rows]
    return (rows if not problems else None), problems


def _load(recipe):
    """`load_dataset` as `train` calls it (every split built, unless the recipe streams it): `(splits, None)` or
    `(None, the problem)`."""
    from datasets import load_dataset

    try:
        with quiet_datasets():
            return load_dataset(recipe.dataset_name, recipe.dataset_config,
                                streaming=recipe.script.get("dataset_streaming", False)), None  # fmt: skip
    except Exception as error:  # noqa: BLE001 - datasets raises many kinds: each named with its message
        return None, load_problem(recipe, error, _offline())


def _offline() -> bool:
    return any(os.environ.get(key, "").upper() in ("1", "ON", "YES", "TRUE")
               for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


_is_conversation = is_conversation


def _chat_template_problems(recipe) -> list[Problem]:
    """Conversational prompts need a chat template: the tokenizer's, loaded without the model where it can be."""
    model = recipe.model_name_or_path
    if model == TINY_MODEL:
        template = None
    elif model.startswith(BUILTIN):
        return []  # the pretrained built-in models are chat models with templates
    else:
        try:
            from transformers import AutoTokenizer

            template = AutoTokenizer.from_pretrained(model, local_files_only=_offline()).chat_template
        except Exception:  # noqa: BLE001 - not reachable now: the model's own load says why, after this preflight
            return []
    if template:
        return []
    return [Problem("dataset_prompt_column", recipe.dataset_prompt_column, "holds conversations (lists of messages), "
                    f"and the tokenizer of {model} has no chat template to turn them into text",
                    "use a chat model (one with a chat template), or give the prompts as plain text")]


def reward_call_problem(path: str, func, rows: list[dict]) -> Problem | None:
    """Call `func` once as TRL calls it, on `rows` with each of [`STAND_INS`], and check what it returns."""
    conversational = _is_conversation(rows[0]["prompt"])
    prompts = [row["prompt"] for row in rows for _ in STAND_INS]
    completions = [[{"role": "assistant", "content": text}] if conversational else text
                   for _ in rows for text in STAND_INS]  # fmt: skip
    kwargs = {key: [row[key] for row in rows for _ in STAND_INS] for key in rows[0]
              if key not in ("prompt", "completion", "completion_ids")}
    kwargs.update(trainer_state=SimpleNamespace(global_step=0, epoch=0.0, max_steps=0, log_history=[]),
                  log_extra=lambda *args, **kw: None, log_metric=lambda *args, **kw: None)
    name = getattr(func, "__name__", path)
    where = f"rows 0-{len(rows) - 1} of the train split with the stand-in completions {list(STAND_INS)}"
    try:
        output = func(prompts=prompts, completions=completions, completion_ids=[[] for _ in completions], **kwargs)
        if inspect.isawaitable(output):
            import asyncio

            output = asyncio.run(output)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - user code: anything it raises is named
        frames = traceback.extract_tb(error.__traceback__)
        at = f" ({frames[-1].filename}, line {frames[-1].lineno})" if len(frames) > 1 else ""
        what = (f"called sys.exit({error.code!r})" if isinstance(error, SystemExit) else
                f"raised {type(error).__name__}: {shorten_message(str(error), 200)}")
        return Problem(f"reward function {name}", path, f"{what}{at} when called on {where}: `train` would stop at "
                       "its first call", f"fix {name}: it must return one reward per completion (None for one it "
                       "cannot score), for any completion the model may write")
    return reward_output_problem(name, output, len(completions))


def run_preflight(recipe) -> None:
    """Raise one [`CurriculumError`] listing every problem [`preflight_problems`] finds."""
    problems = preflight_problems(recipe)
    if problems:
        raise CurriculumError(problems, context=f"recipe {recipe.path}: preflight")

