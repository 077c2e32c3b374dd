"""Tests for `grpo_curriculum.training.report`: uncertain-prompt report: compact arrays, top K, sparse checkpoints."""

from __future__ import annotations

import json
import math
import os
import statistics
import time

import numpy as np
import pytest

from grpo_curriculum.training.files import atomic_json, atomic_write
from grpo_curriculum.training.state import read_state, write_state
from grpo_curriculum.training.report import PromptReport
from grpo_curriculum.core.slots import PromptSlots

NAN = math.nan


def minimal_state() -> dict:
    """A valid curriculum state of a run that has not started (the parts a test does not set)."""
    return {"global_step": 0, "micro_step": 0, "geometry": {"generation_batch_size": 8, "num_processes": 1},
            "callback": {"stages": [{"num_generations": 2}], "current": None, "rounds": 0, "switches": [],
                         "policy_stage": None, "policy": None, "deferred_total": 0},
            "stream": {"epoch": 0, "position": 0}, "round_start_stream": None, "round_plan": None}  # fmt: skip


def indexed(n=16, size=1000):
    return PromptReport(PromptSlots(n, indexed=True), size=size)


def test_report_matches_direct_statistics_across_rounds():
    rounds = [
        (["1", "2"], [1.0, 0.0, 0.5, 0.5], 2),
        (["1", "3"], [0.0, 0.0, 1.0, None, 1.0, NAN, 0.2, 0.3], 4),
        (["2", "1"], [0.1, 0.9, 0.3, 1.0], 2),
        (["3", "1"], [0.0, 1.0, 1.0, 0.5, 0.5, 0.25], (2, 4)),  # groups of different sizes
    ]
    report, seen = indexed(), {}
    for keys, rewards, G in rounds:
        report.update(keys, rewards, G)
        sizes, start = (G,) * len(keys) if isinstance(G, int) else G, 0
        for key, size in zip(keys, sizes):
            seen.setdefault(key, []).append([r for r in rewards[start : start + size] if r is not None and r == r])
            start += size
    rows = {row["prompt_key"]: row for row in report.rows()}
    assert len(report) == 3
    for key, groups in seen.items():
        flat = [r for group in groups for r in group]
        assert rows[key]["mean"] == pytest.approx(statistics.fmean(flat), abs=1e-6)
        assert rows[key]["variance"] == pytest.approx(statistics.pvariance(flat), abs=1e-6)
        assert (rows[key]["times_seen"], rows[key]["completions"]) == (len(groups), len(flat))


@pytest.mark.parametrize(
    "keys, rewards, G, order",
    [
        (["4", "9", "2"], [0.5, 0.5, 0.0, 1.0, 0.25, 0.75], 2, ["9", "2", "4"]),  # highest variance first
        # ties by slot; prompts without a finite reward last
        (["5", "7", "1", "3"], [0.0, 1.0, None, NAN, 1.0, 0.0, 0.3, 0.3], 2, ["1", "5", "3", "7"]),
    ],
)
def test_report_ordering(keys, rewards, G, order):
    report = indexed()
    report.update(keys, rewards, G)
    rows = report.rows()
    assert [row["prompt_key"] for row in rows] == order
    if "7" in order:
        assert rows[-1]["mean"] is None and rows[-1]["variance"] is None and rows[-1]["completions"] == 0


def test_report_holds_the_top_k_and_texts_for_them_only():
    report = PromptReport(PromptSlots(), size=3)  # hashed keys, as for an iterable dataset
    for i in range(40):  # prompt i: rewards 0 and i / 40, variance growing with i
        report.update([f"p{i}"], [0.0, i / 40], 2, texts=[f"text {i}"])
    rows = report.rows()
    assert [row["prompt"] for row in rows] == ["text 39", "text 38", "text 37"]
    assert all(row["prompt_key"].startswith("bucket-") for row in rows)
    assert len(report.texts) <= 4 * 3 + 1  # texts of likely report members only


def test_report_jsonl_and_state_round_trip(tmp_path):
    report = indexed()
    report.update(["1", "2", "3"], [0.0, 1.0, 0.5, 0.5, None, NAN], 2)
    report.update(["2", "4"], [1.0, 0.0, 0.2, 0.4], 2)
    path = tmp_path / "prompts.jsonl"
    path.write_text("stale\n")
    report.write_jsonl(path, texts={1: "one", 2: [{"role": "user", "content": "two?"}]})
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == report.rows({1: "one", 2: [{"role": "user", "content": "two?"}]})
    assert list(lines[0]) == ["prompt_key", "prompt", "mean", "variance", "std", "times_seen", "completions"]
    assert os.listdir(tmp_path) == ["prompts.jsonl"]  # the temporary file was replaced, not left behind

    state = report.state_dict()
    assert state["slots"].tolist() == [1, 2, 3, 4]  # the touched slots only
    write_state(str(tmp_path), {**minimal_state(), "prompt_report": state})
    restored = indexed()
    restored.load_state_dict(read_state(str(tmp_path))["prompt_report"])
    assert restored.rows() == report.rows()
    restored.update(["1"], [1.0, 1.0], 2)
    report.update(["1"], [1.0, 1.0], 2)
    assert restored.rows() == report.rows()
    with pytest.raises(ValueError, match="beyond 3 prompts"):
        PromptReport(PromptSlots(3, indexed=True)).load_state_dict(report.state_dict())


@pytest.mark.parametrize("scale", [1e20, 1e154, 1e300, 1e308])
def test_huge_finite_rewards_never_overflow_the_report(tmp_path, scale):
    """Issue 20: rewards of 1e20 overflowed the float32 sums and the report's JSON writer raised in the checkpoint."""
    from fractions import Fraction

    report = indexed()
    rounds = [(["1", "2"], [scale, -scale, 0.5 * scale, 0.5 * scale], 2), (["1"], [scale, scale, -scale, 0.0], 4),
              (["1", "2"], [-scale, 0.25 * scale, 1.0, None], 2)]  # fmt: skip
    seen = {}
    for keys, rewards, G in rounds:
        report.update(keys, rewards, G)
        for i, key in enumerate(keys):
            seen.setdefault(key, []).extend(r for r in rewards[i * G : (i + 1) * G] if r is not None)
    rows = {row["prompt_key"]: row for row in report.rows()}
    for key, values in seen.items():  # exact statistics, in rationals
        exact = [Fraction(v) for v in values]
        mean = sum(exact) / len(exact)
        std = math.sqrt(sum((v - mean) ** 2 for v in exact) / len(exact) / Fraction(scale) ** 2) * scale
        assert rows[key]["mean"] == pytest.approx(float(mean), rel=1e-12, abs=1e-12 * scale)
        assert rows[key]["std"] == pytest.approx(std, rel=1e-12)
        variance = std * std  # inf beyond the float64 range (`**` would raise)
        assert rows[key]["variance"] == (pytest.approx(variance, rel=1e-12) if variance < math.inf else None)
    path = tmp_path / "uncertain_prompts.jsonl"
    report.write_jsonl(path)  # raised "Out of range float values are not JSON compliant" at 1e20
    assert [json.loads(line) for line in path.read_text().splitlines()] == report.rows()
    write_state(str(tmp_path), {**minimal_state(), "prompt_report": report.state_dict()})
    restored = indexed()
    restored.load_state_dict(read_state(str(tmp_path))["prompt_report"])
    assert restored.rows() == report.rows()


def test_version_2_report_state_is_read():
    """A checkpoint of version 2 holds float32 sums of squared deviations (`m2`); they become standard deviations."""
    report = indexed()
    report.update(["1", "2"], [0.0, 1.0, 0.25, 0.75], 2)
    state = report.state_dict()
    m2 = (state["std"] ** 2 * state["count"]).astype(np.float32)
    restored = indexed()
    restored.load_state_dict({**{k: v for k, v in state.items() if k != "std"}, "m2": m2})
    assert restored.rows() == report.rows()


def test_report_errors():
    with pytest.raises(ValueError, match="prompt_keys has 1 entries"):
        indexed().update(["1"], [1, 0, 1, 0], 2)


def test_fifty_thousand_prompts_checkpoint_small_and_fast(tmp_path):
    """Issue 11's bound: the curriculum files of a checkpoint for 50k prompts seen: well under 2 MB, 100 ms."""
    from grpo_curriculum.core.allocation import PromptStats

    n = 50_000
    rng = np.random.default_rng(0)
    report, stats = indexed(n), PromptStats(n, (2, 4, 8, 16), decay=0.5, smoothing=0.3)
    for start in range(0, n, 500):  # every prompt seen, groups of 4 with mixed rewards
        keys = [str(i) for i in range(start, start + 500)]
        rewards = rng.integers(0, 2, 2000).astype(float).tolist()
        report.update(keys, rewards, 4)
        stats.observe(range(start, start + 500), [2] * 500, [4] * 500, [False] * 500)
    state = {"prompt_report": report.state_dict(), "callback": {"policy": {"stats": stats.state_dict()}}}
    begin = time.process_time()  # CPU time: a busy machine stretches the wall clock, not this
    write_state(str(tmp_path), state)
    elapsed = time.process_time() - begin
    size = sum(f.stat().st_size for f in tmp_path.iterdir())
    assert size < 1_000_000, size
    assert elapsed < 0.5, elapsed  # measured well under 0.1 s unloaded; a margin for a busy CI machine


def test_atomic_write_never_touches_a_users_file_and_keeps_the_umask(tmp_path):
    """The temporary file is a new one (it was `<path>.tmp`, overwritten and removed whatever it held)."""
    target = tmp_path / "state.json"
    (tmp_path / "state.json.tmp").write_text("the user's")
    atomic_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        atomic_write(target, lambda f: (_ for _ in ()).throw(RuntimeError("write failed")))
    assert (tmp_path / "state.json.tmp").read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.tmp"]
    assert json.loads(target.read_text()) == {"a": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
