"""
The study of the adaptive modes (issues 25 and 37), one instrument: `tasks` (the tasks, warm start, exact evaluation,
the probe), `arms` (the arms and their runs), `stats` (paired statistics, the tuning-seed choices, the halves check,
the rules and targets: pure Python), `report` (study2.md, verdict.json, the plots), `fixed_kinds` (the library's rules
on prompts of fixed kinds, no torch; `tests/test_fixed_kinds.py`). Generation batch 128 (16-64 prompts a round, so the
per-prompt knapsack and top-up have choices), candidates (2, 4, 8, 16), five tasks (one with settled prompts),
`REPORTED` reported seeds a task and `TUNING` separate tuning seeds on which the reference static G and each mode's
default are chosen (`--tune-on`: the tasks whose tuning seeds choose the defaults).

    python benchmarks/study --jobs 2 --out /work/study-out   # tune, then report; resumable (docs/study.md: commands)
    python benchmarks/study --report-only --out /work/study-out  # the report from the finished runs
    python benchmarks/study --quick                          # every part once, in a temporary folder (`make bench`)

The peer arm `trl_cgrpo` (the published trl-cgrpo 0.2.0, mode `peer`: never tuned nor a default, an extra row against
the reference; the RLOO arms of mode `rloo` likewise) needs `pip install --no-deps trl-cgrpo==0.2.0` (`make study-peers`) and runs with `--extra trl_cgrpo`.

Results: `benchmarks/results/study2.{md,json}`, `verdict.json`, `study2_TASK.png` (`--results` copies them there:
the current study; earlier ones in `benchmarks/results/issueN/`); the analysis is docs/study.md.
"""
