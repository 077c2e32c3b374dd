"""Checkpoint and resume: the curriculum continues exactly where it stopped, also after SIGKILL."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.training.files import CurriculumStateError
from grpo_curriculum.training.state import read_state
from grpo_curriculum.training.trainer import CurriculumRLOOTrainer

from .conftest import RoundRecorder, assert_whole_groups, indexed_dataset, per_prompt_stages
from .test_trainer import make_trainer

ROOT = Path(__file__).resolve().parent.parent
RESUME_RUN = [sys.executable, str(ROOT / "tests" / "resume_run.py")]  # a run a test kills and resumes

STAGES = [
    Stage(num_generations=2, temperature=0.7, until_step=5),
    Stage(num_generations=4, temperature=1.1, until_step=7),
    Stage(num_generations=8, temperature=1.3),
]
DEFERRING = dict(lookahead=2, defer=True)  # per-prompt rounds that compare and defer prompts


def rounds(recorder):
    return [(c["step"], c["num_generations"], c["temperature"], tuple(c["idx"])) for c in recorder.calls]


@pytest.mark.parametrize(
    ("geometry", "resume_step"),
    [
        (dict(), 4),  # one round per optimizer step; the switch at step 5 comes right after the resume point
        (dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4), 3),  # mid-round
    ],
    ids=["at-round-boundary", "mid-round"],
)
def test_resume_sees_the_same_rounds(tmp_path, geometry, resume_step):
    overrides = dict(max_steps=9, save_strategy="steps", save_steps=1, shuffle_dataset=True, **geometry)
    full, full_recorder = make_trainer(tmp_path / "full", STAGES, **overrides)
    full.train()
    expected = rounds(full_recorder)

    resumed, recorder = make_trainer(tmp_path / "resumed", STAGES, **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / f"checkpoint-{resume_step}"))
    got = rounds(recorder)
    # The run that never stopped, from the round in progress at the checkpoint on.
    # A checkpoint taken inside a round makes TRL regenerate that round at the resume step (its samples are not in
    # the checkpoint): the same G, temperature and prompts, drawn again.
    first = max(i for i, r in enumerate(expected) if r[0] <= resume_step)
    assert got[0][1:] == expected[first][1:]
    assert got[1:] == expected[first + 1 :]
    assert resumed._curriculum.switches == full._curriculum.switches
    assert [h.get("curriculum/num_generations") for h in resumed.state.log_history if "loss" in h] == [
        h.get("curriculum/num_generations") for h in full.state.log_history if "loss" in h
    ]


def settled_or_mixed(prompts, completions, idx, **kwargs):
    """Prompts with index % 3 == 0 always score 1 (solved), == 1 always 0 (hopeless), the others alternate (mixed)."""
    return [1.0 if i % 3 == 0 else 0.0 if i % 3 == 1 else float(j % 2) for j, i in enumerate(idx)]


@pytest.mark.parametrize(
    ("geometry", "resume_step"),
    [(dict(max_steps=14), 8),
     (dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4, max_steps=24), 17)],
    ids=["at-round-boundary", "mid-round"],
)
def test_per_prompt_resume_replays_the_same_rounds(tmp_path, geometry, resume_step):
    """Prompts, each prompt's G and the deferrals after a resume are those of the run that never stopped."""
    stages = per_prompt_stages((2, 4, 8), **DEFERRING)
    overrides = dict(save_strategy="steps", save_steps=1, shuffle_dataset=True,
                     per_device_train_batch_size=geometry.pop("per_device_train_batch_size", 8), **geometry)  # fmt: skip
    make = lambda name: make_trainer(tmp_path / name, stages, recorder=RoundRecorder(settled_or_mixed),  # noqa: E731
                                     dataset=indexed_dataset(12), **overrides)  # fmt: skip
    full, full_recorder = make("full")
    full.train()
    expected = [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in full_recorder.calls]
    assert len({sizes for _, sizes, _ in expected}) > 1 and full._curriculum.deferred_total > 0  # things happen

    resumed, recorder = make("resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / f"checkpoint-{resume_step}"))
    got = [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in recorder.calls]
    first = max(i for i, r in enumerate(expected) if r[0] <= resume_step)
    assert got[0][1:] == expected[first][1:]  # a round in progress is regenerated with its prompts and sizes
    assert got[1:] == expected[first + 1 :]
    assert resumed._curriculum.deferred_total == full._curriculum.deferred_total
    logged = lambda trainer: [(h["step"], h["curriculum/num_generations"], h["curriculum/prompts"])  # noqa: E731
                              for h in trainer.state.log_history if "loss" in h]  # fmt: skip
    assert logged(resumed) == logged(full)


def test_resume_from_a_checkpoint_without_curriculum_state_fails_clearly(tmp_path):
    plain, _ = make_trainer(tmp_path / "plain", None, max_steps=2, save_strategy="steps", save_steps=2)
    plain.train()
    trainer, recorder = make_trainer(tmp_path / "cur", STAGES, max_steps=9)
    with pytest.raises(CurriculumStateError, match="holds no curriculum_state.json.*not written by CurriculumGRPOTrainer"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "plain" / "checkpoint-2"))
    assert recorder.calls == []


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _read_rounds(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_sigkill_then_resume_continues_the_schedule(tmp_path, reference_rounds):
    killed = tmp_path / "killed"
    killed.mkdir()
    process = subprocess.Popen([*RESUME_RUN, str(killed), "--sleep", "0.4"], env=_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 240
    while not (killed / "checkpoint-4" / "trainer_state.json").exists():
        assert process.poll() is None and time.time() < deadline, "the run ended before its checkpoint at step 4"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)  # anywhere after checkpoint-4, possibly inside the writing of the next one
    process.wait()
    complete = [int(p.parent.name.split("-")[1]) for p in killed.glob("checkpoint-*/trainer_state.json")]
    assert max(complete) < 12, "SIGKILL came after the run finished"
    last = max(complete)  # the resume starts from the newest complete checkpoint
    before = len(_read_rounds(killed / "rounds.jsonl"))

    subprocess.run([*RESUME_RUN, str(killed), "--resume"], env=_env(), check=True, timeout=300, capture_output=True)
    after = [(r["step"], r["G"], r["T"], r["idx"]) for r in _read_rounds(killed / "rounds.jsonl")[before:]]
    assert after == reference_rounds[last:]  # one round per step: the resumed run redoes step `last` onwards
    assert {r[1] for r in after} >= {8}  # the schedule went on to its last stage


@pytest.fixture(scope="module")
def reference_rounds(tmp_path_factory):
    """The rounds of `tests/resume_run.py` run to the end without a stop (in this process: no interpreter to start)."""
    from . import resume_run

    reference = tmp_path_factory.mktemp("reference")
    resume_run.main([str(reference)])
    return [(r["step"], r["G"], r["T"], r["idx"]) for r in _read_rounds(reference / "rounds.jsonl")]


@pytest.mark.parametrize(("point", "resumes_at"), [("after-model", 4), ("after-curriculum", 4), ("before-rotation", 6)])
def test_sigkill_while_writing_a_checkpoint_never_loses_the_run(tmp_path, reference_rounds, point, resumes_at):
    """
    SIGKILL inside the writing of checkpoint-6 (save_total_limit 1): `resume_from_checkpoint=True` resumes from the
    newest complete checkpoint (4 when 6 was half-written, with a warning naming it; 6 once complete) and the run
    continues exactly as the run that never stopped.
    """
    env, script = _env(), RESUME_RUN
    killed = tmp_path / "killed"
    killed.mkdir()
    run = subprocess.run([*script, str(killed), "--kill-at", f"{point}:6", "--save-total-limit", "1"], env=env,
                         timeout=300, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    newest = killed / "checkpoint-6"
    assert newest.is_dir() and (newest / "trainer_state.json").exists() == (point == "before-rotation")
    assert (newest / "curriculum_state.json").exists() == (point != "after-model")
    before = len(_read_rounds(killed / "rounds.jsonl"))

    resumed = subprocess.run([*script, str(killed), "--resume", "--save-total-limit", "1"], env=env, timeout=300,
                             capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"skipping {newest}: it was not completely written" in resumed.stderr) == (resumes_at == 4)
    after = [(r["step"], r["G"], r["T"], r["idx"]) for r in _read_rounds(killed / "rounds.jsonl")[before:]]
    assert after == reference_rounds[resumes_at:]  # one round per step


def test_resume_on_another_geometry_revalidates(tmp_path):
    """Resuming with another batch geometry (as on another process count): valid G continue, invalid ones stop first."""
    overrides = dict(max_steps=9, save_strategy="steps", save_steps=4, shuffle_dataset=True)
    full, _ = make_trainer(tmp_path / "full", STAGES, **overrides)
    full.train()
    checkpoint = str(tmp_path / "full" / "checkpoint-4")

    from grpo_curriculum import CurriculumError

    with pytest.raises(CurriculumError, match=r"stages\[2\]\.num_generations = 8.*generation batch 4") as error:
        make_trainer(tmp_path / "smaller", STAGES, per_device_train_batch_size=4, **overrides)
    assert "fix: use num_generations 4" in str(error.value)

    bigger, recorder = make_trainer(tmp_path / "bigger", STAGES, per_device_train_batch_size=16, **overrides)
    bigger.train(resume_from_checkpoint=checkpoint)
    assert [(c["step"], c["num_generations"]) for c in recorder.calls] == [(4, 2), (5, 4), (6, 4), (7, 8), (8, 8)]
    for call in recorder.calls:
        assert len(call["idx"]) == 16
        assert len(set(call["idx"])) == 16 // call["num_generations"]


# --- damaged or mismatched curriculum state ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A finished run with checkpoints at steps 2, 4, 6, 8 and 9 (the schedule of `STAGES`)."""
    folder = tmp_path_factory.mktemp("saved")
    trainer, _ = make_trainer(folder, STAGES, max_steps=9, save_strategy="steps", save_steps=2)
    trainer.train()
    return folder


def damaged_copy(saved_run, tmp_path, edit):
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(saved_run / "checkpoint-4", checkpoint)
    path = checkpoint / "curriculum_state.json"
    edit(path)
    return checkpoint


def set_field(key, value):
    def edit(path):
        state = json.loads(path.read_text())
        state[key] = value
        path.write_text(json.dumps(state))

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.write_text(p.read_text()[:50]), r"cannot be read .*the file is damaged"),
        (lambda p: p.write_text('{"version": 2}'), r"lacks global_step, micro_step, .*the file is damaged"),
        (set_field("version", 99), r"has version 99; this grpo-curriculum reads versions 2 and 3"),
        (set_field("version", 1), r"has version 1"),
        (set_field("global_step", 2), r"saved at step 2, but the checkpoint's trainer state is at step 4"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00binary"), r"cannot be read"),
    ],
    ids=["truncated", "missing-keys", "future-version", "old-version", "other-step", "binary"],
)
def test_damaged_state_fails_clearly_before_any_step(saved_run, tmp_path, edit, message):
    checkpoint = damaged_copy(saved_run, tmp_path, edit)
    trainer, recorder = make_trainer(tmp_path / "resumed", STAGES, max_steps=9)
    with pytest.raises(CurriculumStateError, match=message) as error:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert str(checkpoint) in str(error.value) and "Fix:" in str(error.value)
    assert recorder.calls == []


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([STAGES[0], Stage(num_generations=4, temperature=1.1)], r"3 stages saved, 2 now"),
        ([STAGES[0], Stage(temperature=1.0, adaptive=Adaptive((2, 4)), until_step=7), STAGES[2]],
         r"stage 1: \{'num_generations': 4\} saved, \{'policy': 'hysteresis', 'num_generations': \[2, 4\]\} now"),
        ([STAGES[0], STAGES[1], Stage(num_generations=4, temperature=1.3)], r"stage 2: .*8.* saved, .*4.* now"),
    ],
    ids=["fewer-stages", "fixed-made-adaptive", "other-g"],
)
def test_resume_with_an_edited_schedule_fails_clearly(saved_run, tmp_path, stages, message):
    trainer, recorder = make_trainer(tmp_path / "resumed", stages, max_steps=9)
    with pytest.raises(CurriculumStateError, match=message) as error:
        trainer.train(resume_from_checkpoint=str(saved_run / "checkpoint-4"))
    assert "resume with the recipe (curriculum) the checkpoint was written with" in str(error.value)
    assert recorder.calls == []


def test_resume_true_skips_a_half_written_newest_checkpoint(saved_run, tmp_path, caplog):
    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    (output / "checkpoint-9" / "trainer_state.json").write_text('{"global_step": 9, "log_hi')  # cut while writing
    (output / "checkpoint-8" / "curriculum_state.json").unlink()  # killed before the curriculum state
    trainer, recorder = make_trainer(output, STAGES, max_steps=9, save_strategy="steps", save_steps=2)
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        trainer.train(resume_from_checkpoint=True)
    for step in (9, 8):
        assert f"skipping {output / f'checkpoint-{step}'}: it was not completely written" in caplog.text
    assert [c["step"] for c in recorder.calls] == [6, 7, 8]  # resumed from checkpoint-6


def test_resume_true_skips_a_newest_checkpoint_whose_curriculum_state_is_of_another_step(saved_run, tmp_path, caplog):
    """checkpoint-9 holds checkpoint-8's curriculum state (a copy gone wrong): resume=True falls back to checkpoint-8,
    naming the mismatch, instead of choosing checkpoint-9 and failing at the resume."""
    from grpo_curriculum.training.checkpoint import newest_complete_checkpoint

    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    shutil.copy(output / "checkpoint-8" / "curriculum_state.json", output / "checkpoint-9" / "curriculum_state.json")
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        assert newest_complete_checkpoint(output) == str(output / "checkpoint-8")
    assert f"skipping {output / 'checkpoint-9'}" in caplog.text and "saved at step 8" in caplog.text


def test_mid_round_checkpoint_resumes_on_another_valid_geometry(tmp_path):
    """Generation batch 16 -> 12 (steps_per_generation 4 -> 3): the round in progress is rebuilt for the new batch."""
    stages = [Stage(num_generations=2, temperature=0.7, until_step=4), Stage(num_generations=4, temperature=1.0)]
    geometry = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, save_strategy="steps", save_steps=1,
                    max_steps=8)  # fmt: skip
    full, _ = make_trainer(tmp_path / "full", stages, steps_per_generation=4, **geometry)
    full.train()  # rounds at steps 0, 2, 4, 6: checkpoint-3 is inside the round started at step 2
    resumed, recorder = make_trainer(tmp_path / "resumed", stages, steps_per_generation=3, **geometry)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    assert recorder.calls and all(len(c["idx"]) == 12 for c in recorder.calls)
    assert [c["num_generations"] for c in recorder.calls][-1] == 4
    for call in recorder.calls:
        assert_whole_groups(call["idx"], call["num_generations"])


# --- everything resume reads back is bounded and validated (issue 20) -------------------------------------------


def set_path(dotted, value):
    """An edit of `curriculum_state.json` setting the value at a dotted key path (`callback.current.stage`)."""

    def edit(path):
        state = json.loads(path.read_text())
        *parents, last = dotted.split(".")
        node = state
        for key in parents:
            node = node[key]
        node[last] = value
        path.write_text(json.dumps(state))

    return edit


def set_array(name, fill=None, values=None):
    """An edit of `curriculum_arrays.npz` (next to the state): every value of array `name` set to `fill` (its length
    kept), or the array replaced by `values`."""

    def edit(path):
        import numpy as np

        arrays_path = path.parent / "curriculum_arrays.npz"
        with np.load(arrays_path) as found:
            arrays = {key: found[key] for key in found.files}
        arrays[name] = np.asarray(values) if values is not None else np.full(len(arrays[name]), fill)
        np.savez_compressed(arrays_path, **arrays)

    return edit


def shift_array(name, by):
    """An edit of `curriculum_arrays.npz` (next to the state) adding `by` to every value of array `name`."""

    def edit(path):
        import numpy as np

        arrays_path = path.parent / "curriculum_arrays.npz"
        with np.load(arrays_path) as found:
            arrays = {key: found[key] for key in found.files}
        arrays[name] = arrays[name] + by
        np.savez_compressed(arrays_path, **arrays)

    return edit


@contextlib.contextmanager
def deadline(seconds):
    """Fail (rather than hang) when the block runs longer than `seconds`: SIGALRM interrupts a blocked `open` too."""

    def expired(signum, frame):
        raise AssertionError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


SWITCH = {"step": 3, "round": 3, "from": {"stage": 0, "num_generations": 2, "temperature": 0.7},
          "to": {"stage": 1, "num_generations": 4, "temperature": 1.1}, "reason": "stage 1 starts"}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (set_path("callback.rounds", "4"), r"callback\.rounds = '4': must be an integer >= 0"),
        (set_path("stream", [1, 2]), r"stream = \[1, 2\]: must be a mapping"),
        (set_path("callback.switches", {"step": 5}), r"callback\.switches = .*: must be a list"),
        (set_path("callback.current.stage", 7), r"callback\.current\.stage = 7: must be a stage index below 3"),
        (set_path("callback.current.num_generations", 6), r"current\.num_generations = 6: must be the stage's G, 2"),
        (set_path("callback.current.temperature", math.nan), r"current\.temperature = nan: must be a finite number"),
        (set_path("callback.current.temperature", 1e-300),
         r"current\.temperature = 1e-300: must be a finite number >= 0\.01"),
        (set_path("stream.epoch", 10**9), r"stream\.epoch = 1000000000: must be at most 3 x callback\.rounds \+ 1"),
        (set_path("round_start_stream.epoch", 10**9), r"round_start_stream\.epoch = 1000000000: must be at most 3 x "),
        (set_path("stream.position", -3), r"stream\.position = -3: must be an integer >= 0"),
        (set_path("micro_step", 1), r"callback\.rounds = 4: must be at most micro_step \+ 1 = 2"),
        (set_array("prompt_report.count", -1), r"prompt_report\.count\[0\] = -1: must be a finite number in"),
        (set_array("prompt_report.mean", math.nan), r"prompt_report\.mean\[0\] = nan: must be a finite number"),
        (set_array("prompt_report.seen", values=[1, 2]), r"prompt_report: must hold arrays of one length"),
        (set_array("prompt_report.slots", values=[[1, 2]]), r"prompt_report\.slots = .*: must be a one-dimension"),
        (set_path("callback.defaults.top_up_prompts", "half"), r"callback\.defaults\.top_up_prompts = 'half': must "),
        (set_path("callback.defaults.skip_target", 7),
         r"callback\.defaults\.skip_target = 7: must be a number in \[0, 1\)"),
        # Issue 35: values the recipe and the dataset the run resumes with cannot use.
        (set_path("stream.position", 49), r"stream\.position = 49: must be at most the dataset's 48 prompts"),
        (set_path("round_start_stream", {"epoch": 1, "position": 10**6}),
         r"round_start_stream\.position = 1000000: must be at most the dataset's 48 prompts"),
        (set_path("callback.current.top_up", {"pilot": 2, "largest": 8, "prompts": None}),
         r"callback\.current\.top_up = .*: must be null: stage 0 of the recipe is not a top-up stage"),
        (set_path("callback.current.dynamic_sampling", {"max_rounds": 1024, "on_limit": "mask"}),
         r"callback\.current\.dynamic_sampling = .*: must be null: stage 0 of the recipe has no `dynamic_sampling`"),
        (set_path("callback.current.dynamic_sampling", {"max_rounds": 0, "on_limit": "mask"}),
         r"callback\.current\.dynamic_sampling\.max_rounds = 0: must be a positive integer"),
        (set_path("callback.switches", [SWITCH] * 10_001), r"callback\.switches = '10001 values': must hold at most "
                                                           r"10000 values"),
        (set_path("callback.switches", [SWITCH, SWITCH]), r"callback\.switches = '2 records': must be at most one a "
                                                          r"round: increasing rounds of at most callback\.rounds = 4"),
    ],
    ids=["rounds-str", "stream-list", "switches-dict", "stage-7-of-3", "g-not-the-stage's", "nan-temperature",
         "tiny-temperature", "huge-epoch", "huge-round-start-epoch", "negative-position", "rounds-beyond-micro-steps",
         "negative-count", "nan-mean", "lengths", "2d-slots", "unknown-top-up-rule", "skip-target-7",
         "position-past-the-dataset",
         "round-start-past-the-dataset", "injected-top-up", "injected-dynamic-sampling", "endless-dynamic-sampling",
         "too-many-switches", "two-switches-a-round"],
)  # fmt: skip
def test_wrong_or_out_of_range_state_fails_clearly_before_any_step(saved_run, tmp_path, edit, message):
    checkpoint = damaged_copy(saved_run, tmp_path, edit)
    trainer, recorder = make_trainer(tmp_path / "resumed", STAGES, max_steps=9)
    with deadline(60), pytest.raises(CurriculumStateError, match=message) as error:  # epoch 1e9: a billion passes
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert str(checkpoint / "curriculum_state.json") in str(error.value) and "Fix:" in str(error.value)
    assert recorder.calls == []


def test_a_fifo_is_skipped_instead_of_hanging_the_resume(saved_run, tmp_path, caplog):
    """A FIFO for checkpoint-9's state: resume=True blocked forever opening it; now it is skipped, and a checkpoint
    path holding one is one error."""
    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    fifo = output / "checkpoint-9" / "curriculum_state.json"
    fifo.unlink()
    os.mkfifo(fifo)
    trainer, recorder = make_trainer(output, STAGES, max_steps=9, save_strategy="steps", save_steps=2)
    with deadline(60), caplog.at_level("WARNING", logger="grpo_curriculum"):
        trainer.train(resume_from_checkpoint=True)
    assert f"skipping {output / 'checkpoint-9'}: it was not completely written" in caplog.text
    assert "is a FIFO (named pipe), not a regular file" in caplog.text
    assert [c["step"] for c in recorder.calls] == [8]  # resumed from checkpoint-8
    checkpoint = damaged_copy(saved_run, tmp_path, lambda path: (path.unlink(), os.mkfifo(path)))
    with deadline(60), pytest.raises(CurriculumStateError, match=r"is a FIFO \(named pipe\), not a regular file"):
        trainer.train(resume_from_checkpoint=str(checkpoint))


@pytest.fixture(scope="module")
def per_prompt_run(tmp_path_factory):
    """A per-prompt run with checkpoints at steps 2 and 4 (a round plan and the policy's statistics in each)."""
    folder = tmp_path_factory.mktemp("per-prompt")
    trainer, _ = make_trainer(folder, per_prompt_stages((2, 4, 8), **DEFERRING),
                              recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(12), max_steps=4,
                              save_strategy="steps", save_steps=2)  # fmt: skip
    trainer.train()
    return folder


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (set_path("round_plan.sizes", [8, 7]), r"round_plan\.sizes = \[8, 7\]: must add up to geometry\.generation"),
        (set_path("round_plan.taken", [1, 0]), r"round_plan\.taken = \[1, 0\]: must be 2 increasing positions"),
        (set_path("stream.waiting", [10**6]), r"stream\.waiting = \[1000000\]: must be increasing positions below"),
        (set_path("callback.policy.explore.easy", 3.0), r"callback\.policy\.explore\.easy = 3\.0: must be"),
        (set_path("version", 3), r"has version 3 and holds the state of the per-prompt rule"),
        (set_path("callback.policy.policy", "hysteresis"), r"callback\.policy\.above: is missing"),
        (set_array("callback.policy.stats.moments", values=[math.nan, 0.3, 0.2]),
         r"callback\.policy\.stats\.moments\[0\] = nan: must be a finite number in \[0, 1\]"),
        (set_array("callback.policy.stats.successes", -2.0),
         r"callback\.policy\.stats\.successes\[0\] = -2\.0: must be a finite number >= 0"),
        # Issue 35: positions beyond the 12 prompts of the dataset or the prompts the round looked at (IndexError).
        (set_path("stream", {"epoch": 1, "position": 13, "waiting": [8, 12]}),
         r"stream\.position = 13: must be at most the dataset's 12 prompts"),
        (set_path("round_start_stream", {"epoch": 1, "position": 11, "waiting": [6, 7]}),
         r"round_plan\.read = 2: must be at most the dataset's 12 prompts less round_start_stream\.position \(11\)"),
        (set_path("round_plan.taken", [0, 5]), r"round_plan\.taken = \[0, 5\]: must be positions below 4, the prompts "
                                               r"the round looked at"),
        (set_path("round_plan.left", [2, 9]), r"round_plan\.left = \[2, 9\]: must be positions below 4"),
        (set_path("round_plan.sizes", [3, 5]),
         r"round_plan\.sizes = \[3, 5\]: must be candidates of stage 0, \[2, 4, 8\]"),
        (shift_array("prompt_report.slots", 100), r"prompt_report\.slots\[\d+\] = 1\d\d: must be below 12, the prompt "
                                                  r"slots of this run's dataset"),
    ],
    ids=["round-of-15", "taken-decrease", "waiting-beyond-position", "explore-out-of-range", "older-per-prompt-rule",
         "other-policy", "nan-moment", "negative-successes", "position-past-the-dataset", "read-past-the-dataset",
         "taken-beyond-looked", "left-beyond-looked", "sizes-not-candidates", "report-slots-beyond-the-dataset"],
)  # fmt: skip
def test_out_of_range_per_prompt_state_fails_clearly(per_prompt_run, tmp_path, edit, message):
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(per_prompt_run / "checkpoint-4", checkpoint)
    assert json.loads((checkpoint / "curriculum_state.json").read_text())["round_plan"]["sizes"] == [4, 4]
    edit(checkpoint / "curriculum_state.json")
    trainer, recorder = make_trainer(tmp_path / "resumed", per_prompt_stages((2, 4, 8), **DEFERRING),
                                     dataset=indexed_dataset(12), max_steps=4)  # fmt: skip
    with pytest.raises(CurriculumStateError, match=message):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert recorder.calls == []


ADAPTIVE_T = [Stage(temperature=0.8, adaptive=Adaptive(num_generations=(2, 4), temperature=(0.7, 1.0)))]


@pytest.fixture(scope="module")
def adaptive_t_run(tmp_path_factory):
    """A run of an adaptive stage with temperature bounds [0.7, 1.0], a checkpoint at step 2."""
    folder = tmp_path_factory.mktemp("adaptive-t")
    make_trainer(folder, ADAPTIVE_T, max_steps=2, save_strategy="steps", save_steps=2)[0].train()
    return folder


@pytest.mark.parametrize(("edit", "message"), [
    (set_path("callback.policy.temperature", 1e-300),
     r"callback\.policy\.temperature = 1e-300: must be a finite number >= 0\.01"),  # RuntimeError (inf/nan) before
    (set_path("callback.policy.temperature", 5.0),
     r"callback\.policy\.temperature = 5\.0: must lie within stage 0's adaptive temperature bounds \[0\.7, 1\]"),
    (set_path("callback.policy.decision", [2, 0.5, None]),
     r"callback\.policy\.decision\[1\] = 0\.5: must lie within stage 0's adaptive temperature bounds"),
    (set_path("callback.current.temperature", 1.5),
     r"callback\.current\.temperature = 1\.5: must lie within stage 0's adaptive temperature bounds"),
], ids=["tiny", "above-the-bounds", "decision-below-the-bounds", "current-above-the-bounds"])  # fmt: skip
def test_an_adaptive_temperature_outside_the_stage_s_bounds_is_refused(adaptive_t_run, tmp_path, edit, message):
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(adaptive_t_run / "checkpoint-2", checkpoint)
    edit(checkpoint / "curriculum_state.json")
    trainer, recorder = make_trainer(tmp_path / "resumed", ADAPTIVE_T, max_steps=4)
    with pytest.raises(CurriculumStateError, match=message) as error:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert str(checkpoint / "curriculum_state.json") in str(error.value) and "Fix: " in str(error.value)
    assert recorder.calls == []


def test_an_oversized_state_is_refused_before_it_is_parsed(saved_run, tmp_path):
    """300k switch records (90 MB in the issue's probe) took 141 s and 900 MB to resume: refused by size, at once."""
    checkpoint = damaged_copy(saved_run, tmp_path, set_path("callback.switches", [SWITCH] * 300_000))
    assert (checkpoint / "curriculum_state.json").stat().st_size > 32 << 20
    trainer, recorder = make_trainer(tmp_path / "resumed", STAGES, max_steps=9)
    with deadline(20), pytest.raises(CurriculumStateError, match=r"curriculum_state\.json holds \d+ bytes, more than "
                                                                 r"the 33554432 read"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert recorder.calls == []


@pytest.mark.parametrize(("key", "value", "message"), [
    ("curriculum/prompts_at_gX", 3, r"log_history\[1\]\.curriculum/prompts_at_gX = 3: must name a G"),
    ("curriculum/prompts_at_g4", "many", r"log_history\[1\]\.curriculum/prompts_at_g4 = 'many': must be a finite "
                                         r"number >= 0"),
])  # fmt: skip
def test_a_trainer_state_log_line_the_run_cannot_read_is_refused(saved_run, tmp_path, key, value, message):
    """A trainer-state key `curriculum/prompts_at_gX` resumed and failed at the end of the run (`ValueError` in the
    summary of the per-prompt G): refused when the checkpoint is checked, naming the file and the key."""
    checkpoint = damaged_copy(saved_run, tmp_path, lambda path: None)
    path = checkpoint / "trainer_state.json"
    state = json.loads(path.read_text())
    state["log_history"][1][key] = value
    path.write_text(json.dumps(state))
    trainer, recorder = make_trainer(tmp_path / "resumed", STAGES, max_steps=9)
    with pytest.raises(CurriculumStateError, match=message) as error:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert str(path) in str(error.value)
    assert recorder.calls == []


def test_a_waiting_position_must_lie_below_the_stream_position(per_prompt_run, tmp_path):
    """The boundary of `stream.waiting`: positions of prompts read in this pass, so below `stream.position`; one equal
    to it (a prompt not read yet) is refused, one just below it is read."""
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(per_prompt_run / "checkpoint-4", checkpoint)
    path = checkpoint / "curriculum_state.json"
    position = json.loads(path.read_text())["stream"]["position"]
    assert position > 0
    set_path("stream.waiting", [position - 1])(path)
    assert read_state(str(checkpoint))["stream"]["waiting"] == [position - 1]
    set_path("stream.waiting", [position])(path)
    with pytest.raises(CurriculumStateError, match=rf"stream\.waiting = \[{position}\]: must be increasing positions "
                       rf"below stream\.position = {position}"):
        read_state(str(checkpoint))


def test_a_checkpoint_of_the_earlier_defaults_resumes_only_with_them(per_prompt_run, tmp_path):
    """
    A checkpoint written before the study's defaults (version 5, no `callback.defaults`) ran a per-prompt stage that
    left its knobs out with lookahead 2, weight knapsack and skip_target 0.25. Resumed with a recipe that leaves them
    at today's defaults (0, hard, 0.05) the rule would switch mid-run: the resume stops before any step, naming the knobs and
    the recipe lines that continue the run as it ran; with those lines it resumes.
    """
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(per_prompt_run / "checkpoint-2", checkpoint)
    path = checkpoint / "curriculum_state.json"
    state = json.loads(path.read_text())
    assert state["version"] == 6 and state["callback"]["defaults"] == {
        "lookahead": 0, "defer": True, "max_rounds": 2, "top_up_prompts": "largest_half", "weight": "hard",
        "skip_target": 0.05}
    del state["callback"]["defaults"]
    path.write_text(json.dumps({**state, "version": 5}))
    trainer, recorder = make_trainer(tmp_path / "today", per_prompt_stages((2, 4, 8)), dataset=indexed_dataset(12),
                                     max_steps=4)  # fmt: skip
    with pytest.raises(CurriculumStateError) as error:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    text = str(error.value)
    assert text.startswith(f"{path} does not fit this run: the checkpoint was written by a grpo-curriculum version "
                           "with other defaults (lookahead 2, weight knapsack, skip_target 0.25, max_rounds 4, "
                           "top-up prompts generation_batch_size // (2 * pilot))")
    assert "stage 0 has lookahead 0 (today's default; the checkpoint's: 2), weight hard" in text
    assert "Fix: to continue the run as it was written, set these knobs in the recipe to what it ran with " \
           "(stage 0's `adaptive`: `lookahead: 2, weight: knapsack, skip_target: 0.25`" in text
    assert recorder.calls == []
    trainer, recorder = make_trainer(tmp_path / "as-written", per_prompt_stages((2, 4, 8), **DEFERRING,
                                                                                weight="knapsack", skip_target=0.25),
                                     recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(12),
                                     max_steps=4)  # fmt: skip
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert [c["step"] for c in recorder.calls] == [2, 3]


@pytest.mark.parametrize(("defer", "refused"), [(True, True), (False, False)])
def test_skip_target_counts_in_the_resume_guard_only_where_the_stage_defers(defer, refused):
    """A state written before issue 37 (no `skip_target` among its defaults: 0.25 then) and a per-prompt stage left
    at today's 0.05: refused where the stage defers (its deferral rate would change mid-run), accepted where it does
    not (`skip_target` changes nothing there)."""
    from grpo_curriculum.training.checkpoint import defaults_changed, knob_defaults

    saved = {name: value for name, value in knob_defaults().items() if name != "skip_target"}
    stage = Stage(temperature=1.0, adaptive=Adaptive((2, 4, 8), policy="per_prompt", defer=defer))
    changed = defaults_changed([stage], {"defaults": saved, "current": None, "switches": []})
    assert (changed is not None) == refused
    if refused:
        assert "skip_target 0.05 (today's default; the checkpoint's: 0.25)" in str(changed)
        assert "`skip_target: 0.25`" in changed.fix


def test_a_top_up_checkpoint_of_the_earlier_round_size_resumes_only_with_it(tmp_path):
    """
    A top-up checkpoint whose state records no `top_up_prompts` (version 5, or the first version-6 states) ran rounds
    of the earlier default size, `generation_batch_size // (2 * pilot)`: 4 prompts at generation batch 16 with pilot
    2, where today's rule holds 16 // max(4, 8) = 2. Resumed with a stage that leaves `prompts` out, the run would
    change its rounds mid-run: refused before any step with `prompts: 4`; with that line it resumes.
    """
    stages = [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4, 8, 16), policy="top_up"))]
    geometry = dict(dataset=indexed_dataset(12), per_device_train_batch_size=16, max_steps=4)
    trainer, recorder = make_trainer(tmp_path / "run", stages, save_strategy="steps", save_steps=2, **geometry)
    trainer.train()
    assert {len(c["idx"]) for c in recorder.calls if c["num_generations"] == 2} == {4}  # 2 prompts x pilot 2: today's
    checkpoint = tmp_path / "run" / "checkpoint-2"
    path = checkpoint / "curriculum_state.json"
    state = json.loads(path.read_text())
    assert state["version"] == 6 and state["callback"]["defaults"]["top_up_prompts"] == "largest_half"
    del state["callback"]["defaults"]["top_up_prompts"]  # as the first version-6 states were written
    path.write_text(json.dumps(state))
    trainer, recorder = make_trainer(tmp_path / "today", stages, **geometry)
    with pytest.raises(CurriculumStateError) as error:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    text = str(error.value)
    assert text.startswith(f"{path} does not fit this run: the checkpoint was written by a grpo-curriculum version "
                           "with other defaults (top-up prompts generation_batch_size // (2 * pilot))")
    assert ("stage 0 has no `prompts` (today's default round size generation_batch_size // max(2 * pilot, largest // "
            "2) = 2 prompts at generation batch 16; the checkpoint's: generation_batch_size // (2 * pilot) = 4)") in text
    assert "(stage 0's `adaptive`: `prompts: 4`;" in text
    assert recorder.calls == []
    as_written = [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4, 8, 16), policy="top_up", prompts=4))]
    trainer, recorder = make_trainer(tmp_path / "as-written", as_written, **geometry)
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert sorted({c["step"] for c in recorder.calls}) == [2, 3]
    assert {len(c["idx"]) for c in recorder.calls if c["num_generations"] == 2} == {8}  # 4 prompts x pilot 2


def test_resume_true_skips_a_checkpoint_with_truncated_arrays(saved_run, tmp_path, caplog):
    """A truncated curriculum_arrays.npz counted as complete, then resume crashed with BadZipFile."""
    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    arrays = output / "checkpoint-9" / "curriculum_arrays.npz"
    arrays.write_bytes(arrays.read_bytes()[:100])
    set_path("callback.current.stage", 7)(output / "checkpoint-8" / "curriculum_state.json")  # parses, out of range
    trainer, recorder = make_trainer(output, STAGES, max_steps=9, save_strategy="steps", save_steps=2)
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        trainer.train(resume_from_checkpoint=True)
    assert f"skipping {output / 'checkpoint-9'}: it was not completely written" in caplog.text
    assert f"{arrays} cannot be read" in caplog.text and "callback.current.stage = 7" in caplog.text
    assert [c["step"] for c in recorder.calls] == [6, 7, 8]  # resumed from checkpoint-6


def test_same_size_damage_to_a_checkpoint_file_is_named_by_its_manifest_and_the_previous_one_is_resumed(
        saved_run, tmp_path, caplog):  # fmt: skip
    """
    Issue 53, item 5: the second half of checkpoint-9's `model.safetensors` zeroed and `optimizer.pt` garbled at the
    same size passed every header and size check, and resumed on damaged weights (or failed inside torch). Each
    checkpoint's manifest (`curriculum_manifest.json`, written before its trainer state) names the file; `resume=True`
    takes checkpoint-8, an explicit resume from checkpoint-9 names the file and offers checkpoint-8.
    """
    from grpo_curriculum.training.checkpoint import resume_checkpoint
    from grpo_curriculum.training.files import CurriculumStateError
    from grpo_curriculum.training.manifest import MANIFEST_FILE

    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    listed = {entry["name"] for entry in json.loads((output / "checkpoint-9" / MANIFEST_FILE).read_text())["files"]}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt"} <= listed  # what resume loads without a schema
    assert not listed & {"trainer_state.json", "curriculum_state.json", "curriculum_arrays.npz"}  # (their schemas)
    weights = output / "checkpoint-9" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    optimizer = output / "checkpoint-8" / "optimizer.pt"
    data = bytearray(optimizer.read_bytes())
    data[len(data) // 3] ^= 0xFF  # one byte inside a tensor: the zip directory still reads
    optimizer.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        assert resume_checkpoint(True, str(output)) == str(output / "checkpoint-6")
    for damaged in (weights, optimizer):
        assert f"{damaged} is damaged: it holds other bytes than were saved (the same size" in caplog.text
    with pytest.raises(CurriculumStateError, match="Or resume from .*checkpoint-6"):
        resume_checkpoint(str(output / "checkpoint-9"), str(output))
    (output / "checkpoint-6" / "optimizer.pt").unlink()
    with pytest.raises(CurriculumStateError, match=r"optimizer.pt is missing: it was saved with the checkpoint"):
        resume_checkpoint(str(output / "checkpoint-6"), str(output))


def test_a_checkpoint_without_a_manifest_is_checked_as_before(saved_run, tmp_path):
    """Checkpoints written before manifests (or by plain TRL): the header and size checks only, and they resume."""
    from grpo_curriculum.training.checkpoint import resume_checkpoint
    from grpo_curriculum.training.manifest import MANIFEST_FILE

    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    (output / "checkpoint-9" / MANIFEST_FILE).unlink()
    assert resume_checkpoint(True, str(output)) == str(output / "checkpoint-9")


HOSTILE = r"""
import json, os, sys, time
from grpo_curriculum.training.checkpoint import newest_complete_checkpoint
from grpo_curriculum.training.files import CurriculumStateError
from grpo_curriculum.training.state import read_state
found = {}
for folder in sys.argv[1:]:
    begin = time.process_time()  # CPU time (a busy machine stretches the wall clock); a hang meets the run's timeout
    try:
        read_state(folder)
        found[folder] = "read"
    except CurriculumStateError as error:
        found[folder] = str(error)
    assert time.process_time() - begin < 5, folder
found["newest"] = newest_complete_checkpoint(os.path.dirname(sys.argv[1]))
print(json.dumps(found))
"""


def test_hostile_files_are_refused_without_reading_them(saved_run, tmp_path):
    """
    A link to /dev/zero (read forever, memory growing), a FIFO (blocked forever), a file over the size limit: each is
    one error naming it, in no time; resume=True falls back past them. Run in a subprocess with a time and memory
    limit, so a regression fails instead of hanging or exhausting the machine.
    """
    import resource

    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    hostile = {8: ("curriculum_state.json", "zero"), 6: ("curriculum_state.json", "fifo"),
               4: ("curriculum_arrays.npz", "zero"), 9: ("curriculum_state.json", "huge")}  # fmt: skip
    for step, (name, kind) in hostile.items():
        path = output / f"checkpoint-{step}" / name
        path.unlink()
        if kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            with open(path, "wb") as file:
                file.truncate((1 << 30) + 1)  # sparse: no disk used
    folders = [str(output / f"checkpoint-{step}") for step in sorted(hostile, reverse=True)]

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    result = subprocess.run([sys.executable, "-c", HOSTILE, *folders], env=_env(), capture_output=True, text=True,
                            timeout=120, preexec_fn=limit_memory)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert "is a character device, not a regular file: it is not read" in found[folders[1]]  # 8: link to /dev/zero
    assert "is a FIFO (named pipe), not a regular file" in found[folders[2]]
    assert "curriculum_arrays.npz is a character device" in found[folders[3]]
    assert f"holds {(1 << 30) + 1} bytes, more than the {32 << 20} read" in found[folders[0]]  # the state's own cap
    assert all("Fix: resume from another checkpoint" in found[folder] for folder in folders)
    assert found["newest"] == str(output / "checkpoint-2")


SHORT = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=4, temperature=1.1)]


def test_resume_with_adaptive_entropy_needs_its_state(tmp_path, caplog, monkeypatch):
    """
    TRL wrote entropy_ctrl_state.json after trainer_state.json, and a truncated one crashed the resume
    (JSONDecodeError). It is written before, atomically, and a checkpoint without a valid one is not complete.
    """
    output = tmp_path / "run"
    overrides = dict(max_steps=4, save_strategy="steps", save_steps=2, use_adaptive_entropy=True, entropy_coef=0.01)
    import trl.trainer.grpo_trainer

    from grpo_curriculum.training import files as checkpoint  # (atomic_write's module since issue 53)

    written, trl_opened, atomic_write = [], [], checkpoint.atomic_write

    def recording_atomic_write(path, *args, **kwargs):
        written.append(Path(path).name)
        return atomic_write(path, *args, **kwargs)

    def recording_open(path, *args, **kwargs):  # TRL's own, non-atomic write of the entropy state
        trl_opened.append(str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "atomic_write", recording_atomic_write)
    monkeypatch.setattr(trl.trainer.grpo_trainer, "open", recording_open, raising=False)
    full, _ = make_trainer(output, SHORT, **overrides)
    full.train()
    assert json.loads((output / "checkpoint-4" / "entropy_ctrl_state.json").read_text())["entropy_coef"] >= 0
    first = written[: written.index("trainer_state.json") + 1]  # checkpoint-2's files, in order
    assert first[-3:] == ["entropy_ctrl_state.json", "curriculum_manifest.json", "trainer_state.json"]
    assert not [path for path in trl_opened if "entropy_ctrl_state" in path]
    (output / "checkpoint-4" / "entropy_ctrl_state.json").write_text('{"entropy_co')  # as if killed while writing it
    resumed, recorder = make_trainer(output, SHORT, **overrides)
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        resumed.train(resume_from_checkpoint=True)
    assert f"skipping {output / 'checkpoint-4'}: it was not completely written" in caplog.text
    assert "entropy_ctrl_state.json cannot be read" in caplog.text
    assert [c["step"] for c in recorder.calls] == [2, 3]  # resumed from checkpoint-2


def huge_reward(prompts, completions, idx, **kwargs):
    """1e20 for every other completion: finite in float32, its square is not."""
    return [1e20 * (j % 2) for j in range(len(idx))]


def test_rewards_of_1e20_checkpoint_and_resume(tmp_path):
    """The float32 report overflowed, its JSON writer raised inside the checkpoint and the run aborted."""
    overrides = dict(max_steps=4, save_strategy="steps", save_steps=2, shuffle_dataset=True)
    full, _ = make_trainer(tmp_path / "full", SHORT, recorder=RoundRecorder(huge_reward), **overrides)
    full.train()
    rows = [json.loads(line) for line in (tmp_path / "full" / "uncertain_prompts.jsonl").read_text().splitlines()]
    assert rows and all(row["std"] == pytest.approx(0.5e20) and row["variance"] == pytest.approx(0.25e40)
                        for row in rows)  # fmt: skip
    resumed, recorder = make_trainer(tmp_path / "resumed", SHORT, recorder=RoundRecorder(huge_reward), **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert [c["step"] for c in recorder.calls] == [2, 3]
    assert (tmp_path / "resumed" / "uncertain_prompts.jsonl").read_text().splitlines() == [
        json.dumps(row, ensure_ascii=False) for row in rows]


def test_version_2_checkpoint_resumes(saved_run, tmp_path):
    """A checkpoint written before version 3 (the report's sums of squared deviations `m2`) resumes as it did."""
    import numpy as np

    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    folder = output / "checkpoint-4"
    state = json.loads((folder / "curriculum_state.json").read_text())
    with np.load(folder / "curriculum_arrays.npz") as found:
        arrays = {key: found[key] for key in found.files}
    std = arrays.pop("prompt_report.std")
    arrays["prompt_report.m2"] = (std**2 * arrays["prompt_report.count"]).astype(np.float32)
    np.savez_compressed(folder / "curriculum_arrays.npz", **arrays)
    del state["prompt_report"]["std"]
    state.update(version=2, prompt_report={**state["prompt_report"], "m2": {"__array__": "prompt_report.m2"}})
    (folder / "curriculum_state.json").write_text(json.dumps(state))
    trainer, recorder = make_trainer(output / "resumed", STAGES, max_steps=9)
    trainer.train(resume_from_checkpoint=str(folder))
    assert [c["step"] for c in recorder.calls] == [4, 5, 6, 7, 8]
    assert (output / "resumed" / "uncertain_prompts.jsonl").read_text() == (
        saved_run / "uncertain_prompts.jsonl").read_text()


@pytest.mark.parametrize("case", ["empty", "plain-only", "missing-path"])
def test_resume_without_a_checkpoint_is_one_clear_error(tmp_path, case):
    output = tmp_path / "run"
    if case == "plain-only":
        plain, _ = make_trainer(output, None, max_steps=2, save_strategy="steps", save_steps=2)
        plain.train()
    else:
        output.mkdir()
    trainer, recorder = make_trainer(output, STAGES, max_steps=9)
    target = str(tmp_path / "nowhere" / "checkpoint-4") if case == "missing-path" else True
    message = {"empty": f"the output directory {output} holds no checkpoint-N folder",
               "plain-only": f"none of the 1 checkpoint folders in {output} (checkpoint-2) is a complete",
               "missing-path": f"resume_from_checkpoint = {target} does not exist"}[case]  # fmt: skip
    with pytest.raises(CurriculumStateError, match=re.escape(message)) as error:
        trainer.train(resume_from_checkpoint=target)
    assert "Fix:" in str(error.value) and recorder.calls == []


def test_cli_resume_without_a_checkpoint_exits_2(tmp_path, capsys):
    from grpo_curriculum.cli.main import main

    from .test_train_command import DEMO, FAST

    out = tmp_path / "run"
    for target in ("true", str(tmp_path / "nowhere")):
        assert main(["train", DEMO, "--output_dir", str(out), "--max_steps", "2", "--resume_from_checkpoint", target,
                     *FAST]) == 2  # fmt: skip
    error = capsys.readouterr().err
    assert f"the output directory {out} holds no checkpoint-N folder" in error
    assert f"resume_from_checkpoint = {tmp_path / 'nowhere'} does not exist" in error and "Traceback" not in error


# --- issue 44: damaged transformers files, the other trainer -------------------------------------------------------


@pytest.mark.parametrize("name", ["optimizer.pt", "model.safetensors"])
def test_resume_true_names_a_truncated_file_and_uses_the_previous_checkpoint(saved_run, tmp_path, caplog, name):
    """A truncated optimizer.pt or model.safetensors in the newest checkpoint crashed the resume with a torch or
    safetensors traceback naming neither; `resume_from_checkpoint=True` now skips it, naming the file."""
    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    damaged = output / "checkpoint-9" / name
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    trainer, recorder = make_trainer(output, STAGES, max_steps=9, save_strategy="steps", save_steps=2)
    with caplog.at_level("WARNING", logger="grpo_curriculum"):
        trainer.train(resume_from_checkpoint=True)
    assert f"skipping {output / 'checkpoint-9'}" in caplog.text and f"{damaged} is damaged" in caplog.text
    assert [c["step"] for c in recorder.calls] == [8]  # resumed from checkpoint-8


def test_a_truncated_file_in_the_checkpoint_given_is_named_and_the_previous_one_offered(saved_run, tmp_path):
    output = tmp_path / "run"
    shutil.copytree(saved_run, output)
    damaged = output / "checkpoint-9" / "optimizer.pt"
    damaged.write_bytes(damaged.read_bytes()[:1000])
    trainer, recorder = make_trainer(tmp_path / "resumed", STAGES, max_steps=9)
    with pytest.raises(CurriculumStateError) as error:
        trainer.train(resume_from_checkpoint=str(output / "checkpoint-9"))
    assert f"{damaged} is damaged" in str(error.value) and recorder.calls == []
    assert f"Or resume from {output / 'checkpoint-8'}, the newest complete checkpoint before it" in str(error.value)


@pytest.mark.parametrize("cls", [CurriculumRLOOTrainer])  # (skipped where TRL cannot build it: conftest.py)
def test_a_grpo_checkpoint_is_not_resumed_by_rloo(saved_run, tmp_path, cls):
    """A GRPO run resumed with `trainer: rloo` went on silently with another loss and beta."""
    from grpo_curriculum.training.checkpoint import OtherTrainerError

    assert read_state(str(saved_run / "checkpoint-4"))["trainer"] == "grpo"
    for resume in (str(saved_run / "checkpoint-4"), True):
        output = tmp_path / f"run-{resume is True}"
        shutil.copytree(saved_run, output)
        trainer, recorder = make_trainer(output, STAGES, max_steps=9, cls=cls)
        with pytest.raises(OtherTrainerError, match=r"written by a run of GRPO \(CurriculumGRPOTrainer\), and this "
                           r"run is RLOO .*Fix: resume with `trainer: grpo`"):
            trainer.train(resume_from_checkpoint=resume if resume is True else str(output / "checkpoint-4"))
        assert recorder.calls == []


@pytest.mark.parametrize("cls", [CurriculumRLOOTrainer])
def test_an_rloo_checkpoint_is_not_resumed_by_grpo(tmp_path, cls):
    """The reverse: an RLOO run resumed with `trainer: grpo`."""
    from grpo_curriculum.training.checkpoint import OtherTrainerError

    stages = [Stage(num_generations=2, temperature=1.0)]
    trainer, _ = make_trainer(tmp_path, stages, max_steps=2, save_strategy="steps", save_steps=2, cls=cls)
    trainer.train()
    assert read_state(str(tmp_path / "checkpoint-2"))["trainer"] == "rloo"
    trainer, recorder = make_trainer(tmp_path, stages, max_steps=4)
    with pytest.raises(OtherTrainerError, match=r"written by a run of RLOO .* this run is GRPO .*`trainer: rloo`"):
        trainer.train(resume_from_checkpoint=True)
    assert recorder.calls == []
