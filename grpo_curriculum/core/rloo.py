"""
What a curriculum on TRL's `RLOOTrainer` supports (`CurriculumRLOOTrainer`, and a recipe's `trainer: rloo`).

`RLOOTrainer` computes its leave-one-out advantage, `r - (sum - r) / (n - 1)` (its KL to the reference folded into each
reward first when `beta > 0`), over `rewards.view(-1, num_generations)`: one G for the whole round. A stage that trains
one G a round (fixed, a stage schedule, a temperature ramp, an adaptive `hysteresis` or `success_rate` policy) runs on
it as it is. A per-prompt stage (`policy="per_prompt"`) holds groups of several sizes in one generation pass, and a
top-up stage (`policy="top_up"`) or dynamic sampling merges several passes into one round (RLOO's `old_logps` and KL
computed again when the merge moves a row's prompt): their advantages are computed RLOO's way over each group's own
size (the KL folded in first, `normalize_advantages` over the round). Refused, each with the fix: dynamic sampling's
`on_limit="mask"` with `max_rounds` above 1 (it takes rows out of the loss with a loss mask RLOO's loss does not have),
and comparison modes (they zero advantages that RLOO's reward-side KL also lives in). vLLM generation (server and
colocate modes) follows G and temperature at each switch as with `GRPOTrainer` (one server request per distinct group
size in a per-prompt round): `RLOOTrainer` samples through the same `VLLMGeneration`.
"""

from __future__ import annotations

from .errors import Problem

_USE_GRPO = "or train this curriculum with CurriculumGRPOTrainer"


def rloo_problems(stages, at: str = "stages") -> list[Problem]:
    """
    The stages of a curriculum that `CurriculumRLOOTrainer` refuses, one [`Problem`] each (vLLM generation, server and
    colocate modes, refuses nothing).

    Args:
        stages (`list[Stage]`): The curriculum's stages.
        at (`str`, *optional*, defaults to `"stages"`): The key path of the stages in the messages
            (`"curriculum.stages"` for a recipe).
    """
    problems = []
    for i, stage in enumerate(stages):
        dynamic = stage.dynamic_sampling
        if dynamic is not None and dynamic.on_limit == "mask" and dynamic.max_rounds > 1:  # 1: nothing is masked
            problems.append(Problem(
                f"{at}[{i}].dynamic_sampling.on_limit", "mask", "is not supported with RLOOTrainer: a batch still "
                "short of informative groups after max_rounds is filled up with groups whose tokens are taken out of "
                "the loss by TRL's loss mask (tool_mask), and RLOOTrainer's loss has no such mask",
                f"set on_limit to fill (the filled-up groups trained as RLOO trains them) or error (stop), "
                f"{_USE_GRPO} for on_limit mask"))  # fmt: skip
        if stage.comparison is not None and stage.comparison.mode != "all":
            problems.append(Problem(
                f"{at}[{i}].comparison.mode", stage.comparison.mode, "is not supported with RLOOTrainer yet: a "
                "comparison zeroes the advantages it leaves out, and RLOO's advantages also carry its KL penalty "
                "(beta) as a reward; this is not tested",
                f"remove comparison from this stage (or use mode all), {_USE_GRPO} for comparisons"))  # fmt: skip
    return problems
