"""The TRL integration: the trainer, the callback, checkpoints and `_trl.py`, the one module that knows TRL internals."""
