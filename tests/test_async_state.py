"""
The asynchronous trainer's curriculum state (training/async_state.py, the worker's side in
training/_trl/async_worker.py; docs/async.md): written atomically, read back through the bounded, validated reader,
refused with the file, the problem and the fix when damaged or from another curriculum; and what the worker reports for
a checkpoint: tests/test_async_curriculum.py. No vLLM (the real run:
tests/test_async_real.py, `make test-vllm`).
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.core.schedule import stage_signature
from grpo_curriculum.training.async_state import (ASYNC_ARRAYS_FILE, ASYNC_STATE_FILE, read_async_state,
                                                  write_async_state)  # fmt: skip
from grpo_curriculum.training.files import CurriculumStateError

STAGES = [Stage(num_generations=4, temperature=1.0, until_step=5),
          Stage(temperature=0.7, adaptive=Adaptive(num_generations=(2, 4), policy="per_prompt"))]  # fmt: skip
SIGNATURE = stage_signature(STAGES)
ROUND = {"taken": [0, 1, 2], "sizes": [2, 4, 2], "left": [], "read": 3, "deferred": 0}
OBSERVED = {"pending": [{"key": "4", "rewards": [1.0, None]}], "counted": ["3", "4"],
            "frontier": {"epoch": 2, "position": 5}}  # fmt: skip


def _policy(size=6):
    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.core.slots import PromptSlots

    policy = make_policy(STAGES[1].adaptive, 2, 0.7)
    policy.bind(budget=8, slots=PromptSlots(size, indexed=True), seed=0)
    policy.allocator.stats.successes[2] = 1.5
    policy.allocator.explore["easy"] = 0.42
    return policy


def _state(**changes):
    return {"stages": SIGNATURE, "dataset_size": 6, "stream": {"epoch": 2, "position": 3, "waiting": [1]},
            "round": {"plan": ROUND, "stage": 1, "temperature": 0.7, "skip": 1}, "policy_stage": 1,
            "policy": _policy().state_dict(), "observed": OBSERVED, **changes}  # fmt: skip


def test_the_state_round_trips_and_a_fresh_policy_continues_from_it(tmp_path):
    write_async_state(str(tmp_path), _state())
    assert sorted(p.name for p in tmp_path.iterdir()) == [ASYNC_ARRAYS_FILE, ASYNC_STATE_FILE]  # nothing else left
    state = read_async_state(str(tmp_path), SIGNATURE, 6)
    assert state["stream"] == {"epoch": 2, "position": 3, "waiting": [1]} and state["policy_stage"] == 1
    assert state["round"]["plan"] == ROUND and state["observed"] == OBSERVED
    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.core.slots import PromptSlots

    policy = make_policy(STAGES[1].adaptive, 2, 0.7)
    policy.bind(budget=8, slots=PromptSlots(6, indexed=True), seed=0)
    policy.load_state_dict(state["policy"])
    assert policy.allocator.stats.successes[2] == 1.5 and policy.allocator.explore["easy"] == 0.42


def test_a_state_write_that_fails_midway_leaves_the_previous_state_whole(tmp_path, monkeypatch):
    """Issue 55: the state file is written atomically (a temporary file, then a rename): a write that fails after part
    of the JSON (a full disk, a kill) leaves the state before it readable and no temporary file behind."""
    write_async_state(str(tmp_path), _state())

    def half_then_full_disk(data, f, **kwargs):
        f.write(json.dumps(data)[:40])
        f.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", half_then_full_disk)
    with pytest.raises(OSError):
        write_async_state(str(tmp_path), _state(stream={"epoch": 3, "position": 0, "waiting": []}))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [ASYNC_ARRAYS_FILE, ASYNC_STATE_FILE]
    assert read_async_state(str(tmp_path), SIGNATURE, 6)["stream"] == {"epoch": 2, "position": 3, "waiting": [1]}


@pytest.mark.parametrize(("damage", "said"), [
    (lambda d: (d / ASYNC_STATE_FILE).unlink(), "holds no curriculum_async_state.json"),
    (lambda d: (d / ASYNC_STATE_FILE).write_text("{not json"), "cannot be read"),
    (lambda d: (d / ASYNC_ARRAYS_FILE).write_bytes(b"PK\x03\x04 truncated"), "cannot be read"),
    (lambda d: _edit(d, stream={"epoch": -1, "position": 0}), "stream.epoch"),
    (lambda d: _edit(d, policy_stage=0), "policy.policy"),
    (lambda d: _edit(d, policy_stage=7), "policy_stage"),
    (lambda d: _edit(d, round={"plan": ROUND, "stage": 1, "temperature": 0.7, "skip": 3}), "round.skip"),
    (lambda d: _edit(d, round={"plan": ROUND, "stage": 0, "temperature": 0.7, "skip": 0}), "round.stage"),
    (lambda d: _edit(d, round={"plan": {**ROUND, "taken": [0]}, "stage": 1, "temperature": 0.7, "skip": 0}),
     "round.plan.taken"),
    (lambda d: _edit(d, observed=None), "observed"),
    (lambda d: _edit(d, observed={**OBSERVED, "counted": [7]}), "observed.counted"),
])
def test_a_damaged_state_is_named_with_the_file_and_the_fix(tmp_path, damage, said):
    write_async_state(str(tmp_path), _state())
    damage(tmp_path)
    with pytest.raises(CurriculumStateError, match="Fix:") as caught:
        read_async_state(str(tmp_path), SIGNATURE, 6)
    assert said in str(caught.value), caught.value


def _edit(folder, **changes):
    path = folder / ASYNC_STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(("stages", "size", "said"), [
    ([{"num_generations": 8}, SIGNATURE[1]], 6, "stages"),
    (SIGNATURE, 7, "dataset_size"),
])
def test_a_state_of_another_curriculum_or_dataset_is_refused(tmp_path, stages, size, said):
    write_async_state(str(tmp_path), _state())
    with pytest.raises(CurriculumStateError, match="a curriculum this run cannot continue") as caught:
        read_async_state(str(tmp_path), stages, size)
    assert f"- {said} =" in str(caught.value)


def test_the_state_channel_carries_a_request_and_its_answer_between_processes_files(tmp_path):
    from grpo_curriculum.training._trl.async_worker import StateChannel

    trainer, worker = StateChannel(str(tmp_path)), StateChannel(str(tmp_path))
    assert worker.pending() is None
    answered = []

    def serve():
        while not answered:
            request = worker.pending()
            if request is not None:
                worker.answer(request, {"stream": {"epoch": 1, "position": request["trained_up_to"]},
                                        "stats": {"successes": np.arange(3, dtype=np.float32)}})  # fmt: skip
                answered.append(request)

    thread = threading.Thread(target=serve)
    thread.start()
    state = trainer.request([1], 4, check_health=lambda: None, timeout=30)
    thread.join()
    assert answered[0]["untrained"] == [1] and state["stream"] == {"epoch": 1, "position": 4}
    assert np.array_equal(state["stats"]["successes"], np.arange(3, dtype=np.float32))
    assert worker.pending() is None  # answered once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answer.json", "request.json"]  # the state file consumed


def test_a_worker_that_stops_answering_fails_the_checkpoint_loudly(tmp_path):
    from grpo_curriculum.training._trl.async_worker import StateChannel

    with pytest.raises(RuntimeError, match="did not send its curriculum state within 0 s"):
        StateChannel(str(tmp_path)).request([], 0, check_health=lambda: None, timeout=0.05)


@pytest.mark.parametrize(("written", "refused"), [
    (None, False),  # written before the state recorded its defaults: today's (`UNRECORDED_DEFAULTS`)
    ({"lookahead": 0, "defer": True, "weight": "hard", "skip_target": 0.05}, False),
    ({"lookahead": 2, "defer": True, "weight": "hard", "skip_target": 0.05}, True),  # another default lookahead
])  # fmt: skip
def test_a_state_written_with_other_knob_defaults_takes_the_synchronous_migration(tmp_path, written, refused):
    """The per-prompt stage leaves `lookahead` at today's default (0): a state written where the default was 2 would
    change its rule mid-run, and is refused as the synchronous trainers' is, with the recipe line that continues it."""
    write_async_state(str(tmp_path), _state(**({} if written is None else {"defaults": written})))
    if not refused:
        assert read_async_state(str(tmp_path), SIGNATURE, 6, STAGES)["policy_stage"] == 1
        return
    with pytest.raises(CurriculumStateError, match="other defaults") as caught:
        read_async_state(str(tmp_path), SIGNATURE, 6, STAGES)
    assert "stage 1's `adaptive`: `lookahead: 2`" in str(caught.value)
