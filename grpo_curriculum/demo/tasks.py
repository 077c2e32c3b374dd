"""
Built-in synthetic tasks and a tiny causal LM for the demo, the tests and the benchmarks.

Nothing here downloads anything: the tokenizer is built from a word list and the model from a config. Rewards are
computed by rules, so a run is reproducible bit for bit on CPU.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .arithmetic import arithmetic_dataset, arithmetic_reward

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "fish", "bird", "rock", "star"]
DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
MARKERS = ["echo", "count", ":", "="]
SPECIAL = ["<pad>", "<unk>", "<bos>", "<eos>"]
VOCAB = SPECIAL + MARKERS + WORDS + DIGITS


def build_tokenizer():
    """
    Build a word-level tokenizer over [`VOCAB`] (whitespace split, `<pad>`/`<eos>`/`<unk>` specials).

    Returns:
        [`~transformers.PreTrainedTokenizerFast`]: The tokenizer, left padding, `eos_token == "<eos>"`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins word tokens with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side="left",
    )
    return tokenizer


def build_model(seed: int = 0, hidden_size: int = 32, num_layers: int = 2):
    """
    Build a tiny randomly initialised Llama-architecture causal LM over [`VOCAB`].

    Args:
        seed (`int`, *optional*, defaults to `0`):
            Seed for the weight initialisation.
        hidden_size (`int`, *optional*, defaults to `32`):
            Width of the model.
        num_layers (`int`, *optional*, defaults to `2`):
            Number of decoder layers.

    Returns:
        [`~transformers.LlamaForCausalLM`]: The model, in float32.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=VOCAB.index("<pad>"),
        bos_token_id=VOCAB.index("<bos>"),
        eos_token_id=VOCAB.index("<eos>"),
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)  # its generation config takes the pad and EOS tokens from `config`


# --- tasks -------------------------------------------------------------------------------------------------------


def echo_dataset(num_prompts: int = 64, seed: int = 0, length: int = 2):
    """
    The *echo* task: the prompt `"echo : w1 w2 ="` asks the model to repeat `w1 w2`.

    Rewards come from [`echo_reward`]: the fraction of the expected words produced in place. Prompts differ in how
    hard they are for a random model only through their words, so success rates spread as the policy learns.

    Returns:
        [`~datasets.Dataset`]: Columns `prompt` (str) and `target` (str).
    """
    return draw_echo_dataset(num_prompts, seed, lambda rng: length)


def draw_echo_dataset(num_prompts: int, seed: int, draw_length: Callable):
    """`num_prompts` echo prompts, each of `draw_length(rng)` words drawn by `random.Random(seed)`."""
    from datasets import Dataset

    rng = random.Random(seed)
    rows = {"prompt": [], "target": []}
    for _ in range(num_prompts):
        words = [rng.choice(WORDS) for _ in range(draw_length(rng))]
        rows["prompt"].append("echo : " + " ".join(words) + " =")
        rows["target"].append(" ".join(words))
    return Dataset.from_dict(rows)


def echo_reward(completions: list[str], target: list[str], **kwargs) -> list[float]:
    """Fraction of the target words produced at their position (1.0 for an exact echo)."""
    rewards = []
    for completion, expected in zip(completions, target, strict=True):
        got, want = completion.split(), expected.split()
        rewards.append(sum(g == w for g, w in zip(got, want, strict=False)) / len(want))
    return rewards


def count_dataset(num_prompts: int = 64, seed: int = 0, max_count: int = 5):
    """
    The *count* task: `"count : w w w ="` must be answered with the digit word (`"three"`); reward 1 or 0.

    Returns:
        [`~datasets.Dataset`]: Columns `prompt` (str) and `target` (str).
    """
    from datasets import Dataset

    rng = random.Random(seed)
    rows = {"prompt": [], "target": []}
    for _ in range(num_prompts):
        n = rng.randint(1, max_count)
        word = rng.choice(WORDS)
        rows["prompt"].append("count : " + " ".join([word] * n) + " =")
        rows["target"].append(DIGITS[n])
    return Dataset.from_dict(rows)


def exact_first_word_reward(completions: list[str], target: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's first word is the target, else 0.0 (a binary, success-rate style reward)."""
    return [float(c.split()[:1] == [t]) for c, t in zip(completions, target, strict=True)]


TASKS: dict[str, tuple[Callable, Callable]] = {
    "echo": (echo_dataset, echo_reward),
    "count": (count_dataset, exact_first_word_reward),
    "arithmetic": (arithmetic_dataset, arithmetic_reward),  # for a pretrained chat model (conversational prompts)
}


def warm_start(model, tokenizer, dataset, steps: int = 40, learning_rate: float = 3e-3, batch_size: int = 32,
               seed: int = 0):  # fmt: skip
    """
    A short supervised phase (teacher forcing on `prompt + " " + target + " <eos>"`, loss on the answer only), so
    that per-prompt success rates spread over (0, 1) before RL: the regime where G matters.

    Args:
        model ([`~transformers.PreTrainedModel`]): The model to train in place.
        tokenizer: Its tokenizer (from [`build_tokenizer`]).
        dataset ([`~datasets.Dataset`]): Rows with `prompt` and `target`.
        steps (`int`, *optional*, defaults to `40`): Optimizer steps; 0 leaves the model as it is.
        learning_rate (`float`, *optional*, defaults to `3e-3`): AdamW learning rate.
        batch_size (`int`, *optional*, defaults to `32`): Rows per step, drawn with replacement.
        seed (`int`, *optional*, defaults to `0`): Seed of the row draws.

    Returns:
        The model, in train mode.
    """
    import torch

    if steps <= 0:
        return model
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    prompts, targets = dataset["prompt"], dataset["target"]
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(prompts), (batch_size,), generator=generator).tolist()
        prompt_ids = [tokenizer(prompts[i]).input_ids for i in rows]
        answer_ids = [tokenizer(targets[i] + " <eos>").input_ids for i in rows]
        width = max(len(p) + len(a) for p, a in zip(prompt_ids, answer_ids, strict=True))
        input_ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
        for row, (p, a) in enumerate(zip(prompt_ids, answer_ids, strict=True)):
            ids = p + a
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, len(p) : len(ids)] = torch.tensor(a)
            attention_mask[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
