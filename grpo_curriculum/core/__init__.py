"""The curriculum itself, pure Python (no torch, TRL or transformers): schedules, geometry, policies, YAML input."""
