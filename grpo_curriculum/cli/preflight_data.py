"""
The dataset half of the preflight ([`~cli.preflight.dataset_rows`]): the dataset read as `train` reads it, bounded.

`train` calls `datasets.load_dataset(dataset_name, dataset_config, streaming=dataset_streaming)` as TRL's `trl grpo`
script does. Without streaming, `datasets` builds every split in full into its Arrow cache (a split the run never
reads too: a file it cannot parse, or whose columns differ from the others', stops `train` there); `train` then takes
the train split (and the eval split when the run evaluates) and renames the prompt column `prompt`. The preflight
makes the same call, so the cache it builds is the one `train` reuses (nothing is read or downloaded twice), then
scans what `train` reads at the Arrow level, memory-mapped (no row decoded into Python, no model, no tokenizer):
each split there, the rename possible, every prompt of the split a non-empty string or a conversation, every string
of the split valid UTF-8, the train split large enough for one generation round. With `dataset_streaming: true`
nothing is built: the first rows of each split are checked (a full scan would read the whole stream).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os

from ..core.errors import CurriculumError, Problem, list_text, shorten

ROWS = 2  # rows read from a streamed split
REWARD_ARGUMENTS = ("prompts", "completions", "trainer_state", "log_extra", "log_metric", "environments")
"""The arguments TRL 1.16's `_calculate_rewards` passes every reward function besides the dataset's columns (and
`completion_ids`, which it leaves out of the columns)."""
PROMPT_NAMES = ("question", "problem", "query", "instruction", "input", "text", "messages", "content")
FILE_FIX = ("fix the file (JSON Lines: one complete JSON object a line; CSV: as many fields in each row as in the "
            "header; text saved as UTF-8), or move it out of the dataset's folder")  # fmt: skip


def wanted_splits(recipe) -> list[tuple[str, str]]:
    """The `(key, split)` pairs `train` reads: the train split, and the eval split when the run evaluates."""
    wanted = [("dataset_train_split", recipe.dataset_train_split)]
    if recipe.training.get("eval_strategy", "no") != "no":
        wanted.append(("dataset_test_split", recipe.script.get("dataset_test_split", "test")))
    return wanted


def split_problems(recipe, splits, offline: bool = False) -> list[Problem]:
    """Every problem `train` would meet in the splits it reads of the loaded `splits` (see the module docstring); a
    read that fails (a streamed file is read here) is named as [`load_problem`] names it (`offline`: see there)."""
    name, problems = recipe.dataset_name, []
    for key, split in wanted_splits(recipe):
        if split not in splits:
            problems.append(Problem(key, split, f"is not a split of dataset {name} (its splits: "
                                    f"{list_text(list(splits)) or 'none'})", f"set `{key}` to one of them"))
            continue
        try:
            with quiet_datasets():
                problems += _one_split_problems(recipe, key, split, splits[split])
        except Exception as error:  # noqa: BLE001 - datasets raises many kinds while it reads: each named
            problems.append(load_problem(recipe, error, offline))
    return problems


def _one_split_problems(recipe, key: str, split: str, dataset) -> list[Problem]:
    streamed = not hasattr(dataset, "num_rows")
    rows = [dict(row) for row in dataset.take(ROWS)] if streamed else None
    if (not rows) if streamed else dataset.num_rows == 0:
        return [Problem("dataset_name", recipe.dataset_name, f"has no rows in its split {split!r}",
                        "give a dataset with prompts in it (is the file empty?)")]
    first = rows[0] if streamed else _first_row(dataset)
    problem = _column_problem(recipe, list(dataset.column_names or first), split, first)
    if problem is None and not streamed:
        problem = _utf8_problem(recipe, dataset, split) or _scan_problem(recipe, dataset, split)
    elif problem is None:
        column = recipe.dataset_prompt_column
        bad = next((i for i, row in enumerate(rows) if not is_prompt(row[column])), None)
        problem = None if bad is None else _prompt_problem(recipe, split, bad, rows[bad][column])
    if problem is None and key == "dataset_train_split" and not streamed:
        return _size_problems(recipe, dataset.num_rows)
    return [problem] if problem else []


@contextlib.contextmanager
def quiet_datasets():
    """`datasets` without its progress bars ("Generating train split": `train` shows them when it loads the dataset)
    and its error log ("Failed to load JSON from file ...": the problem names it)."""
    from datasets.utils import logging as datasets_logging

    bars, verbosity = datasets_logging.is_progress_bar_enabled(), datasets_logging.get_verbosity()
    datasets_logging.disable_progress_bar()
    datasets_logging.set_verbosity(datasets_logging.CRITICAL)
    try:
        yield
    finally:
        datasets_logging.set_verbosity(verbosity)
        if bars:
            datasets_logging.enable_progress_bar()


def is_prompt(prompt) -> bool:
    """A prompt `train` can use: a non-empty string or a conversation (a list of `{role, content}` messages)."""
    return (isinstance(prompt, str) and prompt != "") or is_conversation(prompt)


def is_conversation(prompt) -> bool:
    return (isinstance(prompt, list) and bool(prompt)
            and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt))


def _column_problem(recipe, columns: list[str], split: str, first: dict) -> Problem | None:
    """The prompt column missing from `split`, or renamed onto a `prompt` column it also has (as `train` renames it,
    `Dataset.rename_column` refuses that)."""
    name, column = recipe.dataset_name, recipe.dataset_prompt_column
    if column not in columns:
        text = [c for c in columns if c in PROMPT_NAMES] or [c for c in columns if isinstance(first.get(c), str)]
        fix = (f"set `dataset_prompt_column: {text[0]}` (the column holding the prompts; it is renamed `prompt`)"
               if text else "set `dataset_prompt_column` to the column holding the prompts")
        return Problem("dataset_prompt_column", column, f"is not a column of dataset {name} (split {split}; its "
                       f"columns: {list_text(columns)})" + ("" if "dataset_prompt_column" in recipe.raw else
                                                            ": TRL reads the prompts from `prompt`"), fix)
    taken = [c for c in columns if c in REWARD_ARGUMENTS and c != column]
    if taken:
        return Problem("dataset_name", name, f"has a column named {list_text(taken)} (split {split}), a name TRL gives "
                       "an argument of its own when it calls the reward functions with the dataset's columns (`prompts`, "
                       "`completions`: 'got multiple values', the run stops at its first step; `trainer_state`, "
                       "`log_extra`, `log_metric`, `environments`: the column's values replaced by TRL's)",
                       "rename that column in the data (the reward functions then read it by its new name)")
    if column != "prompt" and "prompt" in columns:
        return Problem("dataset_prompt_column", column, f"is renamed `prompt` by `train` (TRL reads the prompts from "
                       f"`prompt`), but split {split} of dataset {name} has a `prompt` column too, and `datasets` "
                       "cannot rename a column onto another", "set `dataset_prompt_column: prompt` to train on the "
                       f"`prompt` column, or rename or drop the `prompt` column of the data to train on `{column}`")
    return None


def _first_row(dataset) -> dict:
    try:
        return dataset[0]
    except UnicodeDecodeError:  # named by `_utf8_problem`
        return {}


def _prompt_problem(recipe, split: str, row: int, prompt, missing: bool = False) -> Problem:
    what = "None" if prompt is None else "an empty string" if prompt == "" else f"a {type(prompt).__name__}"
    also = (f" (no row of split {split} has a `{recipe.dataset_prompt_column}`: `datasets` gives a column that "
            "another split's files have and this split's files lack None in every row)") if missing else ""
    return Problem(
        "dataset_prompt_column", recipe.dataset_prompt_column, f"holds {what} in row {row} of split {split} "
        f"({shorten(prompt)}){also}: a prompt is a non-empty string, or a conversation (a list of {{role, content}} "
        "messages); `train` would stop at the step that samples this row",
        "give every row a prompt as text or messages (or drop the row), or name another column with "
        "`dataset_prompt_column`")  # fmt: skip


def _scan_problem(recipe, dataset, split: str) -> Problem | None:
    """The first row of `split` whose prompt `train` cannot use, found chunk by chunk on the Arrow column."""
    column = dataset.data.column(recipe.dataset_prompt_column)
    offset = 0
    for chunk in column.chunks:
        row = _first_bad_prompt(chunk) if len(chunk) else None
        if row is not None:
            prompt = dataset[offset + row][recipe.dataset_prompt_column]
            return _prompt_problem(recipe, split, offset + row, prompt, missing=column.null_count == len(column))
        offset += len(chunk)
    return None


def _first_bad_prompt(chunk) -> int | None:
    """The index in the Arrow array `chunk` of its first prompt that is not text or a conversation, else `None`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = chunk.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        bad = pc.fill_null(pc.equal(pc.binary_length(chunk), 0), True)  # None or ""
    elif (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(kind.value_type) and \
            {"role", "content"} <= {field.name for field in kind.value_type}:
        bad = pc.fill_null(pc.equal(pc.list_value_length(chunk), 0), True)  # None or []
        messages = pc.list_flatten(chunk)
        if messages.null_count:  # a None message in a conversation
            parents = pc.filter(pc.list_parent_indices(chunk), pc.is_null(messages))
            bad = pc.or_(bad, pc.is_in(pa.array(range(len(chunk))), value_set=parents))
    elif isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.json":  # a column of mixed types
        texts = chunk.storage.to_pylist()
        return next((i for i, text in enumerate(texts) if text is None or not is_prompt(json.loads(text))), None)
    else:  # numbers, None in every row, lists of strings, dicts: no row holds a prompt
        return 0
    index = pc.index(bad, True).as_py()
    return None if index < 0 else index


def _utf8_problem(recipe, dataset, split: str) -> Problem | None:
    """Text `datasets` stored without decoding it (a Latin-1 JSON Lines file): reading its row would raise."""
    import pyarrow as pa

    table = dataset.data.table
    try:
        table.validate(full=True)
        return None
    except pa.ArrowInvalid:
        pass
    for name in table.column_names:
        offset = 0
        for chunk in table.column(name).chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowInvalid as error:
                row = next((offset + i for i in range(len(chunk)) if not _decodes(chunk, i)), offset)
                files = data_files(recipe, split)
                where = f"file {files[0]}" if len(files) == 1 else f"one of the files {list_text(files) or '?'}"
                return Problem("dataset_name", recipe.dataset_name, f"holds text that is not UTF-8 in column {name}, "
                               f"row {row} of split {split} ({where}; {shorten_message(str(error), 120)}): reading "
                               "that row would stop `train`", "save the file as UTF-8 (e.g. `iconv -f latin1 -t "
                               "utf-8 FILE > NEW`), or give `dataset_config` naming its encoding")  # fmt: skip
            offset += len(chunk)
    return None


def _decodes(chunk, i: int) -> bool:
    try:
        chunk[i].as_py()
        return True
    except UnicodeDecodeError:
        return False


def _size_problems(recipe, size: int) -> list[Problem]:
    """The train split too small for one generation round, as the trainer finds it when it is built."""
    from ..config.recipe import run_geometry, starting_num_generations
    from ..config.trainers import ASYNC

    if recipe.trainer == ASYNC:
        return []  # no generation batch
    try:
        world = os.environ.get("WORLD_SIZE")
        geometry = run_geometry(recipe, int(world) if world and world.isdigit() else None)
        if recipe.curriculum.geometry_problems(geometry):
            return []  # named by the geometry's own checks
        start = starting_num_generations(recipe, geometry)
    except (CurriculumError, ValueError, ZeroDivisionError):
        return []
    return recipe.curriculum.dataset_size_problems(start, geometry.generation_batch_size, size)


def data_files(recipe, split: str) -> list[str]:
    """The files of `split` as `datasets` resolves them (`[]` when it cannot say)."""
    try:
        from datasets import load_dataset_builder

        files = load_dataset_builder(recipe.dataset_name, recipe.dataset_config).config.data_files or {}
        return [str(file) for file in files.get(split, [])]
    except Exception:  # noqa: BLE001 - only to name a file in a message
        return []


def load_problem(recipe, error: BaseException, offline: bool) -> Problem:
    """The problem `load_dataset` raising `error` is: an empty dataset, a local file it cannot read (named), files of
    other columns, a Hub dataset this machine cannot reach (`offline`), or the error itself."""
    from datasets.table import CastError

    name = recipe.dataset_name
    causes = _causes(error)
    what = next((f"{type(c).__name__}: {c}" for c in causes if str(c) and "DatasetGenerationError" not in
                 type(c).__name__), type(error).__name__)  # fmt: skip
    if any(isinstance(c, StopIteration) or "StopIteration" in f"{type(c).__name__}: {c}" for c in causes):
        return Problem("dataset_name", name, "holds no rows (`datasets` found nothing to read: an empty file?)",
                       "give a dataset with prompts in it")
    file = _failing_file(causes)
    cast = next((c for c in causes if isinstance(c, CastError)), None)
    if cast is not None:
        theirs, ours = list(cast.table_column_names), list(cast.requested_column_names)
        return Problem("dataset_name", name, f"cannot be built: {file or 'a file'} has the columns "
                       f"{list_text(theirs)}, the dataset's other files {list_text(ours)}; `datasets` builds every "
                       "split with one set of columns (a column a file lacks is filled with None, one it adds is "
                       "refused), even a split the run does not read", "give every file of the dataset the same "
                       "columns, or move the other files out of its folder")  # fmt: skip
    if glob.has_magic(name):
        found = sorted(glob.glob(name))
        return Problem("dataset_name", name, "is a pattern: `datasets.load_dataset` reads a folder, a file or a Hub "
                       "dataset id as its first argument, not a glob (it matches "
                       f"{list_text(found) or 'nothing'} here)",
                       "give the folder holding the files (each split's files named after it: train.jsonl, "
                       "test.jsonl), or one file")  # fmt: skip
    if file is not None or os.path.exists(name):
        return Problem("dataset_name", name, f"cannot be read: {file or name}: {shorten_message(what)}", FILE_FIX)
    if name.startswith(("/", "./", "../", "~")) or os.path.splitext(name)[1] in (".json", ".jsonl", ".csv", ".parquet",
                                                                                 ".txt", ".arrow"):
        return Problem("dataset_name", name, "is not a file or folder on this machine (and a path is no Hub "
                       "dataset id)", "give the path of a local file or folder `datasets.load_dataset` reads, from "
                       f"the folder `train` runs in ({os.getcwd()}) when relative")  # fmt: skip
    if offline or isinstance(error, ConnectionError) or "Connection" in type(error).__name__:
        return Problem("dataset_name", name, f"cannot be loaded: this machine is offline or cannot reach the Hub "
                       f"({shorten_message(what)})", "load it once where there is a network (`datasets` caches it; "
                       "HF_DATASETS_OFFLINE=1 then reads the cache), or give a local path")  # fmt: skip
    return Problem("dataset_name", name, f"cannot be loaded ({shorten_message(what)})",
                   "give a Hub dataset id or a local file or folder `datasets.load_dataset` reads")


def _causes(error: BaseException) -> list[BaseException]:
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _failing_file(causes: list[BaseException]) -> str | None:
    """The file `datasets`' packaged builders (json, csv, parquet, text) were reading when they raised: the `file`
    of their frame (`_generate_tables`, or `_split_generators` where they infer the columns)."""
    for cause in causes:
        trace = cause.__traceback__
        while trace is not None:
            frame = trace.tb_frame
            file = frame.f_locals.get("file") if "packaged_modules" in frame.f_code.co_filename else None
            if isinstance(file, (str, os.PathLike)):
                return os.fspath(file)
            trace = trace.tb_next
    return None


def shorten_message(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
