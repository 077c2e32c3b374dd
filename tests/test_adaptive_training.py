"""Adaptive stages in real TRL training loops: decisions for the right reason, reports, resume, bad rewards."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from grpo_curriculum import Stage
from grpo_curriculum.core.adaptive import Adaptive
from grpo_curriculum.demo.tasks import build_tokenizer

from .test_trainer import make_trainer, train_history
from .conftest import RoundRecorder


def constant_reward(prompts, completions, **kwargs):
    return [1.0] * len(completions)


def test_all_equal_rewards_raise_g_for_the_right_reason(tmp_path):
    adaptive = Adaptive(num_generations=(2, 4, 8), policy="hysteresis", patience=2, cooldown=2, smoothing=1.0)
    recorder = RoundRecorder(reward_fn=constant_reward)
    trainer, recorder = make_trainer(tmp_path, [Stage(temperature=1.0, adaptive=adaptive)], recorder=recorder, max_steps=7)
    trainer.train()
    # Every group has zero std: after 2 observed rounds G goes up, then again 2 rounds later (cooldown 2).
    assert [c["num_generations"] for c in recorder.calls] == [2, 2, 4, 4, 8, 8, 8]
    switches = trainer._curriculum.switches
    assert [(s["step"], s["from"]["num_generations"], s["to"]["num_generations"]) for s in switches] == [
        (3, 2, 4),  # the logged step numbers of the first steps at the new G
        (5, 4, 8),
    ]
    assert all("zero-std" in s["reason"] for s in switches), switches
    history = train_history(trainer)
    assert [h["curriculum/num_generations"] for h in history] == [2, 2, 4, 4, 8, 8, 8]
    assert all(h["curriculum/policy/zero_std_ema"] == 1.0 for h in history[1:])


def test_uncertain_prompt_report(tmp_path):
    def noisy_for_odd(prompts, completions, idx, **kwargs):  # odd prompts: reward depends on the completion
        return [float(len(c) % 2) if i % 2 else 0.5 for c, i in zip(completions, idx, strict=True)]

    recorder = RoundRecorder(reward_fn=noisy_for_odd)
    trainer, _ = make_trainer(tmp_path, [Stage(num_generations=4, temperature=1.0)], recorder=recorder,
                              max_steps=6, save_strategy="steps", save_steps=3)  # fmt: skip
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "uncertain_prompts.jsonl").read_text().splitlines()]
    trained = [i for call in recorder.calls for i in call["idx"][::4]]  # 6 rounds x 2 prompts, one pass
    assert len(rows) == len({trainer.train_dataset[i]["prompt"] for i in trained}) == 11  # one prompt in two rows
    assert sum(r["times_seen"] for r in rows) == 12
    assert [r["variance"] for r in rows] == sorted((r["variance"] for r in rows), reverse=True)
    for row in rows:  # keyed by the prompt's first row in the dataset, which need not be the row trained
        rows_trained = [i for i in trained if trainer.train_dataset[i]["prompt"] == row["prompt"]]
        assert len(rows_trained) == row["times_seen"]
        if all(i % 2 == 0 for i in rows_trained):
            assert row["variance"] == 0.0 and row["mean"] == 0.5
    assert all(r["completions"] == 4 * r["times_seen"] and r["prompt"].startswith("echo :") for r in rows)
    assert (tmp_path / "checkpoint-3" / "uncertain_prompts.jsonl").exists()


@pytest.mark.parametrize("chat", [False, True])
def test_uncertain_prompt_report_lists_a_repeated_prompt_once(tmp_path, monkeypatch, chat):
    # Rows 0-11 hold three prompts, each four times (as a dataset drawn with replacement does): the report keys a
    # prompt by its first row and merges every visit of it, whichever row it came from.
    from datasets import Dataset

    texts = [f"echo : {w} {w} =" for w in ("red", "dog", "sun")]
    prompts = [[{"role": "user", "content": t}] for t in texts] if chat else texts
    dataset = Dataset.from_dict({"prompt": [prompts[i % 3] for i in range(12)], "idx": list(range(12))})
    if chat:
        from . import test_trainer

        def with_template():
            tokenizer = build_tokenizer()
            tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
            return tokenizer

        monkeypatch.setattr(test_trainer, "build_tokenizer", with_template)

    def by_row(prompts, completions, idx, **kwargs):  # differs between the rows of one prompt
        return [float(i) for i in idx]

    recorder = RoundRecorder(reward_fn=by_row)
    trainer, _ = make_trainer(tmp_path, [Stage(num_generations=4, temperature=1.0)], recorder=recorder,
                              dataset=dataset, max_steps=6)  # fmt: skip
    trainer.train()  # 6 rounds x 2 prompts: one pass over the 12 rows
    rows = [json.loads(line) for line in (tmp_path / "uncertain_prompts.jsonl").read_text().splitlines()]
    assert sorted(r["prompt_key"] for r in rows) == ["0", "1", "2"]  # was 12 rows, one a row
    for row in rows:
        first = int(row["prompt_key"])
        rewards = [float(i) for i in range(first, 12, 3) for _ in range(4)]
        assert row["prompt"] == prompts[first]
        assert (row["times_seen"], row["completions"]) == (4, 16)
        assert row["mean"] == pytest.approx(sum(rewards) / 16)
        assert row["variance"] == pytest.approx(statistics.pvariance(rewards))


def test_nan_and_none_rewards_do_not_break_the_policy(tmp_path):
    def sometimes_none(prompts, completions, idx, **kwargs):
        return [None if i % 3 == 0 else 1.0 for i in idx]

    adaptive = Adaptive(num_generations=(2, 4), patience=1, cooldown=1, smoothing=1.0)
    trainer, recorder = make_trainer(tmp_path, [Stage(temperature=1.0, adaptive=adaptive)], recorder=RoundRecorder(sometimes_none),
                                     max_steps=4)  # fmt: skip
    trainer.train()
    stats = trainer._curriculum.last_stats
    assert math.isfinite(stats.zero_std_fraction) and sum(stats.group_counts) < sum(stats.group_sizes)  # some missing
    assert recorder.calls[-1]["num_generations"] == 4


@pytest.mark.parametrize(
    "geometry",
    [dict(), dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4)],
    ids=["at-round-boundary", "mid-round"],
)
def test_adaptive_resume_continues_the_policy(tmp_path, geometry):
    adaptive = Adaptive(num_generations=(2, 4, 8), patience=2, cooldown=2, smoothing=1.0)
    stages = [Stage(temperature=1.0, adaptive=adaptive)]
    overrides = dict(max_steps=12, save_strategy="steps", save_steps=3, **geometry)
    full, full_recorder = make_trainer(tmp_path / "full", stages, recorder=RoundRecorder(constant_reward), **overrides)
    full.train()
    resumed, recorder = make_trainer(tmp_path / "resumed", stages, recorder=RoundRecorder(constant_reward), **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    expected = [(c["step"], c["num_generations"], tuple(c["idx"])) for c in full_recorder.calls]
    first = max(i for i, c in enumerate(expected) if c[0] <= 3)
    got = [(c["step"], c["num_generations"], tuple(c["idx"])) for c in recorder.calls]
    # A round regenerated after a mid-round checkpoint keeps its G and prompts and is not observed twice.
    assert got[0][1:] == expected[first][1:] and got[1:] == expected[first + 1 :]
    assert resumed._curriculum.switches == full._curriculum.switches and full._curriculum.switches


def test_adaptive_candidate_invalid_for_the_geometry(tmp_path):
    from grpo_curriculum import CurriculumError

    with pytest.raises(CurriculumError, match=r"stages\[0\]\.adaptive\.num_generations\[2\] = 16"):
        make_trainer(tmp_path, [Stage(temperature=1.0, adaptive=Adaptive(num_generations=(2, 4, 16)))], per_device_train_batch_size=8)
