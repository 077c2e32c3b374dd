"""`plot` shows what the adaptive modes did: the distribution of G trained, completions generated and trained."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from grpo_curriculum.cli.main import main
from grpo_curriculum.cli.plot_panels import g_quantiles, pooled_quantiles, sampling_series, varies

ROOT = Path(__file__).resolve().parent.parent


def test_g_quantiles_from_the_prompts_trained_at_each_g():
    entry = {"curriculum/prompts_at_g2": 1, "curriculum/prompts_at_g4": 2, "curriculum/prompts_at_g12": 1,
             "curriculum/prompts_at_gx": 5, "curriculum/prompts_at_g8": 0}  # fmt: skip
    assert g_quantiles(entry) == {0.0: 2, 0.1: 2, 0.25: 2, 0.5: 4, 0.75: 4, 0.9: 12, 1.0: 12}
    assert g_quantiles({"curriculum/num_generations": 8}) is None
    assert varies([{"curriculum/prompts_at_g4": 4}, entry]) and not varies([{"curriculum/prompts_at_g4": 4}])
    # a long run: consecutive log lines pooled, each line of a window gets the window's quantiles
    lines = [{"curriculum/prompts_at_g2": 3}, {"curriculum/prompts_at_g8": 1}, {"curriculum/num_generations": 4}]
    assert pooled_quantiles(lines, bins=2) == [{0.0: 2, 0.1: 2, 0.25: 2, 0.5: 2, 0.75: 2, 0.9: 8, 1.0: 8}] * 2 + [None]
    assert pooled_quantiles(lines, bins=3) == [g_quantiles(line) for line in lines]


def test_completions_trained_are_the_generated_less_the_dropped_groups():
    entries = [{"curriculum/num_generations": 4}, {"curriculum/num_generations": 4, "curriculum/generated": 48,
                                                   "curriculum/dropped": 8, "curriculum/increments": 3.0}]
    assert sampling_series(entries) == {"generated": [None, 48.0], "trained": [None, 16.0], "dropped": [None, 8.0],
                                        "increments": [None, 3.0], "informative": [None, None]}  # fmt: skip
    assert sampling_series([{"curriculum/num_generations": 4}]) is None  # no stage samples in increments


def test_plot_of_a_top_up_run_shows_g_varying(tmp_path, capsys, monkeypatch):
    data = yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text())
    data["curriculum"] = {"stages": [{"adaptive": {"policy": "top_up", "num_generations": [2, 4, 8]},
                                      "temperature": 1.0}]}  # fmt: skip
    recipe = tmp_path / "top-up.yaml"
    recipe.write_text(yaml.safe_dump({**data, "max_steps": 8, "warm_start_steps": 0}))
    out = tmp_path / "run"
    assert main(["train", str(recipe), "--output_dir", str(out)]) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    entries = [entry for entry in history if "reward" in entry]
    assert varies(entries)  # groups of 2 to 8 in one round, while the mean G stays 16 / 4 prompts = 4
    assert {entry["curriculum/num_generations"] for entry in entries} == {4}
    drawn = {}
    import grpo_curriculum.cli.plot_panels as panels

    def spy(name):
        original = getattr(panels, name)

        def draw(*args):
            drawn[name] = args
            return original(*args)

        return draw

    for name in ("draw_g", "draw_sampling"):
        monkeypatch.setattr(panels, name, spy(name))
    assert main(["plot", str(out), "-o", str(tmp_path / "plot.png")]) == 0
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    axis, steps, plotted = drawn["draw_g"]
    bands = [collection for collection in axis.collections]  # fill_between: the 10-90% and 25-75% bands
    assert len(bands) == 2 and [line.get_label() for line in axis.get_lines()][:3] == ["mean G", "median",
                                                                                         "smallest / largest"]
    largest = axis.get_lines()[-1].get_ydata()
    smallest = axis.get_lines()[-2].get_ydata()
    assert max(largest) > min(smallest) and steps == [entry["step"] for entry in entries]
    assert "draw_sampling" in drawn  # a top-up run samples in increments: generated vs trained, passes, drops
