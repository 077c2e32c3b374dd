"""The `grpo-curriculum` command: check, train, demo, plot, fetch-model, recipes."""

from .main import main

__all__ = ["main"]
