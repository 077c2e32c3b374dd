"""Demo and benchmark assets, not the product: the built-in tiny model and tasks, arithmetic, the SmolLM2 fetch."""
