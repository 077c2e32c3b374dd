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
