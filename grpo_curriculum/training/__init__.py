"""The TRL integration: trainer, callback, checkpoints, and the seam `_trl/`, the only modules knowing TRL internals."""
