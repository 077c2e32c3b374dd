"""
Test support: a tiny model whose tokenizer can run TRL's tool-calling loop, and a fake engine that calls a tool.

TRL's tool loop (`GRPOTrainer._tool_call_loop`) needs a chat template that renders tool calls and a tokenizer that
parses them back (`parse_response`). [`build_chat_tokenizer`] is a byte-level tokenizer (every text round-trips, no
merges) with TRL's own Qwen3 chat template, so TRL recognises it and sets its response parser as for a real Qwen3
model. [`tool_calling_completion`] stands in for the sampling engine: a first turn calls the `draw` tool with the
completion's own number, a turn after a tool response answers with what the tool returned. A completion whose history
is another row's therefore answers with a card its own tool call never drew.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
           "<tool_response>", "</tool_response>"]  # fmt: skip


def build_chat_tokenizer():
    """A byte-level tokenizer (265 tokens) with TRL's Qwen3 chat template; `<|im_end|>` ends a turn."""
    import trl.chat_template_utils
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        padding_side="left")  # fmt: skip
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL[1:]})
    templates = Path(trl.chat_template_utils.__file__).parent / "chat_templates"
    tokenizer.chat_template = (templates / "qwen3.jinja").read_text()
    return tokenizer


def build_chat_model(seed: int = 0):
    """A tiny Llama over [`build_chat_tokenizer`]'s vocabulary, long enough for a tool-calling conversation."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_chat_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model


@functools.lru_cache(maxsize=1)
def _codec():
    return build_chat_tokenizer()


def draw(card: int) -> str:
    """
    Draw a card.

    Args:
        card: The card's number.
    """
    return f"card {card}"


def tool_calling_completion(prompt_ids: list[int], position: int, sample: int, max_tokens: int) -> list[int]:
    """
    The fake engine's completion (same signature as `tests.fake_vllm.fake_completion_ids`): after a tool response,
    `"answer <the response>"`; otherwise a call of `draw(card=<position>)`, `position` being the completion's index in
    the response of its request.
    """
    tokenizer = _codec()
    history = tokenizer.decode(prompt_ids)
    responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", history)
    if responses:
        text = f"answer {responses[-1]}<|im_end|>"
    else:
        text = f'<tool_call>\n{json.dumps({"name": "draw", "arguments": {"card": position}})}\n</tool_call><|im_end|>'
    return tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]


def drawn_and_answered(completion: list[dict]) -> tuple[int | None, str | None]:
    """A row's conversation: the card its tool call drew, and the card its final answer names."""
    drawn = answered = None
    for message in completion:
        if message["role"] == "assistant" and message.get("tool_calls"):
            drawn = message["tool_calls"][0]["function"]["arguments"]["card"]
        elif message["role"] == "assistant" and message.get("content", "").startswith("answer "):
            answered = message["content"].removeprefix("answer ")
    return drawn, answered
