"""
The seam's contract with the trainer it is mixed into: [`CurriculumHost`], what the hooks ([`~hooks.GRPOHooks`],
[`~hooks.RLOOHooks`]) and the seam's helpers call or read on the trainer besides TRL's own attributes, implemented by
[`~grpo_curriculum.training.trainer.CurriculumTrainerMixin`] (tests/test_layout.py checks that it implements each
member with the same parameters, and that the seam calls no other curriculum event). A `typing.Protocol`, as TRL's
asynchronous trainer declares its own seams (`WeightTransferProtocol`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from ..callback import CurriculumCallback
    from ..round import Round


class CurriculumHost(Protocol):
    """
    The curriculum's side of a trainer built on [`~hooks.GRPOHooks`]: its events, called by the hooks only when
    `_curriculum_active()`, each from inside the TRL method named, and the attributes the seam reads.
    """

    _curriculum: CurriculumCallback | None
    """The run's curriculum (`None`: the trainer trains as TRL's); [`~merge.apply_comparison`] reads the comparison
    mode of the step a round starts at (`resolved.comparison_at`)."""

    _round: Round | None
    """The generation round in progress or last sampled, set by `_curriculum_round_start`: `_generate_single_turn`
    and the vLLM server requests ([`~vllm.install_variable_group_requests`]) read the sizes its increment requests."""

    trainer_kind: str | None
    """`grpo` or `rloo`: the advantages a round of mixed group sizes gets ([`~merge.round_advantages`])."""

    def _curriculum_active(self) -> bool:
        """Whether a curriculum runs (every hook asks first; without one, each passes straight to TRL's method)."""
        ...

    def _curriculum_round_start(self) -> Round:
        """`_generate_and_score_completions`, training: a generation round starts. Decide and apply its setting,
        choose its prompts; returns it ([`Round`]), its first increment planned."""
        ...

    def _curriculum_increment_rows(self, round_: Round) -> tuple[list[dict], list[int]]:
        """`_generate_and_score_completions`, before each TRL generation and scoring pass: this process's rows of the
        round's next increment, and the size of each group it samples."""
        ...

    def _curriculum_increment_scored(self, round_: Round, rewards: list[float], completion_ids) -> bool:
        """`_generate_and_score_completions`, after each pass: the increment's rewards (every process, row order) and
        this process's completion ids; plans the next increment and returns whether there is one."""
        ...

    def _curriculum_round_end(self, round_: Round) -> None:
        """`_generate_and_score_completions`, the round sampled and merged (TRL's metrics are TRL's:
        `frac_reward_zero_std` as TRL logs it for the round's own pass, or computed TRL's way for the rows a merged
        or mixed round trains on): count it, feed the policy and the prompt report."""
        ...

    def _curriculum_evaluation(self) -> AbstractContextManager[None]:
        """`prediction_step`: a context manager around each evaluation step (the temperature of the stage in force)."""
        ...

    def _curriculum_save(self, folder: str) -> None:
        """`_save_checkpoint`: write the curriculum's state into the checkpoint `folder`, before TRL's trainer state
        ([`~checkpoint.curriculum_state_before_trainer_state`])."""
        ...

    def _curriculum_load(self, checkpoint: str) -> None:
        """`_load_optimizer_and_scheduler`, on resume: read the curriculum's state from the folder `checkpoint`, once
        the trainer state is the checkpoint's ([`~checkpoint.load_trainer_state_first`])."""
        ...


def as_host(trainer) -> CurriculumHost:
    """`trainer` (a hook's `self`) seen as its [`CurriculumHost`], for the type checker: the object itself."""
    return cast(CurriculumHost, trainer)
