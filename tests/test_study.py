"""The study's statistics (benchmarks/study_stats.py): paired ratios, bootstrap interval, area under the curve, and the
exact teacher-forced evaluation against sampling from the same tiny model."""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from study_stats import (  # noqa: E402  (benchmarks/study_stats.py)
    answer_probability,
    area_under,
    bootstrap_interval,
    first_reaching,
    median,
    paired_ratio,
)


def test_first_reaching_interpolates_between_the_points_around_the_target():
    xs, ys = [0, 100, 200, 300], [0.2, 0.4, 0.8, 0.6]
    assert first_reaching(xs, ys, 0.6) == pytest.approx(150.0)
    assert first_reaching(xs, ys, 0.8) == 200.0
    assert first_reaching(xs, ys, 0.1) == 0.0  # the start already reaches it
    assert first_reaching(xs, ys, 0.81) is None


def test_paired_ratio_and_median_keep_never_and_no_reference_apart():
    assert paired_ratio(300.0, 600.0) == 0.5
    assert paired_ratio(None, 600.0) == math.inf  # the arm never reaches the target
    assert math.isnan(paired_ratio(300.0, None))  # the reference never does: no ratio on that seed
    assert paired_ratio(0.0, 0.0) == 1.0
    assert median([0.5, math.inf, math.inf, math.nan]) == math.inf  # nan dropped, never counts as the largest
    assert median([0.5, 0.7, math.inf]) == 0.7


def test_bootstrap_interval_matches_the_enumerated_bootstrap_distribution():
    values = [0.4, 0.9, 1.3, 2.0]
    # Every resample of 4 seeds with replacement is equally likely: enumerate them for the exact distribution.
    medians = sorted(statistics.median(r) for r in itertools.product(values, repeat=len(values)))
    exact = (medians[int(0.05 * len(medians))], medians[int(math.ceil(0.95 * len(medians))) - 1])
    assert bootstrap_interval(values, resamples=20_000) == pytest.approx(exact)
    low, high = bootstrap_interval(values, statistic=statistics.fmean, level=0.5)
    assert values[0] < low < statistics.fmean(values) < high < values[-1]
    assert bootstrap_interval([2.0, math.nan, 2.0]) == (2.0, 2.0)


def test_area_under_is_the_mean_height_up_to_the_cut():
    assert area_under([0, 10], [0.0, 1.0], 10) == pytest.approx(0.5)
    assert area_under([0, 10, 20], [0.0, 1.0, 1.0], 20) == pytest.approx(0.75)
    assert area_under([0, 10, 20], [0.0, 1.0, 1.0], 5) == pytest.approx(0.25)  # cut inside the first segment
    assert area_under([0, 10], [0.0, 1.0], 20) == pytest.approx(0.75)  # held flat after the last point


@pytest.fixture(scope="module")
def warm_model():
    import torch

    from grpo_curriculum.demo.tasks import build_model, build_tokenizer, echo_dataset, warm_start

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    model = build_model(seed=0)
    warm_start(model, tokenizer, echo_dataset(64, seed=0, length=1), steps=40, seed=0)
    return model, tokenizer


def test_answer_probability_matches_sampling_at_the_temperature(warm_model):
    import torch

    model, tokenizer = warm_model
    eos = tokenizer.eos_token_id
    prompt = tokenizer("echo : cat =").input_ids
    answer = tokenizer("cat").input_ids + [eos]
    temperature, samples = 0.8, 4000
    (p,) = answer_probability(model, [prompt], [answer], temperature)
    assert 0.05 < p < 0.95  # a probability sampling can estimate well
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=len(answer),
                             num_return_sequences=samples, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
    hits = sum(row[len(prompt) :].tolist() == answer for row in out)
    assert abs(hits / samples - p) < 4 * math.sqrt(p * (1 - p) / samples)


def test_answer_probability_does_not_depend_on_the_batch(warm_model):
    model, tokenizer = warm_model
    prompts = [tokenizer(p).input_ids for p in ("echo : cat =", "echo : red dog sun =", "count : fish fish =")]
    answers = [tokenizer(a).input_ids + [tokenizer.eos_token_id] for a in ("cat", "red dog sun", "two")]
    together = answer_probability(model, prompts, answers, 0.5)
    alone = [answer_probability(model, [p], [a], 0.5)[0] for p, a in zip(prompts, answers, strict=True)]
    assert together == pytest.approx(alone, rel=1e-5)
    # The answers' probabilities at temperature 1 and the sum over every one-token continuation.
    first = answer_probability(model, [prompts[0]] * 30, [[t] for t in range(30)], 1.0)
    assert sum(first) == pytest.approx(1.0, abs=1e-5)


def test_the_study_skips_the_cgrpo_arm_when_trl_cgrpo_is_missing(hide_package, tmp_path, capsys):
    import study

    hide_package("trl_cgrpo")
    with pytest.raises(SystemExit) as error:
        study.main(["--arms", "cgrpo", "--out", str(tmp_path)])
    assert error.value.code == 2
    out, err = capsys.readouterr()
    assert "skipping the `cgrpo` arm: trl-cgrpo is not installed (pip install --no-deps trl-cgrpo==0.2.0)" in out
    assert "no arm left to run" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


# --- the sampling arms (top-up, dynamic sampling), with stand-in runs --------------------------------------------


def test_the_sampling_arms_fit_the_study_round():
    import study

    from grpo_curriculum import BatchGeometry, DynamicSampling, StageSchedule
    from grpo_curriculum.core.sampling import TopUp

    (top_up,) = study.arm_stages("top_up")
    # the round size its runs had (the default before issue 25: 16 // (2 * 2)), explicit since the default is 16 // 8
    assert top_up.top_up == TopUp(pilot=2, largest=16, prompts=4)
    assert top_up.top_up.prompts_for(study.GENERATION_BATCH) == 4
    assert "top_up" in study.INCREMENT_ARMS and "top_up_value" not in study.ARMS  # the removed rule's arm
    (dynamic,) = study.arm_stages("dynamic")
    assert (dynamic.num_generations, dynamic.dynamic_sampling) == (study.DYNAMIC_G, DynamicSampling(4))
    geometry = BatchGeometry(1, study.GENERATION_BATCH, 1)  # as run_arm builds it
    assert StageSchedule([top_up]).geometry_problems(geometry) == []
    assert StageSchedule([dynamic]).geometry_problems(geometry) == []
    assert {"top_up", "dynamic"} <= set(study.ARMS) and not {"top_up", "dynamic"} & set(study.STATIC_ARMS)


def test_the_probe_counts_a_round_sampled_in_increments_by_its_whole_groups(warm_model):
    """Pilots of 2 for 3 prompts, then increments: each group counts once, at its final size, when the round is in."""
    import study

    model, tokenizer = warm_model
    reward = study.ExactAnswer(tokenizer)
    probe = study.Probe(model, reward, None, round_size=12)
    a, b, c = "echo two : cat red dog sun =", "echo one : fish fish cat red =", "echo four : dog dog dog dog ="
    targets = {a: "cat red", b: "fish", c: "dog dog dog dog"}
    calls = [([a, a, b, b, c, c], [0.0, 0.0, 1.0, 0.0, 1.0, 1.0]),  # pilots: a, c all equal; b informative
             ([a, a, c, c], [0.0, 1.0, 1.0, 1.0]),  # a becomes informative, c stays all equal
             ([c, c], [1.0, 1.0])]  # c at 6, the round holds 12
    for i, (prompts, rewards) in enumerate(calls):
        probe(prompts, [targets[p] for p in prompts], rewards)
        assert probe.completions == (12 if i == 2 else 0)  # nothing counted before the round is in
    assert probe.summary()["informative"] == 4 + 2  # a (4 completions) and b (2); c (6) never informative
    assert sum(bin_[0] for bin_ in probe.bins) == 3 and sum(bin_[1] for bin_ in probe.bins) == 12


def test_the_noisy_reward_flips_each_training_reward_with_its_probability_and_the_same_seed_flips_the_same(
        warm_model):  # fmt: skip
    """`prefix_noisy` (benchmarks/study2.py): flip 0 is the exact reward, 1 its complement, 0.1 about a tenth."""
    import study

    _, tokenizer = warm_model
    exact = study.ExactAnswer(tokenizer)
    ids = exact.answer_ids("cat red")
    rows = [ids if i % 3 else ids[:-1] for i in range(3000)]
    call = {"prompts": ["p"] * len(rows), "completions": [""] * len(rows), "completion_ids": rows,
            "target": ["cat red"] * len(rows)}  # fmt: skip
    truth = exact(**call)
    assert truth == [float(i % 3 != 0) for i in range(len(rows))]
    assert study.ExactAnswer(tokenizer, flip=1.0)(**call) == [1.0 - r for r in truth]
    noisy = study.ExactAnswer(tokenizer, flip=0.1, seed=5)(**call)
    flipped = sum(a != b for a, b in zip(noisy, truth, strict=True)) / len(rows)
    assert 0.08 < flipped < 0.12
    assert study.ExactAnswer(tokenizer, flip=0.1, seed=5)(**call) == noisy
    assert study.ExactAnswer(tokenizer, flip=0.1, seed=6)(**call) != noisy


def _stand_in_run(arm, seed, ys, informative, generated=512, logged=None):
    """A run record as `run_arm` returns it, with the exact-reward curve `ys` at even completion counts."""
    xs = [generated * i / (len(ys) - 1) for i in range(len(ys))]
    levels = {"1": 0.5, "2": 0.5, "3": 0.5, "4": 0.5}
    return {"task": "prefix_levels", "arm": arm, "seed": seed, "budget": generated, "steps": 32,
            "generated": generated,
            "eval": [{"step": i, "completions": x, "train_time": 0.0, "exact": y, "sampled": y, "greedy": y,
                      "levels": levels} for i, (x, y) in enumerate(zip(xs, ys))],
            "probe": {"completions": 100, "informative": informative,
                      "bins": [[25, 100, informative]] + [[0, 0, 0]] * 5},
            "deferred": 0, "calibration_rollouts": 0, "train_time": 10.0 + seed, "eval_time": 1.0, "run_time": 12.0,
            "warm_time": 1.0, "warm_steps": 90, "logged": logged or {}}  # fmt: skip


def test_the_report_states_the_sampling_targets_met_or_missed(tmp_path):
    import study

    runs = []
    for seed in (0, 1, 2, 3, 100):
        runs.append(_stand_in_run("static_g2", seed, [0.5, 0.6, 0.7, 0.8], informative=20))
        runs.append(_stand_in_run("static_g4", seed, [0.5, 0.55, 0.6, 0.65], informative=40))
        if seed == 100:
            continue  # the tuning seed: static arms only
        logged = {"generated": 512, "increments": 2.5, "dropped": 0, "informative_steps": 0.5}
        runs.append(_stand_in_run("top_up", seed, [0.5, 0.8, 0.85, 0.9], 60, logged=logged))  # 0.8 after 1/3
        logged = {"generated": 512, "increments": 1.5, "dropped": 30, "informative_steps": 1.0}
        runs.append(_stand_in_run("dynamic", seed, [0.5, 0.6, 0.8, 0.9], 50, logged=logged))  # 0.8 after 2/3
    arms = ["static_g2", "static_g4", "top_up", "dynamic"]
    summary = study.summarise_task(runs, arms, [100], [0, 1, 2, 3])
    assert summary["best_static"] == "static_g2"
    verdicts = study.sampling_verdicts(summary)
    assert list(verdicts["top_up"].values()) == [True, True, True, None]  # 3x the informative share, ratio 0.33
    assert "(3.00x)" in next(iter(verdicts["top_up"]))
    lines = list(verdicts["dynamic"])
    assert lines[0] == "steps whose batch held only informative groups: 100%"
    assert "over the best static's: median 0.67, 90% CI [0.67, 0.67]" in lines[1]
    assert "over top_up's (paired, to the best static's final reward): median 2.00" in lines[3]
    assert set(verdicts) == {"top_up", "dynamic"}
    raw = {"mode": "pilot, custom", "command": "python benchmarks/study.py --arms ...", "wall_time_s": 60.0,
           "options": {"name": "custom", "tasks": ["prefix_levels"], "arms": arms, "seeds": [0, 1, 2, 3],
                       "tuning": [100], "steps": 32, "points": 3, "jobs": 1}, "runs": runs}  # fmt: skip
    text = study.report(raw, tmp_path)
    assert "Targets for `top_up`: informative share >= 1.5x best static (3.00x): met;" in text
    assert "Targets for `dynamic`: steps whose batch held only informative groups: 100%;" in text
    row = next(line for line in text.splitlines() if line.startswith("| dynamic |"))
    assert row.endswith("| 512 ± 0 (512 ± 0) | 1.50 ± 0.00 | 30 ± 0 | 12 ± 1 |")  # generated, increments, time
