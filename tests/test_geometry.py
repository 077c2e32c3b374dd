"""Tests for `grpo_curriculum.core.geometry`: TRL 1.16's batch rules and the seed documents' worked cases."""

import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_curriculum.core.errors import CurriculumError, Problem
from grpo_curriculum.core.geometry import BatchGeometry, Fixes, divisors


PACKAGE_DIR = Path(__file__).resolve().parents[1] / "grpo_curriculum"


def geometry(n, b, acc=1, **kwargs):
    return BatchGeometry.from_values(
        num_processes=n, per_device_train_batch_size=b, gradient_accumulation_steps=acc, **kwargs
    )


@pytest.mark.parametrize(
    "n, expected",
    [(1, [1]), (2, [1, 2]), (6, [1, 2, 3, 6]), (8, [1, 2, 4, 8]), (12, [1, 2, 3, 4, 6, 12]), (16, [1, 2, 4, 8, 16]),
     (36, [1, 2, 3, 4, 6, 9, 12, 18, 36]), (97, [1, 97]), (0, [])],
)
def test_divisors(n, expected):
    assert divisors(n) == expected


# Seeds: every number below is from /work/shared/SEEDS.md.
@pytest.mark.parametrize(
    "n, b, acc, generation_batch, valid",
    [
        (2, 4, 1, 8, [2, 4, 8]),  # "2 GPUs x 4 per device = 8, so G can only be 2, 4 or 8"
        (2, 2, 1, 4, [2, 4]),  # table row 1
        (2, 3, 1, 6, [2, 3, 6]),  # table row 2 and the worked case
        (2, 3, 2, 12, [2, 3, 4, 6, 12]),  # pitfall (1)
        (1, 1, 4, 4, [2, 4]),  # 004: 1 GPU, batch 1, accumulation 4
        (1, 1, 1, 1, []),
    ],
)
def test_valid_num_generations(n, b, acc, generation_batch, valid):
    geo = geometry(n, b, acc)
    assert geo.generation_batch_size == generation_batch
    assert geo.valid_num_generations() == valid


@pytest.mark.parametrize(
    "n, b, acc, G, valid",
    [
        # The seed's table.
        (2, 2, 1, 8, False),
        (2, 3, 1, 3, True),
        (2, 4, 1, 5, False),
        # Worked case, 004's example, and pitfall (1).
        (2, 3, 1, 8, False),
        (1, 1, 4, 4, True),
        (2, 3, 2, 5, False),
        # The 1-, 2- and 4-GPU recipes and the memory-tight config.
        (1, 4, 8, 4, True),
        (2, 3, 1, 6, True),
        (4, 2, 16, 8, True),
        (1, 1, 16, 4, True),
        # Heterogeneous GPUs: 2 processes, per_device 3, G 6.
        (2, 3, 1, 6, True),
        # TRL's own bounds: G >= 2, an integer.
        (1, 4, 1, 1, False),
        (1, 4, 1, 0, False),
        (1, 4, 1, -4, False),
        (1, 4, 1, True, False),
        (1, 4, 1, 4.0, False),
        (1, 4, 1, "4", False),
    ],
)
def test_is_valid_matches_problems(n, b, acc, G, valid):
    geo = geometry(n, b, acc)
    assert geo.is_valid(G) is valid
    problems = geo.problems(G)
    assert (problems == []) is valid
    if not valid:
        assert len(problems) == 1 and isinstance(problems[0], Problem)
        assert problems[0].key == "num_generations" and problems[0].value == G and problems[0].fix


def test_seed_worked_case():
    # 2 x 3 = 6 with G 8 fails; fix 1: G in {2, 3, 6}; fix 2: per_device 4 -> 8, keep G 8.
    geo = geometry(2, 3)
    assert geo.describe() == "2 processes x 3 per-device batch x 1 steps per generation = generation batch 6"
    fixes = geo.fixes(8)
    assert fixes == Fixes(nearest_num_generations=(6,), per_device_train_batch_size=4, steps_per_generation=4,
                          num_processes=8)
    (problem,) = geo.problems(8, key="curriculum.stages[1].num_generations")
    assert problem.key == "curriculum.stages[1].num_generations" and problem.value == 8
    assert geo.describe() in problem.rule
    assert "valid num_generations: 2, 3, 6" in problem.rule
    assert fixes.lines(geo) == [
        "use num_generations 6 (nearest valid)",
        "or per_device_train_batch_size 4 -> generation batch 8",
        "or gradient_accumulation_steps 4 (steps_per_generation follows it) -> generation batch 24",
        "or num_processes 8 -> generation batch 24",
    ]
    assert problem.fix == "; ".join(fixes.lines(geo))
    assert "num_generations = 8" in str(problem)


@pytest.mark.parametrize(
    "n, b, acc, G, nearest, fix_b, fix_s, fix_n",
    [
        (2, 3, 1, 8, (6,), 4, 4, 8),
        (2, 3, 2, 5, (4, 6), 5, 5, 5),  # pitfall (1): tie -> both neighbours
        (2, 2, 1, 8, (4,), 4, 2, 4),  # table row 1
        (2, 4, 1, 5, (4,), 5, 5, 5),  # table row 3
        (2, 3, 1, 4, (3,), 4, 2, 4),
        (1, 1, 1, 2, (), 2, 2, 2),  # nothing is valid in a generation batch of 1
        (1, 4, 1, 1, (2,), None, None, None),  # G < 2: no geometry change helps
        (2, 3, 1, 6, (6,), 3, 1, 2),  # already valid: the fixes change nothing
    ],
)
def test_fixes(n, b, acc, G, nearest, fix_b, fix_s, fix_n):
    geo = geometry(n, b, acc)
    fixes = geo.fixes(G)
    assert fixes == Fixes(nearest, fix_b, fix_s, fix_n)
    for changed in (
        fix_b and geometry(n, fix_b, acc, steps_per_generation=geo.steps_per_generation),
        fix_s and geometry(n, b, acc, steps_per_generation=fix_s),
        fix_n and geometry(fix_n, b, acc, steps_per_generation=geo.steps_per_generation),
    ):
        assert changed is None or changed.is_valid(G)


def test_fix_lines_name_steps_per_generation_when_it_does_not_follow_accumulation():
    geo = geometry(2, 3, acc=1, steps_per_generation=2)
    assert geo.gradient_accumulation_steps == 1 and geo.steps_per_generation == 2
    assert "or steps_per_generation 5 -> generation batch 30" in geo.fixes(5).lines(geo)
    geo = BatchGeometry(2, 3, 2)
    assert geo.fixes(5).lines(geo)[2].startswith("or gradient_accumulation_steps 5")


def test_fix_lines_without_a_valid_num_generations():
    geo = geometry(1, 1)
    assert geo.fixes(2).lines(geo) == [
        "use per_device_train_batch_size 2 -> generation batch 2",
        "or gradient_accumulation_steps 2 (steps_per_generation follows it) -> generation batch 2",
        "or num_processes 2 -> generation batch 2",
    ]
    (problem,) = geo.problems(4)
    assert "valid num_generations: none" in problem.rule


@pytest.mark.parametrize("G", [1, 0, True, 4.0, None])
def test_problem_for_bad_num_generations_value(G):
    (problem,) = geometry(2, 4).problems(G, key="stages[0].num_generations")
    assert problem.key == "stages[0].num_generations" and problem.value is G
    assert "integer >= 2" in problem.rule and "2, 4, 8" in problem.rule
    assert problem.fix == "use num_generations 2"


@pytest.mark.parametrize(
    "n, b, G, note",
    [(2, 4, 8, False), (2, 3, 3, False), (2, 3, 6, False), (1, 1, 4, True), (4, 2, 8, False), (1, 4, 8, True),
     (2, 3, 4, True), (1, 4, 0, False), (1, 4, True, False)],
)
def test_per_step_note(n, b, G, note):
    # The seeds' per-micro-step rule: num_processes x per_device_train_batch_size must hold whole groups.
    result = BatchGeometry(n, b, 16).per_step_note(G)
    assert (result is not None) is note
    if note:
        assert "\n" not in result and f"num_generations {G}" in result and str(n * b) in result


@pytest.mark.parametrize(
    "kwargs, spg, gbs",
    [
        (dict(), 1, 6),
        (dict(acc=4), 4, 24),  # steps_per_generation follows gradient_accumulation_steps
        (dict(acc=4, steps_per_generation=2), 2, 12),
        (dict(acc=4, generation_batch_size=18), 3, 18),
    ],
)
def test_from_values_derivation(kwargs, spg, gbs):
    geo = geometry(2, 3, **kwargs)
    assert (geo.steps_per_generation, geo.generation_batch_size) == (spg, gbs)
    assert geo.gradient_accumulation_steps == kwargs.get("acc", 1)


@pytest.mark.parametrize(
    "kwargs, keys, fix",
    [
        (dict(num_processes=0, per_device_train_batch_size=True), ["num_processes", "per_device_train_batch_size"],
         None),
        (dict(num_processes=2, per_device_train_batch_size=3, gradient_accumulation_steps=-1, num_generations_eval=0),
         ["gradient_accumulation_steps", "num_generations_eval"], None),
        (dict(num_processes=2, per_device_train_batch_size=3, steps_per_generation=2, generation_batch_size=12),
         ["generation_batch_size"], "set only one of generation_batch_size and steps_per_generation"),
        (dict(num_processes=2, per_device_train_batch_size=3, generation_batch_size=8), ["generation_batch_size"],
         "use generation_batch_size 6 or 12"),
        (dict(num_processes=2, per_device_train_batch_size=3, generation_batch_size=4), ["generation_batch_size"],
         "use generation_batch_size 6"),
        (dict(num_processes=2, per_device_train_batch_size=3, steps_per_generation=2.0), ["steps_per_generation"],
         None),
    ],
)
def test_from_values_errors(kwargs, keys, fix):
    with pytest.raises(CurriculumError) as info:
        BatchGeometry.from_values(**kwargs)
    assert [problem.key for problem in info.value.problems] == keys
    assert info.value.problems[-1].fix == fix


def test_constructor_validates():
    with pytest.raises(CurriculumError) as info:
        BatchGeometry(0, 2, 1, per_device_eval_batch_size=-1)
    assert [p.key for p in info.value.problems] == ["num_processes", "per_device_eval_batch_size"]


@pytest.mark.parametrize(
    "n, eval_batch, eval_G, fix",
    [
        (1, 8, 8, None),
        (2, 3, 6, None),
        (2, 3, 4, "use num_generations_eval 3, or per_device_eval_batch_size 4 -> global eval batch 8"),
        (1, 3, 8, "use num_generations_eval 3, or per_device_eval_batch_size 8 -> global eval batch 8"),
        (1, 1, 2, "use per_device_eval_batch_size 2 -> global eval batch 2"),
        (1, 3, None, None),  # evaluation not checked
    ],
)
def test_eval_problems(n, eval_batch, eval_G, fix):
    geo = BatchGeometry(n, 1, 1, per_device_eval_batch_size=eval_batch, num_generations_eval=eval_G)
    problems = geo.eval_problems()
    assert [p.fix for p in problems] == ([] if fix is None else [fix])
    if problems:
        assert problems[0].key == "num_generations_eval" and problems[0].value == eval_G


def _namespace(**overrides):
    values = dict(world_size=1, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                  steps_per_generation=None, generation_batch_size=None, per_device_eval_batch_size=8,
                  num_generations_eval=None, num_generations=8, do_eval=False, eval_strategy="no")
    return SimpleNamespace(**{**values, **overrides})


@pytest.mark.parametrize(
    "overrides, num_processes, expected",
    [
        (dict(), None, BatchGeometry(1, 4, 1, 1)),
        (dict(world_size=2, gradient_accumulation_steps=8), None, BatchGeometry(2, 4, 8, 8)),
        # A post-init config: both filled in for world_size 2; overriding the processes keeps steps_per_generation.
        (dict(world_size=2, steps_per_generation=2, generation_batch_size=16), 4, BatchGeometry(4, 4, 2, 1)),
        # A raw config with only generation_batch_size: derived for the given process count.
        (dict(generation_batch_size=16), 2, BatchGeometry(2, 4, 2, 1)),
        # Eval runs: eval G falls back to num_generations.
        (dict(do_eval=True, eval_strategy="steps"), None, BatchGeometry(1, 4, 1, 1, 8, 8)),
        (dict(do_eval=True, eval_strategy="steps", num_generations_eval=4), 2, BatchGeometry(2, 4, 1, 1, 8, 4)),
        (dict(do_eval=True, eval_strategy="no", num_generations_eval=4), None, BatchGeometry(1, 4, 1, 1)),
        (dict(do_eval=False, eval_strategy="steps"), None, BatchGeometry(1, 4, 1, 1)),
    ],
)
def test_from_args_duck_typed(overrides, num_processes, expected):
    assert BatchGeometry.from_args(_namespace(**overrides), num_processes=num_processes) == expected


def test_from_args_both_set_inconsistently_is_an_error():
    with pytest.raises(CurriculumError) as info:
        BatchGeometry.from_args(_namespace(steps_per_generation=2, generation_batch_size=4))
    assert [p.key for p in info.value.problems] == ["generation_batch_size"]


def _grpo_config(tmp_path, **kwargs):
    trl = pytest.importorskip("trl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **kwargs)


def test_from_args_real_grpo_config(tmp_path):
    # The 1-GPU recipe: per_device 4, G 4, gradient_accumulation_steps 8.
    args = _grpo_config(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=8, num_generations=4)
    geo = BatchGeometry.from_args(args)
    assert geo == BatchGeometry(args.world_size, 4, 8, 8)
    assert geo.generation_batch_size == args.generation_batch_size == 32 * args.world_size
    assert geo.is_valid(args.num_generations)
    # Same config on 2 processes (as if launched with accelerate): steps_per_generation kept, batch recomputed.
    assert BatchGeometry.from_args(args, num_processes=2).generation_batch_size == 64
    # 004's example: per_device 2, accumulation 2, generation_batch_size 8, G 4.
    args = _grpo_config(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                        generation_batch_size=8, num_generations=4, eval_strategy="steps", num_generations_eval=2)
    assert args.world_size == 1 and args.steps_per_generation == 4
    geo = BatchGeometry.from_args(args, num_processes=2)
    assert (geo.steps_per_generation, geo.generation_batch_size) == (4, 16)
    assert (geo.per_device_eval_batch_size, geo.num_generations_eval) == (8, 2)
    assert geo.is_valid(4) and geo.eval_problems() == []


@pytest.mark.parametrize("b, acc, G", [(3, 1, 8), (3, 2, 4), (2, 2, 3), (1, 4, 1), (3, 2, 6), (1, 4, 4)])
def test_agrees_with_grpo_config(tmp_path, b, acc, G):
    geo = BatchGeometry.from_values(num_processes=1, per_device_train_batch_size=b, gradient_accumulation_steps=acc)
    if geo.is_valid(G):
        _grpo_config(tmp_path, per_device_train_batch_size=b, gradient_accumulation_steps=acc, num_generations=G)
    else:
        with pytest.raises(ValueError):
            _grpo_config(tmp_path, per_device_train_batch_size=b, gradient_accumulation_steps=acc, num_generations=G)


def test_geometry_module_does_not_import_torch():
    code = (
        "import sys, types\n"
        "pkg = types.ModuleType('grpo_curriculum')\n"
        f"pkg.__path__ = [{str(PACKAGE_DIR)!r}]\n"
        "sys.modules['grpo_curriculum'] = pkg\n"
        "import grpo_curriculum.core.geometry\n"
        "bad = sorted(m for m in ('torch', 'trl', 'numpy', 'transformers') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_fills_agrees_with_a_plain_table():
    from grpo_curriculum.core.geometry import fills

    for candidates in [(2,), (3, 5), (5, 8), (4, 6, 9), (7, 11, 13), (2, 16), (6, 10, 15), (12,)]:
        table = [True]
        for total in range(1, 61):
            table.append(any(c <= total and table[total - c] for c in candidates))
        assert [fills(candidates, total) for total in range(61)] == table, candidates


def test_bounds_are_checked_before_any_arithmetic():
    """A huge batch would make `divisors` loop for hours; it is refused instead, naming the product."""
    from grpo_curriculum.core.geometry import fills
    from grpo_curriculum.core.rules import MAX_COUNT

    with pytest.raises(CurriculumError, match=f"must be at most {MAX_COUNT}"):
        BatchGeometry(1, 10**26, 1)
    with pytest.raises(CurriculumError) as info:
        BatchGeometry.from_values(num_processes=1000003, per_device_train_batch_size=1000033)
    (problem,) = info.value.problems
    assert problem.key == "generation_batch_size" and problem.value == 1000003 * 1000033
    assert f"more than the {MAX_COUNT}" in problem.rule
    assert "1000003 processes x 1000033 per-device batch" in problem.rule
    with pytest.raises(CurriculumError, match="per_device_eval_batch_size"):
        BatchGeometry(1024, 1, 1, per_device_eval_batch_size=1025, num_generations_eval=2)
    largest = BatchGeometry(1, MAX_COUNT, 1)  # the largest batch still answers at once
    assert largest.valid_num_generations()[-1] == MAX_COUNT and largest.problems(3)
    assert fills((MAX_COUNT // 2 + 1, MAX_COUNT // 2 - 1), MAX_COUNT) and not fills((1000, 1002), MAX_COUNT - 1)
    (problem,) = largest.problems(10**5000)  # a Python caller's huge G: refused without printing it
    assert "must be at most" in problem.rule and "5001 digits" in str(problem) and "5001 digits" in repr(problem)
