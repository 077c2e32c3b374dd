"""
The defaults on prompts of fixed kinds (issue 37; `benchmarks/study/fixed_kinds.py`): solved, impossible, rare-success
(p = 0.05) and fair-coin prompts in equal shares, 48 rounds of 128 completions over 256 prompts, driving the library's
real per-prompt and top-up rules. Pure: no torch, a few seconds. A default change that makes them worse fails here.

Issue 37's bounds, and where the defaults stand (each measured, 4 seeds): the per-prompt default meets the informative
share (>= 1.3x the best static G's) and the rare-success share (>= their static share), and misses the settled share
(<= 0.15 of the completions on solved + impossible prompts; it spends 0.28, the default before 0.34); top-up misses
its bound (>= 1.5x static G 4's informative share; 0.70x). The misses are held where they stand, so they can only
improve; docs/study.md reports them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # `study` (benchmarks/study/)

from study import fixed_kinds  # noqa: E402

from grpo_curriculum import Adaptive  # noqa: E402

CANDIDATES = (2, 4, 8, 16)


@pytest.fixture(scope="module")
def per_prompt():
    return fixed_kinds.checks(Adaptive(CANDIDATES, policy="per_prompt"))


def test_the_per_prompt_default_puts_more_completions_in_informative_groups_than_any_static_g(per_prompt):
    assert per_prompt["informative_vs_best_static"]["ok"], per_prompt  # >= 1.3x the best static G's


def test_the_per_prompt_default_does_not_starve_rare_success_prompts(per_prompt):
    assert per_prompt["rare_vs_static"]["ok"], per_prompt  # at least their share under a static G


def test_the_per_prompt_default_settled_share_stays_where_it_stands(per_prompt):
    """Issue 37's bound (<= 0.15) is missed; the default holds its measured 0.28 (the default before: 0.34)."""
    assert not per_prompt["settled_share"]["ok"]  # when this fails, the bound is met: make the test say so
    assert per_prompt["settled_share"]["value"] <= 0.29, per_prompt
    before = fixed_kinds.checks(Adaptive(CANDIDATES, policy="per_prompt", defer=False, skip_target=0.25))
    assert per_prompt["settled_share"]["value"] < before["settled_share"]["value"] - 0.04


def test_the_top_up_default_share_stays_where_it_stands():
    """Issue 37's bound (>= 1.5x static G 4's informative share) is missed: top-up keeps no memory of prompts, and
    grows the all-equal pilots of settled prompts first. Held at its measured 0.70x."""
    check = fixed_kinds.checks(Adaptive(CANDIDATES, policy="top_up"))["informative_vs_static_g4"]
    assert not check["ok"] and check["value"] >= 0.68, check


def test_the_simulation_is_the_rules_not_noise():
    """Static G gives every kind its share of the completions; a prompt kind's informative share is exact."""
    g4 = fixed_kinds.run(4)
    assert g4["share"] == {kind: 0.25 for kind in fixed_kinds.KINDS} and g4["settled_share"] == 0.5
    solved_only = fixed_kinds.run(Adaptive(CANDIDATES, policy="per_prompt"), mix={"solved": 1}, rounds=8)
    assert solved_only["informative_share"] == 0.0 and solved_only["settled_share"] == 1.0
    coins = fixed_kinds.run(16, mix={"coin": 1}, rounds=8)
    assert coins["informative_share"] > 0.99


@pytest.mark.parametrize("policy", ["per_prompt", "top_up"])
def test_the_budget_is_exact(policy):
    """Every rule spends exactly its rounds' completions (equal completions: the shares compare)."""
    assert fixed_kinds.run(Adaptive(CANDIDATES, policy=policy), rounds=12)["completions"] == 12 * fixed_kinds.BATCH


def test_skipping_from_evidence_moves_completions_from_settled_to_rare_success_prompts(per_prompt):
    """Issue 42's opt-in `skip="evidence"` (docs/per-prompt.md): 0.19 of the completions on solved and impossible
    prompts (the default: 0.28), rare-success prompts 1.16x their static share (1.02x), 1.46x the best static G's
    informative share (1.32x). The 0.15 bound is still missed; in training it lost on the tuning seeds
    (docs/study.md, issue 42), so it is not the default."""
    evidence = fixed_kinds.checks(Adaptive(CANDIDATES, policy="per_prompt", skip="evidence"))
    assert evidence["settled_share"]["value"] <= 0.20 < per_prompt["settled_share"]["value"] - 0.07, evidence
    assert evidence["rare_vs_static"]["value"] >= 1.1 and evidence["informative_vs_best_static"]["value"] >= 1.4
    assert not evidence["settled_share"]["ok"]
