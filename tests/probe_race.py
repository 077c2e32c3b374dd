"""
Issue 45, item 3, replayed deterministically under `torchrun --nproc_per_node 2` (tests/test_folders.py): `train` into
an existing empty `output_dir`, where rank 0 holds its writability probe file inside the folder while rank 1 checks
the folder. Each rank writes `OUT/rankR.json`: the exit status of its folder checks (0: passed, 2: refused) and what it
printed. The run stops after the checks (no model is built).

    torchrun --nproc_per_node 2 --standalone tests/probe_race.py OUT RUN_DIR [plain]

With `plain`, no rank waits for the other (a folder that holds files: each rank's own verdict, issue 55, item 7).
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

out, run_dir = Path(sys.argv[1]), sys.argv[2]
plain = sys.argv[3:] == ["plain"]
rank = int(os.environ["RANK"])
made, checked = out / "probe-made", out / "rank1-checked"


def wait_for(flag: Path) -> None:
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class ChecksPassed(Exception):
    pass


import grpo_curriculum.cli.train as train  # noqa: E402

if plain:
    pass
elif rank == 0:  # hold the probe file in the folder until rank 1 has checked it
    mkstemp = tempfile.mkstemp

    def held_mkstemp(*args, **kwargs):
        found = mkstemp(*args, **kwargs)
        made.touch()
        wait_for(checked)
        return found

    tempfile.mkstemp = held_mkstemp
else:  # check the folder while rank 0's probe is in it
    output_dir_problems = train.output_dir_problems

    def checked_after_the_probe(*args, **kwargs):
        wait_for(made)
        try:
            return output_dir_problems(*args, **kwargs)
        finally:
            checked.touch()

    train.output_dir_problems = checked_after_the_probe


def passed(recipe):
    if rank == 1:
        checked.touch()  # (a fixed rank 0 may not probe at all: nothing to wait for)
    raise ChecksPassed


train.torch_threads = passed  # the step right after the folder checks
from grpo_curriculum.cli.main import main  # noqa: E402

err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(["train", "demo", "--output_dir", run_dir, "--max_steps", "1"])
    except ChecksPassed:
        code = 0
if rank == 1 or code:
    checked.touch()  # never leave rank 0 waiting
(out / f"rank{rank}.json").write_text(json.dumps({"code": code, "stderr": err.getvalue()}))
