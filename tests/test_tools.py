"""
`CurriculumGRPOTrainer` with TRL's tool-calling loop (`tools=`, `environment_factory=`): real TRL code, a tiny model
whose tokenizer renders and parses tool calls, and a stand-in engine that calls a tool (see `tests/tool_calling.py`).
"""

from __future__ import annotations

import pytest
import transformers
from datasets import Dataset

from grpo_curriculum import CurriculumError, Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

from .conftest import RoundRecorder, group_runs, grpo_args, per_prompt_stages
from .fake_vllm import FakeVLLMServer, fake_vllm_server  # noqa: F401 - fixture
from .tool_calling import build_chat_model, build_chat_tokenizer, draw, drawn_and_answered, tool_calling_completion

# TRL's GRPOTrainer refuses `tools` (and `environment_factory`) on transformers 4: "requires transformers version 5.0.0"
pytestmark = pytest.mark.skipif(int(transformers.__version__.split(".")[0]) < 5,
                                reason="TRL's tool calling needs transformers 5")  # fmt: skip

# A tool call, the tool's response and the answer fit; a longer budget only costs time.
MAX_COMPLETION_LENGTH = 256


def chat_dataset(num_prompts=12):
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"draw {i}"}] for i in range(num_prompts)],
                              "idx": list(range(num_prompts))})  # fmt: skip


@pytest.mark.parametrize("stages", [per_prompt_stages((2, 4), defer=False), [Stage(num_generations=4, temperature=1)]],
                         ids=["per_prompt", "fixed"])  # fmt: skip
def test_vllm_server_tool_turns_continue_each_rows_own_history(tmp_path, fake_vllm_server, wanted_by_index, stages):
    """
    Every row calls a tool: TRL sends the follow-up turn of all rows in one request with `n=1`, one history a row. Each
    row must continue its own history (its answer names the card its own tool call drew), in rounds of mixed group
    sizes as in rounds of one G.
    """
    wanted_by_index(lambda index: (2, 4)[index % 2])
    fake_vllm_server.complete, fake_vllm_server.detokenize = tool_calling_completion, build_chat_tokenizer().decode
    recorder = RoundRecorder(reward_fn=lambda completions, **kwargs: [0.0] * len(completions))
    args = grpo_args(tmp_path, use_vllm=True, vllm_mode="server", vllm_server_base_url=FakeVLLMServer.base_url,
                     max_completion_length=MAX_COMPLETION_LENGTH, max_steps=2, num_generations=4,
                     shuffle_dataset=False)  # fmt: skip
    trainer = CurriculumGRPOTrainer(model=build_chat_model(), processing_class=build_chat_tokenizer(),
                                    reward_funcs=recorder, args=args, train_dataset=chat_dataset(), tools=[draw],
                                    callbacks=[CurriculumCallback(stages)])  # fmt: skip
    recorder.trainer = trainer
    trainer.train()
    per_prompt = stages[0].adaptive is not None
    expected_sizes = [[2, 4, 2], [4, 2, 2]] if per_prompt else [[4, 4]] * 2  # prompts 0-2 and 3-5, or 0-1 and 2-3
    assert [group_runs(call["idx"]) for call in recorder.calls] == expected_sizes
    for call in recorder.calls:
        turns = [drawn_and_answered(completion) for completion in call["completions"]]
        assert all(drawn is not None for drawn, _ in turns), turns
        assert [answered for _, answered in turns] == [f"card {drawn}" for drawn, _ in turns]
    # Each round: its first turn (per-prompt: one request per group size), then every row's history with n=1.
    first_turns = [[2, 4]] * 2 if per_prompt else [[4]] * 2
    requests = [r.n for r in fake_vllm_server.generation_requests]
    assert requests == [n for first in first_turns for n in [*first, 1]]
    assert all(len(r.prompts) == 8 for r in fake_vllm_server.generation_requests if r.n == 1)


class CardTable:
    """An environment that owns the data: `reset()` gives each rollout its prompt; `draw` is its tool."""

    def reset(self, **kwargs) -> str:
        return "draw a card"

    def draw(self, card: int) -> str:
        """
        Draw a card.

        Args:
            card: The card's number.
        """
        return f"card {card}"


def environment_trainer(tmp_path, stages, **overrides):
    """A trainer with `environment_factory` and no `train_dataset`; TRL's own G is 4."""
    seen = []

    def reward(prompts, completions, **kwargs):
        seen.append({"rows": len(completions), "prompts": [p[-1]["content"] for p in prompts]})
        return [0.0] * len(completions)

    args = grpo_args(tmp_path, **{"max_completion_length": 4, "max_steps": 2, "num_generations": 4, **overrides})
    trainer = CurriculumGRPOTrainer(model=build_chat_model(), processing_class=build_chat_tokenizer(),
                                    reward_funcs=reward, args=args, environment_factory=CardTable,
                                    callbacks=[CurriculumCallback(stages)])  # fmt: skip
    return trainer, seen


def test_environment_without_dataset_trains_a_stage_below_trls_g(tmp_path, monkeypatch):
    """TRL's placeholder holds one round's prompts at its own G (2 at G 4); a G 2 stage takes 4 prompts a round."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer, seen = environment_trainer(tmp_path, [Stage(num_generations=2, temperature=1.0)])
    trainer.train()
    assert [call["rows"] for call in seen] == [8, 8]
    assert all(prompts == ["draw a card"] * 8 for prompts in (call["prompts"] for call in seen))
    assert [h["curriculum/num_generations"] for h in trainer.state.log_history if "loss" in h] == [2, 2]


def test_environment_without_dataset_refuses_a_per_prompt_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    with pytest.raises(CurriculumError) as error:
        environment_trainer(tmp_path, [Stage(num_generations=4, temperature=1.0, until_step=1),
                                       *per_prompt_stages((2, 4))])  # fmt: skip
    assert str(error.value).count("\n  - ") == 1  # one problem, before anything is built
    assert "stages[1].adaptive.policy = 'per_prompt': needs a train_dataset: with an environment_factory and no " \
           "train_dataset, the environment's reset() picks each rollout's prompt" in str(error.value)
    assert "fix: pass a train_dataset" in str(error.value)
