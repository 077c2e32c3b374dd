"""What the commands may write and delete: resume targets, rotation, staging folders, the run folder lock, links."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_curriculum.cli.main import main
from grpo_curriculum.core.errors import CurriculumError

from .test_sweep import recipe  # noqa: F401  (the demo recipe on 64 prompts, a fixture)

ROOT = Path(__file__).resolve().parent.parent
DEMO = str(ROOT / "recipes" / "demo.yaml")
FAST = ["--warm_start_steps", "0", "--save_strategy", "steps", "--save_steps", "2"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def dead_pid() -> int:
    """The PID of a process that has ended (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- 1. resume targets and rotation ------------------------------------------------------------------------------


def test_resuming_another_folders_checkpoint_never_writes_over_a_full_output_dir(tmp_path, capsys):
    """It replaced the user's README.md and config.json (`resuming=bool(resume)` lifted the refusal for any path)."""
    other, mine, fresh = tmp_path / "other", tmp_path / "mine", tmp_path / "fresh"
    assert main(["train", DEMO, "--output_dir", str(other), "--max_steps", "2", *FAST]) == 0
    mine.mkdir()
    (mine / "README.md").write_text("my notes")
    (mine / "config.json").write_text("{}")
    (mine / "checkpoint-5").mkdir()
    (mine / "checkpoint-5" / "weights.bin").write_text("mine")
    before = listing(mine)
    capsys.readouterr()
    assert main(["train", DEMO, "--output_dir", str(mine), "--max_steps", "4", "--save_total_limit", "1",
                 "--resume_from_checkpoint", str(other / "checkpoint-2"), *FAST]) == 2  # fmt: skip
    captured = capsys.readouterr()
    assert "is a folder that already holds files" in captured.err and "Traceback" not in captured.err
    assert f"resume_from_checkpoint {other / 'checkpoint-2'} is not a checkpoint of this folder" in captured.err
    assert f"`--output_dir {other}` to continue that run in its own folder" in captured.err
    assert "trained" not in captured.out and listing(mine) == before
    # Into a new folder it continues from that checkpoint; the checkpoint's own folder is left as it was.
    source = listing(other / "checkpoint-2")
    assert main(["train", DEMO, "--output_dir", str(fresh), "--max_steps", "4", "--save_total_limit", "1",
                 "--resume_from_checkpoint", str(other / "checkpoint-2"), *FAST]) == 0  # fmt: skip
    assert "curriculum resumed from" in capsys.readouterr().out
    assert sorted(p.name for p in fresh.glob("checkpoint-*")) == ["checkpoint-4"]
    assert listing(other / "checkpoint-2") == source


def test_rotation_deletes_only_checkpoints_this_run_wrote(tmp_path):
    """transformers' `save_total_limit` rotation deletes every `checkpoint-*` folder in `output_dir`, oldest first
    (a glob: `checkpoint-1-keep` too); a run given a folder holding a user's checkpoints deleted them."""
    from grpo_curriculum.cli.build import build_trainer
    from grpo_curriculum.config.recipe import load_recipe

    out = tmp_path / "run"
    for name in ("checkpoint-50", "checkpoint-1-keep"):
        (out / name).mkdir(parents=True)
        (out / name / "trainer_state.json").write_text('{"a user\'s": "file"}')
    settings = dict(warm_start_steps=0, save_strategy="steps", save_steps=1, save_total_limit=1)
    trainer = build_trainer(load_recipe(DEMO, {"max_steps": 3, **settings}), output_dir=str(out))
    trainer.train()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint-1-keep", "checkpoint-3", "checkpoint-50"]  # fmt: skip
    # Resumed in its own folder, the run's earlier checkpoints are its own: rotated away as transformers does.
    trainer = build_trainer(load_recipe(DEMO, {"max_steps": 5, **settings}), output_dir=str(out))
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-3"))
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint-1-keep", "checkpoint-5", "checkpoint-50"]  # fmt: skip
    assert (out / "checkpoint-50" / "trainer_state.json").read_text() == '{"a user\'s": "file"}'


# --- 2. staging folders ------------------------------------------------------------------------------------------


def test_the_next_demo_keeps_a_finished_run_whose_final_rename_failed(tmp_path, capsys):
    """The error said "the complete run is in .out.partial-...: move it"; the next demo removed it (a dead PID)."""
    out = tmp_path / "out"
    out.mkdir()  # empty: accepted
    process = subprocess.Popen([sys.executable, "-m", "grpo_curriculum", "demo", "--out", str(out),
                                "--max-steps", "2"], env=ENV, cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob(".out.partial-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    (out / "late.txt").write_text("a file that appeared meanwhile")  # the final rename onto `out` then fails
    error = process.communicate(timeout=300)[1]
    assert process.returncode == 2, error
    [staging] = tmp_path.glob(".out.partial-*")
    assert f"the complete run is in {staging}: move it where you want it" in error and "Traceback" not in error
    finished = listing(staging)
    assert "trainer_state.json" in finished and "curriculum.png" in {p.name for p in staging.iterdir()}
    (out / "late.txt").unlink()
    assert main(["demo", "--out", str(out), "--max-steps", "2"]) == 0  # the dead demo's finished run is kept
    assert listing(staging) == finished and (out / "trainer_state.json").is_file()


def test_stale_staging_folders_are_matched_by_name_not_as_a_glob_pattern_and_need_the_marker(tmp_path):
    """`--out '?5'` removed `.d5.partial-*` (the name went into a glob); a folder without the marker is kept."""
    from grpo_curriculum.demo import models

    def staging(name, pid, marker=True):
        folder = tmp_path / name
        folder.mkdir()
        if marker:
            owner = {"program": "grpo-curriculum", "pid": pid, "host": models.socket.gethostname()}
            (folder / getattr(models, "UNFINISHED", ".grpo-curriculum-unfinished")).write_text(json.dumps(owner))
        return folder

    dead, host = dead_pid(), models._owner_tag().rsplit("-", 1)[0]  # named as `partial_folder` names them
    d5 = staging(f".d5.partial-{host}-{dead}-abc", dead)
    finished = staging(f".d5.partial-{host}-{dead}-def", dead, marker=False)  # a finished run, waiting to be moved
    alive = staging(f".d5.partial-{host}-{os.getpid()}-ghi", os.getpid())
    assert models.remove_stale_partials(tmp_path / "?5") == [] and d5.exists()
    assert models.remove_stale_partials(tmp_path / "[d]5") == [] and d5.exists()
    assert models.remove_stale_partials(tmp_path / "d5") == [d5]
    assert finished.exists() and alive.exists()
    fresh = models.partial_folder(tmp_path / "d5")
    assert models.unfinished_owner(fresh)["pid"] == os.getpid()
    models.mark_finished(fresh)
    assert models.unfinished_owner(fresh) is None and list(fresh.iterdir()) == []


# --- 3. the lock -------------------------------------------------------------------------------------------------


def test_a_second_sweep_demo_or_train_into_a_sweeps_folder_exits_2_naming_it(tmp_path, capsys, recipe):
    """The second sweep removed the first one's run in progress and both trained into it (a raw FileExistsError)."""
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "grpo_curriculum", "sweep", recipe, "--num-generations", "2", "4",
               "--max-steps", "4", "--held-out", "8", "--eval-every", "2", "--out", str(out)]  # fmt: skip
    first = subprocess.Popen(command, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    running = out / "arms" / "g2" / "seed-0"
    deadline = time.monotonic() + 300
    while not running.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.exists(), first.communicate()[1]
    os.kill(first.pid, signal.SIGSTOP)  # still holding the folder, however fast its runs are (its child goes on)
    try:
        second = subprocess.run(command, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        holder = f"is in use by grpo-curriculum sweep (PID {first.pid} on host "
        assert second.returncode == 2 and holder in second.stderr and "Traceback" not in second.stderr, second.stderr
        assert main(["demo", "--out", str(out), "--max-steps", "2"]) == 2
        assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "2"]) == 2
        error = capsys.readouterr().err
        assert error.count(holder) == 2 and "Traceback" not in error
    finally:
        os.kill(first.pid, signal.SIGCONT)
    printed, error = first.communicate(timeout=600)
    assert first.returncode == 0, error
    assert "sweep directory:" in printed and (out / "sweep.md").is_file()
    assert not os.path.lexists(tmp_path / ".sweep.grpo-curriculum.lock")  # removed by its holder


def test_a_lock_left_by_a_killed_command_is_taken_over_and_its_holder_named(tmp_path, caplog):
    from grpo_curriculum.cli.folders import hold_folder, lock_path

    out = tmp_path / "run"
    code = ("import os, signal, sys; from grpo_curriculum.cli.folders import hold_folder; "
            "hold_folder(sys.argv[1], '--out', 'sweep'); print(os.getpid(), flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, str(out)], env=ENV, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pid = int(done.stdout)
    path = Path(lock_path(out))
    assert json.loads(path.read_text())["pid"] == pid  # left behind, unlocked (the kernel released it)
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        lock = hold_folder(out, "--out", "demo")
    assert f"taking over the lock of grpo-curriculum sweep (PID {pid} on host" in caplog.text
    assert json.loads(path.read_text())["pid"] == os.getpid()
    # Another spelling of the folder (a link to it, a trailing slash) is the same folder: refused while held.
    out.mkdir()
    (tmp_path / "link").symlink_to(out, target_is_directory=True)
    for spelling in (tmp_path / "link", f"{out}/"):
        with pytest.raises(CurriculumError, match=rf"is in use by grpo-curriculum demo \(PID {os.getpid()} on host"):
            hold_folder(spelling, "--out", "sweep")
    lock.release()
    assert not path.exists()
    hold_folder(tmp_path / "link", "--out", "sweep").release()


def test_a_file_at_the_lock_path_that_is_not_a_lock_is_never_written_over(tmp_path):
    from grpo_curriculum.cli.folders import hold_folder, lock_path

    path = Path(lock_path(tmp_path / "run"))
    path.write_text("my own notes")
    with pytest.raises(CurriculumError, match="exists and is not a grpo-curriculum lock file"):
        hold_folder(tmp_path / "run", "--out", "sweep")
    assert path.read_text() == "my own notes"


def test_without_out_a_demo_picks_a_folder_no_other_command_holds(tmp_path, monkeypatch):
    """Two `make demo` at once: the second writes runs/demo-2 instead of being refused for runs/demo."""
    from grpo_curriculum.cli.folders import hold_folder
    from grpo_curriculum.cli.folders import new_folder

    monkeypatch.chdir(tmp_path)
    assert new_folder("runs/demo") == "runs/demo"
    with hold_folder("runs/demo", "--out", "demo"):  # the first demo, still training in its staging folder
        assert new_folder("runs/demo") == "runs/demo-2"
    assert new_folder("runs/demo") == "runs/demo"


# --- 9. links ----------------------------------------------------------------------------------------------------


def test_demo_into_a_link_to_an_empty_folder_writes_the_run_there(tmp_path, capsys):
    """It trained, then failed ("Not a directory") and left the run in a hidden folder."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real, target_is_directory=True)
    assert main(["demo", "--out", str(link), "--max-steps", "2"]) == 0
    captured = capsys.readouterr()
    assert f"run directory: {link} (a link to {real}) (" in captured.out and "Traceback" not in captured.err
    assert link.is_symlink() and (real / "trainer_state.json").is_file() and (real / "curriculum.png").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]  # no staging folder, no lock left
    (tmp_path / "gone").symlink_to(tmp_path / "missing")
    assert main(["demo", "--out", str(tmp_path / "gone"), "--max-steps", "2"]) == 2
    assert f"is a symbolic link to {tmp_path / 'missing'}, which does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


# --- docs/files.md: every deleting call in the package, listed with its proof ---------------------------------------

DELETING = {"rmtree", "unlink", "remove", "replace", "rename", "rmdir", "removedirs", "ftruncate", "truncate"}


def deleting_calls() -> set[tuple[str, str, str]]:
    """(file, enclosing function, call) of every call in the package that deletes or replaces a file or folder."""
    found = set()
    for path in sorted((ROOT / "grpo_curriculum").rglob("*.py")):
        tree = ast.parse(path.read_text())
        scopes = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                scopes[child] = node
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr not in DELETING:
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in ("os", "shutil"):
                call = f"{owner.id}.{node.func.attr}"
            elif node.func.attr in ("remove", "replace", "truncate"):  # list.remove, str.replace, ...: not files
                continue
            else:
                call = f"Path.{node.func.attr}"
            names, scope = [], scopes.get(node)
            while scope is not None:
                if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.append(scope.name)
                scope = scopes.get(scope)
            found.add((str(path.relative_to(ROOT)), ".".join(reversed(names)) or "<module>", call))
    return found


def test_every_deleting_call_in_the_package_is_listed_in_docs_files_md():
    listed = set(re.findall(r"^- `([\w/.]+\.py):([\w.<>]+)` `([\w.]+)`", (ROOT / "docs" / "files.md").read_text(),
                            re.MULTILINE))  # fmt: skip
    calls = deleting_calls()
    assert len(calls) >= 10  # the scan finds them (the package has more than ten)
    assert not calls - listed, f"list these in docs/files.md with the proof they rely on: {sorted(calls - listed)}"
    assert not listed - calls, f"docs/files.md lists calls the package no longer makes: {sorted(listed - calls)}"


# --- issue 35: `~`, nesting, lock files created whole ---------------------------------------------------------------


def test_a_tilde_path_is_the_users_home_folder_in_every_check_never_a_literal_tilde_folder(tmp_path, monkeypatch,
                                                                                           capsys, recipe):
    """`--output_dir '~/x'` wrote over `$HOME/x/config.json`: the checks looked at a literal `./~/x`."""
    home, work = tmp_path / "home", tmp_path / "work"
    for name in ("x", "sw", "y"):
        (home / name).mkdir(parents=True)
        (home / name / "config.json").write_text("mine")
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    before = listing(home)
    assert main(["train", DEMO, "--output_dir", "~/x", "--max_steps", "2"]) == 2
    assert main(["demo", "--out", "~/x", "--max-steps", "2"]) == 2
    assert main(["sweep", recipe, "--num-generations", "2", "--max-steps", "2", "--out", "~/sw"]) == 2
    import yaml

    data = yaml.safe_load(Path(recipe).read_text())
    (work / "r.yaml").write_text(yaml.safe_dump({**data, "output_dir": "~/y"}))
    assert main(["train", "~/../work/r.yaml", "--max_steps", "2"]) == 2  # the recipe path is expanded too
    error = capsys.readouterr().err
    assert error.count("is a folder that already holds files") == 4 and "Traceback" not in error, error
    assert [line.rsplit("/", 1)[-1] for line in re.findall(r"= '([^']*)': is a folder", error)] == ["x", "x", "sw", "y"]
    assert listing(home) == before and sorted(os.listdir(work)) == ["r.yaml"]  # no `./~`, no lock left


def _holding(folder: Path) -> subprocess.Popen:
    """Another process holding `folder`'s lock as `train` would, until it is killed."""
    code = ("import sys, time; from grpo_curriculum.cli.folders import hold_folder; "
            "hold_folder(sys.argv[1], 'output_dir', 'train'); print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], env=ENV, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_run_folder_inside_or_around_a_folder_another_command_writes_is_refused_naming_it(tmp_path, capsys):
    """`demo --out RUN/nested` ran (exit 0) inside a `train`'s RUN, whose rotation and final save then owned it."""
    from grpo_curriculum.cli.folders import hold_folder

    run = tmp_path / "run"
    holder = _holding(run)
    try:
        assert main(["demo", "--out", str(run / "nested"), "--max-steps", "2"]) == 2
        assert main(["train", DEMO, "--output_dir", str(run / "a" / "b"), "--max_steps", "2"]) == 2
        error = capsys.readouterr().err
        assert error.count(f"is inside {run}, which grpo-curriculum train (PID {holder.pid} on host") == 2, error
        assert not run.exists()  # nothing was written inside it, not even a lock
        with hold_folder(tmp_path / "other", "--out", "demo"):  # a sibling is fine
            pass
    finally:
        holder.kill()
        holder.wait()
    inner = tmp_path / "outer" / "inner"
    holder = _holding(inner)
    try:  # the folder above one a command writes (resuming it, or a sweep reusing it) is refused too
        with pytest.raises(CurriculumError, match=rf"holds {inner}, which grpo-curriculum train \(PID {holder.pid}"):
            hold_folder(tmp_path / "outer", "--out", "sweep")
    finally:
        holder.kill()
        holder.wait()
    hold_folder(tmp_path / "outer", "--out", "sweep").release()  # its holder ended: free
    hold_folder(run / "nested", "--out", "demo").release()


def test_the_lock_is_never_written_into_an_existing_file_such_as_a_hard_link_to_a_users_file(tmp_path):
    """The lock record was written into a hard-linked user file: an existing empty file was taken as a lock."""
    from grpo_curriculum.cli.folders import hold_folder, lock_path

    path = Path(lock_path(tmp_path / "run"))
    for content in ("", json.dumps({"program": "grpo-curriculum", "command": "train", "pid": dead_pid()})):
        mine = tmp_path / "mine.txt"
        mine.write_text(content)
        os.link(mine, path)
        with pytest.raises(CurriculumError, match="exists and is not a grpo-curriculum lock file"):
            hold_folder(tmp_path / "run", "--out", "demo")
        assert mine.read_text() == content and path.read_text() == content
        path.unlink()
    lock = hold_folder(tmp_path / "run", "--out", "demo")  # nothing there: created whole, one link, no leftovers
    assert json.loads(path.read_text())["pid"] == os.getpid() and path.stat().st_nlink == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, "mine.txt"]
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


# --- issue 35: unwritable places (real file systems: a read-only and a full tmpfs) -----------------------------------


def _mount(where: Path, options: str) -> bool:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True).returncode == 0


def _can_mount() -> bool:
    """Root with tmpfs mounts (this project's machines and CI)."""
    import tempfile

    where = Path(tempfile.mkdtemp())
    try:
        return _mount(where, "size=64k") and subprocess.run(["umount", str(where)]).returncode == 0
    except OSError:  # no mount command
        return False
    finally:
        where.rmdir()


MOUNTS = pytest.mark.skipif(not _can_mount(), reason="needs root and tmpfs mounts (this project's CI has both)")


@pytest.fixture
def small_disk(tmp_path):
    """A 640 KiB tmpfs: one checkpoint of the demo's model (~352 KiB) fits, the second does not."""
    where = tmp_path / "disk"
    where.mkdir()
    assert _mount(where, "size=640k")
    yield where
    subprocess.run(["umount", "-l", str(where)])


def _train(out, *extra):
    return main(["train", DEMO, "--output_dir", str(out), "--max_steps", "6", *FAST, "--report_to", "none", *extra])


@MOUNTS
def test_a_full_disk_at_a_save_names_the_last_complete_checkpoint_and_a_full_disk_at_resume_leaves_no_lock(
        small_disk, capsys):
    """A full disk at a save ended in torch's `RuntimeError: ... unexpected pos` traceback; resuming on a full disk
    ended in an `OSError` in folders.py and left a 0-byte lock behind."""
    run = small_disk / "run"
    assert _train(run) == 1
    error = capsys.readouterr().err
    assert f"grpo-curriculum train: error: writing {run / 'checkpoint-4'} failed: " in error, error[-2000:]
    assert "MiB free on its file system. Training stopped at step 4; the last complete checkpoint is " \
           f"{run / 'checkpoint-2'}. Resume from it with:" in error and "Traceback" not in error
    with pytest.raises(OSError):  # whatever is left (creating the file may already fail)
        with open(small_disk / "filler", "wb") as file:
            while True:
                file.write(b"\0" * 4096)
                file.flush()
    assert _train(run, "--resume_from_checkpoint", "true") == 2
    error = capsys.readouterr().err
    assert "/disk/run': cannot be locked: " in error and "lock cannot be created (No space left on device)" in error
    assert not [p for p in small_disk.iterdir() if ".grpo-curriculum.lock" in p.name]  # no empty lock, no temporary


@MOUNTS
def test_a_read_only_output_dir_is_refused_before_any_model_loads_even_when_resuming(small_disk, capsys):
    """An output_dir on a read-only file system: a `PermissionError` traceback after the model was built; a resume
    even trained 2 steps first."""
    run = small_disk / "run"
    assert main(["train", DEMO, "--output_dir", str(run), "--max_steps", "2", *FAST, "--report_to", "none"]) == 0
    capsys.readouterr()
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)]).returncode == 0
    before = listing(run)
    assert _train(small_disk / "new") == 2
    assert _train(run, "--resume_from_checkpoint", "true") == 2
    error = capsys.readouterr().err
    assert error.count("cannot be written: Read-only file system in") == 2 and "Traceback" not in error, error
    assert "loading torch" in error and "torch threads" not in error  # refused before the model was built
    assert listing(run) == before


def test_two_processes_give_one_verdict_on_an_empty_output_dir(tmp_path):
    """
    Issue 45, item 3: under `torchrun`, rank 0's writability probe (a file it creates inside an existing empty
    `output_dir`) made rank 1 see "a folder that already holds files" and exit 2 while rank 0 trained on; replayed
    deterministically (tests/probe_race.py holds the probe until rank 1 has checked). Both ranks pass the checks now.
    """
    run_dir, out = tmp_path / "run", tmp_path / "out"
    run_dir.mkdir()
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(ROOT / "tests" / "probe_race.py"), str(out), str(run_dir)]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [rank["code"] for rank in ranks] == [0, 0], (ranks, done.stderr[-2000:])
    assert list(run_dir.iterdir()) == []  # the probe is gone: nothing written


def test_two_processes_both_refuse_an_output_dir_that_holds_a_users_file(tmp_path):
    """Issue 55, item 7: the other half of one verdict. Under `torchrun` every rank checks the folder (not rank 0
    alone): with a file of the user's in it, both exit 2 naming it, and the file is untouched."""
    run_dir, out = tmp_path / "run", tmp_path / "out"
    run_dir.mkdir()
    out.mkdir()
    (run_dir / "notes.txt").write_text("the user's")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(ROOT / "tests" / "probe_race.py"), str(out), str(run_dir), "plain"]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [rank["code"] for rank in ranks] == [2, 2], (ranks, done.stderr[-2000:])
    assert all("is a folder that already holds files" in rank["stderr"] for rank in ranks), ranks
    assert listing(run_dir) == {"notes.txt": b"the user's"}
