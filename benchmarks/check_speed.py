"""
How fast `grpo-curriculum check` answers, next to `python -c "import trl"`, in one run.

Each command runs in a fresh interpreter (as a user types it), `--repeats` times, the commands interleaved so that a
busy machine slows them alike; the table gives the median wall time of each and its ratio to `import trl`. `from trl
import GRPOConfig` is what `check` used to pay to read TRL's fields; `python -c pass` is the interpreter's own start.

    python benchmarks/check_speed.py --repeats 9
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = [sys.executable, "-m", "grpo_curriculum", "check"]
COMMANDS = {
    "check (flags)": CHECK + ["--num-processes", "2", "--per-device-train-batch-size", "3", "--num-generations", "8"],
    "check recipes/2gpu.yaml --no-preflight": CHECK + ["recipes/2gpu.yaml", "--no-preflight"],  # a Hub dataset
    "check recipes/adaptive-demo.yaml": CHECK + ["recipes/adaptive-demo.yaml"],
    'python -c "import trl"': [sys.executable, "-c", "import trl"],
    'python -c "from trl import GRPOConfig"': [sys.executable, "-c", "from trl import GRPOConfig"],
    'python -c "pass"': [sys.executable, "-c", "pass"],
}
REFERENCE = 'python -c "import trl"'


def time_once(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # check exits 1 for an invalid G, which the flags case is
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (default: 7)")
    args = parser.parse_args()
    for command in COMMANDS.values():  # warm the file cache and the bytecode once
        time_once(command)
    times = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            times[name].append(time_once(command))
    reference = statistics.median(times[REFERENCE])
    print(f"{args.repeats} runs of each command, interleaved, wall time of a fresh interpreter ({sys.executable})\n")
    print("| command | median | min - max | / `import trl` |\n|---|---|---|---|")
    for name, runs in times.items():
        median = statistics.median(runs)
        print(f"| `{name}` | {median:.3f} s | {min(runs):.3f} - {max(runs):.3f} s | {median / reference:.2f} |")


if __name__ == "__main__":
    main()
