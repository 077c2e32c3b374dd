"""
The recipe reference (`docs/recipe-reference.md`), generated from the rules `check` and `train` validate with, so it
cannot drift from them: every key with its type and range (the rule's own sentence), its default and where it applies.

```bash
python -m grpo_curriculum.config.reference docs/recipe-reference.md           # rewrite it
python -m grpo_curriculum.config.reference docs/recipe-reference.md --check   # exit 1 when it differs
```
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from ..core.adaptive import CANDIDATES, KNOBS, ONLY, POLICY, REMOVED, Adaptive, condition
from ..core.comparison import COMPARISON_RULES, Comparison
from ..core.curriculum import CURRICULUM_RULES, RECIPE_CURRICULUM_RULES
from ..core.errors import list_text
from ..core.rules import UNCERTAIN_PROMPTS_DEFAULT, Rule
from ..core.sampling import DYNAMIC_SAMPLING_RULES, DynamicSampling
from ..core.schedule import STAGE_RULES, Stage
from ..core.skipping import SKIP_SETTING_RULES, Skip
from .recipe import RECIPE_RULES, trl_rule
from .trl_fields import SHARED, trl_fields, write_generated


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(value) -> str:
    if value is dataclasses.MISSING:
        return "required"
    return "—" if value is None else f"`{value!r}`"


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    lines = ["| key | rule | default | applies |", "|---|---|---|---|"]
    return lines + [f"| `{k}` | {_cell(r)} | {_cell(d)} | {_cell(a)} |" for k, r, d, a in rows]


def _rule(rule: Rule) -> str:
    """The rule in words; a choice of types as each alternative's own rule (with its range)."""
    if rule.kind == "any_of":
        return " or ".join(dict.fromkeys(_rule(option) for option in rule.options))
    return rule.describe().removeprefix("must be ")


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


RLOO_PROBES = {  # what a curriculum may hold that RLOO might refuse, as the smallest recipe holding it
    "a stage of `adaptive.policy: per_prompt`": {"temperature": 1.0, "adaptive": {"policy": "per_prompt",
                                                                                    "num_generations": [2, 4]}},
    "a stage of `adaptive.policy: top_up`": {"temperature": 1.0, "adaptive": {"policy": "top_up",
                                                                              "num_generations": [2, 4]}},
    "`dynamic_sampling` with `on_limit: mask` (its default)": {"num_generations": 4, "temperature": 1.0,
                                                              "dynamic_sampling": {"max_rounds": 2}},
    "`dynamic_sampling` with `on_limit: fill`": {"num_generations": 4, "temperature": 1.0,
                                                "dynamic_sampling": {"max_rounds": 2, "on_limit": "fill"}},
    "a `comparison` of mode `extremes` or `margin`": {"num_generations": 4, "temperature": 1.0,
                                                      "comparison": {"mode": "extremes"}},
    "`use_vllm: true`": None,
}


def refused_with_rloo() -> list[str]:
    """What of [`RLOO_PROBES`] `trainer: rloo` refuses (asked of [`~core.rloo.rloo_problems`], so it cannot drift)."""
    from ..core.rloo import rloo_problems
    from .trainers import parsed_stage

    refused = []
    for what, stage in RLOO_PROBES.items():
        probe = None if stage is None else parsed_stage(stage)
        if stage is not None and probe is None:
            raise ValueError(f"RLOO_PROBES: {stage} is not a valid stage")
        if probe is not None and rloo_problems([probe]):
            refused.append(what)
    return refused


ASYNC_PROBES = {  # what a curriculum may hold that the asynchronous trainer might refuse
    "a temperature ramp": {"num_generations": 4, "temperature": 0.7, "temperature_end": 1.0},
    **{f"a stage of `adaptive.policy: {policy}`": {"temperature": 1.0, "adaptive": {
        "policy": policy, "num_generations": [2, 4]}} for policy in ("hysteresis", "success_rate", "per_prompt",
                                                                      "top_up")},
    "adaptive temperature bounds": {"temperature": 1.0, "adaptive": {"policy": "per_prompt", "num_generations": [2, 4],
                                                                    "temperature": [0.7, 1.0]}},
    "a stage's `dynamic_sampling`": {"num_generations": 4, "temperature": 1.0, "dynamic_sampling": {"max_rounds": 2}},
    "a `comparison`": {"num_generations": 4, "temperature": 1.0, "comparison": {"mode": "extremes"}},
}


def refused_with_async() -> list[str]:
    """What of [`ASYNC_PROBES`] `trainer: async_grpo` refuses (asked of [`~core.asynchronous.async_problems`])."""
    from ..core.asynchronous import async_problems
    from .trainers import parsed_stage

    refused = []
    for what, stage in ASYNC_PROBES.items():
        probe = parsed_stage(stage)
        if probe is None:
            raise ValueError(f"ASYNC_PROBES: {stage} is not a valid stage")
        if async_problems([probe], max_steps=1):
            refused.append(what)
    return refused


def render() -> str:
    """The whole reference as Markdown."""
    stage, adaptive = _defaults(Stage), _defaults(Adaptive)
    stage_rows = [(name, _rule(rule), _default(stage[name]), "") for name, rule in STAGE_RULES.items()]
    stage_rows += [("name", "a string (shown in logs and tables)", "—", ""),
                   ("adaptive", "a mapping (the table below)", "—", "instead of a fixed `num_generations`"),
                   ("dynamic_sampling", "a mapping (`max_rounds`, below)", "—", "a stage of fixed G"),
                   ("comparison", "a mapping (`mode`, `margin`, `margin_end`, below)", "—", "any stage"),
                   ("skip", "true, a rule name, or a mapping (`rule`, `target`, `explore`, `pilot`; "
                    "docs/per-prompt.md)", "—",
                    "a stage of fixed G (not with `adaptive` or `dynamic_sampling`)")]
    knob_rows = [("num_generations", _rule(CANDIDATES), "required", "every policy"),
                 ("temperature", "a list [low, high] of temperatures, or a number", "the stage's `temperature`",
                  "every policy"),
                 ("policy", _rule(POLICY), _default(adaptive["policy"]), "")]
    knob_rows += [(name, _rule(rule), _default(adaptive[name]), condition(ONLY[name]) if name in ONLY else "")
                  for name, rule in KNOBS.items()]
    removed = "; ".join(f"`{name}`: {why[None][0].removeprefix('removed: ')}" for name, why in REMOVED.items())
    own = [(name, _rule(rule), "—", "") for name, rule in RECIPE_RULES.items()]
    own += [("reward_funcs", "a non-empty list of import paths `module:function` (imported and run, as TRL's "
             "scripts do)", "required", "")]
    own += [("curriculum.stages", "a non-empty list of stages (below)", "required", ""),
            ("curriculum.uncertain_prompts", _rule(CURRICULUM_RULES["uncertain_prompts"]),
             _default(UNCERTAIN_PROMPTS_DEFAULT), ""),
            ("curriculum.dynamic_sampling", _rule(RECIPE_CURRICULUM_RULES["dynamic_sampling"]), "—",
             "`trainer: async_grpo` only")]
    trl = [(name, _rule(trl_rule(name, spec)), _default(spec["default"]), spec["owner"])
           for name, spec in trl_fields().items()]
    grpo, rloo = trl_fields("grpo"), trl_fields("rloo")
    rloo_rows = [(name, _rule(trl_rule(name, spec)), _default(spec["default"]),
                  "RLOOConfig only" if name not in grpo else f"GRPOConfig's: {_default(grpo[name]['default'])}")
                 for name, spec in rloo.items()
                 if name not in grpo or spec["default"] != grpo[name]["default"]]
    grpo_only = ", ".join(f"`{name}`" for name in grpo if name not in rloo)
    asynchronous = trl_fields("async_grpo")
    async_rows = [(name, _rule(trl_rule(name, spec)), _default(spec["default"]),
                   "AsyncGRPOConfig only" if name not in grpo else
                   f"{grpo[name]['owner']}'s: {_default(grpo[name]['default'])}")
                  for name, spec in asynchronous.items()
                  if name not in grpo or spec["default"] != grpo[name]["default"] or
                  (spec["owner"] in SHARED) != (grpo[name]["owner"] in SHARED)]  # (`dtype`: ModelConfig's in GRPO)
    not_async = ", ".join(f"`{name}`" for name in grpo if name not in asynchronous)
    lines = ["# Recipe reference", "",
             "Generated by `python -m grpo_curriculum.config.reference docs/recipe-reference.md` from the rules "
             "`check` and `train` validate with (a test fails when this file differs). Every problem of a recipe is "
             "reported at once with its key path, value, rule and fix; `check RECIPE` runs the same validation "
             "without importing torch or TRL.", "",
             "- [The recipe's own keys](#the-recipes-own-keys)", "- [A stage](#a-stage)",
             "- [An adaptive stage](#an-adaptive-stage)", "- [Dynamic sampling](#dynamic-sampling)",
             "- [Comparisons](#comparisons)", "- [Skipping settled prompts](#skipping-settled-prompts)",
             "- [TRL's fields](#trls-fields)",
             "- [`trainer: rloo`](#trainer-rloo)", "- [`trainer: async_grpo`](#trainer-async_grpo)", "",
             "## The recipe's own keys", "", *_table(own), "",
             "## A stage", "",
             "`curriculum: {stages: [...]}`: an end is `until_step` or `until_fraction`, never both; only the last "
             "stage may omit it.", "", *_table(stage_rows), "",
             "## An adaptive stage", "", "`adaptive: {...}` inside a stage.", "", *_table(knob_rows), "",
             f"Removed keys (a recipe that sets one gets one problem saying why, and the fix). {removed}.", "",
             "## Dynamic sampling", "", "`dynamic_sampling: {...}` inside a stage of fixed G.", "",
             *_table([(n, _rule(r), _default(_defaults(DynamicSampling)[n]), "")
                      for n, r in DYNAMIC_SAMPLING_RULES.items()]), "",
             "## Comparisons", "",
             "`comparison: {...}` inside a stage: which completions keep a non-zero advantage "
             "(`grpo_curriculum/core/comparison.py`).", "",
             *_table([(n, _rule(r), _default(_defaults(Comparison)[n]),
                       "`mode: margin`" if n.startswith("margin") else "") for n, r in COMPARISON_RULES.items()]), "",
             "## Skipping settled prompts", "",
             "`skip: {...}` inside a stage of fixed G (`skip: true` or `skip: RULE` take the defaults): its settled "
             "prompts are skipped for the rest of a pass, every group at the stage's G "
             "(`grpo_curriculum/core/skipping.py`, docs/per-prompt.md).", "",
             *_table([(n, _rule(r), _default(_defaults(Skip)[n]), "") for n, r in SKIP_SETTING_RULES.items()]), "",
             "## TRL's fields", "",
             "Top-level keys of `GRPOConfig`, `ModelConfig` and `ScriptArguments`, as `trl grpo --config` reads them "
             "(and `--key value` on the command line of `train`).", "", *_table(trl), "",
             "## `trainer: rloo`", "",
             "With `trainer: rloo` a recipe trains with `CurriculumRLOOTrainer` (TRL's `RLOOTrainer`, TRL 1.16 only) "
             "and its TRL keys are `RLOOConfig`'s instead of `GRPOConfig`'s: the same fields but for the ones below, "
             "which `RLOOConfig` adds or whose default differs.", "", *_table(rloo_rows), "",
             f"`GRPOConfig` keys that `RLOOConfig` lacks, refused with `trainer: rloo` (each named, with the fix "
             f"\"remove it, or use `trainer: grpo`\"): {grpo_only}.", "",
             f"`trainer: rloo` also refuses {list_text(refused_with_rloo(), last=' and ') or 'none of the stages'} "
             "(`grpo_curriculum/core/rloo.py` says why, and the fix).", "",
             "## `trainer: async_grpo`", "",
             "With `trainer: async_grpo` a recipe trains with `CurriculumAsyncGRPOTrainer` (TRL's asynchronous "
             "`AsyncGRPOTrainer`, TRL 1.16 only, generating from a vLLM server; docs/async.md) and its TRL keys are "
             "`AsyncGRPOConfig`'s: the fields below are its own, or differ from `GRPOConfig`'s in default or owner "
             "(`dtype` is `AsyncGRPOConfig`'s).", "", *_table(async_rows), "",
             f"`GRPOConfig` keys that `AsyncGRPOConfig` lacks, refused with `trainer: async_grpo` (each named, with the "
             f"fix \"remove it, or use `trainer: grpo`\"): {not_async}.", "",
             f"`trainer: async_grpo` needs `max_steps` with a curriculum and refuses "
             f"{list_text(refused_with_async(), last=' and ') or 'none of the stages'} "
             "(`grpo_curriculum/core/asynchronous.py` says why, and the fix); `curriculum.dynamic_sampling: true` "
             "drops zero-variance groups in its rollout worker.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write the reference to the path given, or with `--check` exit 1 when the file there differs."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print("usage: python -m grpo_curriculum.config.reference PATH [--check]", file=sys.stderr)
        return 2
    return write_generated(Path(argv[0]), render(), argv[1:] == ["--check"],
                           f"differs: run python -m {__name__} {argv[0]}")


if __name__ == "__main__":
    raise SystemExit(main())
