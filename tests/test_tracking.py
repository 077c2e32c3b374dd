"""wandb, for real, in offline mode: the curriculum in the run config, curriculum/* in the history, switches in a table."""

from __future__ import annotations

import json

import pytest

from .conftest import per_prompt_stages
from .test_trainer import TWO_STAGES, make_trainer
from .wandb_records import read_run

wandb = pytest.importorskip("wandb")


def test_wandb_offline_run_holds_the_curriculum(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    trainer, _ = make_trainer(tmp_path / "out", TWO_STAGES, report_to=["wandb"], max_steps=6)
    trainer.train()
    run_dir = wandb.run.dir.rsplit("/files", 1)[0]
    wandb.finish()

    run = read_run(run_dir)
    assert run["config"]["curriculum"] == {
        "stages": [
            {"num_generations": 2, "temperature": 0.7, "until_step": 3, "temperature_ramp": "linear", "steps": [1, 3]},
            {"num_generations": 4, "temperature": 1.3, "temperature_ramp": "linear", "steps": [4, 6]},
        ],
    }
    steps = [row for row in run["history"] if "train/curriculum/num_generations" in row and "train/loss" in row]
    assert [row["train/curriculum/num_generations"] for row in steps] == [2, 2, 2, 4, 4, 4]
    assert [row["train/curriculum/temperature"] for row in steps] == [0.7] * 3 + [1.3] * 3
    assert [row["train/curriculum/stage"] for row in steps] == [0, 0, 0, 1, 1, 1]

    table = json.loads(run["tables"][-1].read_text())
    assert table["columns"][:6] == ["step", "round", "stage_from", "stage_to", "G_from", "G_to"]
    assert table["data"] == [[4, 4, 0, 1, 2, 4, 0.7, 1.3, "stage 1 starts"]]  # step 4: the first at G 4, as logged


def test_wandb_offline_run_holds_the_per_prompt_g_histogram(tmp_path, monkeypatch, wanted_by_index):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wanted_by_index(lambda index: (2, 4)[index % 2])
    # sizes 2, 4, 2, 4 fill the batch of 12: the window needs 4 prompts (the round's 3 plus `lookahead`)
    trainer, _ = make_trainer(tmp_path / "out", per_prompt_stages((2, 4), defer=False, lookahead=2),
                              report_to=["wandb"], max_steps=3, per_device_train_batch_size=12,
                              num_generations=4)  # fmt: skip
    trainer.train()
    run_dir = wandb.run.dir.rsplit("/files", 1)[0]
    wandb.finish()

    run = read_run(run_dir)
    key = "curriculum/num_generations_per_prompt"
    rows = [row for row in run["history"] if f"{key}/_type" in row]
    assert len(rows) == 3 and all(row[f"{key}/_type"] == "histogram" for row in rows)
    for row in rows:  # each prompt of the step's round, at G 2 (first bin) or G 4 (last bin)
        values = row[f"{key}/values"]
        assert sum(values) == row["train/curriculum/prompts"] and sum(values) == values[0] + values[-1]
        assert 2 * values[0] + 4 * values[-1] == 12  # the generation batch
        assert row[f"{key}/bins"][0] == 2 and row[f"{key}/bins"][-1] == 4
