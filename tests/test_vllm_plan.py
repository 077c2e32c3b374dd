"""Request plans for a data-parallel vLLM server: pure logic, no torch."""

from __future__ import annotations

import math

import pytest

from grpo_curriculum.vllm_plan import RequestPlan, plan_requests, trl_layout

# Generation batches (completions per round) of the seeds' recipes: 1 GPU 4x8, 2 GPUs 3x1 (and x2 accumulation),
# 4 GPUs 2x16, memory-tight 1x16, plus 64.
SEED_GENERATION_BATCHES = [32, 6, 12, 128, 16, 64]
ENGINES = [1, 2, 4, 8]


def seed_geometries():
    for batch in SEED_GENERATION_BATCHES:
        for g in range(2, 33):
            if batch % g == 0:
                for engines in ENGINES:
                    yield batch, g, engines


@pytest.mark.parametrize(
    "prompts, g, engines, trl_imbalance, split, ours",
    [
        # 64 completions at G=16: 4 prompts on 8 engines; TRL fills half of them.
        (4, 16, 8, 2.0, 2, 1.0),
        # one group, 4 engines: TRL uses one engine.
        (1, 8, 4, 4.0, 4, 1.0),
        # already a multiple of the engines: TRL's layout.
        (8, 4, 4, 1.0, 1, 1.0),
        (16, 2, 8, 1.0, 1, 1.0),
        # 3 prompts on 2 engines: TRL 2+1 requests; 2 sub-requests each balance them.
        (3, 4, 2, 4 * 2 * 2 / 12, 2, 1.0),
        # 6 completions on 4 engines cannot be balanced: best is 2,2,1,1 (1.33); the smaller k wins the tie.
        (3, 2, 4, 2 * 4 / 6, 1, 2 * 4 / 6),
        (1, 6, 4, 6 * 4 / 6, 3, 2 * 4 / 6),  # 3 requests of 2 already reach 2,2,2,0
        # engine count unknown or one engine: TRL's layout.
        (1, 16, None, 1.0, 1, 1.0),
        (1, 16, 1, 1.0, 1, 1.0),
    ],
)
def test_plan_table(prompts, g, engines, trl_imbalance, split, ours):
    trl = trl_layout(prompts, g, engines)
    assert trl.split == 1 and trl.n_per_request == g
    assert trl.imbalance == pytest.approx(trl_imbalance)
    plan = plan_requests(prompts, g, engines)
    assert (plan.split, plan.n_per_request) == (split, g // split)
    assert plan.imbalance == pytest.approx(ours)
    assert plan.num_requests == prompts * split
    assert sum(plan.engine_loads) == plan.num_completions == prompts * g


def test_engine_loads_round_robin():
    plan = RequestPlan(num_prompts=3, num_generations=4, num_engines=4, split=2)
    assert plan.num_requests == 6 and plan.n_per_request == 2
    assert plan.engine_loads == [4, 4, 2, 2]
    assert plan.imbalance == pytest.approx(4 / 3)
    assert RequestPlan(2, 8, None).engine_loads == [16]
    assert RequestPlan(0, 8, 4).imbalance == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_prompts=2, num_generations=6, num_engines=4, split=4),  # 4 does not divide 6
        dict(num_prompts=-1, num_generations=2, num_engines=4),
        dict(num_prompts=2, num_generations=0, num_engines=4),
        dict(num_prompts=2, num_generations=2, num_engines=0),
        dict(num_prompts=2, num_generations=2.0, num_engines=2),
        dict(num_prompts=True, num_generations=2, num_engines=2),
    ],
)
def test_invalid_plans(kwargs):
    with pytest.raises(ValueError):
        RequestPlan(**kwargs)


def test_plan_is_frozen():
    plan = plan_requests(4, 16, 8)
    with pytest.raises(AttributeError):
        plan.split = 1


@pytest.mark.parametrize("batch, g, engines", list(seed_geometries()))
def test_seed_geometries(batch, g, engines):
    prompts = batch // g
    plan = plan_requests(prompts, g, engines)
    trl = trl_layout(prompts, g, engines)
    assert g % plan.split == 0
    assert plan.num_completions == batch
    # Never worse than TRL, and as good as any assignment of `batch` completions to `engines` can be.
    lower_bound = math.ceil(batch / engines) * engines / batch
    assert plan.imbalance <= trl.imbalance + 1e-12
    assert plan.imbalance == pytest.approx(lower_bound)
    if batch % engines == 0:
        assert plan.imbalance <= 1.1
    if trl.imbalance == 1.0:
        assert plan.split == 1  # balanced already: TRL's layout, untouched


def test_seed_geometries_worst_cases():
    """The summary the benchmark prints: 1.0 wherever the round's completions divide over the engines."""
    divisible = [plan_requests(b // g, g, e).imbalance for b, g, e in seed_geometries() if b % e == 0]
    assert max(divisible) == 1.0
    # 6 on 4 engines and 12 on 8 are the seeds' geometries no layout balances: 2 completions where the mean is 1.5.
    indivisible = {(b, e): plan_requests(b // g, g, e).imbalance for b, g, e in seed_geometries() if b >= e and b % e}
    assert set(indivisible) == {(6, 4), (12, 8)}
    assert all(value == pytest.approx(4 / 3) for value in indivisible.values())
    # TRL's layout at the same geometries: one group on 8 engines (16 completions at G=16) keeps 7 of them idle.
    assert max(trl_layout(b // g, g, e).imbalance for b, g, e in seed_geometries()) == 8.0
