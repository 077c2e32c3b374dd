"""Recipes: their import-free validation, the TRL fields they may set, `train`'s arguments parsed by TrlParser."""
