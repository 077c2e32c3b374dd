"""
The seam's evaluation helpers, what the CLI asks of a built trainer besides training (through
[`grpo_curriculum.training.evaluation`]): the reward of greedy completions on held-out rows ([`greedy_rewards`],
`sweep`'s held-out curve) and generation at full completion length ([`full_length_completions`], `sweep
--plan-memory`'s probe). Knows GRPOTrainer internals (`_tokenize_prompts`, `_calculate_rewards`, the generation
config), like the rest of the seam.
"""

from __future__ import annotations

import torch

from .settings import round_rewards


def full_length_completions(trainer) -> bool:
    """
    Make transformers generation run every completion to `max_completion_length` (no early end of sequence): the most
    memory a generation batch can take (`sweep --plan-memory` probes it). `False`, and nothing changed, with vLLM,
    which generates outside the trainer.
    """
    if getattr(trainer, "use_vllm", False) or getattr(trainer, "generation_config", None) is None:
        return False
    trainer.generation_config.min_new_tokens = trainer.max_completion_length
    trainer.generation_kwargs["min_new_tokens"] = trainer.max_completion_length
    return True


def _eos_token_ids(trainer, tokenizer) -> list[int]:
    """The tokens that end a completion: TRL >= 1.14 also ends it at every EOS the model's generation config declares
    (`trainer.eos_token_ids`); earlier releases at the tokenizer's EOS only."""
    eos_token_ids = getattr(trainer, "eos_token_ids", None)
    return list(eos_token_ids) if eos_token_ids is not None else [tokenizer.eos_token_id]


def greedy_rewards(trainer, model, rows: list[dict], batch_size: int = 64) -> list[float]:
    """
    The reward of one greedy completion for each of `rows` (dataset rows with a `prompt`), scored as TRL scores a
    training round: prompts tokenized by `_tokenize_prompts` (chat template and all), completions cut after the first
    EOS and decoded as in `_generate_and_score_completions` (assistant messages for conversational prompts), every
    reward function called by `_calculate_rewards` with the rows' other columns, combined by [`round_rewards`].
    Greedy decoding: no sampling noise, and the model's and the global RNG state are untouched.
    """
    from transformers import GenerationConfig
    from trl.data_utils import is_conversational

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    eos_token_ids = _eos_token_ids(trainer, tokenizer)
    config = GenerationConfig(do_sample=False, max_new_tokens=trainer.max_completion_length,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_token_ids)  # fmt: skip
    was_training, rewards = model.training, []
    model.eval()
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            prompts = [row["prompt"] for row in batch]
            prompt_ids = trainer._tokenize_prompts(prompts)[0]
            width = max(map(len, prompt_ids))  # left padding, as TRL pads prompts for generation
            ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + list(p) for p in prompt_ids])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
            with torch.no_grad():
                out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                                     generation_config=config)[:, width:].tolist()  # fmt: skip
            completion_ids = []
            for sequence in out:
                ends = [i for i, token in enumerate(sequence) if token in eos_token_ids]
                completion_ids.append(sequence[: ends[0] + 1] if ends else sequence)
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            if is_conversational(batch[0]):
                texts = [[{"role": "assistant", "content": text}] for text in texts]
            rewards += round_rewards(trainer, trainer._calculate_rewards(batch, prompts, texts, completion_ids))
    finally:
        model.train(was_training)
    return rewards
