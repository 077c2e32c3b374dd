"""The registry of built-in names (config/builtins.py) agrees with the demo tables that hold what they are."""

from __future__ import annotations

from grpo_curriculum.config.builtins import DATASET_NAMES, FETCHED_MODEL_NAMES, MODEL_NAMES, TINY, TINY_MODEL
from grpo_curriculum.demo.models import MODELS
from grpo_curriculum.demo.tasks import TASKS


def test_the_fetched_models_are_the_demo_models():
    assert tuple(MODELS) == FETCHED_MODEL_NAMES
    assert all(spec.name == name for name, spec in MODELS.items())


def test_the_models_are_the_tiny_one_and_the_fetched_ones():
    assert MODEL_NAMES == (TINY, *FETCHED_MODEL_NAMES) and TINY_MODEL == "builtin:tiny"


def test_the_datasets_are_the_demo_tasks():
    assert tuple(TASKS) == DATASET_NAMES
