"""
The prompts a sweep holds out: how many (`--held-out`, checked against the data before anything is written) and the
split that keeps them out of training. Used by `sweep` (its runs) and `sweep --plan-memory` (its probes train on the
same rows), neither importing the other.
"""

from __future__ import annotations

from ...core.errors import CurriculumError, Problem, raise_if_any

DEFAULT_HELD_OUT = 64
"""Held-out prompts without `--held-out`: this many, or a quarter of the train split's rows when that is fewer
(at least 1); all of an eval split's rows when it holds fewer."""


def held_out_source(recipe) -> tuple[str, bool]:
    """Where the held-out prompts come from: the name of the split, and whether it is the train split."""
    if recipe.training.get("eval_strategy", "no") != "no":
        return f"the eval split `{recipe.script.get('dataset_test_split', 'test')}`", False
    return f"the train split `{recipe.dataset_train_split}`", True


def held_out_problem(size: int, rows: int, name: str, from_train: bool) -> Problem | None:
    """The problem of holding out `size` of a split's `rows` (the train split keeps at least one row to train on)."""
    if rows >= size + from_train:
        return None
    return Problem("--held-out", size, f"needs more rows than {name} holds ({rows}"
                   + (", and at least one must be left to train on)" if from_train else ")"),
                   f"hold out fewer, e.g. `--held-out {default_held_out(rows, from_train)}`" if rows > from_train else
                   "use a dataset with more rows")


def default_held_out(rows: int, from_train: bool) -> int:
    """`--held-out` when not given, for a held-out split of `rows` rows (see [`DEFAULT_HELD_OUT`])."""
    return max(1, min(DEFAULT_HELD_OUT, rows // 4 if from_train else rows))


def held_out_rows(recipe) -> int | None:
    """
    The rows of the split the sweep holds prompts out of (see [`held_out_split`]), read before anything is written:
    a built-in dataset's from the recipe, another's by loading it (`datasets` caches it for the runs); `None` when
    streamed (the runs refuse it).
    """
    from ...config.recipe import BUILTIN

    _, from_train = held_out_source(recipe)
    if recipe.dataset_name.startswith(BUILTIN):  # as `build_run` makes them
        return recipe.dataset_num_prompts or 256 if from_train else 64
    if recipe.script.get("dataset_streaming", False):
        return None
    from datasets import load_dataset

    split = recipe.dataset_train_split if from_train else recipe.script.get("dataset_test_split", "test")
    splits = load_dataset(recipe.dataset_name, recipe.dataset_config)
    if split not in splits:
        raise CurriculumError([Problem("dataset_train_split" if from_train else "dataset_test_split", split,
                                       f"is not a split of {recipe.dataset_name} ({', '.join(splits)})",
                                       "name one of its splits")], "sweep")
    return len(splits[split])


def resolve_held_out(recipe, given: int | None) -> int:
    """
    The held-out prompts of a sweep of `recipe`: `given` (`--held-out`), else the default for its data.

    Raises:
        [`CurriculumError`]: when the split does not hold them (the train split: and one row more, to train on).
    """
    rows = held_out_rows(recipe)
    if rows is None:
        return DEFAULT_HELD_OUT if given is None else given
    name, from_train = held_out_source(recipe)
    size = default_held_out(rows, from_train) if given is None else given
    problem = held_out_problem(size, rows, name, from_train)
    raise_if_any([problem] if problem else [], "sweep")
    return size


def held_out_split(recipe, size: int, held: dict):
    """A `build_run` split keeping `size` held-out rows in `held`: the eval split's first, else the train's last."""

    def split(dataset, eval_dataset):
        from datasets import IterableDataset

        name, from_train = held_out_source(recipe)
        source = dataset if from_train or eval_dataset is None else eval_dataset
        if isinstance(source, IterableDataset):
            raise CurriculumError([Problem("dataset_streaming", True, "leaves no rows to hold out: the sweep "
                                           "evaluates a fixed set of held-out prompts",
                                           "set `dataset_streaming: false`")])
        problem = held_out_problem(size, len(source), name, source is dataset)
        if problem is not None:
            raise CurriculumError([problem])
        if source is dataset:  # the last rows, kept out of training
            n = len(dataset)
            held["rows"], held["name"] = list(dataset.select(range(n - size, n))), f"rows {n - size}-{n - 1} of {name}"
            return dataset.select(range(n - size)), eval_dataset
        held["rows"], held["name"] = list(source.select(range(size))), f"rows 0-{size - 1} of {name}"
        return dataset, eval_dataset

    return split
