"""
The `sweep` command, its parts named by role: `command` (the runs, their resume and the report), `arms` (`--arms`),
`child` (what the child processes share), `held_out` (the held-out rows), `memory` (`--plan-memory`), `table` (the
results table and the recommendation). They import each other one way: `command` -> `memory` -> `child`.
"""
