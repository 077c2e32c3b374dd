"""Checkpoint and resume: the curriculum continues exactly where it stopped, also after SIGKILL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.checkpoint import CurriculumStateError

from .conftest import RoundRecorder, assert_whole_groups, indexed_dataset, per_prompt_stages
from .test_trainer import make_trainer

ROOT = Path(__file__).resolve().parent.parent
RESUME_RUN = [sys.executable, str(ROOT / "tests" / "resume_run.py")]  # a run a test kills and resumes

STAGES = [
    Stage(num_generations=2, temperature=0.7, until_step=5),
    Stage(num_generations=4, temperature=1.1, until_step=7),
    Stage(num_generations=8, temperature=1.3),
]


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
    stages = per_prompt_stages((2, 4, 8))
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
    """The rounds of `tests/resume_run.py` run to the end without a stop."""
    reference = tmp_path_factory.mktemp("reference")
    subprocess.run([*RESUME_RUN, str(reference)], env=_env(), check=True, timeout=300, capture_output=True)
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
        (set_field("version", 99), r"has version 99; this grpo-curriculum reads version 2"),
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
