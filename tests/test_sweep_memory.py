"""`grpo-curriculum sweep --plan-memory`: the plan's search table-tested with injected peaks, and real probes of the
tiny model checked against the peaks they measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from grpo_curriculum.cli.main import main
from grpo_curriculum.cli.memory_plan import largest_fitting, parse_size, plan_memory, plan_rows
from grpo_curriculum.core.errors import CurriculumError

PROJECT = Path(__file__).resolve().parent.parent
MiB = 2**20


# --- the plan, with injected peaks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "limit, start, unit, max_probes, expected, probed",
    [
        (40, 4, 4, 8, (40, False), [4, 8, 16, 32, 64, 48, 40, 44]),  # doubling, then bisecting to the unit
        (64, 4, 4, 8, (64, True), [4, 8, 16, 32, 64, 128, 96, 80]),  # still bisecting at the 8th probe: capped
        (3, 4, 4, 8, (None, False), [4]),  # not even the start fits
        (10**9, 2, 2, 4, (16, True), [2, 4, 8, 16]),  # every probe fit: capped, a larger one may fit too
        (5, 2, 1, 8, (5, False), [2, 4, 8, 6, 5]),
    ],
)
def test_largest_fitting_doubles_then_bisects(limit, start, unit, max_probes, expected, probed):
    calls = []

    def fits(value):
        calls.append(value)
        return value <= limit

    assert largest_fitting(start, unit, fits, max_probes) == expected and calls == probed


def _peaks(base, per_item, per_generated, oom_above=None):
    """Peak MiB of a step as bytes: base, activations per micro-batch item, generation per generated completion."""

    def measure(batch, steps, g):
        if oom_above is not None and batch * steps > oom_above:
            return None  # out of memory
        return (base + per_item * batch + per_generated * batch * steps) * MiB

    return measure


def test_plan_finds_the_batch_at_the_smallest_g_then_the_generation_batch():
    # 1000 MiB + 40 a trained item + 10 a generated one, 1600 MiB: S = 1 -> 50 B <= 600 -> B = 12 (G 2: even);
    # B = 12 -> 1480 + 120 S <= 1600 -> S = 1
    measured = []
    measure = _peaks(1000, 40, 10)
    plan = plan_memory([2, 8], 1, 1600 * MiB, lambda *key: measured.append(key) or measure(*key))
    assert (plan.per_device_train_batch_size, plan.steps_per_generation, plan.capped) == (12, 1, [])
    assert [b for b, s, g in measured if s == 1 and g == 2] == [2, 4, 8, 16, 12, 14]
    row = plan.rows[1]  # G 8 does not divide 12: it needs S = 2 (24 completions), above the largest that fit
    assert not row["fits"] and row["steps_per_generation"] == 0 and row["needs"] == 2
    assert plan_rows(plan)[1]["steps_per_generation"] == "none (needs 2)"
    assert plan_rows(plan)[1]["generation batch"] == 24 and plan.common_steps == 1 and plan.fitting == [2]
    assert len(measured) == len(set(measured)) == len(plan.probes)  # no geometry is measured twice
    assert all(p.fits == (p.peak <= 1600 * MiB) for p in plan.probes)


def test_each_g_gets_the_largest_generation_batch_it_divides():
    # 1000 MiB + 20 a trained item + 1/4 a generated one, 1600 MiB: B = 28 (20.25 B <= 600), then S = 5 (7 S <= 40)
    plan = plan_memory([2, 4, 8, 16, 32], 1, 1600 * MiB, _peaks(1000, 20, 0.25))
    assert (plan.per_device_train_batch_size, plan.steps_per_generation, plan.capped) == (28, 5, [])
    rows = {row["num_generations"]: row for row in plan.rows}
    assert [(rows[g]["steps_per_generation"], rows[g]["divides"], rows[g]["prompts"]) for g in (2, 4, 8, 16)] == [
        (5, True, 70), (5, True, 35), (4, False, 14), (4, False, 7)]  # 140 completions; 8 and 16 divide 112
    assert not rows[32]["fits"] and rows[32]["needs"] == 8  # 28 x 8 = 224 completions: more than fit
    assert plan.fitting == [2, 4, 8, 16] and plan.common_steps == 4  # 112: the one batch they all divide
    assert plan_memory([2, 3], 1, 1600 * MiB, _peaks(1000, 20, 0.25)).common_steps == 3  # 84 for G 3
    # running out of memory above 100 completions: a probe that does not fit, whatever the budget
    oom = plan_memory([2], 1, 1600 * MiB, _peaks(1000, 20, 0.25, oom_above=100))
    assert oom.steps_per_generation == 3 and any(p.peak is None and not p.fits for p in oom.probes)


def test_a_budget_below_the_smallest_probe_is_refused_naming_its_peak():
    with pytest.raises(CurriculumError) as error:
        plan_memory([4, 8], 2, 900 * MiB, _peaks(1000, 1, 1))
    text = str(error.value)
    assert "--memory-budget = '900 MiB': is below the smallest probe's peak: G 4, per-device batch 2" in text
    assert "measured 1004 MiB" in text and "raise --memory-budget" in text


@pytest.mark.parametrize("text, size", [("40", 40 * 2**30), ("900MiB", 900 * MiB), ("1.5GiB", 1.5 * 2**30),
                                        ("80GB", 80e9), ("0.5", 2**29)])  # fmt: skip
def test_memory_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["0", "-1", "ten", "5TiB", "nan", ""])
def test_bad_memory_sizes_are_refused(text, capsys):
    with pytest.raises(ValueError):
        parse_size(text)
    assert main(["sweep", "demo", "--plan-memory", "--memory-budget", text]) == 2
    assert "--memory-budget" in capsys.readouterr().err


def test_settings_a_plan_cannot_take_are_refused_before_any_probe(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", "demo", "--memory-budget", "4", "--out", str(out)]) == 2
    assert "--memory-budget = 4294967296.0: only applies with --plan-memory" in capsys.readouterr().err
    assert main(["sweep", "demo", "--plan-memory", "--curriculum", "--jobs", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--curriculum = True: does not apply with --plan-memory" in err and "--jobs = 2: does not apply" in err
    assert not out.exists()
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    assert main(["sweep", "demo", "--plan-memory", "--out", str(out)]) == 2
    assert "is a folder that already holds files" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


# --- real probes of the tiny model -------------------------------------------------------------------------------


def test_real_probes_plan_within_the_budget_they_measured(tmp_path, capsys):
    """
    The tiny model on 6 prompts, 2 held out (the probes train on the 4 the sweep trains on), G 2 and 4: a 1 MiB budget is refused naming the smallest probe's measured peak (and
    leaves no folder); with that peak + 16 MiB, every probe's verdict matches its measured peak, the plan takes the
    largest fitting batch, the dataset's size stops the generation batch, and the planned recipe is valid.
    """
    data = yaml.safe_load((PROJECT / "recipes" / "demo.yaml").read_text())
    recipe = tmp_path / "quick.yaml"
    recipe.write_text(yaml.safe_dump({**data, "dataset_num_prompts": 6, "max_completion_length": 24}))
    command = ["sweep", str(recipe), "--num-generations", "2", "4", "--held-out", "2", "--plan-memory", "--out"]
    out = tmp_path / "plan"
    assert main([*command, str(out), "--memory-budget", "1MiB"]) == 2
    err = capsys.readouterr().err
    peak = int(re.search(r"G 2, per-device batch 2, 1 step per generation measured (\d+) MiB", err).group(1))
    assert peak > 50 and not out.exists()  # a real process's RSS, not a made-up number; nothing half-written

    budget = (peak + 16) * MiB
    assert main([*command, str(out), "--memory-budget", f"{peak + 16}MiB"]) == 0
    plan = json.loads((out / "memory_plan.json").read_text())
    assert plan["budget"] == budget and plan["memory_kind"] == "rss"
    probes = plan["probes"]
    for probe in probes:  # the verdicts are the measured peaks' (a probe the dataset refuses measures nothing)
        assert probe["fits"] == (probe["peak"] is not None and probe["peak"] <= budget)
        assert (probe["peak"] is None) == bool(probe.get("refused"))
        if probe["peak"] is not None:  # every completion generated to max_completion_length: generation's most
            assert probe["full_length"] and probe["mean_length"] == 24
    batches = [p for p in probes if p["steps_per_generation"] == 1 and p["num_generations"] == 2]
    b = plan["per_device_train_batch_size"]
    assert b == max(p["per_device_train_batch_size"] for p in batches if p["fits"])
    assert all(not p["fits"] for p in batches if p["per_device_train_batch_size"] > b)
    larger = [p for p in probes if p["per_device_train_batch_size"] * p["steps_per_generation"] > 8]
    assert larger and all("too small" in p["refused"] for p in larger)  # 4 prompts: at most 8 completions at G 2
    # (on all 6 rows, as before the held-out rows were kept out of the probes, it planned 12, which the sweep refuses)
    assert b * plan["steps_per_generation"] == 8 and not plan["capped"]
    assert [row["fits"] for row in plan["rows"]] == [True, True]
    planned = yaml.safe_load((out / "planned.yaml").read_text())
    assert planned["per_device_train_batch_size"] == b and planned["gradient_accumulation_steps"] == 1
    assert "steps_per_generation" not in planned and planned["reward_funcs"] == data["reward_funcs"]
    printed = capsys.readouterr().out
    assert f"grpo-curriculum sweep {out / 'planned.yaml'} --num-generations 2 4 --held-out 2 --out {out / 'sweep'}" in printed
    assert main(["check", str(out / "planned.yaml")]) == 0
    assert f"budget: {peak + 16} MiB (--memory-budget)" in (out / "memory_plan.md").read_text()
