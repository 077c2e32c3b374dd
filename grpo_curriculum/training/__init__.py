"""The TRL integration: trainer, callback, checkpoints, and `_trl.py`, the one module that knows TRL internals."""
