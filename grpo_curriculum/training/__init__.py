"""The TRL integration: trainer, callback, checkpoints, and the seam `_trl*.py`, the only modules knowing TRL internals."""
