"""docs/recipe-reference.md is generated from the validation rules and must match them."""

from pathlib import Path

from grpo_curriculum.config import reference

DOC = Path(__file__).resolve().parent.parent / "docs" / "recipe-reference.md"


def test_committed_reference_matches_the_rules():
    assert DOC.read_text(encoding="utf-8") == reference.render(), (
        "docs/recipe-reference.md is stale: run python -m grpo_curriculum.config.reference docs/recipe-reference.md")


def test_reference_lists_every_key_check_validates():
    from grpo_curriculum.config.recipe import RECIPE_RULES
    from grpo_curriculum.config.trl_fields import trl_fields
    from grpo_curriculum.core.adaptive import KNOBS
    from grpo_curriculum.core.schedule import STAGE_RULES

    text = reference.render()
    for name in [*RECIPE_RULES, *STAGE_RULES, *KNOBS, *trl_fields()]:
        assert f"| `{name}` |" in text, name


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "ref.md"
    stale.write_text("old\n", encoding="utf-8")
    assert reference.main([str(stale), "--check"]) == 1
    assert reference.main([str(stale)]) == 0
    assert reference.main([str(stale), "--check"]) == 0


def test_reference_lists_rloo_config_differences_and_refusals(monkeypatch):
    """`trainer: rloo`: RLOOConfig's own fields and defaults, GRPO's fields it lacks, and what `rloo_problems` refuses
    (asked of it: lifting a refusal there makes this file stale, not wrong)."""
    import grpo_curriculum.core.rloo as rloo

    text = reference.render().split("## `trainer: rloo`")[1].split("## `trainer: async_grpo`")[0]
    assert "| `normalize_advantages` | true or false | `False` | RLOOConfig only |" in text
    assert "| `beta` |" in text and "| `0.05` | GRPOConfig's: `0.0` |" in text and "`loss_type`" in text
    assert "also refuses `dynamic_sampling` with `on_limit: mask` (its default) and a `comparison` of mode" in text
    assert "per_prompt" not in text.split("also refuses")[1] and "use_vllm" not in text.split("also refuses")[1]
    monkeypatch.setattr(rloo, "rloo_problems", lambda stages, **kwargs: [])
    assert "`trainer: rloo` also refuses none of the stages" in reference.render()


def test_reference_lists_async_config_fields_and_what_async_problems_refuses(monkeypatch):
    """`trainer: async_grpo`: AsyncGRPOConfig's own fields, GRPO's it lacks, and what `async_problems` refuses (asked
    of it: the temperature ramp and per-prompt stages it runs are not listed)."""
    import grpo_curriculum.core.asynchronous as asynchronous

    text = reference.render().split("## `trainer: async_grpo`")[1]
    assert "| `max_staleness` | an integer >= 0" in text and "| `4` | AsyncGRPOConfig only |" in text
    assert "| `dtype` |" in text and "ModelConfig's" in text and "`generation_batch_size`" in text
    refused = text.split("needs `max_steps` with a curriculum and refuses")[1]
    assert "`adaptive.policy: hysteresis`" in refused and "a `comparison`" in refused
    assert "per_prompt" not in refused and "ramp" not in refused
    monkeypatch.setattr(asynchronous, "async_problems", lambda stages, **kwargs: [])
    assert "and refuses none of the stages" in reference.render()
