"""
What a curriculum on TRL's `RLOOTrainer` supports (`CurriculumRLOOTrainer`, and a recipe's `trainer: rloo`).

`RLOOTrainer` computes its leave-one-out advantage, `r - (sum - r) / (n - 1)` (its KL to the reference folded into each
reward first when `beta > 0`), over `rewards.view(-1, num_generations)`: one G for the whole round. A stage that
trains one G a round (fixed, a stage schedule, a temperature ramp, an adaptive `hysteresis` or `success_rate` policy)
runs on it as it is. A per-prompt stage (`policy="per_prompt"`) holds groups of several sizes in one generation pass:
its advantages are computed RLOO's way over each group's own size (the KL folded in first, `normalize_advantages`
over the round). The stages whose rounds are merged from several generation passes (top-up, dynamic sampling) are
refused, each with the fix: RLOO's round output (its per-sequence `old_logps`) is not merged. So are comparison modes
(they zero advantages that RLOO's reward-side KL also lives in). vLLM generation (server and colocate modes) follows
G and temperature at each switch as with `GRPOTrainer` (one server request per distinct group size in a per-prompt
round): `RLOOTrainer` samples through the same `VLLMGeneration`.
"""

from __future__ import annotations

from .errors import Problem

_USE_GRPO = "or train this curriculum with CurriculumGRPOTrainer"


def rloo_problems(stages, at: str = "stages", use_vllm: bool = False, vllm_key: str = "use_vllm") -> list[Problem]:
    """
    The stages (and settings) of a curriculum that `CurriculumRLOOTrainer` refuses, one [`Problem`] each.

    Args:
        stages (`list[Stage]`): The curriculum's stages.
        at (`str`, *optional*, defaults to `"stages"`): The key path of the stages in the messages
            (`"curriculum.stages"` for a recipe).
        use_vllm (`bool`, *optional*, defaults to `False`), vllm_key (`str`, *optional*): The run's `use_vllm` and
            its key path. Accepted for the callers written when vLLM was refused: vLLM generation (server and colocate
            modes) is supported since, and refuses nothing.
    """
    problems = []
    for i, stage in enumerate(stages):
        policy = None if stage.adaptive is None else stage.adaptive.policy
        if policy == "top_up":
            problems.append(Problem(
                f"{at}[{i}].adaptive.policy", policy, "is not supported with RLOOTrainer yet: a top-up round is merged "
                "from several generation passes, and merging RLOO's round outputs (its per-sequence old_logps and KL "
                "penalty) is not implemented",
                f"give this stage one G a round (num_generations, or policy hysteresis or success_rate) or G per prompt "
                f"(policy per_prompt), {_USE_GRPO} for top_up"))  # fmt: skip
        if stage.dynamic_sampling is not None:
            problems.append(Problem(
                f"{at}[{i}].dynamic_sampling", stage.dynamic_sampling, "is not supported with RLOOTrainer yet: a round "
                "sampled until enough groups are informative is merged from several generation passes, and merging "
                "RLOO's round outputs (its per-sequence old_logps and KL penalty) is not implemented",
                f"remove dynamic_sampling from this stage, {_USE_GRPO} for dynamic sampling"))  # fmt: skip
        if stage.comparison is not None and stage.comparison.mode != "all":
            problems.append(Problem(
                f"{at}[{i}].comparison.mode", stage.comparison.mode, "is not supported with RLOOTrainer yet: a "
                "comparison zeroes the advantages it leaves out, and RLOO's advantages also carry its KL penalty "
                "(beta) as a reward; this is not tested",
                f"remove comparison from this stage (or use mode all), {_USE_GRPO} for comparisons"))  # fmt: skip
    return problems
