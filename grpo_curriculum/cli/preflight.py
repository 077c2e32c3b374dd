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
- **The reward functions**: each imported, then called once, as TRL's `_calculate_rewards` calls it, on the first rows
  (every column but the prompt's, by name) with stand-in completions ([`STAND_INS`]), their `completion_ids` (the
  model's tokenizer's ids and its end-of-sequence token, [`stand_in_ids`]) and `trainer_state` a
  `transformers.TrainerState` as the trainer holds it at step 0 ([`stand_in_state`]); an `async def` function (or a
  callable whose `__call__` is one) is awaited, as TRL awaits it, and no other. What it returns must be one finite
  number or `None` per completion ([`~core.reward_output.reward_output_problem`]; a dict, a float, strings, the wrong
  length, NaN everywhere are refused), and it must not raise or call `sys.exit`. The call is a real one: what the
  function logs or counts by itself (its own step counter, its own random numbers) sees one call more than training
  makes.
- **`trainer: async_grpo`**: the prompts must be conversations (TRL's rollout worker applies the chat template to
  each prompt's messages).
- **`generation_kwargs`**: built into transformers' `GenerationConfig` as TRL builds it (sampling on), so a value
  transformers refuses (`max_new_tokens: -3`) is named now, not at step 1. (With vLLM they go to vLLM's sampling
  parameters instead, which are not checked here.)

Cheap: no model forward pass; the dataset built once (the cache `train` reuses) and its prompt column scanned, a few
calls of each reward function. Reward code runs here (and may print): it is the code `train` would run.

Bounded and talkative ([`Limit`]): the dataset's load, the tokenizer's and each reward function's call run under a
time limit (`--preflight-timeout SECONDS`, else `$GRPO_CURRICULUM_PREFLIGHT_TIMEOUT`, else [`DEFAULT_TIMEOUT`]), each
announced by a line on standard error; one that runs out is a problem naming it, the limit and the fixes. Ctrl-C
ends the command with status 130 and one line ([`PreflightInterrupted`]).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import signal
import sys
import threading
import traceback

from ..config.recipe import BUILTIN, TINY_MODEL, import_reward, run_geometry, starting_num_generations
from ..config.trainers import ASYNC
from ..config.trl_fields import trl_fields
from ..core.errors import MISSING, CurriculumError, Problem, shorten
from ..core.reward_output import reward_output_problem
from .preflight_data import is_conversation, load_problem, quiet_datasets, shorten_message, split_problems

ROWS = 2  # dataset rows the reward functions are called on
STAND_INS = ("", "42")  # completions of each row: an empty one (a model may stop at once) and a short answer
END_STAND_IN = 0  # the end-of-sequence id of the stand-in completion ids where the model's tokenizer cannot be loaded


DEFAULT_TIMEOUT = 60.0  # seconds: the longest the dataset's load or one reward function's call may take
TIMEOUT_ENV = "GRPO_CURRICULUM_PREFLIGHT_TIMEOUT"
GRACE = 3.0  # seconds a call that ran out gets to give way to the interrupt before the process ends (exit 2)
RAISE_LIMIT = (f"raise the limit (`--preflight-timeout SECONDS`, or {TIMEOUT_ENV}=SECONDS for any command), or skip "
               "the preflight with `--no-preflight`")


class _OutOfTime(BaseException):
    """Raised in the main thread by [`Limit`] at the deadline: a `BaseException`, so user code's `except Exception`
    does not swallow it."""


class PreflightInterrupted(KeyboardInterrupt):
    """Ctrl-C during the preflight: the command ends with status 130 and this one line (what the preflight was
    doing), no traceback."""


class Limit:
    """
    The preflight's time limit and progress lines.

    Args:
        seconds (`float`, *optional*, defaults to [`DEFAULT_TIMEOUT`]): The longest one part (the dataset's load, the
            tokenizer's, one reward function's call) may take.
        command (`str`, *optional*): The command, for its lines (`grpo-curriculum check: preflight: ...`).
    """

    def __init__(self, seconds: float = DEFAULT_TIMEOUT, command: str | None = None):
        self.seconds, self.command, self.doing = seconds, command, None
        self.prefix = f"grpo-curriculum {command}: " if command else "grpo-curriculum: "

    def run(self, doing: str, call, out_of_time: Problem, context: str | None = None):
        """
        `call()`, in this thread (TRL calls a reward function in the main thread: one that times itself with
        `signal.alarm` works only there), announced by a line `preflight: DOING (limit N s) ...` on standard error.

        At the deadline a watchdog thread interrupts the main thread with SIGINT (a blocking `sleep`, socket read or
        `wait` gives way: Python runs the handler, which raises [`_OutOfTime`] there); a call that does not give way
        within [`GRACE`] seconds (C code that never returns to Python, a handler that swallows the interrupt) gets
        `out_of_time` printed and the process ended with status 2, the thread not waited for.

        Returns:
            `tuple`: `(what call returned, None)`, or `(None, out_of_time)` when it ran out of time.
        """
        self.doing = doing
        if os.environ.get("RANK", "0") == "0":
            print(f"{self.prefix}preflight: {doing} (limit {self.seconds:g} s) ...", file=sys.stderr, flush=True)
        if threading.current_thread() is not threading.main_thread():  # no signal handler here: no limit
            return call(), None
        done, fired, previous = threading.Event(), [], signal.getsignal(signal.SIGINT)

        def interrupted(signum, frame):
            if fired and not done.is_set():
                raise _OutOfTime
            if callable(previous):
                return previous(signum, frame)
            if previous != signal.SIG_IGN:
                raise KeyboardInterrupt

        def watch():
            if done.wait(self.seconds):
                return
            fired.append(True)
            if hasattr(signal, "pthread_kill"):
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            else:  # Windows: the handler runs at the next bytecode; a blocking call is not interrupted
                import _thread

                _thread.interrupt_main()
            if not done.wait(GRACE):
                error = CurriculumError([out_of_time], context)
                print(f"{self.prefix}error: {error} (it did not give way to the interrupt: the process ends)",
                      file=sys.stderr, flush=True)  # fmt: skip
                os._exit(2)

        signal.signal(signal.SIGINT, interrupted)
        threading.Thread(target=watch, name="grpo-curriculum preflight limit", daemon=True).start()
        try:
            try:
                return call(), None
            finally:
                done.set()
                signal.signal(signal.SIGINT, previous)
        except _OutOfTime:  # (also when it came as the call returned, at the deadline)
            done.set()
            signal.signal(signal.SIGINT, previous)
            return None, out_of_time


def parse_timeout(text, key: str = "--preflight-timeout") -> float:
    """`--preflight-timeout`'s value (or [`TIMEOUT_ENV`]'s, `key`): a positive finite number of seconds.

    Raises:
        [`CurriculumError`]: naming `key`, for anything else.
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise CurriculumError([Problem(key, MISSING if text is None else text, "must be a positive number of seconds: "
                                       "the longest the preflight waits for the dataset's load or one reward "
                                       "function's call", "e.g. `--preflight-timeout 300`; `--no-preflight` skips the "
                                       "preflight")], "command line")  # fmt: skip
    return value


def preflight_problems(recipe, limit: Limit | None = None) -> list[Problem]:
    """Every problem the preflight finds in `recipe` (see the module docstring); `[]` when it is ready to train.
    `limit`: the time limit of each part, and its progress lines (default: [`Limit`]'s)."""
    limit = limit or Limit()
    problems = generation_kwargs_problems(recipe)
    rows, found, num_rows = dataset_rows(recipe, limit)
    tokenizer = None
    if rows:
        tokenizer, more = stand_in_tokenizer(recipe, limit)
        found += more
    if rows and _is_conversation(rows[0]["prompt"]):
        found += _chat_template_problems(recipe, tokenizer)
    problems, rows = problems + found, None if found else rows  # a dataset with problems: no rewards called on it
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
    if rows and rewards:
        state = stand_in_state(recipe, num_rows)
        state.num_input_tokens_seen = stand_in_tokens(rows, tokenizer)
        for path, func in rewards:
            problem = reward_call_problem(path, func, rows, state, tokenizer, limit)
            problems += [problem] if problem else []
    return problems


GENERATE_REFUSES = {
    "num_return_sequences": ("must not be set: TRL's generate call samples one completion a prompt row (it repeats "
                             "each prompt num_generations times), so more sequences would break its grouping",
                             "remove it; set `num_generations` (or a stage's G) for more completions a prompt"),
    "stop_strings": ("is not supported by TRL's generate call: transformers needs the tokenizer passed to `generate` "
                     "for stop strings, and TRL does not pass it (the run stops at its first step)",
                     "remove it (end completions with the tokenizer's end-of-sequence token), or use vLLM (`use_vllm: "
                     "true`, whose `generation_kwargs` go to its sampling parameters)"),
}
"""`generation_kwargs` keys `GenerationConfig` takes but TRL's transformers generation cannot run with."""


def generation_kwargs_problems(recipe) -> list[Problem]:
    """`generation_kwargs` TRL cannot generate with: a key transformers' `GenerationConfig` does not know (it keeps
    it and ignores it), one TRL's generate call cannot run with ([`GENERATE_REFUSES`]), or values `GenerationConfig`
    refuses, built with sampling on as TRL builds it."""
    kwargs = recipe.training.get("generation_kwargs")
    if not isinstance(kwargs, dict) or not kwargs or recipe.training.get("use_vllm"):
        return []
    import difflib
    import warnings

    from transformers import GenerationConfig

    known = set(GenerationConfig().to_dict())
    problems = []
    for key in kwargs:
        if key in GENERATE_REFUSES and kwargs[key] not in (None, 1, []):
            rule, fix = GENERATE_REFUSES[key]
            problems.append(Problem(f"generation_kwargs.{key}", kwargs[key], rule, fix))
        elif key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            problems.append(Problem(f"generation_kwargs.{key}", kwargs[key], "is not a generation setting "
                                    "transformers' GenerationConfig knows: it would be kept and ignored",
                                    f"did you mean `{close[0]}`?" if close else "remove it (transformers' "
                                    "GenerationConfig documents each setting)"))  # fmt: skip
    if problems:
        return problems
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


def dataset_rows(recipe, limit: Limit | None = None) -> tuple[list[dict] | None, list[Problem], int | None]:
    """The first [`ROWS`] rows of the train split, the prompt column renamed `prompt` as `train` renames it (`None`
    when the dataset cannot be read or holds a problem), the problems found in the dataset (read as `train` reads it,
    under `limit`: see [`~cli.preflight_data`]), and the number of rows of the train split (`None` for a streamed
    split whose card records no size: it is known only once read whole)."""
    if recipe.dataset_name.startswith(BUILTIN):
        from ..config.environment import BUILTIN_PROMPTS
        from ..demo.tasks import TASKS

        make_dataset, _ = TASKS[recipe.dataset_name.removeprefix(BUILTIN)]
        rows = [dict(row) for row in make_dataset(ROWS, seed=0)]  # the package's own: nothing to check
        return rows, [], recipe.dataset_num_prompts or BUILTIN_PROMPTS
    import datasets  # noqa: F401 - imported before the clock starts: the limit is the load's

    limit = limit or Limit()
    out_of_time = Problem("dataset_name", recipe.dataset_name, f"did not load within {limit.seconds:g} s (the "
                          "preflight's limit for loading and scanning it as `train` builds it: a large Hub dataset "
                          "downloading, a Hub that accepts and never answers, a slow network or file system)",
                          f"use a local copy, or HF_HUB_OFFLINE=1 to read the cache; or {RAISE_LIMIT}")
    read, problem = limit.run(f"loading dataset {recipe.dataset_name}", lambda: _read(recipe), out_of_time,
                              f"recipe {recipe.path}: preflight")  # fmt: skip
    if problem is not None:
        return None, [problem], None
    splits, problems = read
    if problems:
        return None, problems, None
    column, split = recipe.dataset_prompt_column, recipe.dataset_train_split
    dataset = splits[split]
    streamed = not hasattr(dataset, "num_rows")
    rows = [dict(row) for row in (dataset.take(ROWS) if streamed else
                                  dataset.select(range(min(ROWS, dataset.num_rows))))]  # fmt: skip
    if column != "prompt":
        rows = [{**{k: v for k, v in row.items() if k != column}, "prompt": row[column]} for row in rows]
    return rows, [], _split_size(dataset, split) if streamed else dataset.num_rows


def _read(recipe):
    """`(splits, problems)`: the dataset loaded as `train` loads it ([`_load`]) and the splits it reads scanned
    ([`~cli.preflight_data.split_problems`])."""
    splits, problem = _load(recipe)
    if problem is not None:
        return None, [problem]
    return splits, split_problems(recipe, splits, _offline())


def _split_size(dataset, split: str) -> int | None:
    """The rows of `split` as the dataset's metadata records them (a Hub dataset's card), else `None` (a local file
    streamed: its length is known only once read whole)."""
    try:
        size = dataset.info.splits[split].num_examples
    except (AttributeError, KeyError, TypeError):
        return None
    return size if isinstance(size, int) and size > 0 else None


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


def _chat_template_problems(recipe, tokenizer) -> list[Problem]:
    """Conversational prompts need a chat template: the tokenizer's ([`stand_in_tokenizer`], loaded without the
    model where it can be; `None` where it cannot)."""
    model = recipe.model_name_or_path
    if model.startswith(BUILTIN) and model != TINY_MODEL:
        return []  # the pretrained built-in models are chat models with templates
    if tokenizer is None and model != TINY_MODEL:
        return []  # not reachable now: the model's own load says why, after this preflight
    if tokenizer is not None and tokenizer.chat_template:
        return []
    return [Problem("dataset_prompt_column", recipe.dataset_prompt_column, "holds conversations (lists of messages), "
                    f"and the tokenizer of {model} has no chat template to turn them into text",
                    "use a chat model (one with a chat template), or give the prompts as plain text")]


def _tokenizer(model: str, offline: bool):  # (loaded afresh each preflight: a folder's tokenizer can change)
    from transformers import AutoTokenizer

    if model == TINY_MODEL:
        from ..demo.tasks import build_tokenizer

        return build_tokenizer()
    if model.startswith(BUILTIN):
        from ..demo.models import fetched_path

        path = fetched_path(model.removeprefix(BUILTIN))  # converted already; never fetched here
        return None if path is None else AutoTokenizer.from_pretrained(str(path))
    return AutoTokenizer.from_pretrained(model, local_files_only=offline)


def stand_in_tokenizer(recipe, limit: Limit | None = None):
    """
    The tokenizer of the recipe's model where it loads without the model (the built-in tiny model's; a local
    folder's, a cached or reachable Hub model's, a built-in pretrained model already fetched), else `None`; loaded
    under `limit`.

    Returns:
        `tuple`: The tokenizer or `None`, and `[the problem]` when its load ran out of time (else `[]`).
    """
    model, limit = recipe.model_name_or_path, limit or Limit()

    def load():
        try:
            return _tokenizer(model, _offline())
        except Exception:  # noqa: BLE001 - not reachable now: the model's own load says why, after this preflight
            return None

    if model.startswith(BUILTIN):  # the package's own, or a converted folder: local, no Hub
        return load(), []
    import transformers  # noqa: F401 - imported before the clock starts: the limit is the load's
    out_of_time = Problem("model_name_or_path", model, f"its tokenizer did not load within {limit.seconds:g} s (the "
                          "preflight's limit; a Hub that accepts and never answers, a slow network)",
                          f"give a local folder, or HF_HUB_OFFLINE=1 to read the cache; or {RAISE_LIMIT}")
    tokenizer, problem = limit.run(f"loading the tokenizer of {model}", load, out_of_time,
                                   f"recipe {recipe.path}: preflight")  # fmt: skip
    return tokenizer, [problem] if problem else []


def stand_in_ids(texts: list[str], tokenizer=None) -> list[list[int]]:
    """
    The `completion_ids` TRL would pass with completions `texts`: each text's token ids under `tokenizer` (no special
    tokens added) and its end-of-sequence token, as a completion the model ended holds it (TRL decodes them with
    `skip_special_tokens=True`, so the empty completion is `[eos]`). Without a tokenizer: the text's UTF-8 bytes and
    [`END_STAND_IN`], never an empty list.
    """
    if tokenizer is None:
        return [[*text.encode("utf-8"), END_STAND_IN] for text in texts]
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else END_STAND_IN
    return [[*tokenizer(text, add_special_tokens=False)["input_ids"], end] for text in texts]


def stand_in_tokens(rows: list[dict], tokenizer=None) -> int:
    """The trainer's `num_input_tokens_seen` at its first reward call (TRL counts the round's prompt and completion
    tokens before it scores them), for the stand-in round: `rows`' prompts (a conversation's message contents) and
    [`STAND_INS`], as [`stand_in_ids`] counts them."""
    prompts = [" ".join(str(m["content"]) for m in row["prompt"]) if _is_conversation(row["prompt"]) else
               str(row["prompt"]) for row in rows for _ in STAND_INS]  # fmt: skip
    ids = stand_in_ids(prompts, tokenizer) + stand_in_ids([*STAND_INS] * len(rows), tokenizer)
    return sum(len(row) for row in ids) - len(prompts)  # a prompt has no end-of-sequence token


def state_at_start(recipe, num_rows: int | None = None) -> dict:
    """
    The fields of the `TrainerState` TRL's trainer (transformers' `Trainer._init_training_state`) holds when it first
    calls the reward functions: step 0, epoch 0, `max_steps` and `num_train_epochs` as transformers'
    `set_initial_training_values` derives them (from the train split's `num_rows`, TRL's `RepeatSampler` and the
    batch geometry at the first stage's G), the logging, eval and save steps, the per-device train batch. Where
    `num_rows` is not known (a streamed split whose card records no size), `num_train_epochs` is the recipe's rounded
    up and a run by epochs (`max_steps: -1`) gets one step an epoch: stand-ins, positive as in training. Pure: no
    torch.
    """
    fields = trl_fields(recipe.trainer)
    value = lambda key: recipe.training.get(key, (fields.get(key) or {}).get("default"))  # noqa: E731
    max_steps, epochs = value("max_steps"), value("num_train_epochs")
    per_device, accumulation = value("per_device_train_batch_size"), value("gradient_accumulation_steps")
    streamed = bool(recipe.script.get("dataset_streaming"))
    length = None  # the data loader's length, as TRL's sampler makes it
    if num_rows is not None and recipe.trainer != ASYNC and not streamed:
        geometry = run_geometry(recipe)
        prompts = geometry.generation_batch_size // starting_num_generations(recipe, geometry)
        length = num_rows // max(prompts, 1) * (value("num_iterations") or 1) * geometry.steps_per_generation
    if length is None and not streamed:  # not known here: stand-ins
        num_train_epochs = math.ceil(epochs)
        max_steps = max_steps if max_steps > 0 else num_train_epochs
    elif length:  # as transformers' `set_initial_training_values`
        per_epoch = max(length // accumulation + int(length % accumulation > 0), 1)
        max_steps = max_steps if max_steps > 0 else math.ceil(epochs * per_epoch)
        num_train_epochs = (max_steps // per_epoch + int(max_steps % per_epoch > 0) if value("max_steps") > 0
                            else math.ceil(epochs))  # fmt: skip
    else:  # a data loader without a length (a streamed dataset), or an empty one: as many epochs as the steps need
        num_train_epochs = sys.maxsize
        max_steps = max_steps if max_steps > 0 else math.ceil(epochs)
    steps = {}
    for kind in ("logging", "eval", "save"):
        given = value(f"{kind}_steps")
        if kind == "eval" and given is None and value("eval_strategy") == "steps":
            given = value("logging_steps")  # as `TrainingArguments` fills it in
        if given is not None:
            steps[f"{kind}_steps"] = math.ceil(max_steps * given) if given < 1 else int(given)
    return {"epoch": 0, "global_step": 0, "max_steps": max_steps, "num_train_epochs": num_train_epochs,
            "train_batch_size": per_device, **steps}


def stand_in_state(recipe, num_rows: int | None = None):
    """A `transformers.TrainerState` with the fields of [`state_at_start`] (TRL passes `trainer_state=self.state`):
    a reward function may read any field, and compute with `global_step / max_steps`."""
    from transformers import TrainerControl, TrainerState

    state = TrainerState(stateful_callbacks=[TrainerControl()])  # the trainer's, whose control is always one
    for key, field_value in state_at_start(recipe, num_rows).items():
        setattr(state, key, field_value)
    return state


def _is_async(func) -> bool:
    """Whether TRL awaits `func` (`trl.trainer.utils.is_async_callable`: a partial unwrapped, an instance's
    `__call__` looked at)."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))


def reward_call_problem(path: str, func, rows: list[dict], state=None, tokenizer=None,
                        limit: Limit | None = None) -> Problem | None:
    """Call `func` once as TRL calls it, on `rows` with each of [`STAND_INS`], and check what it returns. `state`: the
    `trainer_state` (default: a `TrainerState` at step 0); `tokenizer`: for the `completion_ids`; `limit`: the time
    the call may take ([`Limit`])."""
    conversational = _is_conversation(rows[0]["prompt"])
    prompts = [row["prompt"] for row in rows for _ in STAND_INS]
    texts = [text for _ in rows for text in STAND_INS]
    completions = [[{"role": "assistant", "content": text}] if conversational else text for text in texts]
    kwargs = {key: [row[key] for row in rows for _ in STAND_INS] for key in rows[0]
              if key not in ("prompt", "completion", "completion_ids")}
    if state is None:
        from transformers import TrainerControl, TrainerState

        state = TrainerState(stateful_callbacks=[TrainerControl()])
    kwargs.update(trainer_state=state, log_extra=lambda *args, **kw: None, log_metric=lambda *args, **kw: None)
    name, limit = getattr(func, "__name__", path), limit or Limit()
    where = f"rows 0-{len(rows) - 1} of the train split with the stand-in completions {list(STAND_INS)}"
    try:
        call = functools.partial(func, prompts=prompts, completions=completions,
                                 completion_ids=stand_in_ids(texts, tokenizer), **kwargs)  # fmt: skip
        if _is_async(func):  # TRL awaits these (on its event loop) and no other
            import asyncio

            call = functools.partial(asyncio.run, call())
        out_of_time = Problem(f"reward function {name}", path, f"did not return within {limit.seconds:g} s (the "
                              f"preflight's limit) when called on {where}: `train` would wait as long at its first "
                              "step (a service that never answers, a loop)", f"make {name} return in time (a timeout "
                              f"on what it waits for); if it is only slow, {RAISE_LIMIT}")  # fmt: skip
        output, problem = limit.run(f"calling reward function {path}", call, out_of_time)
        if problem is not None:
            return problem
    except (Exception, SystemExit) as error:  # noqa: BLE001 - user code: anything it raises is named
        frames = traceback.extract_tb(error.__traceback__)
        at = f" ({frames[-1].filename}, line {frames[-1].lineno})" if len(frames) > 1 else ""
        what = (f"called sys.exit({error.code!r})" if isinstance(error, SystemExit) else
                f"raised {type(error).__name__}: {shorten_message(str(error), 200)}")
        return Problem(f"reward function {name}", path, f"{what}{at} when called on {where}: `train` would stop at "
                       "its first call", f"fix {name}: it must return one reward per completion (None for one it "
                       "cannot score), for any completion the model may write")
    if inspect.isawaitable(output):
        if inspect.iscoroutine(output):
            output.close()  # never awaited: no "coroutine was never awaited" warning
        return Problem(f"reward function {name}", path, f"returned an awaitable ({type(output).__name__}) from a "
                       "function not defined with `async def`: TRL awaits only `async def` functions (and callables "
                       "whose `__call__` is one), and would read this as the rewards", f"define {name} with `async "
                       "def`, or return the rewards themselves")
    return reward_output_problem(name, output, len(completions))


PREFLIGHT_FLAGS = {"no_preflight": None, "preflight_timeout": parse_timeout}
"""The preflight's flags of `check` and `train` ([`~cli.progress.take_flags`] reads them among `train`'s overrides)."""


def preflight_unless_skipped(recipe, args) -> None:
    """[`run_preflight`] for `check` and `train` (`args.command`), with `args.preflight_timeout`, unless
    `args.no_preflight` (`--no-preflight`)."""
    if not getattr(args, "no_preflight", False):
        run_preflight(recipe, getattr(args, "preflight_timeout", None), getattr(args, "command", None))


def run_preflight(recipe, timeout: float | None = None, command: str | None = None) -> None:
    """
    Raise one [`CurriculumError`] listing every problem [`preflight_problems`] finds, each part under `timeout`
    seconds (else [`TIMEOUT_ENV`]'s, else [`DEFAULT_TIMEOUT`]); `command` names the lines it prints.

    Raises:
        [`PreflightInterrupted`]: on Ctrl-C, saying what the preflight was doing.
    """
    if timeout is None:
        text = os.environ.get(TIMEOUT_ENV)
        timeout = DEFAULT_TIMEOUT if text is None or not text.strip() else parse_timeout(text, TIMEOUT_ENV)
    limit = Limit(timeout, command)
    try:
        problems = preflight_problems(recipe, limit)
    except KeyboardInterrupt:
        doing = f" ({limit.doing})" if limit.doing else ""
        raise PreflightInterrupted(f"interrupted during the preflight{doing}; nothing was written") from None
    if problems:
        raise CurriculumError(problems, context=f"recipe {recipe.path}: preflight")
