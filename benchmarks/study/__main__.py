"""`python benchmarks/study [--quick | --jobs 2 --out DIR ...]`: tune on the tuning seeds, run the reported ones,
report (see the package's docstring)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

for name, value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                    "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}.items():  # fmt: skip
    os.environ.setdefault(name, value)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: `study` as a package, and `common`

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from study.arms import (ARMS, KNOWS_SETTLED, LIBRARY_ARMS, MODES, PEER_MODES, POINTS, REPORTED, STEPS, TUNING,  # noqa: E402
                        TUNING_SEED_BASE, load_runs, mode_of, peer_missing, run_jobs)
from study.report import report  # noqa: E402
from study.stats import choose, defaults  # noqa: E402
from study.tasks import REPORTED_TASKS, TASKS, has_settled  # noqa: E402

# --quick: one task, one tuning and one reported seed, the static arms G 4 and G 8 and each mode's first variant,
# 4 steps of 128 completions, 2 evaluations: every part of the instrument once (no verdict: one seed). Both seeds run
# every arm at once, one process each, so the reported phase need not wait for the tuning phase's choice.
QUICK = {"tasks": ["prefix_levels"], "tuning": 1, "reported": 1, "steps": 4, "points": 2,
         "arms": ["static_g4", "static_g8", *(arms[0] for mode, arms in MODES.items()
                                              if mode not in ("static", *PEER_MODES))]}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="/work/study-out", help="output folder (runs/ and the reports)")
    parser.add_argument("--tasks", nargs="+", default=list(REPORTED_TASKS), choices=list(TASKS),
                        help="tasks to report (default: the five; `settled_heavy`, `settled_tail`: tuning variants)")
    parser.add_argument("--tune-on", nargs="+", choices=list(TASKS), default=None,
                        help="tasks whose tuning seeds choose the defaults (default: --tasks); their tuning runs are "
                             "run too")  # fmt: skip
    parser.add_argument("--reported", type=int, default=REPORTED, help="reported seeds FROM, FROM + 1, ...")
    parser.add_argument("--reported-from", type=int, nargs="+", default=[0], metavar="FROM",
                        help="the first reported seed (a disjoint seed set, e.g. 500; never a tuning seed); several: "
                             "one set of --reported seeds from each (`800 900`: the report's halves are the sets)")
    parser.add_argument("--tuning", type=int, default=TUNING, help=f"tuning seeds {TUNING_SEED_BASE}, ...")
    parser.add_argument("--extra", nargs="*", default=[], choices=ARMS,
                        help="more arms on the reported seeds (the only way to run a peer arm, e.g. trl_cgrpo)")
    parser.add_argument("--steps", type=int, default=STEPS, help="budget in steps of 128 completions")
    parser.add_argument("--points", type=int, default=POINTS, help="evaluations after step 0")
    parser.add_argument("--jobs", type=int, default=2, help="processes in parallel (one torch thread each)")
    parser.add_argument("--only", nargs="+", default=None, choices=ARMS, metavar="ARM",
                        help="run just these arms on the reported seeds of --tasks (no tuning phase, no report; "
                             "oracle arms only on tasks with settled prompts): to add arms or seeds to a study")
    parser.add_argument("--report-only", action="store_true", help="no training: the report from the runs on disk")
    parser.add_argument("--results", action="store_true", help="copy the reports to benchmarks/results/")
    parser.add_argument("--results-dir", default=None, metavar="DIR",
                        help="with --results: copy them to DIR instead (e.g. benchmarks/results/issue42/seeds_500)")
    parser.add_argument("--quick", action="store_true", help="every part once, in a temporary folder: "
                        + ", ".join(f"{k} {v}" for k, v in QUICK.items()))  # fmt: skip
    options = parser.parse_args(argv)
    missing = {arm: install for arm in options.extra if (install := peer_missing(arm))}
    if missing and not options.report_only:
        parser.error("; ".join(f"the peer arm {arm} needs its package: {install} (or `make study-peers`)"
                               for arm, install in missing.items()))  # fmt: skip
    arms = LIBRARY_ARMS  # the tuning phase's: the peer arms are never tuned nor a default
    if options.quick:
        options.out = tempfile.mkdtemp(prefix="study-quick-")
        options.tasks, options.tuning, options.reported = QUICK["tasks"], QUICK["tuning"], QUICK["reported"]
        options.steps, options.points, arms = QUICK["steps"], QUICK["points"], QUICK["arms"]
    out = Path(options.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    tuning = [TUNING_SEED_BASE + i for i in range(options.tuning)]
    reported = [first + i for first in options.reported_from for i in range(options.reported)]
    if set(reported) & set(tuning):
        parser.error(f"reported seeds {reported} overlap the tuning seeds {tuning}")
    command = "python benchmarks/study " + " ".join(sys.argv[1:] if argv is None else argv)
    if options.only:
        start = time.perf_counter()
        run_jobs([(out, task, seed, [a for a in options.only if mode_of(a) not in KNOWS_SETTLED or has_settled(task)],
                   options.steps, options.points) for seed in reported for task in options.tasks], options.jobs)
        print(f"wall time {(time.perf_counter() - start) / 60:.1f} min", flush=True)
        return 0
    if options.quick:
        start, options.extra = time.perf_counter(), arms
        run_jobs([(out, task, seed, arms, options.steps, options.points) for task in options.tasks
                  for seed in tuning + reported], options.jobs)  # fmt: skip
        print(f"wall time {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    elif not options.report_only:
        start = time.perf_counter()
        tune_on = options.tune_on or options.tasks
        run_jobs([(out, task, seed, arms, options.steps, options.points)
                  for task in dict.fromkeys([*options.tasks, *tune_on]) for seed in tuning], options.jobs)  # fmt: skip
        runs = load_runs(out)
        chosen_arms, default = {}, defaults(runs, tune_on, tuning)
        print(f"defaults chosen on tuning seeds {tuning} over {tune_on}: {default}", flush=True)
        for task in options.tasks:
            chosen = choose(runs, task, tuning)
            print(f"{task}: chosen on tuning seeds {tuning}: {chosen}", flush=True)
            extra = [a for a in options.extra if mode_of(a) not in KNOWS_SETTLED or has_settled(task)]  # oracles: settled tasks
            chosen_arms[task] = list(dict.fromkeys([*chosen.values(), *default.values(), *extra]))
        # seed-major: the tasks advance together, so a run cut short still has every task at the same seeds
        run_jobs([(out, task, seed, chosen_arms[task], options.steps, options.points) for seed in reported
                  for task in options.tasks], options.jobs)  # fmt: skip
        print(f"wall time {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    results = (Path(options.results_dir) if options.results_dir else True) if options.results else False
    print(report(out, options.tasks, tuning, reported, command.strip(), results, options.steps, options.points,
                 options.extra, options.tune_on))  # fmt: skip
    if options.quick:
        print(f"quick run: every file in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
