"""
TEST-ONLY: the task of the real-engine tests of the asynchronous trainer (tests/test_async_real.py, `make test-vllm`;
docs/async.md): the tokenizer with the chat and response templates TRL's rollout worker needs, reward functions the
spawned worker can import by name, and a recorder of the samples the trainer takes from the rollout queue.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from grpo_curriculum.demo.tasks import build_tokenizer

SETTLED_REWARD = 2.0  # `settled_reward` for an `echo` prompt: every completion of its group scores it


def chat_tokenizer():
    """The demo tokenizer with what TRL's rollout worker needs: a chat template (prompts are messages; it renders
    their contents) and a response template (the completion is plain content up to `<eos>`)."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    content = {"close_pattern": r"<eos>\s*|$", "content": "text"}
    tokenizer.response_template = {"defaults": {"role": "assistant"}, "fields": {"content": content}}
    return tokenizer


def _text(completion) -> str:
    return completion[-1]["content"]


def varied_reward(completions, **kwargs) -> list[float]:
    """A reward in [0, 1) that differs between different completions (a checksum of the text)."""
    return [zlib.crc32(_text(c).encode()) % 997 / 997 for c in completions]


def settled_reward(prompts, completions, **kwargs) -> list[float]:
    """[`SETTLED_REWARD`] for every completion of an `echo` prompt (a settled prompt: its group's rewards are all
    equal), else [`varied_reward`]."""
    varied = varied_reward(completions)
    return [SETTLED_REWARD if p[-1]["content"].startswith("echo") else v for p, v in zip(prompts, varied, strict=True)]


@dataclass
class Taken:
    """One sample as the trainer took it from the rollout queue."""

    group_id: int
    advantage: float
    reward: float
    model_version: int  # the policy version current when its group started
    num_generations: float | None  # the G its group was sampled at, as the sample records it (the curriculum's loop)
    temperature: float | None  # the temperature its group was sampled at, as the sample records it
    prompt: str  # its prompt's text


class _RecordingQueue:
    def __init__(self, queue, taken):
        self.queue, self.taken = queue, taken

    def get(self, *args, **kwargs):
        sample = self.queue.get(*args, **kwargs)
        self.taken.append(Taken(sample.group_id, sample.advantage, sample.metrics["reward"], sample.model_version,
                                sample.metrics.get("curriculum/num_generations"),
                                sample.metrics.get("curriculum/temperature"), sample.prompt[-1]["content"]))  # fmt: skip
        return sample

    def qsize(self):
        return self.queue.qsize()


def record_taken(monkeypatch) -> list[Taken]:
    """Record every sample the trainer takes from the rollout queue (TRL's `RolloutQueueDataset`), in order."""
    from trl.experimental.async_grpo import async_grpo_trainer

    taken: list[Taken] = []
    iterate = async_grpo_trainer.RolloutQueueDataset.__iter__

    def recording_iter(self):
        self.queue = _RecordingQueue(self.queue, taken)
        yield from iterate(self)

    monkeypatch.setattr(async_grpo_trainer.RolloutQueueDataset, "__iter__", recording_iter)
    return taken
