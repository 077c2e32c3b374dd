"""Recipes: YAML loading, validation and the GRPOConfig fields they may set."""
