"""
The seam: the only modules naming TRL internals, so a TRL upgrade touches only them; the rest of the package reaches
them through `training/`'s public modules (tests/test_layout.py). The synchronous trainers' side: `hooks.py` (the
TRL methods overridden), `contract.py` (what the hooks call on the trainer: the Protocol `CurriculumHost`),
`settings.py` (G, temperature, fused LM head, rewards), `merge.py` (rounds sampled in increments), `checkpoint.py`,
`vllm.py` (server requests), `evaluation.py` (greedy rewards, full-length generation). The asynchronous trainer's:
`async_trainer.py`, `async_worker.py`, `async_server.py`, `async_transfer.py`. This file imports none of them.
"""
